"""Attention capture parity, mean attention distance (analytic cases, float64 reference, accumulator contract),
per-head maps, rollout and the activation cache (Raghu et al. 2021, Figs 3-4)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import timm
import torch

import vitlab
from vitlab import VitlabError, taps
from vitlab import attention as A
from vitlab.engine.activations import activations, model_view
from vitlab.inputs.models import LoadedModel, ModelSpec


def _variant(**kwargs) -> LoadedModel:
    """test_vit with other prefix tokens (registers, no CLS) as a LoadedModel."""
    torch.manual_seed(0)
    model = timm.create_model("test_vit", pretrained=False, **kwargs).eval().requires_grad_(False)
    cfg = timm.data.resolve_model_data_config(model)
    fp = "test-" + "-".join(f"{k}{v}" for k, v in sorted(kwargs.items()))
    return LoadedModel(ModelSpec("test_vit", "random:0"), model, timm.data.create_transform(**cfg), cfg, fp, "cpu")


@pytest.fixture(scope="module")
def samples():
    return vitlab.open_source("samples")


# ---------------------------------------------------------------- capture parity


@pytest.mark.parametrize("kwargs", [{}, {"reg_tokens": 3}, {"class_token": False, "global_pool": "avg"},
                                    {"qk_norm": True}])
def test_capture_leaves_the_fused_forward_alone(kwargs, samples):
    """timm's plain attention, fused: the probabilities are recomputed beside the forward, so every block output and
    the logits are those of the forward without capture, bit for bit, and the probabilities are the independent
    recomputation's (q_norm/k_norm included)."""
    loaded = _variant(**kwargs)
    assert all(b.attn.fused_attn for b in loaded.model.blocks)
    res = A.capture_parity(loaded, [samples.load(i) for i in range(2)])
    assert res.routes == ["recompute"] * len(loaded.model.blocks)
    assert res.ok(1e-5), res.to_frame()
    assert np.all(res.output_diff == 0) and res.logits_diff == 0
    assert np.all(res.probs_diff == 0) and np.all(res.row_sum_error < 1e-5)
    assert all(b.attn.fused_attn for b in loaded.model.blocks)  # never switched off
    frame = res.to_frame()
    assert list(frame["layer"]) == list(range(len(loaded.model.blocks)))
    assert {"route", "max_abs_diff_output", "max_abs_diff_probs"} <= set(frame.columns)


def test_recomputed_probabilities_are_the_unfused_forwards(tiny_vit, samples):
    """Route 'recompute' forms the softmax with the ops of timm's unfused branch: block 0 (the same input both ways)
    gives the very float32 values an unfused forward passes to attn_drop; later blocks get the fused forward's
    inputs, and their maps equal an unfused forward's to round-off."""
    model = tiny_vit.model
    x = vitlab.inputs.data.to_tensor([samples.load(0), samples.load(1)], tiny_vit)
    probs = A.probs_taps(tiny_vit)
    with torch.inference_mode():
        with taps.capture(model, probs) as beside:
            model(x)
        for b in model.blocks:
            b.attn.fused_attn = False
        try:
            assert {taps.probs_route(model, t) for t in probs} == {"drop-input"}
            with taps.capture(model, probs) as unfused:
                model(x)
        finally:
            for b in model.blocks:
                b.attn.fused_attn = True
    assert torch.equal(beside[probs[0]], unfused[probs[0]])
    for t in probs[1:]:
        torch.testing.assert_close(beside[t], unfused[t], rtol=0, atol=1e-5)


def test_routes_of_other_attention_and_of_gradients(tiny_vit, samples):
    """Another attention class, or probabilities wanted for gradients, switch fused attention off while captured
    (and back on after); parity then allows float32 round-off from the first such block on."""
    model = tiny_vit.model
    t = "blocks.2.attn_probs"
    assert taps.probs_route(model, t) == "recompute"
    assert taps.probs_route(model, t, detach=False) == "unfuse"
    x = vitlab.inputs.data.to_tensor([samples.load(0)], tiny_vit).requires_grad_(True)
    with taps.capture(model, [t], detach=False) as acts:
        assert not model.blocks[2].attn.fused_attn and model.blocks[1].attn.fused_attn
        y = model(x).sum()
        (g,) = torch.autograd.grad(y, acts[t])  # on the output's path: a gradient exists
    assert g.shape == acts[t].shape and model.blocks[2].attn.fused_attn
    blk = model.blocks[2]
    cls = type(blk.attn)
    blk.attn.__class__ = type("OtherAttention", (cls,), {})
    try:
        assert taps.probs_route(model, t) == "unfuse"
        res = A.capture_parity(tiny_vit, [samples.load(0)])
    finally:
        blk.attn.__class__ = cls
    assert res.routes[2] == "unfuse" and res.routes[:2] == ["recompute"] * 2
    assert np.all(res.output_diff[:2] == 0) and res.ok(1e-5), res.to_frame()
    assert blk.attn.fused_attn


def test_parity_would_see_a_capture_that_changes_the_forward(tiny_vit, samples):
    """The check can fail: an unfused block whose forward changes only while captured is reported."""
    blk = tiny_vit.model.blocks[2]
    cls = type(blk.attn)
    blk.attn.__class__ = type("OtherAttention", (cls,), {})  # route 'unfuse'
    orig = blk.attn.attn_drop.forward
    blk.attn.attn_drop.forward = lambda x: orig(x * 0.9)  # only the unfused path calls attn_drop
    try:
        res = A.capture_parity(tiny_vit, [samples.load(0)])
    finally:
        del blk.attn.attn_drop.forward
        blk.attn.__class__ = cls
    assert not res.ok(1e-5)
    assert res.output_diff[2] > 1e-4 and res.output_diff[1] == 0


def test_parity_would_see_a_wrong_recomputation(tiny_vit, samples, monkeypatch):
    """The check can fail: a capture whose recomputed softmax is wrong, with the forward untouched, is reported;
    and an untouched route must give outputs equal to the bit."""
    right = taps.softmax_qk
    monkeypatch.setattr(taps, "softmax_qk", lambda attn, q, k, *a: right(attn, q * 1.1, k, *a))
    res = A.capture_parity(tiny_vit, [samples.load(0)])
    assert np.all(res.output_diff == 0) and not res.ok(1e-5) and np.all(res.probs_diff > 1e-6)
    monkeypatch.setattr(taps, "softmax_qk", right)
    good = A.capture_parity(tiny_vit, [samples.load(0)])
    assert good.ok()
    good.output_diff[3] = 1e-9  # far inside any tolerance, but not the same forward
    assert not good.ok()


def test_recompute_refuses_other_attention_classes(tiny_vit):
    class Other(torch.nn.Module):
        pass

    blk = torch.nn.Module()
    blk.attn = Other()
    with pytest.raises(VitlabError, match="only timm's plain Attention"):
        A.recompute_probs(blk, torch.zeros(1, 5, 64))


# ---------------------------------------------------------------- mean attention distance: analytic cases


def _pairwise_reference(g: int, p: int) -> float:
    cells = [((r + 0.5) * p, (c + 0.5) * p) for r in range(g) for c in range(g)]
    return float(np.mean([np.hypot(a[0] - b[0], a[1] - b[1]) for a, b in itertools.product(cells, cells)]))


@pytest.mark.parametrize("g,p,prefix", [(3, 16, 0), (4, 8, 1), (5, 32, 2)])
def test_uniform_attention_gives_mean_pairwise_distance(g, p, prefix):
    ns = g * g
    probs = torch.full((2, 3, prefix + ns, prefix + ns), 1.0 / ns, dtype=torch.float64)
    probs[..., :prefix] = 0  # all mass on spatial keys
    raw, ren = A.mean_distance_per_image(probs, prefix, A.distance_matrix((g, g), (p, p)))
    assert np.allclose(raw.numpy(), _pairwise_reference(g, p), rtol=1e-12)
    assert np.allclose(ren.numpy(), _pairwise_reference(g, p), rtol=1e-12)


def test_self_attention_gives_zero_and_prefix_mass_conventions():
    g, prefix = 4, 1
    n = prefix + g * g
    eye = torch.eye(n).expand(1, 2, n, n)
    raw, ren = A.mean_distance_per_image(eye, prefix, A.distance_matrix((g, g), (16, 16)))
    assert torch.all(raw == 0) and torch.all(ren == 0)
    # half of every row on the CLS token, half uniform over patches: raw halves, renormalised does not
    probs = torch.full((1, 1, n, n), 0.5 / (g * g), dtype=torch.float64)
    probs[..., 0] = 0.5
    raw, ren = A.mean_distance_per_image(probs, prefix, A.distance_matrix((g, g), (16, 16)))
    ref = _pairwise_reference(g, 16)
    assert raw.item() == pytest.approx(ref / 2, rel=1e-12) and ren.item() == pytest.approx(ref, rel=1e-12)


def test_distance_matrix_non_square_patches():
    d = A.distance_matrix((2, 3), (10, 4))
    assert d.shape == (6, 6)
    assert d[0, 1] == pytest.approx(4) and d[0, 3] == pytest.approx(10) and d[0, 4] == pytest.approx(np.hypot(10, 4))


def _numpy_distances(probs: np.ndarray, prefix: int, grid, patch):
    """Plain float64 loops over images, heads, queries and keys."""
    centres = [((r + 0.5) * patch[0], (c + 0.5) * patch[1]) for r in range(grid[0]) for c in range(grid[1])]
    b, h = probs.shape[:2]
    raw, ren = np.zeros((b, h)), np.zeros((b, h))
    for i, j in itertools.product(range(b), range(h)):
        a = probs[i, j, prefix:, prefix:].astype(np.float64)
        per_q = [sum(a[q, k] * np.hypot(centres[q][0] - centres[k][0], centres[q][1] - centres[k][1])
                     for k in range(len(centres))) for q in range(len(centres))]
        raw[i, j] = np.mean(per_q)
        ren[i, j] = np.mean(np.array(per_q) / a.sum(1))
    return raw, ren


def test_statistic_on_a_real_model_matches_float64_loops(samples, store):
    loaded = _variant(reg_tokens=2)
    opts = A.AttentionDistanceOptions(images=6, batch_size=3)
    res = A.attention_distance(loaded, samples, opts, vitlab.Run(store=store))
    res_ren = A.attention_distance(loaded, samples, replace(opts, renormalise=True), vitlab.Run(store=store))
    acts = activations(loaded, samples, A.probs_taps(loaded), indices=range(6))
    prefix, grid, patch = 3, taps.grid_size(loaded.model), taps.patch_size(loaded.model)
    for li in (0, 5):
        raw, ren = _numpy_distances(acts.arrays[f"blocks.{li}.attn_probs"], prefix, grid, patch)
        # activations are float16-cached: compare at float16 precision
        assert np.allclose(res.distance_px[li], raw.mean(0), rtol=2e-3)
        assert np.allclose(res.std_px[li], raw.std(0), atol=0.05 * raw.std(0).max() + 1e-3)
        assert np.allclose(res_ren.distance_px[li], ren.mean(0), rtol=2e-3)
    frame = res.to_frame()
    assert list(frame.columns[:3]) == ["layer", "head", "distance_px"]
    assert len(frame) == 6 * 2 and (frame["images"] == 6).all()
    assert np.allclose(frame["distance_frac"], frame["distance_px"] / 160)
    # the uniform reference in each result's own convention (issue 12): without renormalising, the 3 prefix keys'
    # share 3/103 of uniform attention counts as distance 0
    assert frame["uniform_px"].iloc[0] == pytest.approx(_pairwise_reference(10, 16) * 100 / 103, rel=1e-12)
    assert res_ren.uniform_px == pytest.approx(_pairwise_reference(10, 16), rel=1e-12)
    # 95 % t interval of the mean over 6 images: t_5 · sample std / √6 (the frame's std is over images, ddof 0)
    from scipy.stats import t as student

    half = student.ppf(0.975, 5) * frame["std_px"] * np.sqrt(6 / 5) / np.sqrt(6)
    assert (frame["interval_unit"] == "images").all() and (frame["interval_units"] == 6).all()
    assert np.allclose(frame["distance_hi"] - frame["distance_px"], half)
    assert np.allclose(frame["distance_px"] - frame["distance_lo"], half)


# ---------------------------------------------------------------- accumulator (its contract: test_accumulators.py)


def test_accumulator_refuses_other_layers_and_an_empty_compute():
    with pytest.raises(VitlabError, match="different layers"):
        A.AttentionDistanceAccumulator([0, 1, 2], 4).merge(A.AttentionDistanceAccumulator([0, 1], 4))
    with pytest.raises(VitlabError, match="no image"):
        A.AttentionDistanceAccumulator([0], 4).compute("m", 1.0)
    with pytest.raises(VitlabError, match="distances of shape"):
        A.AttentionDistanceAccumulator([0], 4).update({"raw": np.zeros((2, 4, 1)), "renorm": np.zeros((2, 4, 1))})


def test_distance_is_cached_per_batch(tiny_vit, samples, store):
    info1, info2 = vitlab.RunInfo(), vitlab.RunInfo()
    opts = A.AttentionDistanceOptions(images=8, batch_size=4)
    a = A.attention_distance(tiny_vit, samples, opts, vitlab.Run(store=store, info=info1))
    b = A.attention_distance(tiny_vit, samples, replace(opts, renormalise=True), vitlab.Run(store=store, info=info2))
    assert info1.batches_computed == 2 and info2.batches_from_cache == 2 and info2.batches_computed == 0
    assert not np.allclose(a.distance_px, b.distance_px)  # the two conventions differ (CLS takes some mass)


def test_user_errors(tiny_vit, tiny_resnet, samples):
    with pytest.raises(VitlabError, match="needs a ViT-family model"):
        A.attention_distance(tiny_resnet, samples, A.AttentionDistanceOptions(images=4))
    with pytest.raises(VitlabError, match=r"block\(s\) \[9\] out of range"):
        A.attention_distance(tiny_vit, samples, A.AttentionDistanceOptions(images=4, blocks=(9,)))
    with pytest.raises(VitlabError, match="has no CLS token"):
        A.query_token(_variant(class_token=False, global_pool="avg"), "cls")
    with pytest.raises(VitlabError, match="outside the 10x10 patch grid"):
        A.query_token(tiny_vit, (10, 0))
    with pytest.raises(VitlabError, match="head 7 out of range"):
        A.attention_map(tiny_vit, samples, 0, 1, 7)
    with pytest.raises(VitlabError, match="head must be a head index"):
        A.attention_map(tiny_vit, samples, 0, 1, "max")


# ---------------------------------------------------------------- maps, rollout, activation cache


def test_maps_are_rows_of_the_captured_probabilities(tiny_vit, samples, store):
    img = samples.load(1)
    x = vitlab.data.to_tensor([img], tiny_vit)
    with taps.capture(tiny_vit.model, A.probs_taps(tiny_vit)) as acts, torch.no_grad():
        tiny_vit.model(x)
    probs = [acts[f"blocks.{i}.attn_probs"][0].double().numpy() for i in range(6)]
    m = A.attention_map(tiny_vit, samples, 1, 3, 1, (2, 7), store=store)
    q = 1 + 2 * 10 + 7
    assert np.allclose(m.grid, probs[3][1, q, 1:].reshape(10, 10), atol=1e-3)  # float16 cache
    mean = A.attention_map(tiny_vit, samples, 1, 3, "mean", "cls", store=store)
    assert np.allclose(mean.grid, probs[3][:, 0, 1:].mean(0).reshape(10, 10), atol=1e-3)
    # rollout reference: explicit loop of (0.5 I + 0.5 mean_h A) with rows renormalised
    r = np.eye(101)
    for layer in range(4):
        step = 0.5 * np.eye(101) + 0.5 * probs[layer].mean(0)
        r = (step / step.sum(1, keepdims=True)) @ r
    roll = A.attention_map(tiny_vit, samples, 1, 3, "rollout", "cls", store=store)
    assert np.allclose(roll.grid, r[0, 1:].reshape(10, 10), atol=1e-3)
    assert m.upsampled().shape == (160, 160) and m.upsampled()[35, 120] == pytest.approx(m.grid[2, 7])
    frame = m.to_frame()
    assert len(frame) == 100 and frame["query_row"].iloc[0] == 2 and frame["query_col"].iloc[0] == 7


def test_switching_views_never_reruns_the_model(tiny_vit, samples, store, monkeypatch):
    first = A.image_attention(tiny_vit, samples, 2, store)
    assert first.computed == 1

    def boom(*a, **k):
        raise AssertionError("the model ran again")

    monkeypatch.setattr(tiny_vit.model, "forward", boom)
    for layer, head, query in [(0, 0, "cls"), (5, 1, 3), (2, "mean", (1, 1)), (4, "rollout", "cls")]:
        A.attention_map(tiny_vit, samples, 2, layer, head, query, store=store)
    frame = A.head_maps(tiny_vit, samples, 2, 4, "cls", store=store)
    assert list(dict.fromkeys(frame["head"])) == ["0", "1", "mean"]
    assert A.image_attention(tiny_vit, samples, 2, store).computed == 0


def test_activations_float16_round_trip_and_inputs(tiny_vit, samples, store):
    imgs = [samples.load(i) for i in range(3)]
    tap = ["blocks.1.resid_post"]
    direct = activations(tiny_vit, imgs, tap, None).arrays[tap[0]]
    cached = activations(tiny_vit, imgs, tap, store)
    again = activations(tiny_vit, imgs, tap, store)
    assert cached.computed == 3 and again.computed == 0
    assert np.allclose(again.arrays[tap[0]], direct, rtol=2e-3, atol=2e-3)
    assert again.arrays[tap[0]].dtype == np.float32 and again.arrays[tap[0]].shape == (3, 101, 64)
    with pytest.raises(VitlabError, match="no images"):
        activations(tiny_vit, [], tap)
    view = model_view(tiny_vit, imgs[0])
    assert view.shape == (160, 160, 3) and view.dtype == np.uint8


def test_cli_commands(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "ad"
    assert main(["attention-distance", "-m", "test_vit@random", "-n", "4", "-b", "4", "-o", str(out),
                 "--cache-dir", str(tmp_path / "c")]) == 0
    frame = pd.read_csv(out / "attention_distance.csv")
    assert list(frame.columns[:3]) == ["layer", "head", "distance_px"] and len(frame) == 12
    assert (out / "attention_distance.png").stat().st_size > 1000 and (out / "attention_distance_sorted.svg").exists()
    assert json.loads((out / "run.json").read_text())["command"] == "attention-distance"
    assert main(["attention-map", "-m", "test_vit@random", "--layer", "2", "--query", "3,4", "-o",
                 str(tmp_path / "am"), "--cache-dir", str(tmp_path / "c")]) == 0
    assert (tmp_path / "am" / "attention_overlay.png").exists() and (tmp_path / "am" / "attention_map.svg").exists()
    assert main(["attention-parity", "-m", "test_vit@random", "-n", "2", "-o", str(tmp_path / "p")]) == 0
    assert pd.read_csv(tmp_path / "p" / "attention_parity.csv")["max_abs_diff_output"].max() < 1e-5
    assert main(["attention-distance", "-m", "test_resnet@random", "-n", "4", "-o", str(tmp_path / "x")]) == 2


def test_charts_and_overlay(tiny_vit, samples, store):
    from vitlab.charts import attention as ch

    dist = A.attention_distance(tiny_vit, samples, A.AttentionDistanceOptions(images=4, batch_size=4),
                                vitlab.Run(store=store)).to_frame()
    for chart in (ch.attention_distance_chart(dist), ch.attention_distance_chart(dist, "frac"),
                  ch.sorted_heads_chart(dist, [0, 5])):
        assert "mean attention distance" in json.dumps(chart.to_dict())
    two = pd.concat([dist, dist.assign(model="other")])
    assert "facet" in ch.attention_distance_chart(two).to_dict()
    maps = A.head_maps(tiny_vit, samples, 0, 1, (0, 0), store=store)
    spec = ch.attention_map_chart(maps, select="patch").to_dict()
    assert "facet" in spec and "patch" in json.dumps(spec)
    parity = A.capture_parity(tiny_vit, [samples.load(0)]).to_frame()
    assert ch.parity_chart(parity).to_dict()["mark"]["type"] == "point"
    assert ch.colourise(np.array([0.0, 1.0])).tolist() == [[0, 0, 4], [252, 255, 164]]
    img = np.full((32, 48, 3), 100, np.uint8)
    heat = np.zeros((2, 3))
    heat[1, 2] = 5.0
    out = ch.overlay(img, heat, alpha=1.0)
    assert out.shape == (32, 48, 3) and out[31, 47].tolist() == [252, 255, 164] and out[0, 0].tolist() == [0, 0, 4]
    big = ch.overlay(img[:28, :28], np.eye(2), alpha=1.0, min_side=224)
    assert big.shape == (224, 224, 3) and big[223, 223].tolist() == [252, 255, 164]


ZOO = Path(vitlab.__file__).parent.parent / "assets" / "zoo"


@pytest.mark.skipif(not list(ZOO.glob("vit-cls*.safetensors")), reason="zoo models not trained yet")
def test_zoo_vit_parity_and_distances(store):
    loaded = vitlab.load("zoo:vit-cls", "cpu")
    source = vitlab.open_source("fashion-mnist:test")
    parity = A.capture_parity(loaded, [source.load(i) for i in range(8)])
    assert parity.ok(1e-5), parity.to_frame()
    res = A.attention_distance(loaded, source, A.AttentionDistanceOptions(images=64, batch_size=32),
                               vitlab.Run(store=store))
    assert np.all(np.isfinite(res.distance_px)) and np.all(res.distance_px > 0)
    assert res.distance_px.max() <= np.hypot(28, 28)  # no two patch centres are further apart than the diagonal
    assert np.ptp(res.distance_px) > 0.5  # trained heads differ from one another


def test_shards_add_up_to_the_whole(tiny_vit, samples, store):
    opts = A.AttentionDistanceOptions(images=8, batch_size=2)
    whole = A.attention_distance(tiny_vit, samples, opts, vitlab.Run(store=store))
    parts = []

    def keep(acc):
        parts.append(acc)

    for rank in range(2):
        A.attention_distance(tiny_vit, samples, opts, vitlab.Run(store=store, shard=(rank, 2), reduce=keep))
    merged = parts[0].merge(parts[1]).compute(whole.model, 160.0)
    assert merged.images == whole.images == 8
    assert np.allclose(merged.distance_px, whole.distance_px, rtol=1e-12)
    assert np.allclose(merged.std_px, whole.std_px, rtol=1e-9)
