"""The streamed measures, the agreement view, CKA sensitivity and compare-models on tiny real models.

References recompute each number from the captured activations with the float64 formulas of test_measures.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import vitlab
from vitlab import measures as ms
from vitlab.analyses.manymodels import CompareOptions, compare_models, parse_depths, tap_at
from vitlab.analyses.sensitivity import SensitivityOptions, sensitivity
from vitlab.analyses.similarity import SimilarityOptions, similarity
from vitlab.engine.context import Run
from vitlab.stats.agreement import agreement, lower_half_reach, uniformity, verdict

from .reference import hsic1_song, linear_gram64
from .test_measures import ref_mutual_knn, ref_procrustes, ref_svcca_pwcca

N, B = 24, 12


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with ms.blas_single_thread():
        yield


def batch_features(model, source, n=N, b=B, tokens="all"):
    """{tap: [per batch (n_b, F) float64]} captured directly, as the reference's input."""
    from vitlab.engine.run import _forward
    from vitlab.inputs.data import decode, plan_batches, select

    taps = vitlab.taps.default_taps(model.model)
    out = {t: [] for t in taps}
    for batch in plan_batches(source, select(source, n), b):
        decode(source, batch)
        acts = _forward(model, batch.images, taps, False)
        for t in taps:
            out[t].append(vitlab.taps.features(acts[t], model.model, tokens).double().numpy())
    return out


@pytest.fixture(scope="module")
def report_and_feats(tiny_vit, tiny_resnet, fmnist_source):
    opts = SimilarityOptions(images=N, batch_size=B, knn_k=3, svd_dims=4, pca_dims=256)
    rep = similarity([tiny_vit, tiny_resnet], fmnist_source, opts, Run())
    return rep, batch_features(tiny_vit, fmnist_source), batch_features(tiny_resnet, fmnist_source)


def test_streamed_gram_measures_equal_per_batch_references(report_and_feats):
    rep, fa, fb = report_and_feats
    ta, tb = list(fa), list(fb)
    for i, j in ((0, 3), (len(ta) - 1, 1), (2, len(tb) - 1)):
        xs, ys = fa[ta[i]], fb[tb[j]]
        hsic = np.sum([[hsic1_song(linear_gram64(x), linear_gram64(y)), hsic1_song(linear_gram64(x), linear_gram64(x)),
                        hsic1_song(linear_gram64(y), linear_gram64(y))] for x, y in zip(xs, ys)], axis=0)
        assert rep.maps[("cka", 0, 1)][i, j] == pytest.approx(hsic[0] / np.sqrt(hsic[1] * hsic[2]), rel=1e-4)
        proc = np.mean([ref_procrustes(x, y, B - 1) for x, y in zip(xs, ys)])
        assert rep.maps[("procrustes", 0, 1)][i, j] == pytest.approx(proc, rel=1e-3, abs=1e-4)
        knn = np.mean([ref_mutual_knn(x, y, 3) for x, y in zip(xs, ys)])
        assert rep.maps[("mutual-knn", 0, 1)][i, j] == pytest.approx(knn, abs=1e-9)
    assert rep.maps[("cka", 1, 0)] == pytest.approx(rep.maps[("cka", 0, 1)].T)
    assert np.allclose(np.diag(rep.maps[("cka", 0, 0)]), 1, atol=1e-5)


def test_cca_measures_equal_reference_on_the_layers_own_features(report_and_feats, tiny_vit, tiny_resnet,
                                                                 fmnist_source):
    """SVCCA is the published formula on the layer's own features of all images, centred over all of them (they fit
    the default budget, so no sketch is used); PWCCA over all neurons is undefined on 24 images of layers this wide
    (NaN), and the report says why."""
    rep, fa, fb = report_and_feats
    ta, tb = list(fa), list(fb)
    assert rep.cca["sketch_dims"] == 0 and rep.cca["features"] == "own" and rep.cca["shift"] is None
    for i, j in ((1, 2), (len(ta) - 1, len(tb) - 1)):
        sv, pw = ref_svcca_pwcca(np.concatenate(fa[ta[i]]), np.concatenate(fb[tb[j]]), 4)
        assert rep.maps[("svcca", 0, 1)][i, j] == pytest.approx(sv, rel=1e-4)
        assert rep.maps[("pwcca-svd20", 0, 1)][i, j] == pytest.approx(pw, rel=1e-4)
    rep = similarity([tiny_vit, tiny_resnet], fmnist_source,
                     SimilarityOptions(measures=("pwcca",), images=N, batch_size=B), Run())
    assert np.all(np.isnan(rep.maps[("pwcca", 0, 1)]))
    assert any(w.startswith("pwcca:") and "undefined (NaN)" in w for w in rep.warnings)
    assert not any("constant or rank-deficient" in w for w in rep.warnings)


def test_a_forced_sketch_equals_reference_and_its_shift_is_measured(report_and_feats, tiny_vit, tiny_resnet,
                                                                    fmnist_source):
    """With --sketch-dims 64, SVCCA/PWCCA-SVD20 are the formulas on the sketched features (sketching each batch
    equals sketching the stacked features), and report.cca holds |sketched − own| over every cell, as recomputed
    here from the captured features."""
    import torch

    _, fa, fb = report_and_feats
    opts = SimilarityOptions(measures=("svcca", "pwcca-svd20"), images=N, batch_size=B, svd_dims=4, sketch_dims=64)
    rep = similarity([tiny_vit, tiny_resnet], fmnist_source, opts, Run())
    own = [[np.concatenate(f[t]) for t in f] for f in (fa, fb)]

    def sk(x):
        return x if x.shape[1] <= 64 else ms.count_sketch(torch.from_numpy(x).float(), 64).double().numpy()

    diffs = {"svcca": [], "pwcca-svd20": []}
    for a in range(2):
        for b in range(2):
            for i, x in enumerate(own[a]):
                for j, y in enumerate(own[b]):
                    got = ref_svcca_pwcca(sk(x), sk(y), 4)
                    assert rep.maps[("svcca", a, b)][i, j] == pytest.approx(got[0], rel=1e-4)
                    assert rep.maps[("pwcca-svd20", a, b)][i, j] == pytest.approx(got[1], rel=1e-4)
                    base = ref_svcca_pwcca(x, y, 4)
                    diffs["svcca"].append(abs(got[0] - base[0]))
                    diffs["pwcca-svd20"].append(abs(got[1] - base[1]))
    assert rep.cca["sketch_dims"] == 64 and "CountSketch" in rep.cca["features"]
    for m, v in diffs.items():
        assert rep.cca["shift"][m]["images"] == N
        assert rep.cca["shift"][m]["mean"] == pytest.approx(np.mean(v), abs=1e-4)
        assert rep.cca["shift"][m]["max"] == pytest.approx(np.max(v), abs=1e-4)


def test_a_sketch_the_budget_forces_states_its_expected_and_measured_shift(tiny_vit, tiny_resnet, fmnist_source,
                                                                          monkeypatch):
    """A sketch chosen by the budget (not forced) records the shift expected at its width and the shift measured;
    a width whose expected mean shift is not below 0.01 is a warning, and so is a measured mean above 0.01."""
    from vitlab.analyses import cca_features as cf

    monkeypatch.setattr(cf, "plan_features", lambda widths, images, p: 64)  # as if only 64 columns fit
    opts = SimilarityOptions(measures=("svcca", "pwcca-svd20"), images=N, batch_size=B, svd_dims=4)
    rep = similarity([tiny_vit, tiny_resnet], fmnist_source, opts, Run())
    assert rep.cca["sketch_dims"] == 64 and rep.cca["expected_shift"] == cf.expected_shift(64)
    assert any(w.startswith("SVCCA/PWCCA: only a 64-column CountSketch fits") and "4096 columns or more" in w
               for w in rep.warnings)
    for m in ("svcca", "pwcca-svd20"):
        shift = rep.cca["shift"][m]
        warned = any(w.startswith("SVCCA/PWCCA ran on a 64-column") and f"{m} by {shift['mean']:.3f} on average (up "
                     f"to {shift['max']:.3f})" in w for w in rep.warnings)
        assert warned == (shift["mean"] > cf.SHIFT_LIMIT), (m, shift, rep.warnings)


def test_rbf_cka_from_cached_linear_grams_equals_rbf_statistic(tiny_vit, fmnist_source):
    rep = similarity([tiny_vit], fmnist_source, SimilarityOptions(measures=("cka-rbf",), images=N, batch_size=B), Run())
    direct = vitlab.run.cka([tiny_vit], fmnist_source, vitlab.CKAOptions(images=N, batch_size=B),
                            statistic=vitlab.GramStatistic(kernel="rbf", precision="float64"))
    np.testing.assert_allclose(rep.maps[("cka-rbf", 0, 0)], direct.pair(0, 0).cka, atol=2e-5)


def test_rerun_reads_the_cache_and_each_model_runs_once(tiny_vit, tiny_resnet, fmnist_source, store):
    run = Run(store=store)
    first = similarity([tiny_vit, tiny_resnet], fmnist_source, SimilarityOptions(images=N, batch_size=B), run)
    assert run.info.forward_passes == {tiny_vit.label: 2, tiny_resnet.label: 2}
    again = Run(store=store)
    second = similarity([tiny_vit, tiny_resnet], fmnist_source, SimilarityOptions(images=N, batch_size=B), again)
    assert again.info.forward_passes == {} and again.info.batches_computed == 0
    for key, v in first.maps.items():
        np.testing.assert_array_equal(v, second.maps[key])


def test_agreement_view_and_claims(report_and_feats):
    rep, _, _ = report_and_feats
    ag = agreement(rep)
    rho = ag.correlations["ab"]
    assert rho.shape == (6, 6) and np.allclose(np.diag(rho), 1) and np.allclose(rho, rho.T)
    cka_, proc = rep.maps[("cka", 0, 1)], rep.maps[("procrustes", 0, 1)]
    i, j = ag.measures.index("cka"), ag.measures.index("procrustes")
    assert rho[i, j] == pytest.approx(ms.rank_correlation(cka_, np.cos(proc)))
    claims = ag.claims_frame()
    assert len(claims) == 12 and set(claims["measure"]) == set(ms.DEFAULT_MEASURES)
    text = " ".join(ag.summary())
    assert "Fig 1" in text and "Fig 2" in text and ("agree" in text or "disagree" in text)


def test_claim_statistics_on_constructed_maps():
    assert uniformity(np.array([[1, 0.5], [0.3, 1]])) == pytest.approx(0.4)
    cross = np.array([[0.9, 0.8, 0.1], [0.1, 0.2, 0.3], [0.2, 0.1, 0.9], [0, 0, 0.2]])
    assert lower_half_reach(cross) == pytest.approx(2 / 3)  # columns 0, 1 best in rows 0-1; column 2 in row 2
    assert [verdict(v) for v in (0.9, 0.6, 0.1, float("nan"))] == ["agree", "partly agree", "disagree", "can't tell"]


def test_sensitivity_matches_brute_force(tiny_vit, tiny_resnet, fmnist_source):
    fa, fb = batch_features(tiny_vit, fmnist_source), batch_features(tiny_resnet, fmnist_source)
    la, lb = list(fa)[3], list(fb)[2]
    opts = SensitivityOptions(images=N, batch_size=B, layer_a=la, layer_b=lb, pcs=(1, 2))
    res = sensitivity(tiny_vit, tiny_resnet, fmnist_source, opts, Run())
    f = res.to_frame().set_index(["check", "side", "k"])
    xs, ys = fa[la], fb[lb]

    def cka_of(pairs):
        t = np.sum([[hsic1_song(linear_gram64(x), linear_gram64(y)), hsic1_song(linear_gram64(x), linear_gram64(x)),
                     hsic1_song(linear_gram64(y), linear_gram64(y))] for x, y in pairs], axis=0)
        return t[0] / np.sqrt(t[1] * t[2])

    def drop_pcs(x, k):
        x = x - x.mean(0)
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        return x - (u[:, :k] * s[:k]) @ vt[:k]

    assert res.cka == pytest.approx(cka_of(zip(xs, ys)), rel=1e-4)
    assert f.loc[("remove top PCs", "A", 2), "value"] == pytest.approx(
        cka_of([(drop_pcs(x, 2), y) for x, y in zip(xs, ys)]), rel=1e-3, abs=1e-4)
    lobo = [cka_of([(xs[1 - b], ys[1 - b])]) for b in range(2)]
    worst = lobo[int(np.argmax(np.abs(np.array(lobo) - res.cka)))]
    assert f.loc[("leave one batch out", "both", 0), "value"] == pytest.approx(worst, rel=1e-4)
    loo = [cka_of([(np.delete(xs[b], i, 0), np.delete(ys[b], i, 0)) if c == b else (xs[c], ys[c]) for c in range(2)])
           for b in range(2) for i in range(B)]
    assert abs(f.loc[("leave one image out", "both", 0), "change"]) == pytest.approx(
        np.max(np.abs(np.array(loo) - res.cka)), rel=1e-3)
    assert 0 < f.loc[("top-direction energy share", "A", 1), "value"] <= 1


def test_compare_models_one_pass_each_then_none(tiny_vit, tiny_resnet, fmnist_source, store):
    other = vitlab.load("test_vit@random:1", "cpu")
    models = [tiny_vit, tiny_resnet, other]
    opts = CompareOptions(images=N, batch_size=B, depths=(0.5, 1.0), measure="cka")
    run = Run(store=store)
    res = compare_models(models, fmnist_source, opts, run)
    assert run.info.forward_passes == {m.label: 2 for m in models}
    again = Run(store=store)
    res2 = compare_models(models, fmnist_source, opts, again)
    assert again.info.forward_passes == {} and np.array_equal(res.matrices, res2.matrices)
    full = similarity(models, fmnist_source, SimilarityOptions(measures=("cka",), images=N, batch_size=B),
                      Run(store=store))
    for k, d in enumerate(opts.depths):
        for a in range(3):
            for b in range(3):
                ia = full.layers[a].index(tap_at(full.layers[a], d))
                ib = full.layers[b].index(tap_at(full.layers[b], d))
                assert res.matrices[k, a, b] == pytest.approx(full.maps[("cka", a, b)][ia, ib], rel=1e-9)
    dist = ms.as_distance("cka", res.matrices[1])
    np.fill_diagonal(dist, 0)
    xy = res.coords[1]
    if res.explained[1] > 0.999:  # 3 points always embed exactly when the distances are Euclidean
        np.testing.assert_allclose(np.linalg.norm(xy[:, None] - xy[None], axis=-1), dist, atol=1e-6)


def test_depths_are_checked():
    assert parse_depths("0.25, 1") == (0.25, 1.0)
    assert tap_at(list("abcd"), 0.25) == "a" and tap_at(list("abcd"), 1.0) == "d" and tap_at(list("abcd"), 0.3) == "b"
    for bad in ("0", "1.5", "x"):
        with pytest.raises(vitlab.VitlabError):
            parse_depths(bad)


def test_cli_similarity_and_compare_models(tmp_path, capsys):
    from vitlab.cli import main

    out = tmp_path / "sim"
    args = ["-m", "test_vit@random:0", "-m", "test_resnet@random:0", "-d", "fashion-mnist:test", "-n", "24", "-b",
            "12", "--device", "cpu"]
    assert main(["similarity", *args, "--measure", "cka,procrustes", "-o", str(out)]) == 0
    assert {"similarity.csv", "agreement.csv", "claims.csv", "agreement_maps.png", "run.json"} <= {
        p.name for p in out.iterdir()}
    assert "agree" in capsys.readouterr().out
    out2 = tmp_path / "cm"
    assert main(["compare-models", *args, "--depth", "0.5,1", "-o", str(out2)]) == 0
    run = json.loads((out2 / "run.json").read_text())
    assert run["forward_passes"] == {} and run["batches_from_cache"] == 2  # the Grams similarity cached
    assert {"compare_models.csv", "mds.csv", "mds_cka_depth0.5.svg", "models_cka_depth1.png"} <= {
        p.name for p in out2.iterdir()}
    assert main(["similarity", *args, "--measure", "cka,rsa", "-o", str(out)]) == 2
    assert "unknown measure" in capsys.readouterr().err
    assert main(["compare-models", *args, "--depth", "2", "-o", str(out2)]) == 2
    out3 = tmp_path / "sens"
    pair = ["-m", "test_vit@random:0", "--other", "test_resnet@random:0", "-d", "fashion-mnist:test", "-n", "24",
            "-b", "12", "--device", "cpu"]
    layers = ["--layer-a", "blocks.0.resid_post", "--layer-b", "layer1.0"]
    assert main(["cka-sensitivity", *pair, *layers, "-o", str(out3)]) == 0
    assert (out3 / "cka_sensitivity.csv").is_file()


def test_compare_models_pwcca_all_tokens_says_why_it_is_undefined(tmp_path, capsys):
    """Morcos et al.'s PWCCA of all-token layers wider than the 24 images is not determined: compare-models stops
    with that reason (not "constant features") and what to use instead; GAP features of the same models work with
    pwcca-svd20, and vitlab similarity gives NaN cells with the same reason."""
    from vitlab.cli import main

    args = ["-m", "test_vit@random:0", "-m", "test_resnet@random:0", "-d", "fashion-mnist:test", "-n", "24", "-b",
            "12", "--device", "cpu", "--depth", "0.5,1"]
    assert main(["compare-models", *args, "--measure", "pwcca", "-o", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "pwcca is undefined at depth 0.5" in err and "more than the 24 images" in err
    assert "use pwcca-svd20, --tokens cls / gap (GAP or CLS features), or more images" in err
    assert "constant features" not in err
    assert main(["compare-models", *args, "--measure", "pwcca-svd20", "--tokens", "gap", "-o",
                 str(tmp_path / "b")]) == 0
    frame = pd.read_csv(tmp_path / "b" / "compare_models.csv")
    assert np.isfinite(frame["value"]).all()
    assert json.loads((tmp_path / "b" / "run.json").read_text())["cca"]["features"] == "own"
    assert main(["compare-models", *args, "--measure", "svcca", "--sketch-dims", "64", "-o", str(tmp_path / "d")]) == 0
    run = json.loads((tmp_path / "d" / "run.json").read_text())
    assert run["cca"]["sketch_dims"] == 64 and run["cca"]["expected_shift"]["measured_at"] is None
    assert any("64-column CountSketch, whose expected mean shift" in w for w in run["warnings"])
    sim_args = [a for a in args if a not in ("--depth", "0.5,1")]
    assert main(["similarity", *sim_args, "--measure", "pwcca", "-o", str(tmp_path / "c")]) == 0
    warned = json.loads((tmp_path / "c" / "run.json").read_text())["warnings"]
    assert any("undefined (NaN)" in w and "use pwcca-svd20, --tokens cls / gap" in w for w in warned)


def test_features_are_the_layers_own_within_the_budget_and_the_widest_fitting_sketch_beyond():
    """The byte budget: N x sum of widths x 12 per model + 24 x N x the widest tap; beyond it the widest power of
    two that fits (taps narrower than it stay whole); a forced width is kept; nothing fits: a clear error."""
    from vitlab.analyses import cca_features as cf
    from vitlab.errors import VitlabError

    widths = [[1088] * 12, [3136, 3136, 1568, 1568, 1024, 1024, 512, 512]]  # the zoo pair, all tokens
    need = 12 * 512 * (13056 + 12480) + 24 * 512 * 3136
    assert cf.feature_bytes(512, widths) == need
    assert cf.plan_features(widths, 512, SimilarityOptions(cca_memory_mib=2048)) == 0
    mib = need // 2**20  # just below what the own features need
    w = cf.plan_features(widths, 512, SimilarityOptions(cca_memory_mib=mib))
    assert w == 2048  # 161 MiB; at 4096 every tap stays whole: 186.4 MiB
    assert cf.feature_bytes(512, [[min(x, w) for x in ws] for ws in widths]) <= mib * 2**20
    assert cf.feature_bytes(512, [[min(x, 2 * w) for x in ws] for ws in widths]) > mib * 2**20
    assert cf.shift_images(widths, 512, SimilarityOptions(cca_memory_mib=mib)) == mib * 2**20 // (need // 512)
    assert cf.plan_features(widths, 512, SimilarityOptions(sketch_dims=300)) == 300
    with pytest.raises(VitlabError, match="do not fit in --cca-memory-mib 1"):
        cf.plan_features(widths, 100_000, SimilarityOptions(cca_memory_mib=1))
    with pytest.raises(VitlabError, match="sketch-dims must be 0"):
        SimilarityOptions(sketch_dims=-1)


def test_the_sketch_width_keeps_the_expected_mean_shift_below_001_when_it_fits():
    """Beyond the budget the sketch is the widest power of two that fits: at least 4096 columns (measured mean shift
    0.005 < 0.01) whenever 4096 fits, narrower only when the budget forces it; a width's expected shift is the one
    measured at the widest measured width not above it."""
    from vitlab.analyses import cca_features as cf

    assert cf.safe_sketch_width() == 4096 and cf.safe_sketch_width(0.02) == 1024
    assert cf.expected_shift(4096) == {"mean": 0.005, "max": 0.024, "measured_at": 4096}
    assert cf.expected_shift(16384)["measured_at"] == 4096
    assert cf.expected_shift(2048) == {"mean": 0.015, "max": 0.061, "measured_at": 1024}  # a bound: 2048 unmeasured
    assert cf.expected_shift(100) == {"mean": None, "max": None, "measured_at": None}
    vit_b16 = [[151_296] * 24]  # ViT-B/16, all tokens
    for images, mib in ((256, 2048), (256, 800), (4096, 2048)):
        w = cf.plan_features(vit_b16, images, SimilarityOptions(cca_memory_mib=mib))
        fits = lambda width: cf.feature_bytes(images, [[min(x, width) for x in ws] for ws in vit_b16]) <= mib * 2**20
        assert fits(w) and not fits(2 * w) and w & (w - 1) == 0
        assert (w >= cf.safe_sketch_width()) == fits(cf.safe_sketch_width())
        assert (cf.expected_shift(w)["mean"] < cf.SHIFT_LIMIT) == fits(cf.safe_sketch_width())
    assert cf.plan_features(vit_b16, 256, SimilarityOptions()) == 16384  # the docs' figure
    assert cf.plan_features(vit_b16, 4096, SimilarityOptions()) == 1024  # the budget forces a narrower sketch
