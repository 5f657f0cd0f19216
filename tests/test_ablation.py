"""Head ablation: exact against hand-written forwards (zero: the attention branch's per-head terms removed; mean:
the head's output replaced by its stored mean), bit-equal restoration, head choice by distance, the experiment."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError
from vitlab import ablation as ab
from vitlab.engine.context import Run


@pytest.fixture(scope="module")
def x():
    return torch.randn(3, 3, 160, 160, generator=torch.Generator().manual_seed(0))


def hand_forward(model, x, block: int, heads=(), mode: str = "zero", mean=None, drop_branch: bool = False):
    """A ViT forward written out: at ``block`` attention is computed by hand; the chosen heads' outputs are set to
    zero (with their share b/H of the projection bias removed) or to ``mean`` (H, N, Dh); ``drop_branch`` skips the
    attention branch altogether."""
    t = model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(x))))
    for i, blk in enumerate(model.blocks):
        if i != block:
            t = blk(t)
            continue
        if not drop_branch:
            attn = blk.attn
            b, n, d = t.shape
            qkv = attn.qkv(blk.norm1(t)).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
            a = ((qkv[0] * attn.scale) @ qkv[1].transpose(-2, -1)).softmax(-1)
            o = a @ qkv[2]  # (B, H, N, Dh)
            for h in heads:
                o[:, h] = 0 if mode == "zero" else mean[h]
            y = o.transpose(1, 2).reshape(b, n, d) @ attn.proj.weight.T + attn.proj.bias
            if mode == "zero":
                y = y - attn.proj.bias * (len(heads) / attn.num_heads)
            t = t + blk.ls1(y)
        t = t + blk.ls2(blk.mlp(blk.norm2(t)))
    return model.forward_head(model.norm(t))


def test_zero_ablating_every_head_of_a_block_removes_its_attention_branch(tiny_vit, x):
    model = tiny_vit.model
    n_heads = model.blocks[2].attn.num_heads
    with torch.no_grad():
        before = model(x)
        with ab.ablate_heads(model, ab.HeadAblation(tuple((2, h) for h in range(n_heads)), "zero")):
            during = model(x)
        after = model(x)
        want = hand_forward(model, x, 2, drop_branch=True)
    assert torch.equal(before, after), "the model must be bit-equal after the with"
    assert not torch.allclose(before, during)
    torch.testing.assert_close(during, want, rtol=0, atol=1e-6)
    assert not model.blocks[2].attn.proj._forward_pre_hooks and not model.blocks[2].attn.proj._forward_hooks


def test_zero_ablating_one_head_matches_the_hand_forward(tiny_vit, x):
    model = tiny_vit.model
    with torch.no_grad():
        with ab.ablate_heads(model, ab.HeadAblation(((1, 1),), "zero")):
            during = model(x)
        want = hand_forward(model, x, 1, heads=(1,))
        intact = hand_forward(model, x, 1)
    torch.testing.assert_close(during, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(intact, model(x), rtol=1e-5, atol=1e-5)  # the hand forward is the model's


def test_mean_ablation_replaces_the_head_by_its_stored_mean(tiny_vit, x):
    model = tiny_vit.model
    source = vitlab.open_source("samples")
    means = ab.head_means(tiny_vit, source, [0, 1, 2, 3], [3], batch_size=2, run=Run())
    # the stored mean, computed independently: head outputs by hand, averaged over the same four images
    imgs = vitlab.data.to_tensor([source.load(i) for i in range(4)], tiny_vit)
    with torch.no_grad():
        t = model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(imgs))))
        for blk in model.blocks[:3]:
            t = blk(t)
        attn = model.blocks[3].attn
        b, n, d = t.shape
        qkv = attn.qkv(model.blocks[3].norm1(t)).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        o = ((qkv[0] * attn.scale) @ qkv[1].transpose(-2, -1)).softmax(-1) @ qkv[2]
    np.testing.assert_allclose(means[3], o.double().mean(0).numpy(), rtol=1e-5, atol=1e-6)
    assert means[3].shape == (attn.num_heads, n, attn.head_dim)
    with torch.no_grad():
        before = model(x)
        with ab.ablate_heads(model, ab.HeadAblation(((3, 0),), "mean"), means):
            during = model(x)
        want = hand_forward(model, x, 3, heads=(0,), mode="mean", mean=torch.as_tensor(means[3]))
        assert torch.equal(before, model(x))
    torch.testing.assert_close(during, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before, during)


def test_ablated_view_has_its_own_fingerprint_and_is_restored_after_an_error(tiny_vit, x):
    with torch.no_grad():
        before = tiny_vit.model(x)
        with ab.ablated(tiny_vit, ab.HeadAblation(((0, 0),))) as view:
            assert view.fingerprint != tiny_vit.fingerprint and view.model is tiny_vit.model
        with pytest.raises(RuntimeError), ab.ablate_heads(tiny_vit.model, ab.HeadAblation(((0, 1),))):
            raise RuntimeError("boom")
        assert torch.equal(before, tiny_vit.model(x))


def test_bad_requests(tiny_vit, tiny_resnet):
    vit = tiny_vit.model
    for abl, means, match in ((ab.HeadAblation(((9, 0),)), None, "block 9 does not exist"),
                              (ab.HeadAblation(((0, 7),)), None, "head 7 does not exist"),
                              (ab.HeadAblation(((0, 0),), "shuffle"), None, "one of zero, mean"),
                              (ab.HeadAblation(((0, 0),), "mean"), None, "stored head means"),
                              (ab.HeadAblation(()), None, "no head")):
        with pytest.raises(VitlabError, match=match), ab.ablate_heads(vit, abl, means):
            pass
    with pytest.raises(VitlabError, match="ViT"), ab.ablate_heads(tiny_resnet.model, ab.HeadAblation(((0, 0),))):
        pass


def test_choose_heads_by_distance():
    d = np.array([[5.0, 1.0, 3.0], [2.0, 9.0, 4.0]])  # blocks 0 and 1, three heads each
    assert ab.choose_heads(d, [0, 1], 2, "local", "pooled") == ((0, 1), (1, 0))
    assert ab.choose_heads(d, [0, 1], 2, "global", "pooled") == ((0, 0), (1, 1))
    assert ab.choose_heads(d, [0, 1], 1, "local", "per-block") == ((0, 1), (1, 0))
    assert ab.choose_heads(d, [0, 1], 1, "global", "per-block") == ((0, 0), (1, 1))
    draws = {ab.choose_heads(d, [0, 1], 2, "random", "pooled", np.random.default_rng(s)) for s in range(30)}
    assert len(draws) > 5 and all(len(set(h)) == 2 for h in draws)
    with pytest.raises(VitlabError, match="cannot ablate 4 heads"):
        ab.choose_heads(d, [0, 1], 4, "local", "per-block")


def test_experiment_on_a_tiny_model(tiny_vit, tiny_resnet):
    source = vitlab.open_source("samples")
    opts = ab.AblationOptions(images=8, batch_size=4, blocks=(1, 2), ks=(1, 4), draws=3)
    res = ab.head_ablation(tiny_vit, tiny_resnet, source, opts, Run(bootstrap=50))
    frame = res.to_frame()
    # 2 modes x 2 ks x (local + global + 3 random draws)
    assert len(frame) == 2 * 2 * 5 and set(frame["selection"]) == set(ab.SELECTIONS)
    assert res.accuracy_kind.startswith("agreement")  # the samples have no labels that fit the model
    assert (frame["kl"] >= -1e-12).all()
    # k = 4 of 4 candidate heads: local, global and every random draw ablate the same set
    full = frame[frame["k"] == 4]
    assert full.groupby("mode")["heads"].nunique().eq(1).all()
    assert np.allclose(full.groupby("mode")["kl"].agg(np.ptp), 0)
    cka = res.cka_frame()
    # block 0 comes before every ablated block: its CKA with the intact model is 1
    assert np.allclose(cka[cka["depth"] == 0]["cka_intact"], 1, atol=1e-9)
    later = cka[(cka["k"] == 4) & (cka["depth"] >= 3)]
    assert (later["cka_intact"] < 1 - 1e-6).all()
    s = res.summary()
    assert ((s["lo"] <= s["mean"] + 1e-12) & (s["mean"] <= s["hi"] + 1e-12)).all()
    assert set(res.verdicts()["vs_global"]) <= {"local hurts more", "global hurts more", "can't tell"}


def test_random_draws_depend_only_on_the_seed_and_k():
    d = np.random.default_rng(0).random((3, 4))
    pick = lambda ks, seed=0: [(c["mode"], c["k"], c["heads"]) for c in ab._plan(  # noqa: E731
        d, [0, 1, 2], ab.AblationOptions(ks=ks, draws=4), Run(seed=seed)) if c["selection"] == "random"]
    both, alone = pick((1, 3)), pick((3,))
    assert [p for p in both if p[1] == 3] == alone
    zero, mean = [p[2] for p in alone if p[0] == "zero"], [p[2] for p in alone if p[0] == "mean"]
    assert zero == mean and len(set(zero)) > 1
    assert pick((3,), seed=1) != alone
