"""Wall time of a command on one process and under torchrun with K processes, side by side (default: the tour).

    python bench/scale_bench.py                                  # vitlab tour, zoo:vit-cls + zoo:resnet, 1 vs 2
    python bench/scale_bench.py --processes 1,2,4 --threads 1    # more processes, one torch thread each
    python bench/scale_bench.py --command "cka -m zoo:vit-cls -m zoo:resnet -n 1024 -b 64"

Baseline: the same command in one process (``python -m vitlab ...``), which is what every command did before
issue 27 for the analyses that did not split. Each variant is the whole command as a user runs it (imports, model
loading, the cold run with ``--no-cache``, outputs), launched as a subprocess; the variants run ``--rounds``
times interleaved (round r starts at variant r: the shared machine's load moves more than the variants differ)
and the fastest and the median of each are reported. Every process gets ``--threads`` torch threads (default:
cores / processes, so one process is not handicapped against K).

The outputs of the last round of each variant are compared (tour.csv, tour_intervals.csv): the numbers must
agree within 1e-7, so the timing is of runs that computed the same thing.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = ("tour -m zoo:vit-cls -m zoo:resnet -n 256 -b 32 --rf-images 32 --probe-draws 3 --probe-test 100 "
           "--probe-shots 5")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], processes: int, threads: int, out: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(threads))
    if processes == 1:
        cmd = [sys.executable, "-m", "vitlab", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               "--master_addr=127.0.0.1", f"--master_port={_port()}", "-m", "vitlab", *args]
    t = time.perf_counter()
    done = subprocess.run([*cmd, "--no-cache", "-o", str(out)], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return time.perf_counter() - t


def _same_outputs(folders: dict[int, Path]) -> float:
    """The largest difference between the numeric columns of every CSV of the runs (vs the first variant)."""
    import numpy as np
    import pandas as pd

    ref_k, ref = next(iter(folders.items()))
    worst = 0.0
    for csv in sorted(ref.glob("*.csv")):
        a = pd.read_csv(csv)
        for k, folder in folders.items():
            b = pd.read_csv(folder / csv.name)
            if list(a.columns) != list(b.columns) or len(a) != len(b):
                sys.exit(f"{csv.name}: {ref_k} process(es) and {k} wrote different tables")
            for col in a.select_dtypes("number").columns:
                d = np.abs(a[col].to_numpy(float) - b[col].to_numpy(float))
                worst = max(worst, float(np.nanmax(d)) if np.isfinite(d).any() else 0.0)
    return worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--command", default=DEFAULT, help=f"the vitlab command and its flags (default: {DEFAULT})")
    p.add_argument("--data", default="fashion-mnist:test")
    p.add_argument("--processes", default="1,2", help="comma-separated process counts; 1 is the baseline")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: cores / processes)")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    counts = [int(k) for k in a.processes.split(",")]
    args = [*a.command.split(), "-d", a.data, "--device", "cpu"]
    cores = os.cpu_count() or 1
    times: dict[int, list[float]] = {k: [] for k in counts}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {k: Path(tmp) / f"p{k}" for k in counts}
        for r in range(a.rounds):
            for k in counts[r % len(counts):] + counts[:r % len(counts)]:
                threads = a.threads or max(1, cores // k)
                times[k].append(_run(args, k, threads, folders[k]))
                print(f"round {r + 1}: {k} process(es) x {threads} thread(s): {times[k][-1]:.1f} s", flush=True)
        worst = _same_outputs(folders)
    base = min(times[counts[0]])
    print(f"\nvitlab {a.command} -d {a.data}, cold (--no-cache), {cores} cores, {a.rounds} interleaved rounds:")
    for k in counts:
        best = min(times[k])
        print(f"  {k} process(es): best {best:7.1f} s, median {statistics.median(times[k]):7.1f} s, "
              f"speed-up {base / best:4.2f}x vs {counts[0]} process(es)")
    print(f"  largest difference between the runs' CSV numbers: {worst:.2g}")


if __name__ == "__main__":
    main()
