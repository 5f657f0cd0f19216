"""Issue 51, "a first answer within a minute", on the causal pages (see tests/test_early_estimates.py for the
batch-streaming analyses): head ablation hands up its result over the ablated head sets done so far, attribution
the maps and the deletion / insertion curves over the masked images measured so far.

The estimate after some units is the analysis's own result over those units (computed here again by a separate run
with fewer sets, or fewer random orders), and handing estimates up changes nothing in the final result. On the page,
the estimate's words and chart come before the final chart, and the estimate is gone once the final result is drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import vitlab
from vitlab import ablation
from vitlab.engine.context import Run

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))


def collect(fn, store=None):
    """``fn(run)`` with a run that records every estimate handed up: (result, [(estimate, done, total), ...])."""
    seen = []
    result = fn(Run(store=store or vitlab.Store(None), partial=lambda est, done, total: seen.append((est, done, total))))
    return result, seen


# ------------------------------------------------------------------------------------------------ head ablation


def test_ablation_estimates_are_the_head_sets_ablated_so_far(tiny_vit, tiny_resnet, fmnist_source, store):
    opts = ablation.AblationOptions(images=8, batch_size=4, blocks=(0, 1), ks=(1, 2), draws=2)
    final, seen = collect(lambda run: ablation.head_ablation(tiny_vit, tiny_resnet, fmnist_source, opts, run), store)
    sets = 2 * 2 * (2 + 2)  # modes x ks x (local, global, 2 random draws)
    assert [(d, t) for _, d, t in seen] == [(d, sets) for d in range(1, sets)]
    plain = ablation.head_ablation(tiny_vit, tiny_resnet, fmnist_source, opts, Run(store=store))
    assert final.to_frame().equals(plain.to_frame()) and final.cka_frame().equals(plain.cka_frame())
    rows = final.to_frame()
    for est, done, _ in seen:  # every set's values are final once its pass is done
        assert est.to_frame().equals(rows.iloc[:done].reset_index(drop=True))
        np.testing.assert_array_equal(est.intact_correct, final.intact_correct)
    # the first k's sets of zero ablation (local, global, two draws) are a run that asks for just those
    alone = ablation.head_ablation(tiny_vit, tiny_resnet, fmnist_source, ablation.AblationOptions(
        images=8, batch_size=4, blocks=(0, 1), ks=(1,), draws=2, modes=("zero",)), Run(store=store))
    est = seen[3][0]
    assert est.to_frame().equals(alone.to_frame()) and est.summary().equals(alone.summary())
    assert est.cka_frame().equals(alone.cka_frame()) and est.verdicts().equals(alone.verdicts())


def test_ablation_makes_the_head_means_only_for_mean_ablation(tiny_vit, tiny_resnet, fmnist_source, monkeypatch):
    made = []
    real = ablation.head_means
    monkeypatch.setattr(ablation, "head_means", lambda *a, **k: made.append(1) or real(*a, **k))
    opts = ablation.AblationOptions(images=8, batch_size=4, blocks=(0,), ks=(1,), draws=1, modes=("zero",))
    _, seen = collect(lambda run: ablation.head_ablation(tiny_vit, tiny_resnet, fmnist_source, opts, run))
    assert made == [] and len(seen) == 2  # local, global (then the last set: the result itself)
    _, seen = collect(lambda run: ablation.head_ablation(tiny_vit, tiny_resnet, fmnist_source,
                                                         ablation.AblationOptions(**{**opts.__dict__,
                                                                                     "modes": ablation.MODES}), run))
    assert made == [1] and [e.to_frame()["mode"].iloc[-1] for e, _, _ in seen][:3] == ["zero"] * 3
