"""How often vitlab's 95 % intervals cover the population value: the larger run of tests/test_coverage.py.

    python bench/coverage_bench.py                      # 2000 data sets per CKA/distance setting, 500 for rates
    python bench/coverage_bench.py --datasets 500 --quick

For each statistic, many independent data sets are drawn from a distribution whose population value is known
(``vitlab.stats.coverage``: features with an analytic population CKA, Gaussian or heavy-tailed with the same second
moments; per-image attention distances from a gamma distribution; a 4 × 4 localization grid whose population rate is
0.75), the interval is built with vitlab's own code and the share of intervals that cover the population value is
printed with its Monte-Carlo standard error sqrt(p (1 − p) / R) (0.5 points at R = 2000 and p = 0.95).

CKA (issue 40): every candidate interval (``coverage.CKA_METHODS``: Fieller's, which the app shows; the jackknife t it
replaced; the jackknife t on the log and logit scales; the studentised and BCa bootstraps; the percentile bootstrap of
before issue 28) on the same data sets, for the designs ``coverage.DESIGNS`` (Gaussian; Student t, 3 df, per
coordinate; multivariate t, 3 df, per image) at 64/16 (the app), 256/32 (the tour) and 1024/64 images/batch size, at
a = 1 (population CKA 0.316) and, for Fieller's and the jackknife t, also at a = 2 (0.555), a = 0.3 (0.043) and
the CLI's 256/64 and 64/8. "below": misses with the whole interval under the population value; "whole": intervals
spanning CKA's whole range [0, 1].
"""

from __future__ import annotations

import argparse
import time

import pandas as pd


def main() -> None:
    from vitlab.stats import coverage as C
    from vitlab.stats import evidence as ev

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", type=int, default=2000, help="data sets per CKA and distance setting")
    p.add_argument("--rate-datasets", type=int, default=500, help="data sets per localization setting")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="only the CKA table of the designs at a = 1")
    a = p.parse_args()
    t0 = time.perf_counter()
    print(f"population CKA: formula {C.population_cka():.4f}, 400,000-draw Gaussian sample {C.large_sample_cka():.4f}")
    rows = []

    def add(row: dict) -> None:  # print as it goes: the full run takes minutes
        rows.append(row)
        print(f"{row['statistic']:24s} {row['design']:12s} {row['setting']:9s} {row['images']:4d}/"
              f"{row['batch_size']:<3d} {row['method']:24s} coverage {row['coverage']:.3f} ± {row['se']:.3f} "
              f"(below {row['below']}, whole {row['whole_range']}, width {row['mean_width']:.3f}, no interval "
              f"{row['no_interval']})", flush=True)

    for design in C.DESIGNS:
        for images, batch in ((64, 16), (256, 32), (1024, 64)):
            for c in C.cka_coverages(images, batch, a.datasets, a.seed, 1.0, design).values():
                add({**c.row(), "setting": "a = 1"})
    if not a.quick:
        pair = (ev.FIELLER, ev.JACKKNIFE)
        for design in C.DESIGNS[:2]:
            for strength in (2.0, 0.3):
                for images, batch in ((64, 16), (256, 32), (1024, 64)):
                    for c in C.cka_coverages(images, batch, a.datasets, a.seed, strength, design, pair).values():
                        add({**c.row(), "setting": f"a = {strength}"})
            for images, batch in ((256, 64), (64, 8), (64, 32)):
                for c in C.cka_coverages(images, batch, a.datasets, a.seed, 1.0, design, pair).values():
                    add({**c.row(), "setting": "a = 1"})
        for images in (64, 256):
            add({**C.distance_coverage(images, a.datasets, a.seed).row(), "setting": "gamma"})
        for images, batch in ((64, 16), (256, 64), (256, 32)):
            for method in (ev.JACKKNIFE, ev.PERCENTILE):
                for noise in (1.5, 2.0):
                    r = C.localization_coverage(images, batch, a.rate_datasets, a.seed, noise=noise,
                                                method=method).row()
                    add({**r, "setting": f"noise {noise}"})
    frame = pd.DataFrame(rows)[["statistic", "design", "setting", "images", "batch_size", "units", "method",
                                "population", "datasets", "coverage", "se", "below", "whole_range", "no_interval",
                                "mean_width"]]
    with pd.option_context("display.width", 220, "display.max_rows", 300, "display.float_format", "{:.3f}".format):
        print(frame.to_string(index=False))
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
