"""The words of the analysis pages (issues 33 and 37): every page that speaks of a claim of the paper leads with the
tour's own check for that figure, computed on the page's models, images and batches (app/claim.py), and the lead must
equal the tour's row run independently on the same settings: pattern and learned answers, statistic, interval, control.
No page shows a zero-width interval, states a direction beside "no interval", prints "nan" / "n/a [", or states the
paper's finding as fact. Plus the findings' numbers against independent float64 computations.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

from vitlab.analyses import findings  # noqa: E402
from vitlab.stats.evidence import Estimate, MIN_UNITS, format_estimate  # noqa: E402

ZOO = ("vit-cls", "vit-cls-14", "resnet", "vit-gap", "vit-gap-14", "vit-cls-3pct", "vit-cls-10pct", "vit-cls-seed1",
       "vit-cls-noskip")
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ZOO)
# the app's defaults (lab.DEFAULTS), set in session state (where lab.DEFAULTS lands: lab is imported once per test
# process, so VITLAB_MODEL_A would not be read again)
DEFAULT = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
           "lab.images": 64, "lab.batch_size": 16}
SETTINGS = {"64/16": DEFAULT, "32/16": {**DEFAULT, "lab.images": 32},
            "vit-cls-14": {**DEFAULT, "lab.model_a": "zoo:vit-cls-14"}}
# every page with a claim of the paper, and the tour's checks its lead shows (in order)
PAGE_CLAIMS = {"similarity": ("cka",), "attention": ("distance",), "heads": ("heads",), "receptive": ("receptive",),
               "skips": ("skips",), "localization": ("localization", "gap"), "probes": ("probes",),
               "checkpoints": ("scale",)}
OTHER_PAGES = ("token_norms", "ablation", "attribution", "models", "analysis")
# the captions of issue 33 that stated the paper as fact while the chart showed otherwise
AS_FACT = ("are most similar to the ResNet", "much stronger than ResNet ones", "mix local heads with global",
           "miss the local heads", "lower ViT layers mix local")
BAD_TEXT = re.compile(r"\bnan\b|n/a \[", re.IGNORECASE)
# an interval of zero width, "6.6708 [6.6708, 6.6708]" or "50%-50%"
NUMBER = r"-?\d+(?:\.\d+)?%?"
ZERO_WIDTH = re.compile(rf"\[({NUMBER}), \1\]|\b({NUMBER})-\2(?![\d.])")
NO_INTERVAL = re.compile(r"no interval|too few \w+ for an interval")
# a direction stated in words (an answer of the pattern or learned kind is "can't tell" when there is no interval)
DIRECTION = re.compile(r"\b(higher|lower|above|below|larger|smaller|exceeds|more uniform|less uniform|opposite|"
                       r"overlapping|no clear difference)\b|\*\*(Pattern|Learned): (shown|not shown|yes|no)\.")
TIMEOUT = 900

pytestmark = pytest.mark.usefixtures("app_cache")


def texts(node) -> list[tuple[str, str]]:
    """(element type, text) of every text element under ``node``, in page order."""
    out = []
    children = getattr(node, "children", None)
    if isinstance(children, dict):
        for k in sorted(children):
            out += texts(children[k])
        return out
    kind = getattr(node, "type", "")
    value = getattr(node, "value", None)
    if kind in ("markdown", "caption", "info", "warning", "error", "alert", "text", "metric", "title", "subheader",
                "header", "success") or isinstance(value, str):
        body = value if isinstance(value, str) else str(value)
        if kind == "metric":
            body = f"{node.label} {node.value}"
        out.append((kind, body))
    return out


def walk(page: str, settings: dict):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=TIMEOUT)
    for k, v in settings.items():
        at.session_state[k] = v
    at.run()
    at.switch_page(f"views/{page}.py").run()
    return at


def check_words(page: str, at, controls: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with a rendered page's words (empty: nothing): an error, "nan", the paper's claim without the
    answer on these models next to it, the paper stated as fact, a zero-width interval, a direction beside no
    interval. ``controls``: the checks' control lines, which name their comparison without answering it."""
    problems = [f"exception: {e.message}" for e in at.exception]
    problems += [f"error: {e.value}" for e in at.error]
    found = texts(at.main)
    for i, (kind, body) in enumerate(found):
        if BAD_TEXT.search(body):
            problems.append(f"{kind} shows nan or 'n/a [': {body[:200]}")
        if m := ZERO_WIDTH.search(body):
            problems.append(f"{kind} shows a zero-width interval '{m.group(0)}': {body[:200]}")
        as_read = re.sub(r"\\([^\w\s])", r"\1", body).replace("\u2060", "")  # the names' escapes removed
        if NO_INTERVAL.search(body) and as_read not in controls and (m := DIRECTION.search(body)):
            problems.append(f"{kind} states a direction ('{m.group(0)}') beside no interval: {body[:200]}")
        if "The paper reports" in body:
            nxt = found[i + 1][1] if i + 1 < len(found) else ""
            if "On these models:" not in nxt:
                problems.append(f"the paper's claim without an 'On these models:' answer next to it: {body[:120]}")
        elif any(p in body for p in AS_FACT):
            problems.append(f"the paper's claim stated as fact: {body[:160]}")
    return problems


# ------------------------------------------------------------------------------- the lead is the tour's row


_TOURS: dict = {}


def tour_row(settings: dict, key: str):
    """The tour's row for claim ``key``, run here on the page's settings (models A and B, the page's images in its
    batches, the tour's resamples and seed), independently of the page: run_tour, not the page's code."""
    import vitlab
    from vitlab import tour
    from vitlab.analyses import token_localization as tl

    images, source = settings["lab.images"], settings["lab.source"]
    if key in ("localization", "gap"):  # the page measures these on the reference set below 64 images
        source, images, _ = tl.images_for_dataset(images, source, tl.ReferenceOptions())
    name = (tuple(sorted(settings.items())), key)
    if name not in _TOURS:
        models = [] if key == "scale" else [vitlab.load(settings[k], "cpu") for k in ("lab.model_a", "lab.model_b")]
        opts = tour.TourOptions(images=images, batch_size=settings["lab.batch_size"], only=(key,))
        run = vitlab.Run(store=vitlab.Store(), bootstrap=tour.TOUR_BOOTSTRAP, seed=tour.TOUR_SEED)
        _TOURS[name] = tour.run_tour(models, vitlab.open_source(source), opts, run).rows[0]
    return _TOURS[name]


def lead_problems(page: str, at, rows: list) -> list[str]:
    """Where the page's lead differs from the tour's rows: the paper's words, the statistic, the pattern and learned
    answers with their numbers and intervals (the same digits), the control on its own line, the interval's basis."""
    found = [re.sub(r"\\([^\w\s])", r"\1", b).replace("\u2060", "") for _, b in texts(at.main)]  # as read
    problems = []
    for row in rows:
        w = row.lines()
        stat = format_estimate(row.statistic, row.lo, row.hi, row.interval_unit, row.interval_units)
        want = {"paper": f"**The paper reports** ({row.figure}) {w['paper']}",
                "statistic": f"**On these models:** {w['statistic']}.",
                "pattern": f"**Pattern: {row.pattern}.** {w['pattern_numbers']}",
                "learned": f"**Learned: {row.learned.rstrip('.')}.** {w['learned_numbers']}",
                "control": w["control_note"]}
        for part, text in want.items():
            if text not in found:
                problems.append(f"{row.figure} {part}: the tour says {text[:160]!r}, not on the page")
        if not any(f"95 % interval: {row.interval}." in b and f"Data: {w['data']}" in b for b in found):
            problems.append(f"{row.figure}: no caption with the tour's interval ({row.interval}) and data")
        if not any(b.startswith(f"**Pattern: {row.pattern}.**") and stat in b for b in found):
            problems.append(f"{row.figure}: the statistic {stat} is not in the page's pattern line")
        if stat.count("[") and row.lo == row.hi:
            problems.append(f"{row.figure}: a zero-width interval {stat}")
    return problems


@pytest.mark.skipif(not ZOO_READY, reason="the app's default models and the tour's controls are the zoo's")
@pytest.mark.parametrize("settings", list(SETTINGS), ids=list(SETTINGS))
@pytest.mark.parametrize("page", list(PAGE_CLAIMS))
def test_every_claim_page_leads_with_the_tours_row_on_its_own_settings(page, settings):
    at = walk(page, SETTINGS[settings])
    rows = [tour_row(SETTINGS[settings], key) for key in PAGE_CLAIMS[page]]
    controls = tuple(r.control_note for r in rows)
    assert not check_words(page, at, controls), check_words(page, at, controls)
    assert not lead_problems(page, at, rows), lead_problems(page, at, rows)
    if page == "checkpoints":  # the other-seed control is drawn beside the data-scale curves (issue 37)
        assert any("zoo:vit-cls-seed1" in str(c.proto) for c in at.get("vega_lite_chart"))
    if settings == "32/16" and page != "localization":  # 2 batches: below 4 units no check answers
        assert all(r.pattern == "can't tell" and r.learned in ("can't tell", "n.a.") for r in rows
                   if r.interval_unit == "batches"), [(r.figure, r.pattern, r.learned) for r in rows]


@pytest.mark.skipif(not ZOO_READY, reason="the app's default models are the zoo's")
@pytest.mark.parametrize("page", OTHER_PAGES)
def test_pages_without_a_claim_of_the_tour_show_no_bad_words(page):
    at = walk(page, DEFAULT)
    assert not check_words(page, at), check_words(page, at)


@pytest.mark.skipif(not ZOO_READY, reason="the app's default models are the zoo's")
def test_the_removal_section_answers_with_accuracy_intervals_and_the_retrained_model_with_fig_8():
    at = walk("skips", {**DEFAULT, "skips.block": 1, "skips.which": "attn"})
    at.button(key="skips.go").click().run()
    assert not check_words("skips", at), check_words("skips", at)
    words = " ".join(b for _, b in texts(at.main))
    assert "top-1 accuracy" in words and "95 % jackknife t over 64 images" in words
    assert "not the paper's Fig 8" in words
    at.button(key="skips.cmp").click().run()
    row = tour_row(DEFAULT, "removal")
    assert not lead_problems("skips", at, [row]), lead_problems("skips", at, [row])


def test_the_check_catches_a_claim_without_an_answer_nan_zero_width_and_a_direction_without_interval():
    class Node:
        def __init__(self, kind, value):
            self.type, self.value = kind, value

    class Page:
        def __init__(self, *nodes):
            self.main = type("B", (), {"children": dict(enumerate(nodes))})()
            self.exception, self.error = [], []

    bad = Page(Node("markdown", "**The paper reports** ViTs are uniform."), Node("caption", "CKA nan"))
    problems = check_words("similarity", bad)
    assert any("without an 'On these models:'" in p for p in problems)
    assert any("nan" in p for p in problems)
    good = Page(Node("markdown", "**The paper reports** X."), Node("markdown", "**On these models:** 0.62 [0.58, 0.66]"))
    assert check_words("similarity", good) == []
    assert check_words("heads", Page(Node("caption", "local heads are most similar to the ResNet's lower layers")))
    for flat in ("radius 6.6708 [6.6708, 6.6708]", "0.33 [0.33, 0.33] of the side", "95 % interval 50%-50% over 4"):
        assert any("zero-width" in p for p in check_words("receptive", Page(Node("markdown", flat)))), flat
    assert not check_words("receptive", Page(Node("markdown", "0.33 [0.31, 0.35], 2-3 px, 50%-60%")))
    for said in ("ViT is more uniform than the ResNet, 0.12 (no interval)",
                 "the opposite of the paper's order (too few batches for an interval: 2 < 4)",
                 "**Pattern: not shown.** 0.1 (too few batches for an interval: 2 < 4) against 0.2"):
        assert any("direction" in p for p in check_words("similarity", Page(Node("markdown", said)))), said
    assert not check_words("similarity", Page(Node(
        "info", "**Pattern: can't tell.** 0.1 (too few batches for an interval: 2 < 4) against 0.2")))


# ------------------------------------------------------------------------------- the helpers and the summaries


def test_interval_caption_is_one_convention():
    assert findings.interval_caption("batches", 4, batch_size=16) == \
        "bars: 95 % jackknife t over 4 batches of 16 images"
    assert findings.interval_caption("images", 64) == "bars: 95 % jackknife t over 64 images"
    assert findings.interval_basis("batches", 2, batch_size=32) == \
        f"no interval: too few batches for one (2 < {MIN_UNITS})"


def test_say_never_prints_nan():
    assert findings.say(Estimate(0.62, 0.58, 0.66)) == "0.62 [0.58, 0.66]"
    assert findings.say(Estimate(0.62, np.nan, np.nan, "batches", 2)) == "0.62 (no interval)"
    assert "nan" not in findings.say(Estimate(np.nan, np.nan, np.nan)).lower()
    assert findings.say(Estimate.exact(3.0), ".1f", " px") == "3.0 px"


def _t(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))


def test_rate_over_images_is_the_t_interval_of_a_mean_of_zeros_and_ones():
    x = np.array([1.0] * 50 + [0.0] * 14)
    e = findings.rate_over_images(x.mean(), len(x))
    half = _t(len(x)) * x.std(ddof=1) / np.sqrt(len(x))
    assert e.value == pytest.approx(x.mean())
    assert (e.lo, e.hi) == pytest.approx((x.mean() - half, x.mean() + half), rel=1e-12)
    assert findings.rate_over_images(1.0, 64).hi == 1.0


def _jackknife(values_loo: np.ndarray, value: float) -> tuple[float, float]:
    """Independent jackknife-t: se² = (T−1)/T Σ(θ₋ₜ − θ̄)², value ± t_{T−1} se."""
    v = np.asarray(values_loo, dtype=np.float64)
    t = len(v)
    se = np.sqrt((t - 1) / t * np.sum((v - v.mean()) ** 2))
    return value - _t(t) * se, value + _t(t) * se


def _cka_terms(rng, batches: int, layers: int, n: int = 10):
    """Per-batch unbiased HSIC terms of random features (float64), via vitlab.stats.cka."""
    from vitlab.stats import cka as cka_mod

    xy, xx = [], []
    base = rng.normal(size=(n * batches, 6))
    for b in range(batches):
        feats = [base[b * n:(b + 1) * n] @ rng.normal(size=(6, 5)) + 0.3 * rng.normal(size=(n, 5))
                 for _ in range(layers)]
        grams = np.stack([f @ f.T for f in feats])
        c = cka_mod.centred(grams)
        xy.append(cka_mod.hsic_all_pairs(c, c))
        xx.append(cka_mod.hsic_self(c))
    return np.stack(xy), np.stack(xx)


def test_uniformity_is_the_off_diagonal_mean_with_its_jackknife():
    from vitlab.analyses import similarity
    from vitlab.stats import cka as cka_mod
    from vitlab.stats.evidence import cka_replicates, jackknife_indices

    rng = np.random.default_rng(0)
    xy, xx = _cka_terms(rng, 5, 4)
    full = xy.sum(0) / np.sqrt(np.outer(xx.sum(0), xx.sum(0)))
    loo = cka_replicates(xy, xx, xx, jackknife_indices(5))
    res = cka_mod.CKAResult("m", "m", list("abcd"), list("abcd"), full, loo=loo)
    e = similarity.uniformity(res)
    off = [(i, j) for i in range(4) for j in range(4) if i != j]
    value = np.mean([full[i, j] for i, j in off])
    # leave-one-out by hand: drop batch t from the sums, then average the off-diagonal cells
    by_hand = []
    for t in range(5):
        keep = [s for s in range(5) if s != t]
        m = xy[keep].sum(0) / np.sqrt(np.outer(xx[keep].sum(0), xx[keep].sum(0)))
        by_hand.append(np.mean([m[i, j] for i, j in off]))
    assert e.value == pytest.approx(value, rel=1e-12)
    assert (e.lo, e.hi) == pytest.approx(_jackknife(np.array(by_hand), value), rel=1e-10)
    cell = similarity.cell_estimate(res, 0, 1)
    assert cell.value == pytest.approx(full[0, 1])


def test_head_subset_estimate_is_the_mean_over_layers_with_its_jackknife():
    from vitlab.analyses.heads import HeadSubsetResult

    rng = np.random.default_rng(1)
    loo = rng.uniform(0.3, 0.8, size=(4, 4, 3))  # (T, S, Lb): 3 windows + all heads
    cka = loo.mean(0)
    res = HeadSubsetResult("vit", "cnn", ["b0.h0", "b0.h1", "b0.h2", "b0.h3"], np.array([5.0, 8, 11, 14]),
                           [[0, 1], [1, 2], [2, 3], [0, 1, 2, 3]], ["l1", "l2", "l3"], cka, 2, 64, 28.0,
                           loo=loo, uniform_px=13.0)
    near = res.subset_estimate(0)
    assert near.value == pytest.approx(cka[0].mean())
    assert (near.lo, near.hi) == pytest.approx(_jackknife(loo[:, 0].mean(-1), cka[0].mean()), rel=1e-10)


def test_skip_group_estimate_is_the_mean_over_sublayers_with_its_jackknife():
    from vitlab.analyses.skips import SkipResult

    rng = np.random.default_rng(2)
    loo = rng.uniform(2, 6, size=(4, 4, 5))  # (T, S, N): CLS + 4 spatial tokens
    ratio = loo.mean(0)
    res = SkipResult("vit", "vit", ["blocks.0.attn", "blocks.0.mlp", "blocks.1.attn", "blocks.1.mlp"], ratio,
                     ratio, 1, 64, np.zeros(4), ratio_loo=loo, interval_units=4)
    groups = res.sublayer_groups()
    assert groups == {"attention sublayers": [0, 2], "MLP sublayers": [1, 3]}
    e = res.group_estimate(groups["attention sublayers"])
    value = ratio[[0, 2], 1:].mean()
    assert e.value == pytest.approx(value)
    assert (e.lo, e.hi) == pytest.approx(_jackknife(loo[:, [0, 2], 1:].mean((1, 2)), value), rel=1e-10)


def test_checkpoint_halves_and_many_model_loo_match_hand_computations():
    from vitlab.analyses.checkpoints import CheckpointComparison
    from vitlab.stats import cka as cka_mod

    rng = np.random.default_rng(3)
    loo = rng.uniform(0.5, 1.0, size=(4, 6, 6))
    full = loo.mean(0)
    res = cka_mod.CKAResult("a", "b", list("abcdef"), list("abcdef"), full, loo=loo)
    comp = CheckpointComparison([("a", "b")], [list("abcdef")], [np.diag(full).copy()], [res], 64, None, [])
    lower, upper = comp.curve_estimates(0)
    d = np.diagonal(loo, axis1=1, axis2=2)
    assert lower.value == pytest.approx(np.diag(full)[:3].mean())
    assert (upper.lo, upper.hi) == pytest.approx(_jackknife(d[:, 3:].mean(1), np.diag(full)[3:].mean()), rel=1e-10)


def test_many_models_leave_one_out_cka_equals_dropping_a_batch():
    from vitlab.analyses.manymodels import _leave_one_out
    from vitlab.analyses.similarity import PairAccumulator

    rng = np.random.default_rng(4)
    xy, xx = _cka_terms(rng, 4, 3)
    acc = PairAccumulator(["cka"], 3, 3)
    acc.terms = [(t, {"cka": (xy[t], xx[t], xx[t], 10)}) for t in range(4)]
    loo = _leave_one_out(acc, "cka")
    for t in range(4):
        keep = [s for s in range(4) if s != t]
        m = xy[keep].sum(0) / np.sqrt(np.outer(xx[keep].sum(0), xx[keep].sum(0)))
        assert loo[t] == pytest.approx(m, rel=1e-12)


def test_pc_removal_is_limited_to_what_a_batch_supports():
    from vitlab.analyses.sensitivity import _pc_rows, max_pcs

    assert max_pcs(16) == 7
    rng = np.random.default_rng(5)
    ga = [(lambda f: f @ f.T)(rng.normal(size=(16, 20))) for _ in range(2)]
    rows = _pc_rows(ga, ga, 1.0, (1, 10))
    ten = [r for r in rows if r["k"] == 10]
    assert all(np.isnan(r["value"]) and "not run" in r["detail"] for r in ten)
    assert all(np.isfinite(r["value"]) for r in rows if r["k"] == 1)


def test_a_pages_check_names_the_images_it_reads_when_they_are_not_the_pages(monkeypatch):
    """Fig 11's check reads its probe pool (500 images at the tour's defaults) and Fig 6's its first images (a
    backward pass each), whatever the page's count (64 here): the check's label, shown in its progress while it
    runs, says how many and why; a check that reads the page's images says nothing more."""
    import claim
    import lab

    import vitlab

    labels = {}
    monkeypatch.setattr(lab, "compute", lambda key, fn, label, **kw: labels.setdefault(key[1], label) and None)
    s = lab.Settings("zoo:vit-cls", "zoo:resnet", "fashion-mnist:test", 64, 16, "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    for key in ("probes", "receptive", "skips"):
        assert claim.check(key, [], src, s) is None
    opts = vitlab.tour.TourOptions()
    pool = max(64, opts.probe_test + 30 * opts.probe_shots)  # the tour's probe pool: test images and 30 shots a class
    assert labels["probes"] == (f"Fig 11 check on {pool} images (the probe pool: {opts.probe_draws} few-shot draws of "
                                f"{opts.probe_shots} shots per class and {opts.probe_test} test images)")
    assert labels["receptive"] == f"Fig 6 check on {opts.rf_images} images (the first images: a backward pass each)"
    assert labels["skips"] == "Fig 7 check"
