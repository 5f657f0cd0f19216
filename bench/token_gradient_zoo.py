"""Per-token gradient maps on the zoo: share of |dh_t/dx| inside the token's own patch and its 3x3 neighbourhood.

zoo:vit-cls (28 px Fashion-MNIST, 7 px patches, 4x4 grid) at blocks 0, 2 and 5, every spatial token, over the first
32 Fashion-MNIST test images; the baseline is chance (a uniform gradient): 1/16 for the own patch. Also zoo:resnet
at its first block's feature map centre. Run: PYTHONPATH=$PWD python bench/token_gradient_zoo.py
"""

from __future__ import annotations

import time

import numpy as np

import vitlab
from vitlab import token_gradient as TG
from vitlab.engine.context import Run

IMAGES = 32


def measure(spec: str, layer: str) -> None:
    loaded = vitlab.load(spec, "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    first = TG.token_gradient(loaded, src, TG.TokenGradientOptions(layer=layer), Run())
    gh, gw = first.grid
    own, near = [], []
    t0 = time.perf_counter()
    for i in range(IMAGES):
        for r in range(gh):
            for c in range(gw):
                g = TG.token_gradient(loaded, src, TG.TokenGradientOptions(index=i, layer=layer, row=r, col=c), Run())
                own.append(g.shares["own_share"])
                near.append(g.shares["neighbourhood_share"])
    dt = (time.perf_counter() - t0) / (IMAGES * gh * gw)
    own, near = np.array(own), np.array(near)
    print(f"{spec:14s} {layer:10s} grid {gh}x{gw}: own patch share median {np.median(own):.3f} "
          f"(min {own.min():.3f}, >0.5 in {np.mean(own > 0.5):.0%} of {own.size} maps; "
          f"chance {first.shares['own_chance']:.3f}); "
          f"3x3 neighbourhood median {np.median(near):.3f} (chance median ~{first.shares['neighbourhood_chance']:.3f} "
          f"at (0,0)); {dt * 1000:.1f} ms per map")


if __name__ == "__main__":
    for layer in ("blocks.0", "blocks.2", "blocks.5"):
        measure("zoo:vit-cls", layer)
    measure("zoo:resnet", "layer1.0")
