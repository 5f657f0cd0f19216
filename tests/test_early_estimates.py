"""Issue 51, "a first answer within a minute": an analysis that streams batches hands up its running estimate after
each batch but the last (``vitlab.Run.partial``), and a page draws it in place, said as such, before the run ends.

The estimate after batch k is the analysis's own result over the first k batches' images (computed here again by a
separate run over just those images), and handing estimates up changes nothing in the final result. On the page, the
messages Streamlit sends the browser are recorded in order: the estimate's words and chart come before the final
chart, which equals the engine's result, and the estimate is gone once the final result is drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import vitlab
from vitlab import heads, localization, logit_lens, probes, receptive, skips
from vitlab.engine.context import Run

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

BATCH = 4
IMAGES = 12  # three batches: estimates after the first and the second


def collect(fn, store):
    """``fn(run)`` with a run that records every estimate handed up: (result, [(estimate, done, total), ...]). The
    runs compared with it read its per-batch statistics from ``store`` (what is compared is how they are summed)."""
    seen = []
    result = fn(Run(store=store, partial=lambda est, done, total: seen.append((est, done, total))))
    return result, seen


def test_cka_estimates_are_cka_over_the_batches_so_far(tiny_vit, tiny_resnet, fmnist_source, store):
    opts = vitlab.run.CKAOptions(images=IMAGES, batch_size=BATCH)
    final, seen = collect(lambda run: vitlab.run.cka([tiny_vit, tiny_resnet], fmnist_source, opts, run), store)
    assert [(d, t) for _, d, t in seen] == [(1, 3), (2, 3)]
    plain = vitlab.run.cka([tiny_vit, tiny_resnet], fmnist_source, opts, Run(store=store))
    for p, res in plain.results.items():  # handing estimates up changes nothing
        np.testing.assert_array_equal(final.results[p].cka, res.cka)
        np.testing.assert_array_equal(final.results[p].evidence.lo, res.evidence.lo)
    for est, done, _ in seen:
        alone = vitlab.run.cka([tiny_vit, tiny_resnet], fmnist_source,
                               vitlab.run.CKAOptions(images=done * BATCH, batch_size=BATCH), Run(store=store))
        assert est.images == done * BATCH
        for p, res in alone.results.items():
            np.testing.assert_allclose(est.results[p].cka, res.cka, rtol=0, atol=1e-12)
            assert est.results[p].batches == done


def test_no_estimate_without_a_partial_callback_or_with_repeats(tiny_vit, fmnist_source):
    opts = vitlab.run.CKAOptions(images=IMAGES, batch_size=BATCH, repeats=2)
    _, seen = collect(lambda run: vitlab.run.cka([tiny_vit], fmnist_source, opts, run), vitlab.Store(None))
    assert seen == []  # a repeat's estimate would not be the result's (a mean over repeats)
    made = []
    Run().estimate(lambda: made.append(1), 1, 3)
    Run(partial=lambda *a: None, shard=(0, 2)).estimate(lambda: made.append(1), 1, 3)
    assert made == []  # made only where someone takes it, and never from one rank's share


def test_skip_ratio_estimates_are_the_ratios_over_the_batches_so_far(tiny_vit, tiny_resnet, fmnist_source, store):
    opts = skips.SkipOptions(images=IMAGES, batch_size=BATCH)
    final, seen = collect(lambda run: skips.skip_ratios([tiny_vit, tiny_resnet], fmnist_source, opts, run), store)
    assert [(d, t) for _, d, t in seen] == [(1, 3), (2, 3)]
    plain = skips.skip_ratios([tiny_vit, tiny_resnet], fmnist_source, opts, Run(store=store))
    np.testing.assert_array_equal(final.results[0].ratio, plain.results[0].ratio)
    for est, done, _ in seen:
        alone = skips.skip_ratios([tiny_vit, tiny_resnet], fmnist_source,
                                  skips.SkipOptions(images=done * BATCH, batch_size=BATCH), Run(store=store))
        for e, a in zip(est.results, alone.results):
            assert e.images == a.images == done * BATCH
            np.testing.assert_allclose(e.ratio, a.ratio, rtol=1e-12)
            assert e.interval_units == done


def test_head_subset_estimates_sort_the_heads_over_the_batches_so_far(tiny_vit, tiny_resnet, fmnist_source, store):
    opts = heads.HeadSubsetOptions(images=IMAGES, batch_size=BATCH, size=1)
    final, seen = collect(lambda run: heads.head_subsets(tiny_vit, tiny_resnet, fmnist_source, opts, run), store)
    assert [(d, t) for _, d, t in seen] == [(1, 3), (2, 3)]
    plain = heads.head_subsets(tiny_vit, tiny_resnet, fmnist_source, opts, Run(store=store))
    np.testing.assert_array_equal(final.cka, plain.cka)
    for est, done, _ in seen:
        alone = heads.head_subsets(tiny_vit, tiny_resnet, fmnist_source, heads.HeadSubsetOptions(
            images=done * BATCH, batch_size=BATCH, size=1), Run(store=store))
        assert est.heads == alone.heads and est.images == done * BATCH
        np.testing.assert_allclose(est.cka, alone.cka, rtol=1e-12, equal_nan=True)


def test_receptive_field_estimates_are_the_fields_over_the_batches_so_far(tiny_vit, fmnist_source, store):
    opts = receptive.ReceptiveOptions(images=12, batch_size=4, layers=("blocks.0", "blocks.1"))
    final, seen = collect(lambda run: receptive.receptive_fields(tiny_vit, fmnist_source, opts, run), store)
    assert [(d, t) for _, d, t in seen] == [(1, 3), (2, 3)]
    plain = receptive.receptive_fields(tiny_vit, fmnist_source, opts, Run(store=store))
    np.testing.assert_array_equal(final.maps, plain.maps)
    for est, done, _ in seen:
        alone = receptive.receptive_fields(tiny_vit, fmnist_source, receptive.ReceptiveOptions(
            images=4 * done, batch_size=4, layers=("blocks.0", "blocks.1")), Run(store=store))
        assert est.images == 4 * done
        np.testing.assert_allclose(est.maps, alone.maps, rtol=1e-12)


def test_localization_estimates_are_the_maps_over_the_batches_so_far(tiny_vit, tiny_resnet, fmnist_source, store):
    opts = localization.LocalizationOptions(images=IMAGES, batch_size=BATCH)
    models = [tiny_vit, tiny_resnet]
    final, seen = collect(lambda run: localization.localization(models, fmnist_source, opts, run), store)
    assert [(d, t) for _, d, t in seen] == [(1, 3), (2, 3)]
    plain = localization.localization(models, fmnist_source, opts, Run(store=store))
    assert final.rates().equals(plain.rates())
    for est, done, _ in seen:
        alone = localization.localization(models, fmnist_source, localization.LocalizationOptions(
            images=done * BATCH, batch_size=BATCH), Run(store=store))
        assert est.images == done * BATCH
        for e, a in zip(est.results, alone.results):
            np.testing.assert_allclose(e.cka, a.cka, rtol=1e-12, equal_nan=True)
            assert e.rate_units == a.rate_units == done


def test_logit_lens_estimates_are_the_readouts_over_the_batches_so_far(tiny_vit, tiny_resnet, fmnist_source, store):
    opts = logit_lens.LensOptions(images=IMAGES, batch_size=BATCH)
    models = [tiny_vit, tiny_resnet]
    final, seen = collect(lambda run: logit_lens.logit_lens(models, fmnist_source, opts, run), store)
    assert [(d, t) for _, d, t in seen] == [(1, 3), (2, 3)]
    assert final.to_frame().equals(logit_lens.logit_lens(models, fmnist_source, opts, Run(store=store)).to_frame())
    for est, done, _ in seen:
        alone = logit_lens.logit_lens(models, fmnist_source, logit_lens.LensOptions(
            images=done * BATCH, batch_size=BATCH), Run(store=store))
        assert est.images == done * BATCH
        assert est.to_frame().equals(alone.to_frame())


def test_probes_first_answer_is_the_cheapest_models_probes(tiny_vit, tiny_resnet, fmnist_source, store):
    """The cheaper model (fewer multiply-accumulates a forward) is probed first and is the first answer; the final
    report keeps the models' order, and each model's probes equal its probes alone."""
    opts = probes.ProbeOptions(shots=2, test=20, draws=2, batch_size=16, reps=("gap",))
    assert tiny_vit.forward_macs < tiny_resnet.forward_macs  # (30 M against 103 M): given last, probed first
    final, seen = collect(lambda run: probes.probes([tiny_resnet, tiny_vit], fmnist_source, opts, run), store)
    assert [(d, t) for _, d, t in seen] == [(1, 2)]
    cheap = tiny_vit
    alone = probes.probes([cheap], fmnist_source, opts, Run(store=store))
    assert seen[0][0].to_frame().equals(alone.to_frame())
    assert [r.model for r in final.results] == [tiny_resnet.label, tiny_vit.label]
    for m in (tiny_vit, tiny_resnet):
        one = probes.probes([m], fmnist_source, opts, Run(store=store)).to_frame()
        assert final.to_frame()[lambda f: f["model"] == m.label].reset_index(drop=True).equals(one)


def test_forward_macs_counts_linear_and_convolution_layers():
    """Against a count by hand: a 3 -> 5 channel 3x3 convolution (padding 1) on 8x8 is 5*64 outputs of 3*9
    products; a grouped one (groups 5, 5 -> 5) 5*64 of 1*9; then a 320 -> 10 linear layer."""
    import torch

    from vitlab.inputs.models import LoadedModel

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(5, 5, 3, padding=1, groups=5), torch.nn.Flatten(),
                              torch.nn.Linear(320, 10))
    m = LoadedModel(spec=None, model=net.eval(), transform=None, data_config={"input_size": (3, 8, 8)},
                    fingerprint="", device="cpu")
    assert m.forward_macs == 5 * 64 * 27 + 5 * 64 * 9 + 320 * 10
    assert not any(mod._forward_hooks for mod in net.modules())  # the counting hooks are gone


# ------------------------------------------------------------------------------------------------ on the page

ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ("vit-cls", "resnet"))
PAGE = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
        "lab.images": 32, "lab.batch_size": 8}


def frame_of(vega) -> list[dict]:
    """The rows a Vega-Lite chart message carries (Arrow IPC streams, as the browser gets them)."""
    import pyarrow as pa

    rows = []
    for d in vega.datasets:
        rows += pa.ipc.open_stream(d.data.data).read_all().to_pylist()
    return rows


def cka_cells(rows: list[dict]) -> dict:
    return {(r["layer_a"], r["layer_b"]): r["cka"] for r in rows}


@pytest.mark.usefixtures("app_cache")
@pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are not in assets/zoo")
def test_similarity_draws_a_labelled_first_estimate_before_the_final_heatmap(monkeypatch):
    from streamlit.runtime.forward_msg_queue import ForwardMsgQueue
    from streamlit.testing.v1 import AppTest

    sent = []  # (kind, payload) of every element in the order the browser would get them

    def record(msg) -> None:
        if msg.WhichOneof("type") != "delta" or msg.delta.WhichOneof("type") != "new_element":
            return
        el = msg.delta.new_element
        kind = el.WhichOneof("type")
        if kind == "markdown":
            sent.append(("text", el.markdown.body))
        elif kind == "vega_lite_chart":
            sent.append(("chart", el.vega_lite_chart))

    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    for k, v in PAGE.items():
        at.session_state[k] = v
    at.run()
    monkeypatch.setattr(ForwardMsgQueue, "_before_enqueue_msg", staticmethod(record))
    at.switch_page("views/similarity.py").run()
    assert not at.exception, [e.message for e in at.exception]

    words = [i for i, (kind, body) in enumerate(sent) if kind == "text" and body.startswith("**Running estimate")]
    assert [sent[i][1].split(":")[0] for i in words] == [
        f"**Running estimate from {8 * k} of 32 images (batch {k} of 4)**" for k in (1, 2, 3)]
    assert "refined in place as the run goes on; the final result replaces it" in sent[words[0]][1]
    first = next(body for kind, body in sent[words[0]:] if kind == "chart")
    final_at = next(i for i, (kind, body) in enumerate(sent) if kind == "chart" and i > words[-1] + 1)
    assert words[0] < final_at

    a, b = (vitlab.load(PAGE[k], "cpu") for k in ("lab.model_a", "lab.model_b"))
    src = vitlab.open_source(PAGE["lab.source"])
    for images, chart in ((8, first), (32, sent[final_at][1])):
        want = vitlab.run.cka([a, b], src, vitlab.run.CKAOptions(images=images, batch_size=8)).pair(0, 1).to_frame()
        got = cka_cells(frame_of(chart))
        assert len(got) == len(want)
        for _, r in want.iterrows():
            assert got[(r["layer_a"], r["layer_b"])] == pytest.approx(r["cka"], abs=1e-5)
    # once done, the estimate is gone: the page shows the final heatmap only
    assert not [m for m in at.markdown if "Running estimate" in m.value]
    assert cka_cells(frame_of(at.get("vega_lite_chart")[0].proto)) == cka_cells(frame_of(sent[final_at][1]))
