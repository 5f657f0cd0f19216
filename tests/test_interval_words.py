"""Issue 50, the words around an interval: one that spans the statistic's whole range says so ("uninformative at this
size: raise --images") in ``format_estimate`` and ``Check.lines``; a fixed control reads with its meaning, never a
bare ", 0"; a trained difference is shown when only the untrained twins' is missing; negative numbers have "−"."""

import numpy as np

from vitlab import tour
from vitlab.stats import evidence as ev
from vitlab.stats import leads
from vitlab.stats.evidence import Estimate, format_estimate
from vitlab.tour.checks.base import make_check

NAN = float("nan")
WHOLE = "(uninformative at this size: raise --images)"


def jk(v: float, lo: float, hi: float, bounds=None) -> Estimate:
    return Estimate(v, lo, hi, "batches", 8, ev.JACKKNIFE, "", bounds)


def test_format_estimate_says_when_the_interval_is_the_whole_range():
    assert format_estimate(0.5, 0.0, 1.0, "batches", 4, bounds=(0.0, 1.0)) == f"0.500 [0.000, 1.000] {WHOLE}"
    assert format_estimate(0.5, 0.0, 0.9, "batches", 4, bounds=(0.0, 1.0)) == "0.500 [0.000, 0.900]"
    assert format_estimate(0.5, 0.0, 1.0, "batches", 4) == "0.500 [0.000, 1.000]"  # no range known: nothing said
    # a half-open range (a ratio of norms, (0, ∞)) is never spanned; a missing interval never says it
    assert format_estimate(3.0, 0.1, 1e9, "batches", 8, bounds=(0.0, np.inf)) == "3.000 [0.100, 1000000000.000]"
    assert format_estimate(0.5, NAN, NAN, "batches", 8, bounds=(0.0, 1.0)) == "0.500 (no interval)"
    assert format_estimate(0.5, NAN, NAN, "batches", 2, bounds=(0.0, 1.0)) == \
        "0.500 (too few batches for an interval: 2 < 4)"


def test_a_jackknife_whose_leave_one_out_values_reach_both_bounds_is_uninformative():
    # leave-one-out CKA on both bounds: the logit is infinite, the raw interval is clipped to [0, 1]
    e = Estimate.jackknife(0.5, np.array([0.0, 1.0, 0.0, 1.0, 0.5]), "batches", bounds=(0.0, 1.0))
    assert (e.lo, e.hi, e.bounds, e.uninformative) == (0.0, 1.0, (0.0, 1.0), True)
    assert e.text() == f"0.500 [0.000, 1.000] {WHOLE}"
    narrow = Estimate.jackknife(0.5, np.array([0.49, 0.51, 0.5, 0.5, 0.52]), "batches", bounds=(0.0, 1.0))
    assert not narrow.uninformative and "uninformative" not in narrow.text()


def test_negative_numbers_have_the_minus_sign_of_words():
    assert format_estimate(-0.084, -0.217, 0.056) == "−0.084 [−0.217, 0.056]"
    assert Estimate.exact(-1.5).text(".2f") == "−1.50"
    assert ev.number(-0.0004) == "−0.000" and ev.number(2.5, ".1f") == "2.5"


def test_check_lines_say_uninformative_and_write_a_fixed_control_with_its_meaning():
    gap = jk(0.1, -1.0, 1.0, (-1.0, 1.0))
    c = tour.check_uniformity(gap, None, "d")
    assert c.lines()["pattern_numbers"] == \
        f"0.100 [−1.000, 1.000] {WHOLE} against no gap, the ResNet as uniform as the ViT (fixed at 0)"
    # the label states the reference already: no value appended
    loc = tour.check_locality(jk(0.3, 0.2, 0.4), None, 0.25, "d")
    assert loc.lines()["pattern_numbers"] == "0.300 [0.200, 0.400] against uniform attention at 0, local from 0.25"
    heads = tour.check_head_rank(jk(0.3, 0.2, 0.4), 0.01, 0.412, "d")
    assert heads.lines()["pattern_numbers"] == \
        "0.300 [0.200, 0.400] against the head-label permutation null's 97.5 % point (fixed at 0.412)"


def test_a_measured_control_spanning_its_range_says_so_too():
    # Fig 9's counts: the chance-corrected rate's range is [−1/15, 1] with 16 positions
    point = np.eye(16) * 0.5 + 0.1
    vit = leads.localization_evidence(point, point + np.zeros((8, 16, 16)), prefix=0).corrected
    assert vit.bounds == (-1 / 15, 1.0)
    cnn = Estimate(0.3, -1 / 15, 1.0, "batches", 8, leads.LEADS, "", (-1 / 15, 1.0))
    c = make_check("localization", vit, cnn, "CNN chance-corrected rate", "d", floor=0.0)
    assert c.lines()["pattern_numbers"] == f"1.000 against CNN chance-corrected rate, 0.300 [−0.067, 1.000] {WHOLE}"


def test_the_trained_difference_is_shown_when_only_the_twins_value_is_missing():
    vit, cnn = jk(3.35, 3.2, 3.5, (0.0, np.inf)), jk(4.57, 4.4, 4.7, (0.0, np.inf))
    effect = jk(-1.226, -1.244, -1.208)
    twin = Estimate(NAN, NAN, NAN, "batches", 8, ev.JACKKNIFE)
    c = tour.check_skips(vit, cnn, "d", effect, twin)
    assert c.learned == "can't tell"
    assert c.lines()["learned_numbers"] == ("trained −1.226 [−1.244, −1.208]; only the untrained twins' ViT − CNN "
                                            "median ratio could not be formed, see the evidence")
    none = tour.check_skips(vit, cnn, "d", Estimate(NAN, NAN, NAN, "batches", 8, ev.JACKKNIFE), jk(0.2, 0.1, 0.3))
    assert none.lines()["learned_numbers"] == "the trained value could not be formed, see the evidence"
    both = tour.check_skips(vit, cnn, "d", Estimate(NAN, NAN, NAN, "batches", 8, ev.JACKKNIFE), twin)
    assert both.lines()["learned_numbers"] == ("neither the trained value nor the untrained twins' ViT − CNN median "
                                               "ratio could be formed, see the evidence")
    full = tour.check_skips(vit, cnn, "d", effect, jk(-0.5, -0.7, -0.3))
    assert full.lines()["learned_numbers"] == ("trained −1.226 [−1.244, −1.208] against the untrained twins' ViT − CNN "
                                               "median ratio −0.500 [−0.700, −0.300]")
    assert "-" not in "".join(full.lines()[k] for k in ("pattern_numbers", "learned_numbers"))


def test_a_control_that_could_not_be_measured_is_said_in_words_never_nan():
    from vitlab.stats.evidence import Estimate
    from vitlab.tour import check_skips

    nan = float("nan")
    row = check_skips(Estimate(3.2, 3.0, 3.4, "batches", 8, "jackknife t"), Estimate(nan, nan, nan), "detail")
    text = row.lines()["pattern_text"]
    assert text.endswith("against CNN median ratio, which could not be measured (see the evidence)"), text
    assert "nan" not in text
