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
import pytest

import vitlab
from vitlab import ablation, attribution
from vitlab.analyses.deletion import coarse_first
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


# ------------------------------------------------------------------------------------------------ attribution


def test_attribution_estimates_are_the_maps_then_the_curves_measured_so_far(tiny_vit, fmnist_source):
    opts = attribution.FaithfulnessOptions(methods=("grad-rollout",), random_orders=2)
    final, seen = collect(lambda run: attribution.attribution(tiny_vit, fmnist_source, 3, opts, run))
    plain = attribution.attribution(tiny_vit, fmnist_source, 3, opts)
    assert final.to_frame().equals(plain.to_frame()) and final.scores == plain.scores and final.measured == {}
    dones = [d for _, d, _ in seen]
    total = seen[0][2]
    assert dones[0] == 1 and dones == sorted(set(dones)) and dones[-1] < total
    maps_only = seen[0][0]
    assert maps_only.curves == {} and maps_only.target == final.target
    for m, grid in final.maps.items():  # the maps come first, whole
        np.testing.assert_array_equal(maps_only.maps[m], grid)
    every = np.arange(final.curves["grad-rollout"].shape[1])
    for est, done, _ in seen[1:]:
        assert 1 + sum(a for a, _ in est.measured.values()) == done  # one unit per masked image, after the maps
        assert est.measured["random order"][1] == 2 * 2 * len(every)  # of both random orders
        for m in opts.methods:
            got, of = est.measured[m]
            if not got:
                assert m not in est.curves
                continue
            # no ties in these maps: every step is measured, coarse to fine; straight lines between
            steps = np.sort(coarse_first(of // 2 - 1)[: got // 2])
            for c in range(2):
                np.testing.assert_array_equal(est.curves[m][c, steps], final.curves[m][c, steps])
                np.testing.assert_allclose(est.curves[m][c], np.interp(every, steps, final.curves[m][c, steps]))
    # once the map's order and the first random order are measured, the estimate is a run with one random order
    at = next(e for e, _, _ in seen if e.measured["random order"][0] == 2 * len(every))
    alone = attribution.attribution(tiny_vit, fmnist_source, 3, attribution.FaithfulnessOptions(
        methods=opts.methods, random_orders=1))
    assert at.curves.keys() == alone.curves.keys() == final.curves.keys()
    for m, c in alone.curves.items():
        np.testing.assert_array_equal(at.curves[m], c)
        np.testing.assert_allclose(at.scores[m], alone.scores[m], rtol=1e-12)


# ------------------------------------------------------------------------------------------------ on the page

ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ("vit-cls", "resnet"))
PAGE = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
        "lab.images": 16, "lab.batch_size": 8}


def open_recorded(monkeypatch, page: str, **state):
    """The page opened in AppTest, with every text and chart sent to the browser recorded in order."""
    from streamlit.runtime.forward_msg_queue import ForwardMsgQueue
    from streamlit.testing.v1 import AppTest

    sent = []

    def record(msg) -> None:
        if msg.WhichOneof("type") != "delta" or msg.delta.WhichOneof("type") != "new_element":
            return
        el = msg.delta.new_element
        if el.WhichOneof("type") == "markdown":
            sent.append(("text", el.markdown.body))
        elif el.WhichOneof("type") == "vega_lite_chart":
            sent.append(("chart", el.vega_lite_chart))

    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    for k, v in {**PAGE, **state}.items():
        at.session_state[k] = v
    at.run()
    monkeypatch.setattr(ForwardMsgQueue, "_before_enqueue_msg", staticmethod(record))
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at, sent


def rows_of(vega) -> list[dict]:
    import pyarrow as pa

    rows = []
    for d in vega.datasets:
        rows += pa.ipc.open_stream(d.data.data).read_all().to_pylist()
    return rows


def estimates(sent) -> list[int]:
    return [i for i, (kind, body) in enumerate(sent) if kind == "text" and body.startswith("**Running estimate")]


@pytest.mark.usefixtures("app_cache")
@pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are not in assets/zoo")
def test_ablation_page_draws_the_sets_so_far_before_the_final_curves(monkeypatch):
    at, sent = open_recorded(monkeypatch, "ablation", **{"abl.k": 1, "abl.draws": 2, "abl.modes": ["zero"]})
    words = estimates(sent)  # 4 sets (local, global, 2 random draws): estimates after the first 3
    assert [sent[i][1].split(" (")[0] for i in words] == [
        f"**Running estimate from {k} of 4 ablated head sets over 16 images" for k in (1, 2, 3)]
    assert "refined in place as the run goes on" in sent[words[0]][1]
    first = next(body for kind, body in sent[words[0]:] if kind == "chart")
    final_at = next(i for i, (kind, _) in enumerate(sent) if kind == "chart" and i > words[-1] + 2)
    a, b = (vitlab.load(PAGE[k], "cpu") for k in ("lab.model_a", "lab.model_b"))
    want = ablation.head_ablation(a, b, vitlab.open_source(PAGE["lab.source"]), ablation.AblationOptions(
        images=16, batch_size=8, blocks=tuple(range(max(1, a.depth // 2))), ks=(1,), draws=2,
        modes=("zero",))).summary()
    want = want[want["metric"] == "delta_accuracy"].set_index("selection")
    got = rows_of(first)
    assert [r["selection"] for r in got] == ["local"]  # the first set alone, with its value in the final
    assert got[0]["mean"] == pytest.approx(want.loc["local", "mean"], abs=1e-12)
    final = {r["selection"]: r["mean"] for r in rows_of(sent[final_at][1])}
    assert final == pytest.approx(want["mean"].to_dict(), abs=1e-12)
    assert not [m for m in at.markdown if "Running estimate" in m.value]  # gone once the result is drawn


@pytest.mark.usefixtures("app_cache")
@pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are not in assets/zoo")
def test_attribution_page_draws_the_maps_then_curves_so_far_before_the_final_curves(monkeypatch):
    at, sent = open_recorded(monkeypatch, "attribution", **{"attr.orders": 1, "attr.image": 2})
    words = estimates(sent)
    assert sent[words[0]][1].startswith("**Running estimate: the maps, before any of the ")
    assert sent[words[1]][1].startswith("**Running estimate from 16 of ")  # the first forward: 8 steps of each
    first = next(body for kind, body in sent[words[1]:] if kind == "chart")
    final_at = next(i for i, (kind, _) in enumerate(sent) if kind == "chart" and i > words[-1] + 1)
    m = vitlab.load(PAGE["lab.model_a"], "cpu")
    want = attribution.attribution(m, vitlab.open_source(PAGE["lab.source"]), 2,
                                   attribution.FaithfulnessOptions(methods=attribution.VIT_METHODS, random_orders=1))
    got = rows_of(first)
    assert {r["method"] for r in got} == {"rollout"}
    final = rows_of(sent[final_at][1])
    assert len(final) == len(want.to_frame())
    for r in final:  # the final chart is the engine's result
        c = want.curves[r["method"]][("deletion", "insertion").index(r["curve"]), r["step"]]
        assert r["probability"] == pytest.approx(c, abs=1e-6)
    assert not [m for m in at.markdown if "Running estimate" in m.value]
