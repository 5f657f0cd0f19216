"""The Linear probes page's cost before and after its pool-aware interval, interleaved.

    git archive BASE vitlab | tar -x -C /tmp/probe-base     # the code before, e.g. BASE = the commit before
    nice python bench/probe_interval_bench.py --baseline /tmp/probe-base [--rounds 5]

``probes.probes`` on zoo:vit-cls + zoo:resnet at the page's defaults (Fashion-MNIST test, 5 shots, 64 test images,
5 draws, CLS and GAP, batches of 16, the engine's 200 bootstrap resamples, which switch the interval on), timed to
its first answer (the cheaper model's probes, handed to ``run.partial`` as the page draws them) and to its end. Each
measurement is a fresh process (its imports and model loads not timed) running one tree's code; round r runs both
trees, the base first in even rounds, so both see the same load. ``cold``: no feature cache (the forwards count);
``warm``: features read from a cache both trees filled before the rounds (only the probe fits and the intervals
count, where an interval's cost would show most). One BLAS and torch thread per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdicts import interval_text

HERE = Path(__file__).resolve().parents[1]
THREADS = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def child(store: str | None) -> dict:
    import torch

    import vitlab
    from vitlab.analyses import probes

    torch.set_num_threads(1)
    models = [vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")]
    src = vitlab.open_source("fashion-mnist:test")
    opts = probes.ProbeOptions(shots=5, test=64, reps=("cls", "gap"), draws=5, batch_size=16)
    first: list[float] = []
    t0, c0 = time.perf_counter(), time.process_time()
    run = vitlab.Run(store=vitlab.Store(store), partial=lambda est, done, total: first.append(
        (est.to_frame(), time.perf_counter() - t0)[1]))
    report = probes.probes(models, src, opts, run)
    frame = report.to_frame()
    return {"first_s": first[0], "total_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "code": vitlab.__file__, "method": str(frame["interval_method"].iloc[0]),
            "width": float((frame["accuracy_hi"] - frame["accuracy_lo"]).mean())}


def measure(tree: Path, store: str | None) -> dict:
    env = {**os.environ, **THREADS, "PYTHONPATH": str(tree)}
    args = [sys.executable, str(Path(__file__).resolve()), "--child"] + (["--store", store] if store else [])
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="a checkout of the code before")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.store)))
        return
    if a.baseline is None:
        ap.error("--baseline is needed: a checkout of the code before")
    trees = {"base": a.baseline.resolve(), "new": HERE}
    with tempfile.TemporaryDirectory() as cache:
        for tree in trees.values():  # fill the feature cache (the same statistic in both trees)
            measure(tree, cache)
        rows: dict[tuple[str, str], list[dict]] = {}
        for r in range(a.rounds):
            for mode, store in (("cold", None), ("warm", cache)):
                order = list(trees) if r % 2 == 0 else list(trees)[::-1]
                for name in order:
                    rows.setdefault((mode, name), []).append(measure(trees[name], store))
    for name, tree in trees.items():
        print(f"{name}: {tree} ({rows['warm', name][0]['code']}); interval: {rows['warm', name][0]['method']}; "
              f"mean width {rows['warm', name][0]['width']:.4f}")
    print("| mode | tree | first answer s (median, min-max) | total s | process CPU s |")
    print("|---|---|---|---|---|")
    for (mode, name), rs in rows.items():
        cells = []
        for key in ("first_s", "total_s", "cpu_s"):
            v = [x[key] for x in rs]
            cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
        print(f"| {mode} | {name} | " + " | ".join(cells) + " |")
    for mode in ("cold", "warm"):
        for key in ("first_s", "total_s"):
            ratios = [n[key] / b[key] for n, b in zip(rows[mode, "new"], rows[mode, "base"])]
            print(f"{mode} {key}, new / base per round: {interval_text(ratios)}")


if __name__ == "__main__":
    main()
