"""Peak and kept memory of the Receptive fields and Linear probes pages' engine calls at real size (issue 51).

Each case runs in a fresh process per code version: it loads the models, then makes the page's engine call twice,
each on a new thread as two Streamlit script runs do (a rerun, a second visit), with no disk cache (every batch
computed). It prints, per run, the seconds, the peak resident memory above the loaded models and what stays resident
after the run. Versions, interleaved case by case: ``old`` (the code in --old, default /work/main) and ``new`` (this
checkout).

    python bench/real_size_memory.py                      # ViT-B/16 + ResNet-50 (random weights), 8 images
    python bench/real_size_memory.py --images 32 --cases probes

The calls are the pages' own (app/views/receptive.py, app/views/probes.py): receptive fields of model A at batch
min(bs, 8), every block after the residual; probes of A and B, CLS and GAP, 5 draws; here with the images asked for
(the probe page's test images = max(50, images) and 5 shots; --probe-test and --shots override them to keep a run
short).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def worker(case: str, a: str, b: str, images: int, batch: int, probe_test: int | None, shots: int) -> dict:
    """In this process: load the models, make the page's call twice on new threads, measure each."""
    import torch

    import vitlab
    from vitlab.analyses import probes, receptive

    torch.set_num_threads(2)
    ma, mb = vitlab.load(a, "cpu"), vitlab.load(b, "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    loaded = _status("VmRSS")
    if case == "receptive":
        opts = receptive.ReceptiveOptions(images=min(images, 32), batch_size=min(batch, 8), residual="post")

        def call(run):
            receptive.receptive_fields(ma, src, opts, run)
    else:
        popts = probes.ProbeOptions(shots=shots, test=probe_test or max(50, images), reps=("cls", "gap"), draws=5,
                                    batch_size=batch)

        def call(run):
            probes.probes([ma, mb], src, popts, run)
    runs = []
    for _ in range(2):
        before = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM: the peak from here on
        t0 = time.perf_counter()
        t = threading.Thread(target=call, args=(vitlab.Run(bootstrap=0),))
        t.start()
        t.join()
        runs.append({"seconds": time.perf_counter() - t0, "peak_MiB": (_status("VmHWM") - loaded) / 2**20,
                     "start_MiB": (before - loaded) / 2**20, "kept_MiB": (_status("VmRSS") - loaded) / 2**20})
    return {"loaded_MiB": loaded / 2**20, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="vit_base_patch16_224@random:0")
    ap.add_argument("--b", default="resnet50@random:0")
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--probe-test", type=int, default=None, help="test images of the probes (default: the page's)")
    ap.add_argument("--shots", type=int, default=5, help="probe shots per class (the page's default: 5)")
    ap.add_argument("--cases", default="receptive,probes")
    ap.add_argument("--old", default="/work/main", help="checkout of the baseline code")
    ap.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        case, a, b, n, bs, pt, shots = args.worker
        print(json.dumps(worker(case, a, b, int(n), int(bs), int(pt) or None, int(shots))))
        return
    print(f"models {args.a} + {args.b}, {args.images} images, batch {args.batch_size}, probes: {args.shots} shots, "
          f"{args.probe_test or max(50, args.images)} test images; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"{'case':10} {'code':4} {'run':>3} {'seconds':>8} {'peak MiB':>9} {'kept MiB':>9}   (above the loaded models)")
    for case in args.cases.split(","):
        for code, path in (("old", args.old), ("new", str(ROOT))):
            env = {**os.environ, "PYTHONPATH": path}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", case, args.a, args.b, str(args.images),
                   str(args.batch_size), str(args.probe_test or 0), str(args.shots)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if out.returncode:
                print(f"{case} {code}: failed: {out.stderr[-800:]}")
                continue
            res = json.loads(out.stdout.strip().splitlines()[-1])
            for i, r in enumerate(res["runs"]):
                print(f"{case:10} {code:4} {i + 1:>3} {r['seconds']:8.1f} {r['peak_MiB']:9.0f} {r['kept_MiB']:9.0f}",
                      flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
