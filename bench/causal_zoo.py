"""The zoo measurements quoted in docs/causal.md: head ablation by attention distance on zoo:vit-cls (vs zoo:resnet)
and deletion/insertion scores of every attribution method on zoo:vit-cls and Grad-CAM on zoo:resnet.

    PYTHONPATH=$PWD python bench/causal_zoo.py ablation    [OUT]   # ~5-10 min on 2 busy CPU cores
    PYTHONPATH=$PWD python bench/causal_zoo.py attribution [OUT]

Prints the tables; writes CSVs into OUT (default results/causal_zoo).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

import vitlab
from vitlab.engine.context import Run

pd.set_option("display.width", 250)
pd.set_option("display.max_rows", 200)


def ablation(out: Path) -> None:
    from vitlab import ablation as ab

    vit, res = vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    t0 = time.perf_counter()
    opts = ab.AblationOptions(images=256, batch_size=64, blocks=(0, 1, 2), ks=(1, 2, 3, 4, 6), draws=10)
    r = ab.head_ablation(vit, res, src, opts, Run(store=vitlab.Store(None), seed=0, bootstrap=1000))
    print(f"head ablation: {time.perf_counter() - t0:.0f} s, {r.images} images, intact accuracy "
          f"{r.intact_correct.mean():.4f}")
    print("heads, most local first:", ", ".join(f"{h} {d:.2f}px" for h, d in r.heads_by_distance))
    s = r.summary()
    print(s.to_string(index=False))
    print(r.verdicts().to_string(index=False))
    out.mkdir(parents=True, exist_ok=True)
    r.to_frame().to_csv(out / "ablation.csv", index=False)
    s.to_csv(out / "ablation_summary.csv", index=False)
    r.verdicts().to_csv(out / "ablation_verdicts.csv", index=False)
    r.cka_frame().to_csv(out / "ablation_cka.csv", index=False)


def attribution(out: Path) -> None:
    from vitlab import attribution as at

    src = vitlab.open_source("fashion-mnist:test")
    out.mkdir(parents=True, exist_ok=True)
    cnn = ("gradcam", "gradcam:layer3.1", "gradcam:layer2.1", "random")
    for spec, methods in (("zoo:vit-cls", at.VIT_METHODS + ("random",)), ("zoo:resnet", cnn)):
        m = vitlab.load(spec, "cpu")
        t0 = time.perf_counter()
        opts = at.FaithfulnessOptions(images=256, methods=methods, cell_px=7, random_orders=8)
        r = at.faithfulness(m, src, opts, Run(store=vitlab.Store(None), seed=0, bootstrap=1000))
        print(f"{spec}: {time.perf_counter() - t0:.0f} s, {r.images} images, cells of {r.cell_px} px "
              f"({r.cells} cells), baseline {r.baseline}")
        print(r.summary().to_string(index=False))
        r.to_frame().to_csv(out / f"faithfulness_{spec.replace(':', '_')}.csv", index=False)
        r.summary().to_csv(out / f"faithfulness_summary_{spec.replace(':', '_')}.csv", index=False)


if __name__ == "__main__":
    import torch

    # one intra-op thread: on a shared 2-core machine two threads per process made a forward pass 20x slower
    torch.set_num_threads(1)
    what = sys.argv[1] if len(sys.argv) > 1 else "ablation"
    target = Path(sys.argv[2] if len(sys.argv) > 2 else "results/causal_zoo")
    {"ablation": ablation, "attribution": attribution}[what](target)
