"""The paper tour's checks: each says "shown" on synthetic inputs built to show the claim, "not shown" on inputs
built to refute it and on untrained twins, and none passes on the inputs that fooled the earlier tour (issue 12)."""

import numpy as np
import pandas as pd
import pytest

import vitlab
from vitlab import evidence as ev
from vitlab import tour
from vitlab.engine.context import Run
from vitlab.stats.evidence import Estimate

E = Estimate


def staged(n: int, stages: int, across: float = 0.2) -> np.ndarray:
    """Self-CKA of a model in ``stages`` blocks: 1 within a stage, ``across`` between stages."""
    s = np.repeat(np.arange(stages), n // stages)
    return np.where(s[:, None] == s[None, :], 1.0, across)


def test_every_claim_names_a_figure_and_the_report_has_the_csv_columns():
    assert set(tour.CLAIMS) == {"cka", "distance", "heads", "receptive", "skips", "removal", "localization", "gap",
                                "probes", "scale"}
    assert all(c.figure.startswith("Fig") and c.claim for c in tour.CLAIMS.values())
    rows = [tour.check_skips(E(5, 4, 6), E(1, 0.9, 1.1), "x"), tour.cant_tell("scale", "no pair")]
    frame = tour.TourReport(rows, {}, ["a"], vitlab.RunInfo()).to_frame()
    assert list(frame.columns) == ["figure", "claim", "verdict", "statistic", "lo", "hi", "control", "evidence"]
    assert list(frame["verdict"]) == ["shown", "can't tell"]


def test_figs_1_2_uniformity_needs_more_than_the_untrained_twins():
    assert tour.off_diagonal_mean(staged(6, 3)) == pytest.approx((6 * 1 + 24 * 0.2) / 30)
    # the input that fooled the old check: untrained ViT 1.000 vs ResNet 0.819, and the trained pair no different
    gap = E(1.0 - 0.819, 0.17, 0.19)
    assert tour.check_uniformity(gap, gap, "").verdict == "not shown"
    assert tour.check_uniformity(gap, None, "").verdict == "can't tell"  # no control: never shown
    assert tour.check_uniformity(E(0.35, 0.3, 0.4), E(0.18, 0.17, 0.19), "").verdict == "shown"
    assert tour.check_uniformity(E(0.2, 0.15, 0.25), E(0.18, 0.17, 0.19), "").verdict == "can't tell"
    assert tour.check_uniformity(E(-0.1, -0.2, 0.0), E(0.18, 0.17, 0.19), "").verdict == "not shown"


def test_figs_3_4_local_heads_against_the_uniform_reference_of_the_same_convention():
    uniform = 13.23  # zoo ViT, prefix keys dropped without renormalising
    # the input that fooled the old check: block-0 heads at 12.1-13.6 px, essentially uniform
    fooled = tour.head_locality(np.array([12.1, 12.8, 13.2, 13.6]), uniform)
    assert tour.check_locality(E(float(fooled), fooled - 0.01, fooled + 0.01), E.exact(0.0), 0.25, "").verdict == \
        "not shown"
    # a clearly local head (4 px) beyond its interval and beyond the untrained twin
    local = float(tour.head_locality(np.array([4.0, 9.0, 13.0, 13.2]), uniform))
    twin = E(0.002, 0.001, 0.003)
    assert tour.check_locality(E(local, local - 0.05, local + 0.05), twin, 0.25, "").verdict == "shown"
    assert tour.check_locality(twin, twin, 0.25, "").verdict == "not shown"  # untrained: itself as control
    assert tour.check_locality(E(0.3, 0.2, 0.4), twin, 0.25, "").verdict == "can't tell"


def test_fig_5_rank_correlation_with_a_permutation_p_value():
    rng = np.random.default_rng(0)
    dist = np.linspace(2, 14, 12)
    conv_like = 0.9 - 0.05 * dist + 0.01 * rng.normal(size=12)  # local heads more CNN-like
    rho = -float(ev.spearman(dist, conv_like))
    null = -ev.spearman(dist, np.stack([rng.permutation(conv_like) for _ in range(500)]))
    p = (1 + (null >= rho).sum()) / 501
    assert rho > 0.9 and p < 0.01
    assert tour.check_head_rank(E(rho, 0.8, 1.0), p, float(np.percentile(null, 97.5)), "").verdict == "shown"
    # the opposite order refutes it; no order (p large) cannot tell
    assert tour.check_head_rank(E(-rho, -1.0, -0.8), 1.0, 0.6, "").verdict == "not shown"
    assert tour.check_head_rank(E(0.1, -0.3, 0.5), 0.35, 0.6, "").verdict in ("can't tell", "not shown")
    assert tour.check_head_rank(E(0.1, -0.3, 0.5), 0.35, 0.6, "").verdict != "shown"


def _disc_maps(radius: float, side: int = 28, n: int = 6) -> np.ndarray:
    yy, xx = np.mgrid[0:side, 0:side]
    r = np.hypot(yy + 0.5 - side / 2, xx + 0.5 - side / 2)
    return np.repeat(np.exp(-((r / radius) ** 2))[None], n, axis=0)


def _growth(before: float, after: float) -> Estimate:
    b, a = ev.radius_fraction(_disc_maps(before).mean(0)), ev.radius_fraction(_disc_maps(after).mean(0))
    return E.exact(float(a - b))


def test_fig_6_growth_not_patch_geometry():
    # the input that fooled the old check: the ViT's patch embedding alone (5.5 px) wider than ResNet's layer1.0
    # (3.5 px); attention adds nothing, the ResNet block does
    vit, cnn = _growth(5.5, 5.5), _growth(2.0, 3.5)
    assert vit.value == pytest.approx(0.0, abs=1e-12) and cnn.value > 0
    assert tour.check_growth(vit, cnn, "").verdict == "not shown"
    assert tour.check_growth(_growth(3.0, 12.0), cnn, "").verdict == "shown"


def test_fig_7_skips():
    ratio = np.array([[5.0, 6.0], [np.inf, 7.0]])
    assert tour.finite_median(ratio) == 6.0
    assert tour.check_skips(E(6, 5.5, 6.5), E(1.5, 1.2, 1.8), "").verdict == "shown"
    assert tour.check_skips(E(1.5, 1.2, 1.8), E(6, 5.5, 6.5), "").verdict == "not shown"
    assert tour.check_skips(E(2.0, 1.5, 2.5), E(1.8, 1.2, 2.2), "").verdict == "can't tell"


def test_fig_8_retrained_without_skip_against_the_model_with_it():
    blocks = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    normal = np.full((10, 10), 0.9)
    noskip = normal.copy()
    b = np.array(blocks)
    noskip[np.ix_(b < 2, b > 2)] = noskip[np.ix_(b > 2, b < 2)] = 0.6
    a, n = tour.cross_block_mean(noskip, blocks, 2), tour.cross_block_mean(normal, blocks, 2)
    assert a == pytest.approx(0.6) and n == pytest.approx(0.9)
    assert tour.check_removal(E(a, a - 0.05, a + 0.05), E(n, n - 0.02, n + 0.02), 2, "").verdict == "shown"
    # the old fooling input: a model compared with (almost) itself; and any unchanged model
    same = E(0.99999, 0.9999, 1.0)
    assert tour.check_removal(same, E(0.99999, 0.9999, 1.0), 2, "").verdict == "not shown"
    assert tour.check_removal(E(n, n - 0.02, n + 0.02), E(a, a - 0.05, a + 0.05), 2, "").verdict == "not shown"
    with pytest.raises(vitlab.VitlabError, match="both sides"):
        tour.cross_block_mean(normal, blocks, 0)


def test_figs_9_10_chance_corrected_localization():
    # the kind of input that fooled the old check: raw rates on grids with different chance levels
    vit = E.exact(float(ev.chance_corrected(0.30, 4)))  # 30 % on 2x2: barely above chance (25 %)
    cnn = E.exact(float(ev.chance_corrected(0.28, 16)))  # 28 % on 4x4: far above chance (6 %)
    assert 0.30 > 0.28 and tour.check_localization(vit, cnn, "").verdict == "not shown"
    assert tour.check_localization(E(0.9, 0.8, 1.0), E(0.3, 0.1, 0.5), "").verdict == "shown"
    gap = tour.check_gap(E(0.9, 0.8, 1.0), E(0.3, 0.2, 0.5), "")
    assert gap.verdict == "shown" and "LayerNorm" in gap.evidence
    assert tour.check_gap(E(0.9, 0.6, 1.0), E(0.9, 0.6, 1.0), "").verdict == "not shown"
    alone = tour.check_gap(E(0.9, 0.8, 1.0), E(0.3, 0.2, 0.5), "", norm_moved=False)
    assert alone.verdict == "shown" and tour.GAP_CAVEAT not in alone.evidence and "pooling only" in alone.evidence


def test_fig_11_probes_against_the_twin():
    assert tour.check_probes(E(0.1, 0.05, 0.15), E(-0.05, -0.1, 0.0), "").verdict == "shown"
    assert tour.check_probes(E(-0.05, -0.1, 0.0), E(-0.05, -0.1, 0.0), "").verdict == "not shown"
    assert tour.check_probes(E(0.02, -0.02, 0.06), None, "").verdict == "can't tell"


def test_fig_12_depth_drop():
    falling, rising = np.array([0.95, 0.9, 0.6, 0.5]), np.array([0.5, 0.6, 0.9, 0.95])
    assert tour.depth_drop(falling) == pytest.approx(0.375)
    assert tour.check_scale(E(0.375, 0.3, 0.45), "").verdict == "shown"
    assert tour.check_scale(E(float(tour.depth_drop(rising)), -0.45, -0.3), "").verdict == "not shown"
    assert tour.check_scale(E(0.05, -0.02, 0.1), "").verdict == "can't tell"


def test_draw_split_is_stratified_and_seeded():
    from vitlab.tour.measure import draw_split

    y = np.repeat(np.arange(3), 10)
    tr, va, te = draw_split(y, 2, 5, seed=1)
    assert all((y[tr] == c).sum() == 2 and (y[va] == c).sum() == 2 for c in range(3)) and len(te) == 5
    assert not set(tr) & set(va) and not set(te) & (set(tr) | set(va))
    assert np.array_equal(draw_split(y, 2, 5, seed=1)[0], tr) and not np.array_equal(draw_split(y, 2, 5, 2)[0], tr)
    with pytest.raises(vitlab.VitlabError, match="too few"):
        draw_split(y, 5, 5, seed=0)


@pytest.fixture(scope="module")
def untrained_report():
    """The tour run on untrained zoo models: their twins are themselves, so nothing that needs training passes."""
    src = vitlab.open_source("fashion-mnist:test")
    models = [vitlab.load("zoo:vit-cls@random:0", "cpu"), vitlab.load("zoo:resnet@random:0", "cpu")]
    opts = tour.TourOptions(images=48, batch_size=8, rf_images=8, probe_draws=3, probe_test=60, probe_shots=3,
                            only=("cka", "distance", "probes", "removal"),
                            noskip=("zoo:vit-cls@random:0", "zoo:vit-cls@random:0"))
    return tour.run_tour(models, src, opts, Run(bootstrap=50, seed=0))


def test_untrained_twins_show_nothing_that_needs_training(untrained_report):
    by = {r.figure: r for r in untrained_report.rows}
    assert set(by) == {"Figs 1-2", "Figs 3-4", "Fig 11", "Fig 8"}
    for figure, row in by.items():
        assert row.verdict == "not shown", (figure, row)
        assert row.lo <= row.statistic <= row.hi
    assert by["Figs 1-2"].statistic == pytest.approx(by["Figs 1-2"].control)  # the twins are the models
    frame = untrained_report.frames["Figs 1-2"]
    assert {"statistic", "control"} <= set(frame["role"]) and (frame["lo"] <= frame["hi"]).all()
    assert set(untrained_report.charts) == set(by)
    spec = untrained_report.charts["Figs 1-2"].to_dict()
    assert any(layer["mark"]["type"] == "rule" for layer in spec["layer"])  # the interval is drawn


def test_a_missing_model_is_a_cant_tell_row_in_words():
    src = vitlab.open_source("fashion-mnist:test")
    models = [vitlab.load("zoo:resnet@random:0", "cpu")]
    rep = tour.run_tour(models, src, tour.TourOptions(images=8, batch_size=8, only=("cka",)), Run(bootstrap=10))
    assert rep.rows[0].verdict == "can't tell" and "needs a ViT" in rep.rows[0].evidence
    with pytest.raises(vitlab.VitlabError, match="unknown tour check"):
        tour.run_tour(models, src, tour.TourOptions(only=("fig99",)), Run())
    with pytest.raises(vitlab.VitlabError, match="--control"):
        tour.run_tour(models, src, tour.TourOptions(control="trained", only=("cka",)), Run())


def test_cli_tour_writes_the_table_and_run_json(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "tour"
    assert main(["tour", "-m", "zoo:vit-cls@random", "-m", "zoo:resnet@random", "--only", "cka,skips", "-n", "16",
                 "-b", "8", "--bootstrap", "20", "--no-cache", "-o", str(out)]) == 0
    frame = pd.read_csv(out / "tour.csv")
    assert list(frame["figure"]) == ["Figs 1-2", "Fig 7"]
    assert set(frame["verdict"]) <= {"shown", "not shown", "can't tell"}
    assert frame.loc[0, "verdict"] == "not shown"
    import json

    run = json.loads((out / "run.json").read_text())
    assert run["command"] == "tour" and run["bootstrap"] == 20 and run["control"] == "random"
    assert (out / "tour_intervals.csv").exists() and (out / "tour_figs1_2.png").exists()
    assert main(["tour", "-m", "zoo:resnet", "--only", "nope", "-n", "8", "--no-cache", "-o", str(out)]) == 2
