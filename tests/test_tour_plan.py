"""One pass for the whole tour (issue 48): every model goes over each image set once, and the answers are those of
the checks run one at a time."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

import vitlab
from vitlab import tour
from vitlab.engine.context import Run
from vitlab.inputs.cache import Store, as_stored, pack, unpack

# 16 images in 4 batches of 4 (intervals need 4 batches); a probe pool of 42 images (10 batches: the last 2 join the one before)
OPTS = tour.TourOptions(images=16, batch_size=4, rf_images=4, probe_draws=2, probe_test=12, probe_shots=1,
                        permutations=20)


def _tour(planned: bool, store: Store):
    src = vitlab.open_source("fashion-mnist:test")
    models = [vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")]
    run = Run(store=store, bootstrap=20, seed=0)
    return tour.run_tour(models, src, OPTS, run, planned=planned), run.info


@pytest.fixture(scope="module")
def both():
    return _tour(True, Store(None)), _tour(False, Store(None))


def _same(a: pd.DataFrame, b: pd.DataFrame, what: str) -> None:
    """Equal frames: every cell, text and number, exactly (NaN where the other has NaN). Exact holds because
    observing does not change the forward (vitlab.inputs.taps.capture): the one pass captures zoo:vit-cls's attention
    probabilities in the same forward as its Grams, skip ratios and token features, and each of those is the fused
    forward's, bit for bit, as when its check streams it alone over the same batches."""
    assert list(a.columns) == list(b.columns) and a.shape == b.shape, what
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_exact=True, obj=what)


def test_planned_tour_answers_as_one_check_at_a_time(both):
    (planned, _), (alone, _) = both
    _same(planned.to_frame(), alone.to_frame(), "tour rows")
    assert [(r.pattern, r.learned) for r in planned.rows] == [(r.pattern, r.learned) for r in alone.rows]
    _same(*(pd.DataFrame([dataclasses.asdict(r) for r in rep.rows]) for rep in (planned, alone)), "every row field")
    assert set(planned.frames) == set(alone.frames) and set(planned.figures) == set(alone.figures)
    for fig in alone.frames:
        _same(planned.frames[fig], alone.frames[fig], f"{fig} interval chart")
        for name, data in alone.figures[fig].items():
            if isinstance(data, pd.DataFrame):
                _same(planned.figures[fig][name], data, f"{fig} figure {name}")
            else:
                assert planned.figures[fig][name] == data


def test_each_model_goes_over_each_image_set_once(both):
    (planned, info), (_, before) = both
    tour_batches, pool_batches = 4, 10
    assert info.forward_passes["zoo:resnet"] == tour_batches
    assert info.forward_passes["zoo:vit-cls"] == tour_batches + pool_batches
    for label, n in info.forward_passes.items():  # twins and zoo controls: once over the tour's images
        assert n == tour_batches + (pool_batches if label.split("@")[0] == "zoo:vit-cls" else 0), label
    assert before.forward_passes["zoo:resnet"] == 4 * tour_batches  # checks one at a time: four passes
    sets = {p["images"]: p for p in planned.passes}
    assert set(sets) == {"the tour's images", "the probe pool"}
    assert sets["the probe pool"]["count"] == 42 and sets["the tour's images"]["count"] == 16
    assert sets["the tour's images"]["models"]["zoo:resnet"]["statistics"] == ["gram", "localization", "skips"]
    assert sets["the tour's images"]["models"]["zoo:vit-cls"]["forward_batches"] == tour_batches


def test_a_later_check_finds_the_passes_entries_in_the_cache(tmp_path):
    """The pass's per-batch statistics stay cached one by one: the same checks run again compute nothing."""
    store = Store(tmp_path / "cache")
    src = vitlab.open_source("fashion-mnist:test")
    models = [vitlab.load("zoo:vit-cls@random:0", "cpu"), vitlab.load("zoo:resnet@random:0", "cpu")]
    opts = tour.TourOptions(images=16, batch_size=8, control="none", only=("cka", "skips", "heads"))
    tour.run_tour(models, src, opts, Run(store=store, bootstrap=10))
    again = Run(store=store, bootstrap=10)
    tour.run_tour(models, src, opts, again, planned=False)
    assert again.info.forward_passes == {} and again.info.batches_computed == 0


def test_run_json_records_the_planned_passes(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "tour"
    assert main(["tour", "-m", "zoo:vit-cls@random", "-m", "zoo:resnet@random", "--only", "cka,skips,localization",
                 "-n", "16", "-b", "8", "--bootstrap", "10", "--control", "none", "--no-cache", "-o", str(out)]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["forward_passes"] == {"zoo:vit-cls@random": 2, "zoo:resnet@random": 2}
    (only,) = run["planned_passes"]
    assert only["images"] == "the tour's images" and only["count"] == 16 and only["batch_size"] == 8
    assert only["checks"] == ["cka", "skips", "localization"]
    assert only["models"]["zoo:resnet@random"] == {"statistics": ["gram", "localization", "skips"],
                                                     "forward_batches": 2}


@pytest.mark.parametrize("make", [
    lambda r: r.random((3, 4, 5)).astype(np.float32),  # C order
    lambda r: np.asfortranarray(r.random((4, 5))),  # Fortran order: np.save keeps it
    lambda r: np.stack([x.T for x in r.random((2, 6, 3))]),  # (L, H, B) of (B, H) transposes: attention distances
    lambda r: r.random((5, 8))[:, ::2],  # a strided slice
])
def test_a_fresh_statistic_is_laid_out_as_the_cache_gives_it_back(make):
    """The stream hands out a statistic fresh from its forward in the memory order it has when read from the cache
    (disk or the pass's memo): numpy's sums follow the strides, so otherwise a check that reads the pass's entry and
    one that computes it gave numbers apart in the last bit (Fig 5's head distances did)."""
    x = make(np.random.default_rng(0))
    fresh, back = as_stored({"a": x})["a"], unpack(pack({"a": x}))["a"]
    assert fresh.strides == back.strides and fresh.dtype == back.dtype
    np.testing.assert_array_equal(fresh, back)
    np.testing.assert_array_equal(fresh.sum(-1), back.sum(-1))
