"""Whole results kept in the disk cache (issue 34, vitlab.tour.saved): a tour survives a round trip exactly (rows,
frames, figure data, NaN cells, and charts drawn again as run_tour draws them); keys change with models, data and
options; an entry that is damaged, foreign or pickled is a miss (recomputed), never unpickled; unsaveable results
are not stored."""

from __future__ import annotations

import dataclasses
import io
import math
import pickle

import numpy as np
import pandas as pd
import pytest

import vitlab
from vitlab import tour
from vitlab.tour import saved


def same(x, y) -> bool:
    """Equal, NaN equal to NaN (a dataclass's == says NaN != NaN)."""
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return type(x) is type(y) and x == y


def assert_same_value(x, y) -> None:
    if isinstance(x, pd.DataFrame):
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    elif isinstance(x, pd.Series):
        pd.testing.assert_series_equal(x, y, check_exact=True)
    elif isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
    elif isinstance(x, dict):
        assert list(x) == list(y)
        for k in x:
            assert_same_value(x[k], y[k])
    elif isinstance(x, (list, tuple)):
        assert type(x) is type(y) and len(x) == len(y)
        for a, b in zip(x, y):
            assert_same_value(a, b)
    elif dataclasses.is_dataclass(x):
        assert type(x) is type(y)
        for f in dataclasses.fields(x):
            assert_same_value(getattr(x, f.name), getattr(y, f.name))
    else:
        assert same(x, y), (x, y)


@pytest.fixture(scope="module")
def small_tour():
    """A tour of two claims on the zoo pair, with untrained twins, and one claim that cannot be measured (a model
    that does not exist): a "can't tell" row full of NaN cells."""
    a, b = vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    opts = tour.TourOptions(images=16, batch_size=8, only=("cka", "skips", "removal"),
                            noskip=("zoo:vit-cls", "zoo:no-such-model"))
    return tour.run_tour([a, b], src, opts, vitlab.Run(store=vitlab.Store(None), bootstrap=50, seed=0))


def test_a_tour_survives_the_cache_exactly(small_tour, store):
    rep = small_tour
    assert rep.to_frame().isna().any().any()  # the "can't tell" row: NaN cells go through too
    key = saved.result_key("tour", 1)
    assert saved.save(store, key, rep)
    back = saved.load(store, key)
    assert type(back) is type(rep)
    for f in dataclasses.fields(rep):
        if f.name not in ("charts", "paper_charts"):
            assert_same_value(getattr(rep, f.name), getattr(back, f.name))
    pd.testing.assert_frame_equal(rep.to_frame(), back.to_frame(), check_exact=True)
    # the charts are drawn again from the saved data, exactly as run_tour drew them
    assert list(rep.charts) == list(back.charts) and list(rep.paper_charts) == list(back.paper_charts)
    for figure in rep.charts:
        assert rep.charts[figure].to_dict() == back.charts[figure].to_dict()
    for figure in rep.paper_charts:
        assert rep.paper_charts[figure].to_dict() == back.paper_charts[figure].to_dict()


def test_values_of_every_supported_kind_round_trip(store):
    frame = pd.DataFrame({
        "f": [1.5, np.nan, -np.inf], "i": np.array([1, 2, 3], dtype=np.int32), "b": [True, False, True],
        "s": ["a", None, "c"], "o": pd.Series(["x", None, 2.5], dtype=object),
        "c": pd.Categorical(["lo", "hi", "lo"], categories=["lo", "hi"], ordered=True)}, index=[10, 20, 30])
    value = {"frame": frame, "empty": pd.DataFrame(columns=["a", "b"]), ("t", 1): (np.float32(0.1), np.int64(7)),
             "nan": float("nan"), "inf": float("-inf"), "arr": np.arange(6, dtype=np.float16).reshape(2, 3),
             "series": pd.Series([1.0, np.nan], name="x"), "nested": [None, "s", 3, [1.25]],
             "info": vitlab.RunInfo(3, 4, [("a.png", "unreadable")], seconds=1.5)}
    saved.save(store, "k", value)
    assert_same_value(value, saved.load(store, "k"))


def test_unsaveable_results_are_not_stored(store):
    import torch

    @dataclasses.dataclass
    class Local:  # not a vitlab dataclass: never written, so never imported on reading
        x: int = 1

    for value in ({"t": torch.zeros(2)}, [lambda: 0], Local(), np.array([object()], dtype=object)):
        assert saved.save(store, "k", value) is False
        assert saved.load(store, "k") is None


def _npz(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["garbage", "truncated", "foreign class", "not a dataclass", "pickled array",
                                  "bad tree"])
def test_a_damaged_or_foreign_entry_is_recomputed_never_unpickled(store, monkeypatch, kind):
    good = saved.encode(vitlab.RunInfo(1, 2))
    tree = lambda t: np.frombuffer(t.encode(), dtype=np.uint8)  # noqa: E731
    blob = {"garbage": b"not an npz at all",
            "truncated": _npz(good)[:40],
            "foreign class": _npz({saved.TREE: tree('{"$":"dc","cls":"os:system","f":{}}')}),
            "not a dataclass": _npz({saved.TREE: tree('{"$":"dc","cls":"vitlab.errors:VitlabError","f":{}}')}),
            "pickled array": _npz({saved.TREE: good[saved.TREE], "a0": np.array([{"x": 1}], dtype=object)}),
            "bad tree": _npz({saved.TREE: tree('{"$":"nd","k":"missing"}')})}[kind]
    store._write("a:k", blob)

    def refuse(*args, **kwargs):
        raise AssertionError("a cache entry was unpickled")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    assert saved.load(store, "k") is None  # a miss: the caller computes and saves again
    saved.save(store, "k", vitlab.RunInfo(1, 2))
    assert saved.load(store, "k") == vitlab.RunInfo(1, 2)


def test_keys_change_with_models_data_options_and_weights_files(tmp_path):
    opts = tour.TourOptions(images=16, batch_size=8)
    ckpt = tmp_path / "w.safetensors"
    ckpt.write_bytes(b"weights")

    def key(fingerprint="f1", data="fashion-mnist:test", o=opts, spec=f"vit_tiny@{ckpt}"):
        k = ("tour", (spec, "zoo:resnet", data, 16, 8, "auto", ()), o, 200)
        return saved.result_key(saved.plain(k), [[spec, "cpu", fingerprint]], saved.files_key(k))

    base = key()
    assert base == key()  # stable
    assert key(fingerprint="f2") != base  # another model (weights)
    assert key(data="samples") != base  # other data (a folder's listing key changes the same way)
    assert key(o=dataclasses.replace(opts, images=32)) != base  # other options
    assert key(o=dataclasses.replace(opts, control="none")) != base
    ckpt.write_bytes(b"other weights")  # the same spec, its file changed
    assert key() != base
    # sets are keyed the same in every process (their repr follows per-process string hashing)
    assert saved.plain({"b", "a", "c"}) == ["a", "b", "c"]


def test_receptive_field_maps_are_cached_per_batch_and_read_back_exactly(tiny_vit, fmnist_source, store,
                                                                          monkeypatch):
    """The tour's per-image |gradient| maps (Fig 6) are kept per batch: a second run reads them, the same bits."""
    from vitlab.analyses import receptive
    from vitlab.inputs.data import plan_batches, select

    points = [("blocks.0", "in"), ("blocks.0.ls1", "out")]
    batch = plan_batches(fmnist_source, select(fmnist_source, 4, None), 4)[0]
    first = receptive.field_maps(tiny_vit, points, fmnist_source, batch, store)
    assert [m.shape[0] for m in first] == [4, 4]

    def no_gradient(*args, **kwargs):
        raise AssertionError("a cached gradient was computed again")

    monkeypatch.setattr(receptive, "centre_gradient", no_gradient)
    again = receptive.field_maps(tiny_vit, points, fmnist_source,
                                 plan_batches(fmnist_source, select(fmnist_source, 4, None), 4)[0], store)
    for a, b in zip(first, again):
        assert a.dtype == b.dtype and np.array_equal(a, b)
