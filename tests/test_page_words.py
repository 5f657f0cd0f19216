"""The words of the analysis pages (issue 33): every page that reports the paper's claim puts the answer on these
models next to it (lab.finding), computed from the page's own run with its interval; no page states the paper's
finding as fact, shows an error, or prints "nan" / "n/a [". Plus the findings' numbers against independent float64
computations.
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
from vitlab.stats.evidence import Estimate, MIN_UNITS  # noqa: E402

ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file()
                for n in ("vit-cls", "vit-cls-14", "resnet"))
# the app's defaults (lab.DEFAULTS); the second run: VITLAB_MODEL_A=zoo:vit-cls-14 (set in session state, which is
# where lab.DEFAULTS lands: lab is imported once per test process, so the variable would not be read again)
DEFAULT = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
           "lab.images": 64, "lab.batch_size": 16}
VIT14 = {**DEFAULT, "lab.model_a": "zoo:vit-cls-14"}
# pages with a claim of the paper (or the literature) answered by lab.finding; the others say what they measure
CLAIM_PAGES = ("similarity", "attention", "heads", "receptive", "skips", "probes", "checkpoints", "token_norms")
OTHER_PAGES = ("ablation", "attribution", "models", "analysis")
# the captions of issue 33 that stated the paper as fact while the chart showed otherwise
AS_FACT = ("are most similar to the ResNet", "much stronger than ResNet ones", "mix local heads with global",
           "miss the local heads", "lower ViT layers mix local")
BAD_TEXT = re.compile(r"\bnan\b|n/a \[", re.IGNORECASE)
TIMEOUT = 600

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
                "header") or isinstance(value, str):
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


def check_words(page: str, at) -> list[str]:
    """What is wrong with a rendered page's words (empty: nothing)."""
    problems = [f"exception: {e.message}" for e in at.exception]
    problems += [f"error: {e.value}" for e in at.error]
    found = texts(at.main)
    for i, (kind, body) in enumerate(found):
        if BAD_TEXT.search(body):
            problems.append(f"{kind} shows nan or 'n/a [': {body[:200]}")
        if "The paper reports" in body:
            nxt = found[i + 1][1] if i + 1 < len(found) else ""
            if "On these models:" not in nxt:
                problems.append(f"the paper's claim without an 'On these models:' answer next to it: {body[:120]}")
        elif any(p in body for p in AS_FACT):
            problems.append(f"the paper's claim stated as fact: {body[:160]}")
    leads = [b for _, b in found if "The paper reports" in b]
    if page in CLAIM_PAGES and not leads:
        problems.append("no lead: the page does not say what the paper reports and what these models show")
    return problems


@pytest.mark.skipif(not ZOO_READY, reason="the app's default models are the zoo's")
@pytest.mark.parametrize("settings", [DEFAULT, VIT14], ids=["default", "vit-cls-14"])
@pytest.mark.parametrize("page", CLAIM_PAGES + OTHER_PAGES)
def test_every_analysis_page_answers_the_paper_on_these_models(page, settings):
    at = walk(page, settings)
    assert not check_words(page, at), check_words(page, at)


@pytest.mark.skipif(not ZOO_READY, reason="the app's default models are the zoo's")
def test_the_removal_section_answers_fig_8_with_accuracy_intervals():
    at = walk("skips", {**DEFAULT, "skips.block": 1, "skips.which": "attn"})
    at.button(key="skips.go").click().run()
    assert not check_words("skips", at), check_words("skips", at)
    words = " ".join(b for _, b in texts(at.main))
    assert "top-1 accuracy" in words and "95 % jackknife t over 64 images" in words


def test_the_check_catches_a_claim_without_an_answer_and_nan():
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


def test_attention_finding_says_why_without_local_heads_and_counts_them_with():
    from vitlab.analyses.attention import AttentionDistanceResult

    n = 64
    dist = np.array([[13.0, 12.8, 13.5], [13.2, 14.0, 13.1], [14, 14, 14], [14, 14, 14]])
    std = np.full_like(dist, 1.0)
    none = AttentionDistanceResult("vit", [0, 1, 2, 3], dist, std, 28.0, n, False, 13.2).finding()
    assert none.ours is None and "no local heads" in none.why
    assert "within 0.8 px of uniform attention's 13.2 px" in none.why
    local = dist.copy()
    local[0, 1] = 5.0
    f = AttentionDistanceResult("vit", [0, 1, 2, 3], local, std, 28.0, n, False, 13.2).finding()
    half = _t(n) * 1.0 / np.sqrt(n - 1)
    assert f.why is None and "1 of 6 heads" in f.ours
    assert f"5.0 px [{5 - half:.1f}, {5 + half:.1f}]" in f.ours


def test_head_subset_finding_compares_local_with_global_by_the_jackknife():
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
    diff_lo, diff_hi = _jackknife(loo[:, 0].mean(-1) - loo[:, 2].mean(-1), cka[0].mean() - cka[2].mean())
    assert f"{diff_lo:.2f}, {diff_hi:.2f}]" in res.finding(16).ours


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
