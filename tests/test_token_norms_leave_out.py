"""Flagged high-norm tokens left out of the localization maps and of the one-image attention maps: against the
clean model's computation written out in float64 numpy, and against a hand renormalisation of captured attention."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, taps
from vitlab import attention as A
from vitlab import localization as loc
from vitlab import token_norms as tn
from vitlab.engine.context import Run
from vitlab.inputs.data import decode, plan_batches, to_tensor

from .reference import hsic1_song, linear_gram64
from .test_localization import _batches
from .test_token_norms import injected_model

TAP = "blocks.3.resid_post"


@pytest.fixture(scope="module")
def source():
    return vitlab.open_source("samples")


def visible_sink_model(clean):
    """The test ViT with a huge-norm token appended after the patches that every token may attend to (no mask): the
    attention maps of this model put weight on it, unlike :func:`injected_model`'s."""
    from timm.models.vision_transformer import VisionTransformer

    class VisibleSinkViT(VisionTransformer):
        def forward_features(self, x, attn_mask=None, is_causal=False):
            x = self.norm_pre(self.patch_drop(self._pos_embed(self.patch_embed(x))))
            x = torch.cat([x, self.sink + 100 * x[:, 1:].mean(1, keepdim=True)], dim=1)
            return self.norm(self.blocks(x))

    model = copy.deepcopy(clean.model)
    model.__class__ = VisibleSinkViT
    model.sink = torch.nn.Parameter(torch.full((1, 1, model.embed_dim), 300.0), requires_grad=False)
    return dataclasses.replace(clean, model=model, fingerprint="visible-sink-test")


def clean_reference(loaded, source, n, bs):
    """(T, G) minibatch CKA (sum of per-batch Song HSIC_1) of every token of ``TAP`` with every 16 px input patch."""
    per_batch = []
    for x, a in _batches(loaded, source, TAP, n, bs):
        tok = [linear_gram64(a[:, t]) for t in range(a.shape[1])]
        pat = [linear_gram64(x[:, :, r * 16:(r + 1) * 16, c * 16:(c + 1) * 16]) for r in range(10) for c in range(10)]
        per_batch.append((tok, pat))
    T, G = len(per_batch[0][0]), len(per_batch[0][1])
    kl, kk, ll = np.zeros((T, G)), np.zeros(T), np.zeros(G)
    for tok, pat in per_batch:
        kk += [hsic1_song(K, K) for K in tok]
        ll += [hsic1_song(L, L) for L in pat]
        kl += [[hsic1_song(K, L) for L in pat] for K in tok]
    return kl / np.sqrt(np.outer(kk, ll))


def test_localization_without_the_injected_token_is_the_clean_computation(tiny_vit, source):
    dirty = injected_model(tiny_vit)
    opts = loc.LocalizationOptions(layers=(TAP,), images=10, batch_size=5, flagged_k=5.0)
    res = loc.localization([dirty], source, opts, Run(bootstrap=20)).results[0]
    assert res.cka.shape == (102, 100)
    assert np.flatnonzero(res.left_out).tolist() == [101], "the injected token, and only it, is left out"
    assert np.isnan(res.cka[101]).all() and res.kinds()[101] == "left out"
    ref = clean_reference(tiny_vit, source, 10, 5)
    np.testing.assert_allclose(res.cka[:101], ref, rtol=1e-4, atol=1e-6)
    best = ref[1:].argmax(1)
    margin = np.sort(ref[1:], 1)[:, -1] - np.sort(ref[1:], 1)[:, -2]
    assert margin.min() > 1e-4, "no near-tie that float32 could flip"
    assert res.rate() == pytest.approx(float((best == np.arange(100)).mean()), abs=1e-12)
    rates = loc.LocalizationReport([res], Run().info).rates()
    assert rates["localized"].iloc[0] == pytest.approx(res.rate()) and rates["left_out"].iloc[0] == 1
    assert rates["rate"].iloc[0] == pytest.approx(res.rate()) and np.isfinite(res.rate_samples).all()
    # with every token kept, the injected token has no grid position: it is summarised as 'extra', not a patch
    kept = loc.localization([dirty], source, dataclasses.replace(opts, flagged_k=None)).results[0]
    assert kept.kinds()[101] == "extra" and np.isfinite(kept.cka[101]).all()
    assert not kept.summary()["localized"].iloc[101]
    assert kept.rate() == pytest.approx(res.rate(), abs=1e-12)


def test_localization_leaves_flagged_patches_out_of_the_rate(tiny_vit, source):
    k = 1.0
    opts = loc.LocalizationOptions(layers=(TAP,), images=10, batch_size=5)
    full = loc.localization([tiny_vit], source, opts).results[0]
    res = loc.localization([tiny_vit], source, dataclasses.replace(opts, flagged_k=k)).results[0]
    # reference flags: norms of the tap's tokens over the 10 images, median + k · 1.4826 · MAD of the patches
    acts = vitlab.activations.activations(tiny_vit, source, [TAP], indices=range(10)).arrays[TAP]
    norms = np.linalg.norm(acts.astype(np.float64), axis=-1)  # float16 cache: ~1e-3 relative
    med = np.median(norms[:, 1:])
    thr = med + k * 1.4826 * np.median(np.abs(norms[:, 1:] - med))
    want = (norms > thr).any(0)
    want[0] = False
    clear = np.abs(norms - thr).min(0) > 3e-3 * thr  # positions no float16 rounding can move across the threshold
    assert (res.left_out[clear] == want[clear]).all() and 0 < res.left_out.sum() < 100
    kept = ~res.left_out[1:]
    np.testing.assert_array_equal(res.cka[1:][kept], full.cka[1:][kept])
    assert np.isnan(res.cka[1:][~kept]).all()
    hit = full.cka[1:].argmax(1) == np.arange(100)
    assert res.rate() == pytest.approx(hit[kept].mean(), abs=1e-12)
    assert res.rate_evidence()["rate"] == pytest.approx(hit[kept].mean(), abs=1e-12)
    summary = res.summary()
    assert (summary["kind"] == "left out").sum() == res.left_out.sum()
    assert not summary.loc[summary["kind"] == "left out", "localized"].any()
    assert summary.loc[summary["kind"] == "spatial", "localized"].mean() == pytest.approx(hit[kept].mean())
    # a tiny k flags every position in some image: the layer stays in the rates, with no rate, and says why
    every = loc.localization([tiny_vit], source, dataclasses.replace(opts, flagged_k=1e-3))
    rates = every.rates()
    assert len(rates) == 1 and np.isnan(rates["localized"].iloc[0]) and np.isnan(rates["rate"].iloc[0])
    assert rates["left_out"].iloc[0] == 100 and any("every grid position is flagged" in w for w in every.warnings)


def test_attention_map_with_the_flagged_key_masked_is_renormalised(tiny_vit, source):
    dirty = visible_sink_model(tiny_vit)
    norms = tn.token_norms(dirty, source, tn.TokenNormOptions(images=8, batch_size=4, skip_attention=True), Run())
    flags = tn.block_input_flags(norms, 2, 0)
    assert np.flatnonzero(flags).tolist() == [101] and tn.block_input_flags(norms, 0, 0) is None
    # attention probabilities of image 0, block 2, by the taps' own recomputation in float32 (not the cache)
    batch = next(iter(plan_batches(source, [0], 1)))
    decode(source, batch)
    with taps.capture(dirty.model, ["blocks.2.attn_probs"]) as acts, torch.no_grad():
        dirty.model(to_tensor(batch.images, dirty))
    a = acts["blocks.2.attn_probs"][0].double().numpy()  # (H, 102, 102)
    for head in (0, 1, "mean"):
        row = a[:, 0].mean(0) if head == "mean" else a[head, 0]
        assert row[101] > 1e-3, "the sink takes attention, so masking it changes the map"
        hand = row.copy()
        hand[101] = 0
        hand /= hand.sum()
        amap = A.attention_map(dirty, source, 0, 2, head, "cls", leave_out=flags)
        np.testing.assert_allclose(amap.grid, hand[1:101].reshape(10, 10), rtol=5e-3, atol=1e-6)
        plain = A.attention_map(dirty, source, 0, 2, head, "cls")
        np.testing.assert_allclose(plain.grid, row[1:101].reshape(10, 10), rtol=5e-3, atol=1e-6)
        assert not amap.flagged.any() and plain.flagged is None  # the sink has no place on the grid


def test_attention_map_marks_and_masks_flagged_patches(tiny_vit, source):
    norms = tn.token_norms(tiny_vit, source, tn.TokenNormOptions(images=8, batch_size=8, k=1.0,
                                                                 skip_attention=True), Run())
    flags = tn.block_input_flags(norms, 3, 1)
    assert 0 < flags.sum() < 100 and not flags[0]
    a = A.image_attention(tiny_vit, source, 1).arrays["blocks.3.attn_probs"][0].astype(np.float64)
    row = a[:, 0].mean(0)
    hand = np.where(flags, 0.0, row) / np.where(flags, 0.0, row).sum()
    amap = A.attention_map(tiny_vit, source, 1, 3, "mean", "cls", leave_out=flags)
    np.testing.assert_allclose(amap.grid, hand[1:].reshape(10, 10), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(amap.flagged.ravel(), flags[1:])
    assert (amap.grid.ravel()[flags[1:]] == 0).all()
    frame = A.head_maps(tiny_vit, source, 1, 3, "cls", leave_out=flags)
    assert set(frame["tokens"]) == {"flagged left out"} and frame["flagged"].sum() == flags[1:].sum() * (tiny_vit.heads + 1)
    with pytest.raises(VitlabError, match="leave_out has"):
        A.attention_map(tiny_vit, source, 1, 3, "mean", "cls", leave_out=flags[:-1])
    with pytest.raises(VitlabError, match="nothing left"):
        A.attention_map(tiny_vit, source, 1, 3, "mean", "cls", leave_out=np.ones(101, dtype=bool))
    with pytest.raises(VitlabError, match="token model"):
        loc.localization([vitlab.load("test_resnet@random:0", "cpu")], source,
                         loc.LocalizationOptions(images=8, batch_size=4, flagged_k=5.0))
