"""What the default intervals cost: a cold minibatch CKA (no cache) with and without its evidence.

    python bench/evidence_bench.py                       # zoo:vit-cls vs zoo:resnet, 512 Fashion-MNIST images
    python bench/evidence_bench.py --models test_vit@random,test_resnet@random --data samples --images 64

Baseline: the same ``vitlab.run.cka`` call with ``bootstrap=0, permutations=0`` (what ``vitlab cka`` did before
issue 12). Both variants run ``--repeats`` times interleaved (load on a shared machine moves more than the
variants differ) and the fastest run of each is reported, with the evidence part timed on its own: the bootstrap
and the null computed again from the kept per-batch terms, which is exactly the extra work.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    import vitlab
    from vitlab.engine.run import cka

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="zoo:vit-cls,zoo:resnet")
    p.add_argument("--data", default="fashion-mnist:test")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--permutations", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    models = [vitlab.load(s, "cpu") for s in a.models.split(",")]
    src = vitlab.open_source(a.data)
    variants = {"plain (baseline)": dict(bootstrap=0, permutations=0),
                f"with evidence (B={a.bootstrap}, P={a.permutations})": dict(bootstrap=a.bootstrap,
                                                                             permutations=a.permutations)}
    best = {k: float("inf") for k in variants}
    for r in range(a.repeats):
        for name in list(variants)[r % 2:] + list(variants)[:r % 2]:
            t = time.perf_counter()
            cka(models, src, images=a.images, batch_size=a.batch_size, **variants[name])
            best[name] = min(best[name], time.perf_counter() - t)
    base, full = best.values()
    print(f"{a.models}, {a.images} images, batch {a.batch_size}, {torch.get_num_threads()} thread(s), "
          f"best of {a.repeats}:")
    for name, s in best.items():
        print(f"  {name:40s} {s:7.2f} s")
    print(f"  evidence overhead: {100 * (full - base) / base:+.1f} % of the cold run")


if __name__ == "__main__":
    main()
