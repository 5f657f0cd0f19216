"""The tour's 95 % intervals cover on real activations (issue 50): a light version of bench/coverage_real.py.

Design (what it can and cannot detect). zoo:vit-cls and zoo:resnet run once over 1,280 Fashion-MNIST test images (40
batches of 32; the bench uses all 10,000). Those 40 batches are the population: its value is each statistic on all of
them. A sample is 8 batches (256 images in batches of 32, the tour's default) drawn *with replacement* from the 40,
so the samples are independent draws from that population, as a run's batches are from the images it could have
seen (drawing without replacement, 8 of 40 batches, would make every interval conservative by the finite-population
factor and hide undercoverage). 400 samples give each coverage a Monte-Carlo standard error of about 1.1 points at
95 %, so an interval that truly covers 95 % falls below 93 % here with probability ~4 % per statistic, and one that
covers 90 % or less (the half-step-widened localization interval covered 85.9 % at 256/32 on the 10,000 images)
stays below 93 % with probability ~97 %. It cannot tell 93 % from 95 %, does not cover 64/16 or 1,024/32, Fig 10's
GAP model, nor heavy tails rarer than 1 in 1,280 images: the bench does those. The samples are seeded, so the test
is deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import coverage_real as C
import pytest

MODELS = ["zoo:vit-cls", "zoo:resnet"]
BATCHES, PER_SAMPLE, SAMPLES = 40, 8, 400


@pytest.mark.xfail(strict=True, reason="issue 50, open: in this 40-batch population Fig 7's ViT median ratio covers "
                   "91.5 % (48 of 51 misses below: the median over sublayers and tokens of mean ratios is biased low "
                   "at few images) and the ResNet's mean CKA between layers 92.5 %; strict: passes only once fixed")
def test_every_tour_interval_covers_at_least_93_percent_at_256_in_batches_of_32(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "CACHE", tmp_path)
    per = C.collect(MODELS, 32, images=BATCHES * 32, progress=False)
    assert C.full_batches(per, 32) == BATCHES
    population = C.estimates(per, np.arange(BATCHES))
    samples = list(np.random.default_rng(0).integers(0, BATCHES, size=(SAMPLES, PER_SAMPLE)))
    rows = C.coverage(per, population, samples)
    low = {}
    for name, r in rows.items():
        assert r["none"] == 0, f"{name}: {r['none']} samples of 8 batches gave no interval"
        p = r["covered"] / r["n"]
        print(f"{name:44s} {100 * p:5.1f} % (below {r['below']}, above {r['above']})")
        if p < 0.93:
            low[name] = f"{100 * p:.1f} % (below {r['below']}, above {r['above']})"
    assert not low, f"intervals covering below 93 % at 256/32: {low}"
    # the statistics the harness reads are the tour's: the localization count follows the leads
    assert {"Fig 9: ViT chance-corrected localization", "Fig 7: ViT median skip ratio",
            "Figs 1-2: ViT − ResNet uniformity gap", "Figs 3-4: most local first-block head"} <= set(rows)
