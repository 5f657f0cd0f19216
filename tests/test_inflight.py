"""Statistics formed inside the capture equal the same statistics of held activations, and hold nothing."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from vitlab.engine import inflight
from vitlab import taps
from vitlab.analyses.attention import AttentionDistanceStatistic
from vitlab.inputs.data import decode, plan_batches, select, to_tensor
from vitlab.engine.run import GramStatistic
from vitlab.analyses.skips import SkipStatistic


def _batch(source, n=6):
    b = plan_batches(source, select(source, n), n)[0]
    return decode(source, b)


def _held(loaded, x, stats, batch):
    """The path before streaming: hold every tap, then compute each statistic from the held dict."""
    names = sorted({t for s in stats for t in s.taps(loaded)})
    with taps.capture(loaded.model, names) as acts, torch.inference_mode():
        acts["logits"] = loaded.model(x)
    return {s.name: s.compute(acts, loaded, batch) for s in stats}


@pytest.mark.parametrize("tokens", ["all", "gap"])
def test_in_capture_grams_equal_post_hoc_grams_vit(tiny_vit, fmnist_source, tokens):
    batch = _batch(fmnist_source)
    x = to_tensor(batch.images, tiny_vit)
    stats = [GramStatistic(tokens=tokens), AttentionDistanceStatistic()]
    got = inflight.forward_statistics(tiny_vit, x, stats, batch)
    ref = _held(tiny_vit, x, stats, batch)
    np.testing.assert_array_equal(got["gram"]["grams"], ref["gram"]["grams"])
    for k in ("raw", "renorm"):
        np.testing.assert_array_equal(got["attn_distance"][k], ref["attn_distance"][k])
    assert got["gram"]["grams"].shape == (len(taps.default_taps(tiny_vit.model)), 6, 6)


def test_in_capture_grams_of_in_place_taps_and_shared_held_taps_resnet(tiny_resnet, fmnist_source):
    """CNN '.sum' taps are modified in place by the ReLU after the hook: the reducer must see them before.
    SkipStatistic needs held activations of taps the Gram statistic also reduces."""
    batch = _batch(fmnist_source)
    x = to_tensor(batch.images, tiny_resnet)
    sum_taps = tuple(t for t in taps.tap_table(tiny_resnet.model) if t.endswith(".sum"))
    stats = [GramStatistic(taps_=sum_taps), SkipStatistic(), GramStatistic(name="gram_default")]
    got = inflight.forward_statistics(tiny_resnet, x, stats, batch)
    ref = _held(tiny_resnet, x, stats, batch)
    for s in stats:
        for k in ref[s.name]:
            np.testing.assert_array_equal(got[s.name][k], ref[s.name][k])
    assert np.all(np.isfinite(got["gram"]["grams"]))


def test_reduced_taps_are_not_held(tiny_vit, fmnist_source):
    """With reducers every tapped tensor is released once the forward is done with it: nothing the capture keeps
    refers to an activation (weak references to every tapped tensor are dead after the forward)."""
    batch = _batch(fmnist_source)
    x = to_tensor(batch.images, tiny_vit)
    names = taps.default_taps(tiny_vit.model)
    refs, kept = [], {}

    def reducer(name):
        def fn(t):
            refs.append(weakref.ref(t))
            return t.float().reshape(t.shape[0], -1).sum(dim=1)  # new memory, (B,)

        return fn

    with taps.capture(tiny_vit.model, names, reduce={n: reducer(n) for n in names}) as out, torch.inference_mode():
        tiny_vit.model(x)
        kept = dict(out)
    gc.collect()
    assert len(refs) == len(names)
    assert all(r() is None for r in refs)
    assert set(kept) == set(names) and all(v.shape == (6,) for v in kept.values())
    # the held path keeps them all alive
    with taps.capture(tiny_vit.model, names) as out, torch.inference_mode():
        tiny_vit.model(x)
        held = dict(out)
    assert all(isinstance(v, torch.Tensor) and v.shape[0] == 6 and v.dim() == 3 for v in held.values())


def test_reducer_runs_without_autocast_and_in_float32(tiny_vit, fmnist_source):
    """Under bf16 autocast the reducer sees float32 and computes in float32 (as the held path's cast-up)."""
    batch = _batch(fmnist_source)
    seen = []

    class Probe(GramStatistic):
        def reduce_tap(self, tap, act, loaded):
            seen.append((act.dtype, torch.is_autocast_enabled("cpu")))
            return super().reduce_tap(tap, act, loaded)

    x = to_tensor(batch.images, tiny_vit)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inflight.forward_statistics(tiny_vit, x, [Probe()], batch)
    assert seen and all(d == torch.float32 and not on for d, on in seen)

