"""Issue 33, the tour's part: intervals inside each statistic's range and never of zero width unless exact; the words
around the numbers (Check.lines, headline, evidence) never "nan" or "n/a [", the paper's claim alone with the app's
control on its own line; one default for the Paper tour page, the slides and `vitlab tour` / `vitlab report`, so
that the page and the report give identical tour.csv rows; every row names its models; Fig 12 against another seed.
"""

import re

import numpy as np
import pytest
from scipy.special import expit, logit
from scipy.stats import t as student

import vitlab
from vitlab import tour
from vitlab.engine.context import Run
from vitlab.stats import evidence as ev
from vitlab.stats.evidence import Estimate

# ---------------------------------------------------------------- the bounded interval, against references


def test_bounded_jackknife_is_the_t_interval_of_the_logit_mapped_back():
    # reference written out here from the definition: jackknife se of logit((x − a)/(b − a)), t on T − 1 df
    rng = np.random.default_rng(0)
    loo = 0.9 + 0.05 * rng.random(8)
    value, a, b = 0.93, 0.0, 1.0
    g, gl = logit(value), logit(loo)
    se = np.sqrt(7 / 8 * ((gl - gl.mean()) ** 2).sum())
    q = student.ppf(0.975, 7)
    lo, hi, note = ev.bounded_jackknife(value, loo, a, b)
    assert (lo, hi) == pytest.approx((expit(g - q * se), expit(g + q * se)), rel=1e-12)
    assert "logit" in note and a < lo < value < hi < b


def test_bounded_interval_stays_in_range_where_the_t_interval_leaves_it():
    # the case: a difference of rates at few batches, the symmetric t interval past ±1
    loo = np.array([0.1, 0.95, 0.9, 0.2, 0.92, 0.97])
    raw = ev.jackknife_interval(0.6, loo)
    assert raw[0] < -1 or raw[1] > 1
    for bounds in ((-1.0, 1.0), (-1.07, 1.33), (0.0, 1.0)):
        e = Estimate.jackknife(0.6, loo, "batches", bounds=bounds)
        assert bounds[0] <= e.lo < 0.6 < e.hi <= bounds[1] and e.note


def test_bounded_interval_is_equivariant_under_an_affine_map_and_a_reflection():
    rng = np.random.default_rng(1)
    loo = 0.3 + 0.2 * rng.random(10)
    lo, hi, _ = ev.bounded_jackknife(0.4, loo, 0.0, 1.0)
    # CKA on [0, 1] as a difference on [−1, 1]: x -> 2x − 1 maps the interval's ends
    lo2, hi2, _ = ev.bounded_jackknife(2 * 0.4 - 1, 2 * loo - 1, -1.0, 1.0)
    assert (lo2, hi2) == pytest.approx((2 * lo - 1, 2 * hi - 1), rel=1e-12)
    # reflection x -> 1 − x swaps the ends
    lo3, hi3, _ = ev.bounded_jackknife(0.6, 1 - loo, 0.0, 1.0)
    assert (lo3, hi3) == pytest.approx((1 - hi, 1 - lo), rel=1e-12)


def test_tukey_interval_is_the_t_interval_of_the_pseudo_values():
    # reference from the definition, by a loop: the statistic a ratio of sums over 5 batches, its leave-one-out
    # values, the pseudo-values T·θ − (T − 1)·θ₋ₜ, their mean ± t_{T−1} · sd / √T (Efron & Tibshirani 1993, 11.5)
    x, y = np.array([1.0, 2.0, 1.0, 3.0, 4.0]), np.array([2.0, 3.0, 5.0, 4.0, 6.0])
    theta = x.sum() / y.sum()
    loo = np.array([(x.sum() - x[t]) / (y.sum() - y[t]) for t in range(5)])
    pseudo = np.array([5 * theta - 4 * loo[t] for t in range(5)])
    assert ev.tukey_estimate(theta, loo) == pytest.approx(pseudo.mean(), rel=1e-12)
    half = student.ppf(0.975, 4) * pseudo.std(ddof=1) / np.sqrt(5)
    lo, hi = ev.jackknife_interval(theta, loo, bias_corrected=True)
    assert (lo, hi) == pytest.approx((pseudo.mean() - half, pseudo.mean() + half), rel=1e-12)
    # bounded: the same on the logit scale of the range, mapped back; the value shown stays the plain one
    g = logit((theta + 1) / 2)
    pg = 5 * g - 4 * logit((loo + 1) / 2)
    half = student.ppf(0.975, 4) * pg.std(ddof=1) / np.sqrt(5)
    e = Estimate.jackknife(theta, loo, "batches", bounds=(-1.0, 1.0), bias_corrected=True)
    assert (e.lo, e.hi) == pytest.approx((2 * expit(pg.mean() - half) - 1, 2 * expit(pg.mean() + half) - 1), rel=1e-12)
    assert e.value == theta and "bias-corrected (Tukey)" in e.basis and "logit" in e.basis
    plain = Estimate.jackknife(theta, loo, "batches", bounds=(-1.0, 1.0))
    assert (plain.hi - plain.lo) != pytest.approx(e.hi - e.lo)  # the logit map: same se, another centre, another width
    assert "Tukey" not in plain.basis


def test_a_tukey_interval_that_misses_the_plain_value_is_stretched_to_it_and_says_so():
    loo = np.array([0.9, 0.91, 0.92, 0.93, 0.94])  # a centre 5 · 0.5 − 4 · 0.92 = −1.18, far from 0.5
    e = Estimate.jackknife(0.5, loo, "batches", bias_corrected=True)
    assert e.lo < -1 and e.hi == 0.5 and "stretched to reach the plain estimate" in e.basis


def test_figs_1_2_intervals_are_tukey_on_the_logit_scale():
    from vitlab.tour.measure.similarity import uniformity_estimate

    rng = np.random.default_rng(1)
    loo = 0.2 + 0.02 * rng.random(6)
    for gap, bounds in ((True, (-1.0, 1.0)), (False, (0.0, 1.0))):
        e = uniformity_estimate(0.21, loo, gap=gap)
        ref = Estimate.jackknife(0.21, loo, "batches", bounds=bounds, bias_corrected=True)
        assert (e.value, e.lo, e.hi, e.bounds, e.basis) == (ref.value, ref.lo, ref.hi, ref.bounds, ref.basis)
        assert e.basis == f"jackknife t over 6 batches; bias-corrected (Tukey); " \
                          f"on the logit scale of [{bounds[0]:.3g}, {bounds[1]:.3g}]"


def test_a_value_on_the_bound_is_clipped_and_said_so():
    loo = np.array([1.0, 1.0, 0.8, 1.0, 0.9])
    lo, hi, note = ev.bounded_jackknife(1.0, loo, -0.0667, 1.0)
    raw_lo, raw_hi = ev.jackknife_interval(1.0, loo)
    assert raw_hi > 1.0 and (lo, hi) == pytest.approx((float(raw_lo), 1.0)) and note.startswith("clipped to")
    e = Estimate.jackknife(1.0, loo, "batches", bounds=(-0.0667, 1.0))
    assert "clipped" in e.basis and e.hi == 1.0
    # one-sided range (a ratio of norms): the log scale, never below the bound
    e = Estimate.jackknife(0.5, np.array([0.1, 0.9, 0.2, 0.8, 0.15]), "batches", bounds=(0.0, np.inf))
    assert 0.0 < e.lo < 0.5 < e.hi and "log" in e.note


def test_too_few_units_give_no_interval_and_words_without_nan():
    e = Estimate.jackknife(0.4, np.array([0.3, 0.5, 0.45]), "batches", bounds=(0.0, 1.0))
    assert np.isnan(e.lo) and e.basis.startswith("too few batches for an interval")
    assert e.text() == "0.400 (too few batches for an interval: 3 < 4)"
    assert ev.format_estimate(float("nan"), float("nan"), float("nan"), "batches", 8) == "not measured"
    assert ev.format_estimate(0.2, float("nan"), float("nan")) == "0.200 (no interval)"
    # ends that would print as the value get more digits, up to 6
    assert ev.format_estimate(0.999971, 0.999962, 0.999978) == "0.99997 [0.99996, 0.99998]"


def test_a_quantile_on_a_grid_is_widened_to_one_step_and_says_so():
    step = 1 / 28
    same = np.full(200, 0.25)  # every resample on the same grid point
    e = Estimate.from_samples(0.25, same, unit="images", units=32, resolution=step)
    assert e.hi - e.lo == pytest.approx(step) and e.lo < 0.25 < e.hi and "step" in e.basis
    e = Estimate.from_samples(0.99, np.full(50, 0.99), unit="images", units=32, bounds=(0.0, 1.0), resolution=step)
    assert e.hi == 1.0 and e.lo == pytest.approx(0.99 - step / 2)
    wide = Estimate.from_samples(0.25, np.linspace(0.1, 0.4, 200), unit="images", units=32, resolution=step)
    assert wide.note == "" and wide.hi - wide.lo > step  # a real spread is left alone
    assert Estimate.exact(0.3).widened(step) == Estimate.exact(0.3)  # an exact reference keeps zero width


# ---------------------------------------------------------------- the words of a check


def depth(text: str) -> int:
    d = best = 0
    for ch in text:
        d += {"(": 1, ")": -1}.get(ch, 0)
        best = max(best, d)
    return best


NAN = re.compile(r"\bnan\b|n/a \[", re.IGNORECASE)


def assert_words(rows, headline=()) -> None:
    for r in rows:
        words = r.lines()
        assert set(words) >= {"paper", "statistic", "control_note", "pattern_text", "learned_text", "interval_text",
                              "models", "data"}
        for k, v in words.items():
            assert isinstance(v, str) and not NAN.search(v), (r.figure, k, v)
            assert depth(v) <= 1, (r.figure, k, v)  # no nested parentheses
        assert not NAN.search(r.evidence), (r.figure, r.evidence)
        assert words["paper"] == tour.CLAIMS[next(k for k, c in tour.CLAIMS.items() if c.figure == r.figure)].claim
        assert words["statistic"] and words["control_note"]
    for line in headline:
        assert not NAN.search(line), line


def test_the_paper_box_holds_only_the_papers_words():
    for key, c in tour.CLAIMS.items():
        # the app's own controls are not the paper's: they live in CONTROL_NOTES, on their own line
        assert "untrained" not in c.claim and "twin" not in c.claim and "chance-corrected" not in c.claim, key
        assert "(" not in c.claim, key
        assert tour.STATISTICS[key] and tour.CONTROL_NOTES[key]
    assert "untrained" in tour.CONTROL_NOTES["cka"] and "seed" in tour.CONTROL_NOTES["scale"]


def test_unmeasured_and_too_few_rows_render_in_words():
    E = Estimate
    few = E.jackknife(0.5, np.array([0.4, 0.6, 0.5]), "batches", bounds=(0.0, 1.0))
    rows = [tour.cant_tell("skips", "this check needs a ResNet among the models, e.g. zoo:resnet"),
            tour.check_skips(few, E(4.8, 4.8, 4.8), "x", E(0.1, float("nan"), float("nan")), None),
            tour.check_uniformity(E(0.074, 0.055, 0.093, "batches", 8, ev.JACKKNIFE), None, "detail")]
    assert_words(rows)
    assert rows[0].lines()["pattern_text"].startswith("can't tell: not measured: this check needs a ResNet")
    assert "too few batches for an interval" in rows[1].lines()["pattern_text"]
    assert rows[2].lines()["pattern_text"] == "shown: 0.074 [0.055, 0.093] against no gap, the ResNet as uniform " \
                                              "as the ViT (fixed at 0)"


def test_fig_10_follows_model_a_to_its_pooling_only_twin():
    opts = tour.TourOptions()
    assert opts.gap_models("zoo:vit-cls-14") == (("zoo:vit-cls-14", "zoo:vit-gap-14"), True)
    assert opts.gap_models("zoo:vit-cls") == (tour.GAP_PAIR, True)
    assert opts.gap_models("vit_base_patch32_224") == (tour.GAP_PAIR, False)
    assert tour.TourOptions(gap_pair=("a", "b")).gap_models("zoo:vit-cls-14") == (("a", "b"), False)
    with pytest.raises(vitlab.VitlabError, match="two models"):
        tour.TourOptions(gap_pair=("a",)).gap_models(None)
    with pytest.raises(vitlab.VitlabError, match="OTHER-SEED vs FULL-DATA"):
        tour.TourOptions(seed_pair="zoo:vit-cls").seed_control()


def test_a_196_token_model_a_uses_its_twin_and_says_which_checks_stay_on_16_tokens(tmp_path):
    src = vitlab.open_source("fashion-mnist:test")
    models = [vitlab.load("zoo:vit-cls-14", "cpu"), vitlab.load("zoo:resnet", "cpu")]
    opts = tour.TourOptions(images=32, batch_size=8, control="none", only=("removal", "gap"))
    rep = tour.run_tour(models, src, opts, Run(store=vitlab.Store(tmp_path / "s"), bootstrap=20, seed=0))
    by = {r.figure: r for r in rep.rows}
    assert by["Fig 10"].models == "zoo:vit-cls-14; zoo:vit-gap-14" and "pooling only" in by["Fig 10"].evidence
    assert by["Fig 8"].models == "zoo:vit-cls; zoo:vit-cls-noskip"
    assert "16-token zoo controls" in by["Fig 8"].control_note and "zoo:vit-cls-14" in by["Fig 8"].control_note
    assert all(r.images == 32 and r.batches == 4 and r.batch_size == 8 for r in rep.rows)


# ---------------------------------------------------------------- the default tour on the zoo


def page_options() -> tuple[tour.TourOptions, int, int]:
    """What app/views/tour.py builds from its widgets' defaults (tour.images, tour.batch_size, twins on,
    tour.bootstrap; seed TOUR_SEED)."""
    return (tour.TourOptions(images=tour.TOUR_IMAGES, batch_size=tour.TOUR_BATCH, control="random"),
            tour.TOUR_BOOTSTRAP, tour.TOUR_SEED)


def cli_options(command: str):
    from vitlab.cli import build_parser, options_from_args
    from vitlab.table import ANALYSES

    args = build_parser(command).parse_args([command, "-m", "zoo:vit-cls", "-m", "zoo:resnet"])
    return options_from_args(ANALYSES["tour"], args), args.bootstrap, args.seed


@pytest.fixture(scope="module")
def zoo_default(tmp_path_factory):
    store = vitlab.Store(tmp_path_factory.mktemp("tour-default") / "store")
    models = [vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")]
    src = vitlab.open_source("fashion-mnist:test")
    opts, boot, seed = page_options()
    return store, models, src, tour.run_tour(models, src, opts, Run(store=store, bootstrap=boot, seed=seed))


def test_one_default_for_the_page_the_slides_the_tour_and_the_report():
    page = page_options()
    assert cli_options("tour") == page and cli_options("report") == page
    assert page[0] == tour.TourOptions() and page[0].images // page[0].batch_size >= 8


# the statistic's range on the zoo's models (an independent list: CKA means, differences of them, chance-corrected
# rates on the ViT's 16 positions, radius fractions at most half the diagonal, ratios of norms, accuracy margins)
RANGES = {"Figs 1-2": (-1, 1), "Figs 3-4": (-np.inf, 1), "Fig 5": (-1, 1), "Fig 6": (-0.71, 0.71),
          "Fig 7": (0, np.inf), "Fig 8": (0, 1), "Fig 9": (-1 / 15, 1), "Fig 10": (-1 / 15, 1), "Fig 11": (-1, 1),
          "Fig 12": (-2, 2)}
EFFECT_RANGES = {"Figs 1-2": (-1, 1), "Figs 3-4": (-np.inf, 1), "Fig 5": (-1, 1), "Fig 6": (-0.71, 0.71),
                 "Fig 7": (-np.inf, np.inf), "Fig 9": (-1 - 1 / 15, 1 + 1 / 3), "Fig 11": (-1, 1)}


def test_default_tour_intervals_lie_in_range_with_width_and_words_without_nan(zoo_default):
    *_, rep = zoo_default
    assert [r.figure for r in rep.rows] == [c.figure for c in tour.CLAIMS.values()]
    for r in rep.rows:
        assert r.pattern != "can't tell" or r.statistic == r.statistic, (r.figure, r.evidence)  # all measured
        # the counts its statistic used (issue 37): Fig 6 its first 32 images in batches of 8, Fig 11 a probe pool
        counts = {"Fig 6": (32, 4, 8), "Fig 11": (500, 16, 32)}.get(r.figure, (256, 8, 32))
        assert r.interval_units >= 4 and (r.images, r.batches, r.batch_size) == counts, r
        low, high = RANGES[r.figure]
        assert low <= r.lo < r.hi <= high and r.lo <= r.statistic <= r.hi, (r.figure, r.lo, r.statistic, r.hi)
        if r.learned != "n.a." and r.effect == r.effect:
            low, high = EFFECT_RANGES[r.figure]
            for v, lo, hi in ((r.effect, r.effect_lo, r.effect_hi), (r.twin, r.twin_lo, r.twin_hi)):
                if lo == lo:
                    assert low <= lo < hi <= high and lo <= v <= hi, (r.figure, lo, v, hi)
    # every estimate drawn in the interval charts: zero width only for exact references
    frame = rep.intervals_frame()
    drawn = frame[(frame["unit"] != "") & frame["lo"].notna()]
    assert (drawn["hi"] > drawn["lo"]).all(), drawn[drawn["hi"] <= drawn["lo"]]
    assert_words(rep.rows, rep.headline())


def test_every_row_names_its_models(zoo_default):
    *_, rep = zoo_default
    by = {r.figure: r.models.split("; ") for r in rep.rows}
    assert by["Figs 1-2"] == ["zoo:vit-cls", "zoo:resnet", "zoo:vit-cls@random:0", "zoo:resnet@random:0"]
    assert by["Fig 8"] == ["zoo:vit-cls", "zoo:vit-cls-noskip"] and by["Fig 10"] == ["zoo:vit-cls", "zoo:vit-gap"]
    assert rep.to_frame()["models"].str.len().gt(0).all()


def test_fig_12_is_measured_against_another_seed(zoo_default):
    *_, rep = zoo_default
    row = next(r for r in rep.rows if r.figure == "Fig 12")
    assert "zoo:vit-cls-seed1" in row.models.split("; ") and "zoo:vit-cls-seed1" in row.control_note
    assert "other seed" in row.evidence and row.control == 0.0 and row.control_label == "no more than another seed"
    # the statistic is the smallest less-data drop minus the other seed's: recomputed from the curves drawn
    curves = rep.figures["Fig 12"]["scale"]

    def drop(pair: str) -> float:
        return float(tour.depth_drop(curves[curves["pair"] == pair].sort_values("index")["cka"].to_numpy()))

    seed = drop("zoo:vit-cls-seed1 vs zoo:vit-cls")
    less = [drop(p) - seed for p in ("zoo:vit-cls-3pct vs zoo:vit-cls", "zoo:vit-cls-10pct vs zoo:vit-cls")]
    assert row.statistic == pytest.approx(min(less), abs=1e-12)


def test_the_report_and_the_page_give_identical_tour_rows(zoo_default, tmp_path):
    from vitlab.tour.report import ReportOptions, report

    store, models, src, page = zoo_default
    opts, boot, seed = cli_options("report")
    result = report(models, src, ReportOptions(opts), Run(store=store, bootstrap=boot, seed=seed))
    a, b = result.tour.to_frame(), page.to_frame()
    assert a.equals(b), a.compare(b)


def test_the_paper_tour_page_shows_the_reports_rows_at_its_defaults(zoo_default, tmp_path, monkeypatch):
    """The page itself (AppTest), left at its own defaults: its table is the report's, row for row, and its words
    carry no nan. The sidebar's images (64 here) no longer decide the tour's."""
    import sys
    from pathlib import Path

    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    app = Path(__file__).resolve().parent.parent / "app"
    sys.path.insert(0, str(app))
    monkeypatch.setenv("VITLAB_CACHE_DIR", str(tmp_path / "app-cache"))
    import lab

    lab.store.clear()
    try:
        at = AppTest.from_file(str(app / "Home.py"), default_timeout=600)
        for k, v in {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
                     "lab.images": 64, "lab.batch_size": 16}.items():
            at.session_state[k] = v
        at.run()
        at.switch_page("views/tour.py").run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert at.number_input(key="tour.images").value == tour.TOUR_IMAGES
        assert at.number_input(key="tour.batch_size").value == tour.TOUR_BATCH
        shown = at.dataframe[0].value
        *_, page = zoo_default
        expected = page.table()  # every number in words with its interval, no None cell (issue 37)
        assert not shown.isna().any().any() and not shown.astype(str).isin(["None", "nan", ""]).any().any()
        assert shown.reset_index(drop=True).equals(expected), shown.compare(expected)
        texts = [x.value for x in list(at.success) + list(at.warning) + list(at.info) + list(at.markdown)
                 + list(at.caption)]
        assert texts and not any(NAN.search(t) for t in texts), [t for t in texts if NAN.search(t)]
    finally:
        lab.store.clear()
