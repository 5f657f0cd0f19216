"""Extra time of each similarity measure over linear CKA (vitlab.similarity), per architecture.

    PYTHONPATH=. python bench/measures_bench.py                        # vit_base_patch16_224, resnet50, 256 images
    PYTHONPATH=. python bench/measures_bench.py --images 64             # quicker (stated in the output)

Baseline: what `vitlab cka` costs: one forward pass per batch plus the per-batch Grams, then the CKA sums.
For each model (compared with itself, all default taps x all default taps, as on the similarity page):

1. one pass computing both per-batch statistics, with the time inside each statistic's ``compute`` measured
   (Gram: every measure but SVCCA/PWCCA; CountSketch: SVCCA/PWCCA only);
2. from the cache (no forward pass), the time of each measure's accumulation and result.

Extra time of a measure = its statistic's time if it is not the Gram + (its time from cache - CKA's from cache).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def timed_statistic(stat, clock: dict):
    """The statistic with its per-batch ``compute`` timed into ``clock[stat.name]`` (frozen dataclass: wrap)."""
    original = type(stat).compute

    class Timed(type(stat)):
        def compute(self, acts, loaded, batch):
            t = time.perf_counter()
            out = original(self, acts, loaded, batch)
            clock[self.name] = clock.get(self.name, 0.0) + time.perf_counter() - t
            return out

    Timed.__name__ = type(stat).__name__
    return Timed(**{f: getattr(stat, f) for f in stat.__dataclass_fields__})


def bench_model(spec: str, args, source) -> list[dict]:
    import vitlab
    from vitlab import measures as ms
    from vitlab.engine.context import Run
    from vitlab.engine.run import stream
    from vitlab.analyses.similarity import SimilarityOptions, similarity, statistics_for

    model = vitlab.load(spec, "cpu")
    taps = vitlab.taps.default_taps(model.model)
    store = vitlab.Store(tempfile.mkdtemp(prefix="measures-bench-"))
    opts = SimilarityOptions(images=args.images, batch_size=args.batch_size)
    clock: dict[str, float] = {}
    stats = [timed_statistic(s, clock) for s in statistics_for(list(ms.MEASURES), opts)]
    t0 = time.perf_counter()
    for _ in stream([model], source, vitlab.select(source, args.images), args.batch_size, [stats], Run(store=store)):
        pass
    pass_s = time.perf_counter() - t0
    forward_s = pass_s - sum(clock.values())
    rows = []
    base = None
    for m in ms.MEASURES:
        t = time.perf_counter()
        similarity([model], source, SimilarityOptions(measures=(m,), images=args.images, batch_size=args.batch_size),
                   Run(store=store))
        fold_s = time.perf_counter() - t
        stat_s = clock.get("gram" if ms.MEASURES[m].source == "gram" else "sketch", 0.0)
        if m == "cka":
            base = forward_s + stat_s + fold_s
        extra = fold_s - rows[0]["from_cache_s"] if rows else 0.0
        if ms.MEASURES[m].source == "features":
            extra += stat_s
        rows.append({"model": spec, "taps": len(taps), "measure": m, "statistic_s": stat_s, "from_cache_s": fold_s,
                     "extra_over_cka_s": extra, "forward_s": forward_s})
    for r in rows:
        r["cka_total_s"] = base
        r["extra_pct"] = 100 * r["extra_over_cka_s"] / base
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="vit_base_patch16_224@random,resnet50@random")
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--data", default="fashion-mnist:test")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    import torch

    import vitlab

    if args.threads:
        torch.set_num_threads(args.threads)
    source = vitlab.open_source(args.data)
    print(f"{args.images} images, batch {args.batch_size}, 224 px, CPU {torch.get_num_threads()} thread(s); all "
          "default taps x all default taps of each model with itself", flush=True)
    print("| model | taps | measure | per-batch statistic (s) | from cache (s) | extra over CKA (s) | "
          "extra (% of CKA run) |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for spec in args.models.split(","):
        rows = bench_model(spec.strip(), args, source)
        for r in rows:  # each model's rows as soon as they exist: a slow machine may not see the next model
            print(f"| {r['model']} | {r['taps']} | {r['measure']} | {r['statistic_s']:.2f} | {r['from_cache_s']:.2f} | "
                  f"{r['extra_over_cka_s']:+.2f} | {r['extra_pct']:+.1f} % |")
        print(f"| {spec} | | (CKA baseline: forward {rows[0]['forward_s']:.1f} s + Grams + sums) | | | "
              f"{rows[0]['cka_total_s']:.1f} s in all | |", flush=True)


if __name__ == "__main__":
    main()
