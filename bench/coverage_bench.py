"""How often vitlab's 95 % intervals cover the population value: the larger run of tests/test_coverage.py.

    python bench/coverage_bench.py                      # 2000 data sets per CKA/distance setting, 500 for rates
    python bench/coverage_bench.py --datasets 500 --quick

For each statistic, many independent data sets are drawn from a distribution whose population value is known
(``vitlab.stats.coverage``: Gaussian features with an analytic population CKA, checked on a 400,000-draw sample;
per-image attention distances from a gamma distribution; a 4 × 4 localization grid whose population rate is 0.75), the
interval is built with vitlab's own code at the app's defaults (64 images in batches of 16), the CLI's (256 in batches
of 64), the tour's (256 in batches of 32) and a few more, and the share of intervals that cover the population value is
printed. Baseline: the percentile bootstrap over batches (B = 200) that vitlab used before issue 28, on the same data
sets. A coverage estimate from R data sets has a standard error of about sqrt(0.95 · 0.05 / R): 0.5 points at R = 2000.
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
    p.add_argument("--quick", action="store_true", help="only the app's and the CLI's defaults")
    a = p.parse_args()
    t0 = time.perf_counter()
    print(f"population CKA: formula {C.population_cka():.4f}, 400,000-draw sample {C.large_sample_cka():.4f}")
    settings = [(64, 16, "app"), (256, 64, "CLI"), (256, 32, "tour")]
    if not a.quick:
        settings += [(64, 32, "app before issue 28"), (64, 8, ""), (512, 32, ""), (256, 16, "")]
    rows = []

    def add(row: dict) -> None:  # print as it goes: the full run takes minutes
        rows.append(row)
        print(f"{row['statistic']:24s} {row['setting']:9s} {row['images']:4d}/{row['batch_size']:<3d} "
              f"{row['defaults']:20s} {row['method']:21s} coverage {row['coverage']:.3f} (width "
              f"{row['mean_width']:.3f}, no interval {row['no_interval']})", flush=True)

    for images, batch, where in settings:
        for method in (ev.JACKKNIFE, ev.PERCENTILE):
            for strength in (1.0, 2.0):
                r = C.cka_coverage(images, batch, a.datasets, a.seed, a=strength, method=method).row()
                add({**r, "defaults": where, "setting": f"a = {strength}"})
    for images in (64, 256):
        add({**C.distance_coverage(images, a.datasets, a.seed).row(), "defaults": "", "setting": "gamma"})
    for images, batch, where in settings[:3]:
        for method in (ev.JACKKNIFE, ev.PERCENTILE):
            for noise in (1.5, 2.0):
                r = C.localization_coverage(images, batch, a.rate_datasets, a.seed, noise=noise, method=method).row()
                add({**r, "defaults": where, "setting": f"noise {noise}"})
    frame = pd.DataFrame(rows)[["statistic", "setting", "images", "batch_size", "units", "defaults", "method",
                                "population", "datasets", "coverage", "no_interval", "mean_width"]]
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.float_format", "{:.3f}".format):
        print(frame.to_string(index=False))
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
