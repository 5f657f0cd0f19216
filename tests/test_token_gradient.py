"""Per-token gradient maps (vitlab.token_gradient): against a full autograd Jacobian of a tiny ViT written here, an
analytic patch-embedding case, the receptive-field analysis for one image (ResNet), shares, errors, the zoo."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError
from vitlab import receptive as R
from vitlab import token_gradient as TG
from vitlab.engine.context import Run
from vitlab.inputs.data import to_tensor


@pytest.fixture(scope="module")
def samples():
    return vitlab.open_source("samples")


@pytest.fixture(scope="module")
def little_vit():
    """A 16 px, 4 px-patch, two-block ViT built here, wrapped as a LoadedModel (its own plain transform)."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(3)
    model = VisionTransformer(img_size=16, patch_size=4, in_chans=3, num_classes=5, embed_dim=12, depth=2,
                              num_heads=2, mlp_ratio=2.0).eval()
    with torch.no_grad():  # timm starts pos/cls embeddings near zero; give them weight so they matter
        model.pos_embed.normal_(0, 0.5)
        model.cls_token.normal_(0, 0.5)

    def transform(img):
        a = np.asarray(img.convert("RGB").resize((16, 16)), dtype=np.float32) / 255.0
        return torch.from_numpy(a).permute(2, 0, 1)

    spec = vitlab.ModelSpec("little_vit", "random:3")
    return vitlab.LoadedModel(spec, model, transform, {"input_size": (3, 16, 16)}, "little-vit-3", "cpu")


def _reference_map(model, x: torch.Tensor, block: int, token: int) -> np.ndarray:
    """Full Jacobian of block ``block``'s output (float64 copy of the model, written out layer by layer, no hooks):
    d Σ_d h[token, d] / dx, abs, mean over colour channels."""
    import copy

    m = copy.deepcopy(model).double()

    def f(inp):
        h = m._pos_embed(m.patch_embed(inp))
        h = m.norm_pre(h)
        for blk in m.blocks[: block + 1]:
            h = blk(h)
        return h[0, token].sum()

    jac = torch.autograd.functional.jacobian(f, x.double())  # (1, C, H, W)
    return jac[0].abs().mean(0).numpy()


@pytest.mark.parametrize("block,pos", [(0, (0, 0)), (0, (2, 1)), (1, (3, 3)), (1, (1, 2))])
def test_vit_map_equals_full_jacobian(little_vit, samples, block, pos):
    opts = TG.TokenGradientOptions(index=1, layer=f"blocks.{block}", row=pos[0], col=pos[1])
    got = TG.token_gradient(little_vit, samples, opts, Run())
    x = to_tensor([samples.load(1)], little_vit)
    ref = _reference_map(little_vit.model, x, block, 1 + pos[0] * 4 + pos[1])
    assert got.map.shape == (16, 16) and got.grid == (4, 4)
    np.testing.assert_allclose(got.map, ref, rtol=2e-4, atol=1e-6 * ref.max())
    # the reference's own shares, summed independently over its own patch
    own = ref[pos[0] * 4:pos[0] * 4 + 4, pos[1] * 4:pos[1] * 4 + 4].sum() / ref.sum()
    assert got.shares["own_share"] == pytest.approx(own, rel=1e-4)
    assert got.shares["own_chance"] == pytest.approx(1 / 16)


def test_patch_embedding_is_analytic_and_stays_in_its_patch(little_vit, samples):
    """Before block 0 a token is W·patch + b + pos: its gradient is |Σ_d W[d, c, i, j]| on its own patch, else 0."""
    opts = TG.TokenGradientOptions(index=0, layer="blocks.0.resid_pre", row=1, col=2)
    got = TG.token_gradient(little_vit, samples, opts, Run())
    w = little_vit.model.patch_embed.proj.weight.detach().double()  # (D, C, p, p)
    expect = np.zeros((16, 16))
    expect[4:8, 8:12] = w.sum(0).abs().mean(0).numpy()
    np.testing.assert_allclose(got.map, expect, rtol=1e-5, atol=1e-9)
    assert got.shares["own_share"] == pytest.approx(1.0)
    assert got.shares["neighbourhood_share"] == pytest.approx(1.0)
    assert got.shares["neighbourhood_chance"] == pytest.approx(9 / 16)


def test_resnet_centre_position_equals_receptive_field_of_one_image(tiny_resnet, samples):
    """An input of 144 px makes layer3's map 9x9 (odd): the receptive-field 'centre' is one position, (4, 4)."""
    import timm.data

    cfg = dict(tiny_resnet.data_config, input_size=(3, 144, 144), crop_pct=1.0)
    loaded = dataclasses.replace(tiny_resnet, transform=timm.data.create_transform(**cfg), data_config=cfg,
                                 fingerprint=tiny_resnet.fingerprint + "-144")
    one = vitlab.data.FilesSource([(samples.item_id(2), _bytes(samples, 2))], name="one")
    rf = R.receptive_fields(loaded, one, R.ReceptiveOptions(images=1, batch_size=1, layers=("layer3.0",)))
    got = TG.token_gradient(loaded, one, TG.TokenGradientOptions(layer="layer3.0", row=4, col=4), Run())
    assert got.grid == (9, 9) and got.map.max() > 0
    np.testing.assert_allclose(got.map, rf.maps[0], rtol=1e-6, atol=1e-12)
    # the stage name is the stage's feature map: the same as its last block
    stage = TG.token_gradient(loaded, one, TG.TokenGradientOptions(layer="layer3", row=4, col=4), Run())
    np.testing.assert_allclose(stage.map, got.map, rtol=1e-6, atol=1e-12)


def _bytes(source, i: int) -> bytes:
    import io

    buf = io.BytesIO()
    source.load(i).convert("RGB").save(buf, format="PNG")
    return buf.getvalue()


def test_shares_on_a_known_map():
    m = np.zeros((12, 12))
    m[4:8, 4:8] = 1.0  # all in patch (1, 1) of a 3x3 grid of 4 px patches
    m[0, 0] = 1.0  # one unit in the corner patch (a neighbour of (1, 1))
    s = TG.shares(m, (3, 3), (1, 1))
    assert s["own_share"] == pytest.approx(16 / 17)
    assert s["neighbourhood_share"] == pytest.approx(1.0)
    corner = TG.shares(m, (3, 3), (0, 0))  # neighbourhood clipped at the border: 2x2 patches
    assert corner["own_share"] == pytest.approx(1 / 17)
    assert corner["neighbourhood_share"] == pytest.approx(1.0)
    assert corner["neighbourhood_chance"] == pytest.approx(64 / 144)
    assert np.isnan(TG.shares(np.zeros((12, 12)), (3, 3), (1, 1))["own_share"])


def test_cached_and_errors(tiny_vit, samples, store):
    run = Run(store=store)
    opts = TG.TokenGradientOptions(index=0, layer="blocks.1", row=3, col=4)
    first = TG.token_gradient(tiny_vit, samples, opts, run)
    again = TG.token_gradient(tiny_vit, samples, opts, run)
    assert run.info.forward_passes[tiny_vit.label] == 1
    np.testing.assert_array_equal(first.map, again.map)
    frame = first.to_frame()
    assert len(frame) == 160 * 160 and frame["gradient"].sum() == pytest.approx(first.map.sum())
    with pytest.raises(VitlabError, match="outside the layer's 10x10 grid"):
        TG.token_gradient(tiny_vit, samples, dataclasses.replace(opts, row=10), Run())
    with pytest.raises(VitlabError, match="unknown layer"):
        TG.token_gradient(tiny_vit, samples, dataclasses.replace(opts, layer="blocks.99"), Run())
    with pytest.raises(VitlabError, match="image index"):
        TG.token_gradient(tiny_vit, samples, dataclasses.replace(opts, index=50), Run())


def test_zoo_vit_block0_token_mass_is_in_its_own_patch():
    """zoo:vit-cls (4x4 grid of 7 px patches) at block 0 on a Fashion-MNIST test image: most of the gradient is in
    the token's own patch (chance: 1/16). bench/token_gradient_zoo.py measures every token over 32 images."""
    vit = vitlab.load("zoo:vit-cls", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    got = TG.token_gradient(vit, src, TG.TokenGradientOptions(index=0, layer="blocks.0", row=1, col=2), Run())
    assert got.shares["own_chance"] == pytest.approx(1 / 16)
    assert got.shares["own_share"] > 0.5
    assert got.shares["neighbourhood_share"] > got.shares["own_share"]


def test_cli_token_gradient_row_writes_the_map_and_its_shares(tmp_path, capsys):
    import pandas as pd

    from vitlab.cli import main

    out = tmp_path / "tg"
    assert main(["token-gradient", "-m", "zoo:vit-cls", "--layer", "blocks.0", "--row", "1", "--col", "2",
                 "--out", str(out)]) == 0
    shares = pd.read_csv(out / "token_gradient_shares.csv")
    direct = TG.token_gradient(vitlab.load("zoo:vit-cls", "cpu"), vitlab.open_source("fashion-mnist:test"),
                               TG.TokenGradientOptions(layer="blocks.0", row=1, col=2), Run())
    assert shares["own_share"].iloc[0] == pytest.approx(direct.shares["own_share"], rel=1e-6)
    assert len(pd.read_csv(out / "token_gradient.csv")) == 28 * 28
    assert "in its own patch" in capsys.readouterr().out
    assert main(["token-gradient", "-m", "zoo:vit-cls", "--row", "9", "--out", str(tmp_path / "bad")]) == 2
