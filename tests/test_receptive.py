"""Effective receptive fields (Raghu et al. 2021, Fig 6): known footprints, per-image independence, caching."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import vitlab
from vitlab import VitlabError
from vitlab import receptive as R
from vitlab.inputs.data import to_tensor


@pytest.fixture(scope="module")
def samples():
    return vitlab.open_source("samples")


def _support(m: np.ndarray) -> tuple[tuple[int, int], tuple[int, int]]:
    nz = np.argwhere(m > 0)
    return tuple(nz.min(0)), tuple(nz.max(0))


@pytest.mark.parametrize("side,kernel,expect", [(15, 5, ((5, 5), (9, 9))),  # 11x11 output, centre (5,5)
                                                 (16, 5, ((5, 5), (10, 10))),  # 12x12 output: 2x2 centre -> 6x6
                                                 (15, 3, ((6, 6), (8, 8)))])
def test_single_conv_field_is_its_kernel_footprint(side, kernel, expect):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, kernel)).eval()
    g = R.centre_gradient(model, "0", torch.randn(2, 3, side, side))
    assert g.shape == (2, side, side)
    for i in range(2):
        assert _support(g[i].numpy()) == expect
        assert np.all(g[i].numpy()[expect[0][0]:expect[1][0] + 1, expect[0][1]:expect[1][1] + 1] > 0)


def test_stacked_convs_compose_and_stop_early():
    torch.manual_seed(0)
    called = []
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Conv2d(2, 2, 3, stride=2),
                                torch.nn.Conv2d(2, 2, 3))
    model[2].register_forward_hook(lambda *a: called.append(1))
    g = R.centre_gradient(model, "1", torch.randn(1, 1, 23, 23))
    # layer-1 output is 10x10 (even): centre rows 4..5 -> layer-0 rows 8..12 (stride 2, k 3) -> input rows 8..14
    assert _support(g[0].numpy()) == ((8, 8), (14, 14))
    assert not called  # the forward stops at the requested layer


def test_batch_gradients_are_per_image(tiny_resnet, samples):
    x = to_tensor([samples.load(i) for i in range(3)], tiny_resnet)
    both = R.centre_gradient(tiny_resnet.model, "layer2.0", x)
    for i in range(3):
        alone = R.centre_gradient(tiny_resnet.model, "layer2.0", x[i:i + 1])
        assert torch.allclose(both[i], alone[0], rtol=1e-4, atol=1e-9)


def test_vit_patch_embedding_field_is_the_centre_patches(tiny_vit, samples, store):
    res = R.receptive_fields(tiny_vit, samples, R.ReceptiveOptions(layers=("blocks.0.resid_pre", "blocks.0"),
                                                                   images=2, batch_size=2), vitlab.Run(store=store))
    # 10x10 grid of 16 px patches: the centre is the 2x2 middle patches, pixels 64..95
    assert _support(res.maps[0]) == ((64, 64), (95, 95))
    # after block 0's attention every token sees every patch
    assert (res.maps[1] > 0).mean() > 0.99
    frame = res.to_frame(max_side=40)
    assert set(frame["layer"]) == {"blocks.0.resid_pre", "blocks.0"} and frame["row"].max() == 39
    assert frame.groupby("layer")["value"].max().eq(1).all()


def test_result_is_the_mean_over_images_and_cached(tiny_resnet, samples, store):
    info1, info2 = vitlab.RunInfo(), vitlab.RunInfo()
    opts = R.ReceptiveOptions(layers=("layer1.0", "layer3.0"), images=5, batch_size=2)
    res = R.receptive_fields(tiny_resnet, samples, opts, vitlab.Run(store=store, info=info1))
    x = to_tensor([samples.load(i) for i in range(5)], tiny_resnet)
    ref = R.centre_gradient(tiny_resnet.model, "layer3.0", x).mean(0).numpy()
    assert np.allclose(res.maps[1], ref, rtol=1e-5, atol=1e-12) and res.images == 5
    again = R.receptive_fields(tiny_resnet, samples, opts, vitlab.Run(store=store, info=info2))
    assert info1.batches_computed == 3 and info2.batches_from_cache == 3 and np.array_equal(again.maps, res.maps)
    r50 = res.radius_px(0.5)
    assert r50[0] < r50[1]  # deeper layers see more
    assert np.allclose(res.normalised().reshape(2, -1).max(1), 1)


def test_pre_residual_branch(tiny_resnet, tiny_vit, samples):
    assert R.layer_point(tiny_vit, "blocks.2", "pre") == ("blocks.2.ls1", "out")  # attention sublayer (App. C)
    assert R.layer_point(tiny_vit, "blocks.2", "pre-mlp") == ("blocks.2.ls2", "out")
    with pytest.raises(VitlabError, match="one branch"):
        R.layer_point(tiny_resnet, "layer1.0", "pre-mlp")
    assert R.layer_point(tiny_vit, "blocks.2", "post") == ("blocks.2", "out")
    assert R.layer_point(tiny_vit, "blocks.2.attn_out") == ("blocks.2.ls1", "out")
    assert R.layer_point(tiny_resnet, "layer1.0", "pre") == ("layer1.0.bn2", "out")
    # timm zero-initialises the branch's last BN: with random weights the branch is constant, and says so
    res = R.receptive_fields(tiny_resnet, samples, R.ReceptiveOptions(layers=("layer1.0",), images=2, batch_size=2,
                                                                     residual="pre"))
    assert not res.maps.any() and "zero everywhere" in res.warnings[0]
    pre = R.receptive_fields(tiny_vit, samples, R.ReceptiveOptions(images=2, batch_size=2, layers=("blocks.1",),
                                                                   residual="pre"))
    post = R.receptive_fields(tiny_vit, samples, R.ReceptiveOptions(images=2, batch_size=2, layers=("blocks.1",)))
    assert pre.maps.any() and not np.allclose(pre.normalised(), post.normalised())


def test_errors(tiny_vit):
    with pytest.raises(VitlabError, match="unknown layer 'blocks.99'"):
        R.layer_point(tiny_vit, "blocks.99")
    with pytest.raises(VitlabError, match="residual must be"):
        R.layer_point(tiny_vit, "blocks.0", "middle")
    with pytest.raises(VitlabError, match="not found"):
        R.centre_gradient(tiny_vit.model, "nope", torch.zeros(1, 3, 160, 160))


def test_cli_receptive_field(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "rf"
    assert main(["receptive-field", "-m", "test_vit@random", "-n", "2", "-b", "2", "--layers", "blocks.0,blocks.3",
                 "--residual", "both", "--no-cache", "-o", str(out)]) == 0
    frame = pd.read_csv(out / "receptive_field.csv")
    assert set(frame["residual"]) == {"post", "pre"} and set(frame["layer"]) == {"blocks.0", "blocks.3"}
    assert (out / "receptive_field_post.png").exists() and (out / "receptive_field_pre.npz").exists()
    assert len(pd.read_csv(out / "receptive_field_summary.csv")) == 4


@pytest.mark.skipif(not list((Path(vitlab.__file__).parent.parent / "assets" / "zoo").glob("resnet*.safetensors")),
                    reason="zoo models not trained yet")
def test_zoo_resnet_fields_grow_with_depth(store):
    m = vitlab.load("zoo:resnet", "cpu")
    res = R.receptive_fields(m, vitlab.open_source("fashion-mnist:test"), R.ReceptiveOptions(images=8, batch_size=8),
                             vitlab.Run(store=store))
    r = res.radius_px(0.5)
    assert np.all(np.isfinite(r)) and r[-1] > r[0]
