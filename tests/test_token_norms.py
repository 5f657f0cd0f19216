"""Token-norm artefacts: an injected high-norm token is flagged exactly, and leaving it out restores the clean
model's CKA; thresholds, energy shares and the attention distance against float64 references."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError
from vitlab import token_norms as tn
from vitlab.engine.context import Run


def injected_model(clean):
    """The test ViT with one extra token appended after the patches, of huge norm, that no other token can attend
    to (an additive -inf mask on its key): every other token, and the output, is the clean model's."""
    from timm.models.vision_transformer import VisionTransformer

    class InjectedViT(VisionTransformer):
        def forward_features(self, x, attn_mask=None, is_causal=False):
            x = self.norm_pre(self.patch_drop(self._pos_embed(self.patch_embed(x))))
            # a large constant plus an image-dependent part: a constant token would vanish from centred Grams
            x = torch.cat([x, self.sink + 100 * x[:, 1:].mean(1, keepdim=True)], dim=1)
            mask = torch.zeros(x.shape[1], x.shape[1], dtype=x.dtype)
            mask[:-1, -1] = float("-inf")
            for blk in self.blocks:
                x = blk(x, attn_mask=mask)
            return self.norm(x)

    import copy

    model = copy.deepcopy(clean.model)
    model.__class__ = InjectedViT
    model.sink = torch.nn.Parameter(torch.full((1, 1, model.embed_dim), 300.0), requires_grad=False)
    return dataclasses.replace(clean, model=model, fingerprint="injected-sink-test")


@pytest.fixture(scope="module")
def source():
    return vitlab.open_source("samples")


def test_injected_token_is_flagged_exactly_and_leaving_it_out_restores_cka(tiny_vit, source):
    dirty = injected_model(tiny_vit)
    opts = tn.TokenNormOptions(images=8, batch_size=4, skip_attention=True)
    clean_res = tn.token_norms(tiny_vit, source, opts, Run())
    dirty_res = tn.token_norms(dirty, source, opts, Run())
    n_clean = clean_res.norms.shape[2]
    assert dirty_res.norms.shape[2] == n_clean + 1
    flags = dirty_res.flags
    assert flags[:, :, n_clean].all(), "the injected token is flagged in every image at every tap"
    assert flags.sum() == flags.shape[0] * flags.shape[1], "and nothing else is"
    assert not clean_res.flags.any()
    assert set(dirty_res.flagged_frame()["token"]) == {f"token {n_clean}"}
    # the sink dominates the energy of every Gram; leaving it out gives the clean model's CKA back
    assert (dirty_res.energy_share > 0.5).all() and (clean_res.energy_share == 0).all()
    np.testing.assert_allclose(dirty_res.cka_kept.cka, clean_res.cka_all.cka, atol=1e-6, rtol=0)
    assert np.abs(dirty_res.cka_all.cka - clean_res.cka_all.cka).max() > 1e-3  # with it, CKA differs


def test_thresholds_energy_and_distance_against_references(tiny_vit, source):
    res = tn.token_norms(tiny_vit, source, tn.TokenNormOptions(images=8, batch_size=8, k=1.0), Run())
    taps = res.layers
    acts = vitlab.activations.activations(tiny_vit, source, taps + [f"blocks.{i}.attn_probs" for i in range(6)]
                                          + [f"blocks.{i}.resid_pre" for i in range(6)], indices=range(8))
    for li, tap in enumerate(taps):
        x = acts.arrays[tap].astype(np.float64)  # float16 round trip: norms to ~1e-3 relative
        norms = np.linalg.norm(x, axis=-1)
        np.testing.assert_allclose(res.norms[li], norms, rtol=3e-3)
        sp = res.norms[li][:, 1:].astype(np.float64).ravel()
        med = np.median(sp)
        assert res.thresholds[li] == pytest.approx(med + 1.0 * 1.4826 * np.median(np.abs(sp - med)), rel=1e-9)
        flagged = res.norms[li] > res.thresholds[li]
        flagged[:, 0] = False
        xc = x - x.mean(0)
        energy = (xc**2).sum(-1)
        assert res.energy_share[li] == pytest.approx(energy[flagged].sum() / energy.sum(), rel=2e-2)
    assert res.flags.any() and not res.flags[:, :, 0].any()  # k = 1 flags some patches, never the CLS token
    # attention distance with flagged tokens left out, by hand for block 2 (input flags: blocks.1.resid_post)
    d = vitlab.attention.distance_matrix((10, 10), (16, 16))
    thr = res.thresholds[taps.index("blocks.1.resid_post")]
    a = acts.arrays["blocks.2.attn_probs"][:, :, 1:, 1:].astype(np.float64)
    keep = np.linalg.norm(acts.arrays["blocks.2.resid_pre"].astype(np.float64), axis=-1)[:, 1:] <= thr
    want = []
    for b in range(8):
        q = np.nonzero(keep[b])[0]
        want.append([(a[b, h][np.ix_(q, q)] * d[np.ix_(q, q)]).sum() / len(q) for h in range(a.shape[1])])
    np.testing.assert_allclose(res.distance_kept[2], np.mean(want, axis=0), rtol=2e-2)
    assert not np.allclose(res.distance_kept[2], res.distance_all[2])
    frame = res.to_frame()
    assert list(frame["tap"]) == taps and (frame["flagged_tokens"] > 0).any()
    assert set(res.cka_frame()["tokens"]) == {"all", "flagged left out"}
    assert not res.histogram_frame().empty and res.flag_grid(0, taps[-1]).shape == (10, 10)


def test_prefix_names_and_errors(tiny_vit, tiny_resnet, source):
    assert tn.prefix_names(tiny_vit.model) == ["cls"]
    reg = vitlab.load(vitlab.ModelSpec("vit_small_patch14_reg4_dinov2", "random:0", img_size=56), "cpu")
    assert tn.prefix_names(reg.model) == ["cls", "reg0", "reg1", "reg2", "reg3"]
    with pytest.raises(VitlabError, match="token model"):
        tn.token_norms(tiny_resnet, source)
    with pytest.raises(VitlabError, match="k must be positive"):
        tn.token_norms(tiny_vit, source, tn.TokenNormOptions(k=0))
