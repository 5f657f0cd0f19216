"""The paper tour planned (one pass per model and image set, issue 48) against the tour check by check.

    PYTHONPATH=$PWD python bench/tour_bench.py                     # zoo:vit-cls + zoo:resnet, 64 images, batches of 16
    PYTHONPATH=$PWD python bench/tour_bench.py --models vit_base_patch16_224@random:0,resnet50@random:0 --rounds 1

Baseline: ``run_tour(..., planned=False)``, every check streaming its own statistics (the tour before issue 48).
Each run is a fresh subprocess (imports and model loading excluded from the wall time; peak RSS is the process's,
so the variants' peaks do not mix) with no cache (``Store(None)``: a cold tour); the variants run ``--rounds``
times interleaved (round r starts at variant r: the shared machine's load moves more than the variants differ).
Printed per run: wall time of ``run_tour``, where it went (the planned passes; the streams inside the checks, i.e.
forward batches not planned or cache reads; Fig 6's receptive-field gradients; Fig 11's probe fits; the rest:
resampling, intervals, figures), forward batches per model and peak RSS. The last rounds' tour tables are compared:
the largest relative difference of their numbers is printed (0 since attention capture leaves the forward alone;
tests/test_tour_plan.py asserts exact equality).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(a) -> None:
    """One tour in this process; prints one JSON line."""
    import resource

    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    import vitlab
    import vitlab.analyses.probes as P
    import vitlab.analyses.receptive as R
    import vitlab.tour.measure.common as C
    from vitlab import tour
    from vitlab.engine.context import Run
    from vitlab.inputs.cache import Store

    spent = {"passes": 0.0, "check streams": 0.0, "rf gradients": 0.0, "probe fits": 0.0}

    def timed(mod, name, what):
        f = getattr(mod, name)

        def g(*x, **k):
            t = time.perf_counter()
            try:
                return f(*x, **k)
            finally:
                spent[what] += time.perf_counter() - t
        setattr(mod, name, g)

    orig = C.stream

    def stream(*x, **k):  # a generator: time its batches, not its creation
        t, it = time.perf_counter(), orig(*x, **k)
        for item in it:
            spent["check streams"] += time.perf_counter() - t
            yield item
            t = time.perf_counter()
        spent["check streams"] += time.perf_counter() - t
    C.stream = stream
    timed(R, "field_maps", "rf gradients")
    timed(P, "_probe_one", "probe fits")
    if a.planned:
        from vitlab.tour import plan

        timed(plan, "run_passes", "passes")
    src = vitlab.open_source(a.data)
    models = [vitlab.load(s, "cpu") for s in a.models.split(",")]
    opts = tour.TourOptions(images=a.images, batch_size=a.batch_size)
    run = Run(store=Store(None), bootstrap=200, seed=0)
    t = time.perf_counter()
    rep = tour.run_tour(models, src, opts, run, planned=a.planned)
    wall = time.perf_counter() - t
    rep.to_frame().to_csv(a.out, index=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": wall, "spent": spent, "forward": run.info.forward_passes, "peak_mib": peak,
                      "passes": rep.passes}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="zoo:vit-cls,zoo:resnet")
    p.add_argument("--data", default="fashion-mnist:test")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads per run (0: torch's default)")
    p.add_argument("--child", choices=("planned", "alone"), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        a.planned = a.child == "planned"
        child(a)
        return
    variants = ["alone", "planned"]
    names = {"alone": "check by check (baseline)", "planned": "planned: one pass per model and image set"}
    print(f"tour_bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; models {a.models}; {a.data}, {a.images} images, batches of {a.batch_size}; "
          f"{a.rounds} interleaved round(s), a fresh process each, no cache")
    results: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for v in variants[r % 2:] + variants[:r % 2]:
                out = Path(tmp) / f"{v}.csv"
                cmd = [sys.executable, __file__, "--child", v, "--out", str(out), "--models", a.models, "--data",
                       a.data, "--images", str(a.images), "--batch-size", str(a.batch_size), "--threads",
                       str(a.threads)]
                done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                      env={**os.environ, "HF_HUB_OFFLINE": "1"})
                if done.returncode != 0:
                    sys.exit(f"{v} failed:\n{done.stderr[-4000:]}")
                res = json.loads(done.stdout.strip().splitlines()[-1])
                results[v].append(res)
                s = res["spent"]
                rest = res["wall"] - sum(s.values())
                print(f"round {r + 1} {names[v]:42s} wall {res['wall']:7.1f} s  (passes {s['passes']:.1f}, check "
                      f"streams {s['check streams']:.1f}, rf gradients {s['rf gradients']:.1f}, probe fits "
                      f"{s['probe fits']:.1f}, rest {rest:.1f})  peak {res['peak_mib']:.0f} MiB", flush=True)
        import numpy as np
        import pandas as pd

        frames = {v: pd.read_csv(Path(tmp) / f"{v}.csv") for v in variants}
        x, y = (frames[v].select_dtypes("number").to_numpy(np.float64) for v in variants)
        ok = ~np.isnan(y)
        diff = float(np.max(np.abs(x[ok] - y[ok]) / np.maximum(np.abs(y[ok]), 1e-12), initial=0.0))
        same_words = frames["alone"][["pattern", "learned"]].equals(frames["planned"][["pattern", "learned"]])
    print()
    print(f"{'variant':42s} {'fastest s':>9s} {'median s':>9s} {'peak MiB':>9s}  forward batches per model")
    for v in variants:
        walls = sorted(res["wall"] for res in results[v])
        fwd = ", ".join(f"{k} {n}" for k, n in results[v][-1]["forward"].items())
        print(f"{names[v]:42s} {walls[0]:9.1f} {walls[len(walls) // 2]:9.1f} "
              f"{max(res['peak_mib'] for res in results[v]):9.0f}  {fwd}")
    fast = {v: min(res["wall"] for res in results[v]) for v in variants}
    print(f"planned / check by check, fastest runs: {fast['planned'] / fast['alone']:.2f}x; tour tables: patterns and "
          f"learned answers {'identical' if same_words else 'DIFFER'}, largest relative difference of a number "
          f"{diff:.2g}")
    for rec in results["planned"][-1]["passes"]:
        models = "; ".join(f"{k}: {', '.join(m['statistics'])} ({m['forward_batches']} batches)"
                           for k, m in rec["models"].items())
        print(f"planned pass over {rec['images']} ({rec['count']} images, batches of {rec['batch_size']}) for "
              f"{', '.join(rec['checks'])}: {models}")


if __name__ == "__main__":
    main()
