"""How far SVCCA/PWCCA move when the features are CountSketched, on the zoo pair (issue 40): quoted in docs/measures.md.

    PYTHONPATH=$PWD python bench/cca_sketch_zoo.py [IMAGES]     # ~1-2 min on 2 busy CPU cores

zoo:vit-cls vs zoo:resnet, the first IMAGES (512) Fashion-MNIST test images, all tokens, batches of 64. "own" is
what `vitlab similarity` computes by default now (the layers' own features: they fit the budget); each forced
sketch width (256, the former default; 1024; 4096) is compared with it cell by cell (A vs B, A vs A, B vs B), and
the Fig 1 uniformity gap (mean off-diagonal within ViT minus within ResNet) is printed for each.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import vitlab
from vitlab.analyses.similarity import SimilarityOptions, off_diagonal_mean, similarity
from vitlab.engine.context import Run

MEASURES = ("svcca", "pwcca-svd20")


def main(images: int = 512) -> None:
    models = [vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")]
    src = vitlab.open_source("fashion-mnist:test")
    reports = {}
    for width in (0, 256, 1024, 4096):
        t0 = time.perf_counter()
        opts = SimilarityOptions(measures=MEASURES, images=images, batch_size=64, sketch_dims=width)
        reports[width] = similarity(models, src, opts, Run(store=vitlab.Store(None)))
        print(f"features {reports[width].cca['features']}: {time.perf_counter() - t0:.0f} s; "
              f"measured shift {reports[width].cca['shift']}")
    own = reports[0]
    print(f"\n{images} images; |sketched − own| over every cell of A-B, A-A and B-B")
    print("width | measure | mean | max | share > 0.05 | Fig 1 gap (own → sketched)")
    for width in (256, 1024, 4096):
        for m in MEASURES:
            d = np.concatenate([np.abs(reports[width].maps[(m, i, j)] - own.maps[(m, i, j)]).ravel()
                                for i, j in ((0, 1), (0, 0), (1, 1))])
            gap = [off_diagonal_mean(r.maps[(m, 0, 0)]) - off_diagonal_mean(r.maps[(m, 1, 1)])
                   for r in (own, reports[width])]
            print(f"{width} | {m} | {d.mean():.3f} | {d.max():.3f} | {np.mean(d > 0.05):.0%} | "
                  f"{gap[0]:.3f} → {gap[1]:.3f}")


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 512)
