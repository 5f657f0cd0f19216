"""Head subsets (local -> global) vs another model (Raghu et al. 2021, Fig 5), against float64 references."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import vitlab
from vitlab import VitlabError, taps
from vitlab import attention as A
from vitlab import heads as Hd
from vitlab.inputs.data import to_tensor

from .reference import cka64


@pytest.fixture(scope="module")
def samples():
    return vitlab.open_source("samples")


def test_head_outputs_rebuild_the_attention_branch(tiny_vit, samples):
    x = to_tensor([samples.load(i) for i in range(2)], tiny_vit)
    names = ["blocks.3.resid_pre", "blocks.3.attn_probs", "blocks.3.attn_out"]
    with taps.capture(tiny_vit.model, names) as acts, torch.no_grad():
        tiny_vit.model(x)
    blk = tiny_vit.model.blocks[3]
    out = Hd.head_outputs(blk, acts[names[0]], acts[names[1]])  # (B, H, N, Dh)
    b, h, n, dh = out.shape
    assert (h, dh) == (2, 32)
    rebuilt = blk.ls1(blk.attn.proj(blk.attn.norm(out.transpose(1, 2).reshape(b, n, h * dh))))
    assert torch.allclose(rebuilt, acts[names[2]], atol=1e-6)


def test_subsets_by_distance():
    size, subsets = Hd.subsets_by_distance(12, None)
    assert size == 3 and subsets[0] == [0, 1, 2] and subsets[-2] == [9, 10, 11] and subsets[-1] == list(range(12))
    assert len(subsets) == 10 + 1
    assert Hd.subsets_by_distance(2, None) == (1, [[0], [1], [0, 1]])
    with pytest.raises(VitlabError, match="between 1 and the number of heads"):
        Hd.subsets_by_distance(4, 5)


def _proj_inputs(loaded, images, blocks):
    """Concatenated head outputs as the projection sees them (a pre-hook on attn.proj): independent of heads.py."""
    got = {}
    hooks = [loaded.model.blocks[b].attn.proj.register_forward_pre_hook(
        lambda m, a, b=b: got.__setitem__(b, a[0].detach().double().numpy())) for b in blocks]
    try:
        with torch.no_grad():
            loaded.model(to_tensor(images, loaded))
    finally:
        for hk in hooks:
            hk.remove()
    return got


def test_subset_cka_matches_a_float64_reference(tiny_vit, tiny_resnet, samples, store):
    n_img, blocks = 8, (0, 2)
    res = Hd.head_subsets(tiny_vit, tiny_resnet, samples,
                          Hd.HeadSubsetOptions(images=n_img, batch_size=n_img, blocks=blocks, size=2),
                          vitlab.Run(store=store))
    images = [samples.load(i) for i in range(n_img)]
    dist = A.attention_distance(tiny_vit, samples, A.AttentionDistanceOptions(images=n_img, batch_size=n_img,
                                                                              blocks=blocks), vitlab.Run(store=store))
    flat = dist.distance_px.ravel()
    order = np.argsort(flat, kind="stable")
    assert np.allclose(res.distance_px, flat[order]) and np.all(np.diff(res.distance_px) >= 0)
    assert res.heads == [f"b{blocks[i // 2]}.h{i % 2}" for i in order]
    # reference features: per head (B, Ns * Dh) from the projection's input, prefix token dropped
    proj = _proj_inputs(tiny_vit, images, blocks)
    per_head = [proj[blocks[i // 2]][:, 1:, (i % 2) * 32:(i % 2 + 1) * 32].reshape(n_img, -1) for i in range(4)]
    with taps.capture(tiny_resnet.model, res.layers_b) as acts, torch.no_grad():
        tiny_resnet.model(to_tensor(images, tiny_resnet))
    other = [acts[t].double().numpy().reshape(n_img, -1) for t in res.layers_b]
    assert len(res.subsets) == 3 + 1 and res.size == 2
    for s, members in enumerate(res.subsets):
        feats = np.concatenate([per_head[order[m]] for m in members], axis=1)
        for j, y in enumerate(other):
            assert res.cka[s, j] == pytest.approx(cka64(feats, y), abs=2e-5), (s, j)
    frame = res.to_frame()
    assert len(frame) == 4 * len(res.layers_b) and frame["all_heads"].sum() == len(res.layers_b)
    assert frame.groupby("subset")["mean_distance_px"].first().iloc[:-1].is_monotonic_increasing


def test_head_subsets_errors(tiny_vit, tiny_resnet, samples):
    with pytest.raises(VitlabError, match="needs a ViT-family model"):
        Hd.head_subsets(tiny_resnet, tiny_vit, samples, Hd.HeadSubsetOptions(images=4))
    with pytest.raises(VitlabError, match="unknown tap"):
        Hd.head_subsets(tiny_vit, tiny_resnet, samples, Hd.HeadSubsetOptions(images=4, other_taps=("layer9.0",)))
    with pytest.raises(VitlabError, match="head tokens"):
        Hd.head_subsets(tiny_vit, tiny_resnet, samples, Hd.HeadSubsetOptions(images=4, tokens="cls"))


def test_cli_head_subsets(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "hs"
    assert main(["head-subsets", "-m", "test_vit@random", "--other", "test_resnet@random", "-n", "8", "-b", "8",
                 "--blocks", "0,1", "--no-cache", "-o", str(out)]) == 0
    frame = pd.read_csv(out / "head_subsets.csv")
    assert {"subset", "heads", "mean_distance_px", "layer_b", "cka"} <= set(frame.columns)
    assert (out / "head_subsets.png").exists() and (out / "heads_by_distance.csv").exists()


@pytest.mark.skipif(not list((Path(vitlab.__file__).parent.parent / "assets" / "zoo").glob("vit-cls*.safetensors"))
                    or not list((Path(vitlab.__file__).parent.parent / "assets" / "zoo").glob("resnet*.safetensors")),
                    reason="zoo models not trained yet")
def test_zoo_heads_differ_in_distance_and_subsets_compare(store):
    vit, resnet = vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")
    source = vitlab.open_source("fashion-mnist:test")
    res = Hd.head_subsets(vit, resnet, source, Hd.HeadSubsetOptions(images=64, batch_size=32), vitlab.Run(store=store))
    assert np.all(np.isfinite(res.cka)) and np.all((res.cka > 0) & (res.cka <= 1 + 1e-9))
    assert res.distance_px[-1] > res.distance_px[0]  # trained heads are not all alike
