"""Token-to-input-patch CKA against float64 numpy references (Song et al. HSIC_1, minibatch sums)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, taps
from vitlab import localization as loc
from vitlab.charts import localization as loc_charts
from vitlab.inputs.data import decode, plan_batches, to_tensor

from .reference import hsic1_song, linear_gram64


def minibatch_cka64(xs, ys):
    kl = kk = ll = 0.0
    for x, y in zip(xs, ys):
        K, L = linear_gram64(x), linear_gram64(y)
        kl, kk, ll = kl + hsic1_song(K, L), kk + hsic1_song(K, K), ll + hsic1_song(L, L)
    return kl / np.sqrt(kk * ll)


def _batches(loaded, source, tap, n, bs):
    """Per batch: the model input as numpy (B, C, H, W) and the tap's activations."""
    out = []
    for batch in plan_batches(source, list(range(n)), bs):
        decode(source, batch)
        x = to_tensor(batch.images, loaded)
        with taps.capture(loaded.model, [tap]) as acts, torch.no_grad():
            loaded.model(x)
        out.append((x.numpy(), acts[tap].numpy()))
    return out


@pytest.fixture(scope="module")
def samples():
    return vitlab.open_source("samples")


def test_vit_against_reference(tiny_vit, samples):
    tap = "blocks.3.resid_post"
    rep = loc.localization([tiny_vit], samples, loc.LocalizationOptions(layers=(tap,), images=10, batch_size=5))
    res = rep.results[0]
    assert res.cka.shape == (101, 100) and res.grid == (10, 10) and res.prefix == 1 and res.images == 10
    data = _batches(tiny_vit, samples, tap, 10, 5)
    p = 16
    for t, g in [(0, 0), (1, 0), (12, 11), (57, 3), (100, 99)]:
        r, c = divmod(g, 10)
        xs = [a[:, t] for _, a in data]
        ys = [x[:, :, r * p:(r + 1) * p, c * p:(c + 1) * p] for x, _ in data]
        assert res.cka[t, g] == pytest.approx(minibatch_cka64(xs, ys), rel=1e-4, abs=1e-6), (t, g)
    summary = res.summary()
    assert summary["kind"].iloc[0] == "cls" and np.isnan(summary["own_cka"].iloc[0])
    assert summary["own_cka"].iloc[12] == pytest.approx(res.cka[12, 11])


def test_resnet_regions_against_reference(tiny_resnet, samples):
    tap = "layer3.0"
    rep = loc.localization([tiny_resnet], samples, loc.LocalizationOptions(layers=(tap,), images=6, batch_size=6))
    res = rep.results[0]
    data = _batches(tiny_resnet, samples, tap, 6, 6)
    x, a = data[0]
    h, w = a.shape[-2:]
    assert res.grid == (h, w) and res.cka.shape == (h * w, h * w) and res.prefix == 0
    H, W = x.shape[-2:]
    for t, g in [(0, 0), (3, 7), (h * w - 1, h * w - 1)]:
        r, c = divmod(g, w)
        patch = x[:, :, r * H // h:(r + 1) * H // h, c * W // w:(c + 1) * W // w]
        tr, tc = divmod(t, w)
        assert res.cka[t, g] == pytest.approx(minibatch_cka64([a[:, :, tr, tc]], [patch]), rel=1e-4, abs=1e-6)


def test_patches_match_reshape():
    x = torch.arange(2 * 3 * 8 * 12, dtype=torch.float32).reshape(2, 3, 8, 12)
    got = torch.stack(loc.patches(x, (2, 3)))  # (G, B, F), patch 4x4
    want = x.reshape(2, 3, 2, 4, 3, 4).permute(2, 4, 0, 1, 3, 5).reshape(6, 2, -1)
    assert torch.equal(got, want)
    uneven = loc.patches(torch.zeros(1, 1, 10, 10), (3, 3))  # edges at 0, 3, 6, 10
    assert [p.shape[1] for p in uneven[:3]] == [9, 9, 12] and uneven[-1].shape[1] == 16


def test_summary_logic():
    cka = np.array([[0.1, 0.2, 0.3, 0.4],  # CLS
                    [0.9, 0.1, 0.0, 0.0],  # token 1 at position 0: localized
                    [0.5, 0.4, 0.0, 0.0],  # token 2 at position 1: rank 2
                    [0.0, 0.0, 0.2, 0.1],
                    [0.0, 0.0, 0.0, 0.7]])
    res = loc.LocalizationResult("m", "l", (2, 2), 1, cka, 8)
    s = res.summary()
    assert s["localized"].tolist() == [False, True, False, True, True]
    assert s["own_rank"].tolist()[1:] == [1, 2, 1, 1]
    frame = res.to_frame()
    assert len(frame) == 20 and frame["own"].sum() == 4
    assert frame[(frame["token"] == 3) & frame["own"]]["position"].item() == 2


def test_errors_and_charts(tiny_vit, samples, store):
    with pytest.raises(VitlabError, match="unknown tap"):
        loc.localization([tiny_vit], samples, loc.LocalizationOptions(layers=("blocks.99.resid_post",), images=4))
    with pytest.raises(VitlabError, match="at least 4"):
        loc.localization([tiny_vit], samples, loc.LocalizationOptions(images=3, batch_size=3))
    rep = loc.localization([tiny_vit], samples, loc.LocalizationOptions(images=8, batch_size=8),
                           vitlab.Run(store=store))
    assert [r.layer for r in rep.results] == ["blocks.0.resid_post", "blocks.3.resid_post", "blocks.5.resid_post"]
    again = loc.localization([tiny_vit], samples, loc.LocalizationOptions(images=8, batch_size=8),
                             vitlab.Run(store=store))
    assert again.info.batches_from_cache == 1
    np.testing.assert_array_equal(again.results[2].cka, rep.results[2].cka)
    frame = rep.results[1].to_frame()
    assert loc_charts.spread_tokens(frame)[:3] == [1, 10, 56]
    spec = loc_charts.localization_maps(frame).to_dict()
    assert spec["facet"]["field"] == "token_label"
    loc_charts.localization_summary_chart(rep.summary()).to_dict()
    loc_charts.localization_rate_chart(rep.rates()).to_dict()


def test_cli(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "loc"
    assert main(["localization", "-m", "test_vit@random", "-n", "6", "-b", "6", "--layers", "blocks.5.resid_post",
                 "--tokens", "0,1,50", "-o", str(out), "--no-cache"]) == 0
    for name in ("localization.csv", "localization_summary.csv", "localization_rate.png", "run.json",
                 "maps_test_vit_random_blocks.5.resid_post.svg"):
        assert (out / name).is_file(), name
    assert main(["localization", "-m", "test_vit@random", "--tokens", "a,b", "-n", "4", "-o", str(out)]) == 2


def test_cli_writes_the_rate_and_its_interval_as_csv(tmp_path, capsys):
    import json

    import pandas as pd

    from vitlab.cli import main

    for n, batches in ((8, 2), (16, 4)):
        out = tmp_path / f"loc{n}"
        assert main(["localization", "-m", "test_vit@random", "-n", str(n), "-b", "4", "--layers",
                     "blocks.5.resid_post", "--tokens", "1", "--data", "fashion-mnist:test", "-o", str(out),
                     "--no-cache"]) == 0
        rates = pd.read_csv(out / "localization_rates.csv")
        record = json.loads((out / "run.json").read_text())["localized_fraction"]
        (row,) = rates.itertuples()
        assert row.rate == pytest.approx(record["test_vit@random blocks.5.resid_post"])
        assert row.chance == pytest.approx(1 / row.positions)
        assert row.corrected == pytest.approx((row.rate - row.chance) / (1 - row.chance))
        assert row.interval_units == batches and row.interval_unit == "batches"
        text = capsys.readouterr().out
        if batches < 4:  # no interval: the table and the headline say why instead of printing NaN
            assert np.isnan(row.rate_lo) and row.interval_method == "too few batches for an interval (2 < 4)"
            assert "too few batches for an interval (2 < 4)" in text and "nan" not in text
        else:
            assert row.rate_lo <= row.rate <= row.rate_hi and row.interval_method.startswith("jackknife")
            assert f"95 % {row.rate_lo:.0%}-{row.rate_hi:.0%}" in text


def test_a_constant_input_patch_is_warned_about_once_not_once_per_layer(tmp_path, capsys):
    # a 14x14 grid on Fashion-MNIST: a 2x2 corner patch is black in all of the first 64 test images (its CKA is NaN)
    from vitlab.cli import main

    assert main(["localization", "-m", "zoo:vit-cls-14", "--data", "fashion-mnist:test", "-n", "64", "-b", "16",
                 "--no-cache", "-o", str(tmp_path / "loc")]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "self-HSIC is 0" in line]
    assert lines and len(lines) == len(set(lines)), lines
