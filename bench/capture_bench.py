"""Attention capture that leaves the forward alone, against the capture that unfused it (issue 48's exactness).

    PYTHONPATH=$PWD python bench/capture_bench.py                       # ViT-B/16 (random weights), 16 images, 5 rounds
    PYTHONPATH=$PWD python bench/capture_bench.py --model test_vit@random:0 --rounds 3

Variants, each one forward of the same 16 Fashion-MNIST images (as the model's transform makes them):

- ``plain``: the fused forward, nothing captured (the floor);
- ``old held`` / ``new held``: every block's ``attn_probs`` (B, H, N, N) kept, as ``taps.capture`` hands them over.
  Old is the capture before this change: fused attention switched off on every block, the softmax read at
  ``attn_drop`` (reproduced here by switching ``fused_attn`` off around ``taps.capture``, whose route is then
  ``drop-input``: the same forward and the same hooks). New is today's route ``recompute``: the forward stays fused
  and hooks on ``q_norm``/``k_norm`` form the softmax beside it;
- ``old reduced`` / ``new reduced``: the same with each block's map reduced to mean attention distances inside the
  forward (``vitlab.engine.inflight``, ``AttentionDistanceStatistic``), which is how the tour and the pages use them.

Wall time: one subprocess runs every variant ``--rounds`` times interleaved (round r starts at variant r; the shared
machine's load moves more than the variants differ); the fastest and median run of each are printed, and new over old
per round with the sign test's interval for its median (``bench/verdicts.py``). Peak memory: each variant once in a
fresh subprocess, peak RSS growth over the loaded model and inputs (``resource.getrusage``). The timing process also
prints what each route does to the numbers: max |Δ logits| against the plain forward and max |Δ probabilities|
between old and new (block 0 sees the same input both ways).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

VARIANTS = ("plain", "old held", "new held", "old reduced", "new reduced")


def _setup(a):
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    import vitlab
    from vitlab.inputs.data import to_tensor

    loaded = vitlab.load(a.model, "cpu")
    src = vitlab.open_source(a.data)
    x = to_tensor([src.load(i) for i in range(a.images)], loaded)
    return loaded, x


@contextmanager
def _unfused(model):
    """The old capture's forward: fused attention off on every block (restored after)."""
    for b in model.blocks:
        b.attn.fused_attn = False
    try:
        yield
    finally:
        for b in model.blocks:
            b.attn.fused_attn = True


def _run(variant: str, loaded, x):
    """One forward of ``variant``; returns (logits, {tap: probs} or None)."""
    import torch

    from vitlab.analyses.attention import AttentionDistanceStatistic, probs_taps
    from vitlab.engine.inflight import forward_statistics
    from vitlab.inputs import taps

    model = loaded.model
    old = variant.startswith("old")
    with _unfused(model) if old else _nothing():
        if variant == "plain":
            with torch.inference_mode():
                return model(x), None
        if variant.endswith("held"):
            with taps.capture(model, probs_taps(loaded)) as acts, torch.inference_mode():
                logits = model(x)
            return logits, dict(acts)
        forward_statistics(loaded, x, [AttentionDistanceStatistic(None)], None)
        return None, None


@contextmanager
def _nothing():
    yield


def child_memory(a) -> None:
    import resource

    loaded, x = _setup(a)
    _run("plain", loaded, x)  # first-call allocations (thread pools, kernels) are not the variant's
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    import gc

    gc.collect()
    out = _run(a.child, loaded, x)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del out
    print(json.dumps({"variant": a.child, "peak_growth_mib": (peak - base) / 1024}))


def child_timing(a) -> None:
    import torch

    loaded, x = _setup(a)
    plain, _ = _run("plain", loaded, x)
    old_logits, old = _run("old held", loaded, x)
    new_logits, new = _run("new held", loaded, x)
    taps = list(new)
    checks = {"new logits - plain": float((new_logits - plain).abs().max()),
              "old logits - plain": float((old_logits - plain).abs().max()),
              "probs block 0, new - old": float((new[taps[0]] - old[taps[0]]).abs().max()),
              "probs other blocks, new - old": max(float((new[t] - old[t]).abs().max()) for t in taps[1:])}
    del old, new
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(a.rounds):
        for v in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:
            t = time.perf_counter()
            out = _run(v, loaded, x)
            times[v].append(time.perf_counter() - t)
            del out
    print(json.dumps({"times": times, "checks": checks, "threads": torch.get_num_threads()}))


def _child(a, *extra) -> dict:
    cmd = [sys.executable, __file__, "--model", a.model, "--images", str(a.images), "--data", a.data,
           "--rounds", str(a.rounds), "--threads", str(a.threads), *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit_base_patch16_224@random:0")
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--data", default="fashion-mnist:test")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--timing", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child_memory(a)
    if a.timing:
        return child_timing(a)
    sys.path.insert(0, str(Path(__file__).parent))
    from verdicts import median_interval, verdict

    t0 = time.time()
    peaks = {v: _child(a, "--child", v)["peak_growth_mib"] for v in VARIANTS}
    got = _child(a, "--timing")
    times = got["times"]
    print(f"{a.model}, {a.images} images, {got['threads']} torch threads, {a.rounds} interleaved rounds "
          f"({time.time() - t0:.0f} s in all)")
    print(f"{'variant':14s} {'fastest s':>9s} {'median s':>9s} {'peak growth MiB':>16s}")
    for v in VARIANTS:
        print(f"{v:14s} {min(times[v]):9.3f} {statistics.median(times[v]):9.3f} {peaks[v]:16.0f}")
    for what in ("held", "reduced"):
        ratios = [n / o for n, o in zip(times[f"new {what}"], times[f"old {what}"])]
        lo, hi, cover = median_interval(ratios)
        print(f"new / old, {what}: median {statistics.median(ratios):.3f}x per round, {cover:.0%} interval "
              f"[{lo:.3f}, {hi:.3f}]; at most 1.0x: {verdict(ratios, 1.0)}")
    for k, v in got["checks"].items():
        print(f"max |{k}| = {v:.3g}")


if __name__ == "__main__":
    main()
