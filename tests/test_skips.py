"""Skip-connection norm ratios against a plain float64 numpy computation; accumulator contract; charts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, skips, taps
from vitlab.charts import skips as skip_charts
from vitlab.inputs.data import decode, plan_batches, to_tensor


def _acts(loaded, source, n=8):
    batch = decode(source, plan_batches(source, list(range(n)), n)[0])
    with taps.capture(loaded.model, skips.SkipStatistic().taps(loaded)) as acts, torch.no_grad():
        loaded.model(to_tensor(batch.images, loaded))
    return {k: v.double().numpy() for k, v in acts.items()}


def _ref_ratio(z: np.ndarray, fz: np.ndarray):
    """Plain float64: per image and token ‖z‖/‖f(z)‖ and the cosine, averaged over images."""
    if z.ndim == 4:  # (B, C, h, w) -> per position, then mean over positions
        z, fz = z.reshape(*z.shape[:2], -1).transpose(0, 2, 1), fz.reshape(*fz.shape[:2], -1).transpose(0, 2, 1)
        r = np.linalg.norm(z, axis=-1) / np.linalg.norm(fz, axis=-1)
        c = (z * fz).sum(-1) / (np.linalg.norm(z, axis=-1) * np.linalg.norm(fz, axis=-1))
        return r.mean(1).mean(0), c.mean(1).mean(0)
    r = np.linalg.norm(z, axis=-1) / np.linalg.norm(fz, axis=-1)
    c = (z * fz).sum(-1) / (np.linalg.norm(z, axis=-1) * np.linalg.norm(fz, axis=-1))
    return r.mean(0), c.mean(0)


@pytest.fixture(scope="module")
def samples():
    return vitlab.open_source("samples")


@pytest.fixture(scope="module")
def resnet_nonzero():
    """A ResNet whose last BN per block is not zero-initialised (timm zero-inits it: f(z) = 0 at random init)."""
    m = vitlab.load("test_resnet@random:1", "cpu")
    g = torch.Generator().manual_seed(0)
    for mod in m.model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.weight.data = torch.randn(mod.weight.shape, generator=g)
    m.fingerprint += "-bn"
    return m


def test_vit_identities_and_reference(tiny_vit, samples):
    acts = _acts(tiny_vit, samples)
    for i in range(len(tiny_vit.model.blocks)):
        b = f"blocks.{i}"
        np.testing.assert_allclose(acts[f"{b}.resid_mid"], acts[f"{b}.resid_pre"] + acts[f"{b}.attn_out"], atol=1e-5)
        np.testing.assert_allclose(acts[f"{b}.resid_post"], acts[f"{b}.resid_mid"] + acts[f"{b}.mlp_out"], atol=1e-5)
    report = skips.skip_ratios([tiny_vit], samples, skips.SkipOptions(images=8, batch_size=4))
    res = report.results[0]
    assert res.images == 8 and res.prefix == 1
    assert np.all(res.identity_err < 1e-5)
    for s, (name, z, fz, _) in enumerate(skips.sublayers(tiny_vit.model)):
        r, c = _ref_ratio(acts[z], acts[fz])
        np.testing.assert_allclose(res.ratio[s], r, rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(res.cosine[s], c, rtol=1e-5, atol=1e-6, err_msg=name)


def test_resnet_reference(resnet_nonzero, samples):
    acts = _acts(resnet_nonzero, samples, n=6)
    res = skips.skip_ratios([resnet_nonzero], samples, skips.SkipOptions(images=6, batch_size=6)).results[0]
    assert res.ratio.shape == (4, 1) and res.family == "resnet"
    for s, (name, z, _, total) in enumerate(skips.sublayers(resnet_nonzero.model)):
        assert acts[total].min() < 0, "the pre-ReLU sum must be captured before the in-place ReLU"
        r, c = _ref_ratio(acts[z], acts[total] - acts[z])
        np.testing.assert_allclose(res.ratio[s, 0], r, rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(res.cosine[s, 0], c, rtol=1e-4, atol=1e-6, err_msg=name)
    frame = res.to_frame()
    assert set(frame["token"]) == {-1} and set(frame["kind"]) == {"spatial"}


def test_zero_branch_is_reported_not_hidden(tiny_resnet, samples):
    res = skips.skip_ratios([tiny_resnet], samples, skips.SkipOptions(images=4, batch_size=4)).results[0]
    assert np.isinf(res.ratio).all()  # timm zero-initialises each block's last BN
    assert len(res.warnings) == 4 and "infinite" in res.warnings[0]


def test_analytic_case():
    z = torch.tensor([[[3.0, 4.0], [1.0, 0.0]]])  # (B=1, N=2, D=2)
    fz = torch.tensor([[[0.0, 1.0], [-2.0, 0.0]]])
    r, c = skips.branch_stats(z, fz)
    np.testing.assert_allclose(r.numpy(), [[5.0, 0.5]])
    np.testing.assert_allclose(c.numpy(), [[0.8, -1.0]])


def test_accumulator_refuses_mismatched_layers_and_an_empty_compute():
    """Its contract (streaming, order, merge, state round trip) is checked in test_accumulators.py."""
    rng = np.random.default_rng(0)
    stat = {"ratio_sum": rng.random((3, 5)), "cos_sum": rng.random((3, 5)), "identity_err": rng.random(3),
            "count": np.array([4])}
    with pytest.raises(VitlabError):
        skips.SkipAccumulator(["a"]).update(stat)
    with pytest.raises(VitlabError, match="no batch"):
        skips.SkipAccumulator(["a", "b", "c"]).compute("m", 1, "vit")
    with pytest.raises(VitlabError, match="different sublayers"):
        skips.SkipAccumulator(["a"]).merge(skips.SkipAccumulator(["b"]))


def test_cached_second_run_and_charts(tiny_vit, samples, store):
    opts = skips.SkipOptions(images=8, batch_size=4)
    first = skips.skip_ratios([tiny_vit], samples, opts, vitlab.Run(store=store))
    second = skips.skip_ratios([tiny_vit], samples, opts, vitlab.Run(store=store))
    assert second.info.batches_from_cache == 2 and second.info.batches_computed == 0
    np.testing.assert_array_equal(first.results[0].ratio, second.results[0].ratio)
    frame = first.to_frame()
    assert {"cls", "spatial"} == set(frame["kind"])
    assert len(frame) == 12 * 101
    charts = skip_charts.skip_charts(first)
    assert set(charts) == {"skip_ratio_lines", "skip_cosine_lines", f"skip_ratio_{tiny_vit.label}",
                           f"skip_cosine_{tiny_vit.label}"}
    # 2 batches: too few for an interval, so no error bar is drawn as if it were one, and the frame says why
    assert charts["skip_ratio_lines"].to_dict()["mark"]["type"] == "line"
    assert frame["ratio_lo"].isna().all() and frame["interval_method"].str.startswith("too few batches").all()
    four = skips.skip_ratios([vitlab.load("zoo:vit-cls", "cpu")], vitlab.open_source("fashion-mnist:test"),
                             skips.SkipOptions(images=16, batch_size=4), vitlab.Run(store=store))
    spec = skip_charts.skip_charts(four)["skip_ratio_lines"].to_dict()
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "rule"]  # 4 batches: error bars
    assert charts["skip_cosine_lines"].to_dict()["mark"]["type"] == "line"  # no interval for the cosine


def _fields(spec: dict) -> set:
    """Every field an Altair spec encodes, tooltips included, in any layer."""
    out = set()
    for layer in spec.get("layer", [spec]):
        for enc in layer["encoding"].values():
            for e in enc if isinstance(enc, list) else [enc]:
                if isinstance(e, dict) and "field" in e:
                    out.add(e["field"])
    return out


def test_summary_intervals_are_a_jackknife_of_the_token_mean_and_drawn():
    """The interval of each line of Fig 7 (the mean over a kind's tokens) against a plain loop over the per-batch
    sums: leave each batch out, re-add, divide, average over the kind's tokens; mean ± t_4 · jackknife se."""
    src = vitlab.open_source("fashion-mnist:test")
    m = vitlab.load("zoo:vit-cls", "cpu")
    rep = skips.skip_ratios([m], src, skips.SkipOptions(images=40, batch_size=8), vitlab.Run(bootstrap=120, seed=4))
    summary = rep.summary()
    stat = skips.SkipStatistic()
    sums = [f[0][stat.name] for _, f in vitlab.stream([m], src, range(40), 8, [[stat]], vitlab.Run())]
    from scipy.stats import t as student

    def kinds(i):
        ratio = sum(sums[k]["ratio_sum"] for k in i) / sum(float(sums[k]["count"].sum()) for k in i)  # (S, N)
        return np.stack([ratio[:, :1].mean(1), ratio[:, 1:].mean(1)], axis=1)  # CLS, spatial

    full = kinds(range(5))
    loo = np.array([kinds([k for k in range(5) if k != t]) for t in range(5)])
    half = student.ppf(0.975, 4) * np.sqrt(4 / 5 * ((loo - loo.mean(0)) ** 2).sum(0))
    lo, hi = full - half, full + half  # (S, 2)
    layers = rep.results[0].layers
    for _, row in summary.iterrows():
        s, k = layers.index(row["layer"]), ["cls", "spatial"].index(row["kind"])
        assert row["ratio_lo"] == pytest.approx(lo[s, k], rel=1e-9) and row["ratio_hi"] == pytest.approx(hi[s, k])
        assert row["ratio_lo"] <= row["ratio"] <= row["ratio_hi"]
    lines, heat = skip_charts.skip_lines(summary, "ratio"), skip_charts.skip_heatmap(rep.to_frame(), "ratio")
    assert {"ratio_lo", "ratio_hi"} <= _fields(lines.to_dict()) and {"ratio_lo", "ratio_hi"} <= _fields(heat.to_dict())
    plain = skips.skip_ratios([m], src, skips.SkipOptions(images=16, batch_size=8), vitlab.Run(bootstrap=0))
    assert "ratio_lo" not in plain.summary() and "ratio_lo" not in _fields(skip_charts.skip_lines(
        plain.summary()).to_dict())


def test_cli_writes_csv_charts_json(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "out"
    assert main(["skip-ratio", "-m", "test_vit@random", "-n", "4", "-b", "4", "-o", str(out), "--no-cache"]) == 0
    for name in ("skip_ratio.csv", "skip_ratio_summary.csv", "skip_ratio_lines.png", "skip_ratio_lines.svg",
                 "run.json"):
        assert (out / name).is_file(), name
    assert main(["remove-skip", "-m", "test_resnet@random", "--block", "0", "-n", "4", "-o", str(out)]) == 2
