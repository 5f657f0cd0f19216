"""Skip removal: exact restoration, the patched block against a hand-written reference, cache separation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, taps
from vitlab import interventions as iv
from vitlab.engine.run import GramStatistic


@pytest.fixture(scope="module")
def x():
    return torch.randn(3, 3, 160, 160, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("which", iv.WHICH)
def test_restores_exactly_and_matches_reference(tiny_vit, x, which):
    model = tiny_vit.model
    with torch.no_grad():
        before = model(x)
        with iv.remove_skip(model, iv.SkipRemoval(2, which)), taps.capture(model, ["blocks.2.resid_pre",
                                                                               "blocks.2.resid_post"]) as acts:
            during = model(x)
        after = model(x)
        blk = model.blocks[2]
        z = acts["blocks.2.resid_pre"]
        a = blk.ls1(blk.attn(blk.norm1(z)))
        h = a if which in ("attn", "both") else z + a
        m = blk.ls2(blk.mlp(blk.norm2(h)))
        want = m if which in ("mlp", "both") else h + m
    assert torch.equal(before, after), "outputs must be bit-equal after the with"
    assert not torch.allclose(before, during)
    torch.testing.assert_close(acts["blocks.2.resid_post"], want, rtol=0, atol=0)
    assert "forward" not in vars(blk)


def test_restored_after_an_exception(tiny_vit, x):
    with torch.no_grad():
        before = tiny_vit.model(x)
        with pytest.raises(RuntimeError), iv.remove_skip(tiny_vit.model, iv.SkipRemoval(0)):
            raise RuntimeError("boom")
        assert torch.equal(before, tiny_vit.model(x))


def test_mixer_reference():
    m = vitlab.load(vitlab.ModelSpec("mixer_s16_224", "random:0", img_size=64), "cpu")
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = m.model(x)
        with iv.remove_skip(m.model, iv.SkipRemoval(1, "attn")), taps.capture(
                m.model, ["blocks.1.resid_pre", "blocks.1.resid_post"]) as acts:
            m.model(x)
        blk = m.model.blocks[1]
        z = acts["blocks.1.resid_pre"]
        h = blk.mlp_tokens(blk.norm1(z).transpose(1, 2)).transpose(1, 2)
        want = h + blk.mlp_channels(blk.norm2(h))
        assert torch.equal(before, m.model(x))
    torch.testing.assert_close(acts["blocks.1.resid_post"], want, rtol=0, atol=0)


def test_bad_requests(tiny_vit, tiny_resnet):
    vit = tiny_vit.model
    with pytest.raises(VitlabError, match="block 9 does not exist"), iv.remove_skip(vit, iv.SkipRemoval(9)):
        pass
    with pytest.raises(VitlabError, match="one of attn, mlp, both"), iv.remove_skip(vit, iv.SkipRemoval(0, "x")):
        pass
    with pytest.raises(VitlabError, match="ViT and Mixer"), iv.remove_skip(tiny_resnet.model, iv.SkipRemoval(0)):
        pass
    with iv.remove_skip(vit, iv.SkipRemoval(1)), pytest.raises(VitlabError, match="already"), \
            iv.remove_skip(vit, iv.SkipRemoval(1, "attn")):
        pass
    assert "forward" not in vars(vit.blocks[1])


def test_skip_removal_report_and_cache(tiny_vit, store):
    source = vitlab.open_source("samples")
    gram = GramStatistic(("blocks.0.resid_post", "blocks.2.resid_post", "blocks.4.resid_post"))
    opts = iv.RemoveSkipOptions(block=2, which="both", images=8, batch_size=4)
    res = iv.skip_removal(tiny_vit, source, opts, vitlab.Run(store=store), gram=gram)
    assert res.accuracy_before is None  # samples have no labels fitting a 1000-class model
    assert 0.0 <= res.agreement <= 1.0 and res.images == 8
    np.testing.assert_allclose(np.diag(res.before.cka), 1.0, atol=1e-9)
    np.testing.assert_allclose(np.diag(res.after.cka), 1.0, atol=1e-9)
    # block 0 is upstream of the surgery: identical representation before and after
    assert res.cross.cka[0, 0] == pytest.approx(1.0, abs=1e-9)
    assert res.cross.cka[2, 2] < 0.999
    assert res.info.batches_computed == 4  # 2 batches x (original, ablated): distinct cache keys
    again = iv.skip_removal(tiny_vit, source, opts, vitlab.Run(store=store), gram=gram)
    assert again.info.batches_computed == 0
    np.testing.assert_array_equal(again.cross.cka, res.cross.cka)
    frame = res.to_frame()
    assert set(frame["map"]) == {"before", "after", "before_vs_after"} and len(frame) == 27
    metrics = res.metrics_frame()
    assert "post-hoc ablation" in metrics["intervention"].iloc[0]
    with iv.intervened(tiny_vit, iv.SkipRemoval(2)) as ablated:
        assert ablated.fingerprint != tiny_vit.fingerprint and ablated.model is tiny_vit.model


def test_accuracy_with_matching_labels(tiny_vit):
    """A model whose class count matches the source's labels gets accuracies before and after."""
    import timm

    model = timm.create_model("test_vit", num_classes=10, img_size=28, patch_size=4, in_chans=1).eval()
    spec = vitlab.ModelSpec("test_vit", "random:0")
    loaded = vitlab.LoadedModel(spec, model, None, {"input_size": (1, 28, 28)}, "fmnist-test-vit", "cpu")
    import torchvision.transforms as T

    loaded.transform = T.Compose([T.ToTensor()])
    source = vitlab.open_source("fashion-mnist:test")
    res = iv.skip_removal(loaded, source, iv.RemoveSkipOptions(block=1, which="mlp", images=16, batch_size=8),
                          gram=GramStatistic(("blocks.1.resid_post",)))
    labels = np.array([source.label(i) for i in range(16)])
    with torch.no_grad():
        xs = torch.stack([loaded.transform(source.load(i)) for i in range(16)])
        p0 = model(xs).argmax(-1).numpy()
    assert res.accuracy_before == pytest.approx(float((p0 == labels).mean()))
    assert res.accuracy_after is not None


def test_retrained_comparison_side_by_side(tiny_vit, store):
    other = vitlab.load("test_vit@random:3", "cpu")
    source = vitlab.open_source("samples")
    comp = iv.retrained_comparison(tiny_vit, other, source, vitlab.options.DataOptions(images=8, batch_size=4),
                                   vitlab.Run(store=store))
    frame = comp.to_frame()
    assert (frame["model_a"] == frame["model_b"]).all() and set(frame["model_a"]) == {tiny_vit.label, other.label}
    assert comp.accuracy == {tiny_vit.label: None, other.label: None}  # no labels that fit 1000 classes
    assert list(comp.metrics_frame()["model"]) == [tiny_vit.label, other.label]


@pytest.mark.skipif(not (vitlab.data.ASSETS / "zoo" / "vit-cls-noskip.safetensors").is_file(), reason="zoo not built")
def test_zoo_retrained_without_skip(store):
    normal, noskip = vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:vit-cls-noskip", "cpu")
    source = vitlab.open_source("fashion-mnist:test")
    with pytest.raises(VitlabError, match="NoSkipBlock"), iv.remove_skip(noskip.model, iv.SkipRemoval(3)):
        pass
    comp = iv.retrained_comparison(normal, noskip, source, vitlab.options.DataOptions(images=64, batch_size=32),
                                   vitlab.Run(store=store))
    assert all(0.5 < a <= 1.0 for a in comp.accuracy.values())  # trained 10-class models on their own data
    res = iv.skip_removal(normal, source, iv.RemoveSkipOptions(block=3, images=64, batch_size=32),
                          vitlab.Run(store=store))
    assert res.accuracy_before > res.accuracy_after


def test_a_removal_in_words_numbers_its_block_as_the_model_does():
    assert iv.SkipRemoval(1, "attn").words == "block 1's attention skip"
    assert iv.SkipRemoval(0, "mlp").words == "block 0's MLP skip"
    assert iv.SkipRemoval(3).words == "block 3's attention and MLP skips"
    assert iv.SkipRemoval(1, "attn").label == "no-skip[1.attn]"  # the CSV's and the model's name is unchanged
