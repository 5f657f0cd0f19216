"""Coverage of the 95 % intervals by simulation (issue 28): many independent data sets from distributions with a
known population value, the interval built by vitlab's own code at the app's and the CLI's defaults, and how often
it covers. numpy float64 on features, no model; ``bench/coverage_bench.py`` runs the larger version whose figures
are in docs/evidence.md. A coverage from R data sets has a Monte-Carlo standard error of sqrt(p (1 − p) / R): ~1.3
points at R = 300, ~0.5 at R = 2000 (the CKA test of issue 40, Gaussian and Student-t features)."""

import numpy as np
import pytest

from vitlab.stats import coverage as C
from vitlab.stats import cka as cka_mod
from vitlab.stats import evidence as ev
from vitlab.table import ANALYSES

APP = (64, 16)  # app/lab.py's defaults: 64 images in batches of 16
CLI = (ANALYSES["cka"].options().images, ANALYSES["cka"].options().batch_size)  # vitlab cka: 256 in batches of 64


def test_population_cka_formula_matches_a_large_sample():
    assert C.large_sample_cka(seed=3) == pytest.approx(C.population_cka(), abs=3e-3)
    assert C.population_cka(a=0.0) == 0.0


SIZES = [(64, 16), (256, 32), (1024, 64)]  # images / batch size: the app's, the tour's and a large run
SHOWN = ev.FIELLER  # the CKA interval the app shows (vitlab.stats.evidence.cka_interval)


def test_simulated_hsic_terms_equal_the_accumulators_u_centred_grams():
    x, y = C.cka_pair(np.random.default_rng(2), (3, 2, 16), design="t3")
    u = [cka_mod.u_center(C._grams(f)) for f in (x, y)]
    ref = (u[0] * u[1]).sum((-1, -2)) / (16 * 13)
    np.testing.assert_allclose(C.linear_hsic1(x, y), ref, rtol=1e-10)
    np.testing.assert_allclose(C.linear_hsic1(x, x), (u[0] ** 2).sum((-1, -2)) / (16 * 13), rtol=1e-10)


def test_the_simulated_interval_is_the_one_the_accumulator_gives():
    # cka_coverages builds every data set's interval from arrays; the app builds it in BootstrapCKA.evidence
    terms = C.cka_terms(64, 16, datasets=6, seed=5, design="t3")
    lo, hi = C.cka_intervals(terms, SHOWN)
    for r in range(len(terms)):
        acc = ev.BootstrapCKA(["x"], ["y"])
        for xy, xx, yy in terms[r]:
            acc.add(np.array([[xy]]), np.array([xx]), np.array([yy]), 16)
        got = acc.evidence(0, 0)
        assert got.method == SHOWN and got.interval_info()["interval_method"] == "jackknife Fieller"
        assert (got.lo[0, 0], got.hi[0, 0]) == pytest.approx((lo[r], hi[r]), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("design", ["gaussian", "t3"])
def test_cka_interval_keeps_93_percent_coverage_under_gaussian_and_heavy_tailed_features(design, capsys):
    """Done-when of issue 40: 2000 data sets per size (Monte-Carlo s.e. ~0.5 points); the test fails when coverage is
    shown to be below 93 % (the one-sided 95 % upper Wilson bound under 0.93). The same check on the same data sets
    fails for the jackknife t that the app showed before (91-92 % under t3, pooled over the sizes), so it can fail."""
    old_hits = old_sets = 0
    for images, batch in SIZES:
        got = C.cka_coverages(images, batch, datasets=2000, seed=11, design=design,
                              methods=(SHOWN, ev.JACKKNIFE))
        new, old = got[SHOWN], got[ev.JACKKNIFE]
        with capsys.disabled():
            print(f"\n{design:8s} {images:4d}/{batch:<3d} {SHOWN} {new.rate:.3f} ± {new.se:.3f} "
                  f"(bounds {new.bounds()[0]:.3f}-{new.bounds()[1]:.3f}); jackknife t {old.rate:.3f} ± {old.se:.3f}")
        assert new.no_interval == 0 and new.bounds()[1] >= 0.93 and new.rate >= 0.93, new.row()
        old_hits, old_sets = old_hits + old.covered, old_sets + old.datasets
        if design == "gaussian":  # the two agree in width there (Fieller's bends only where D is uncertain)
            assert new.mean_width == pytest.approx(old.mean_width, rel=0.1), (new.row(), old.row())
    pooled = C.Coverage("CKA", 0, 1, ev.JACKKNIFE, 0.0, old_sets, old_hits, 0, float("nan"), design)
    assert (pooled.bounds()[1] < 0.93) == (design == "t3"), pooled.row()


def test_percentile_bootstrap_it_replaced_covers_far_less():
    old = C.cka_coverage(*APP, datasets=300, seed=0, method=ev.PERCENTILE)
    assert old.rate < 0.87, old.row()
    assert C.cka_coverage(*CLI, datasets=300, seed=0, method=ev.PERCENTILE).rate < 0.87


def test_heavy_tailed_designs_keep_the_second_moments_so_the_population_cka():
    # linear CKA's population value depends on the covariances only: the designs differ in their tails alone (a sample
    # CKA itself converges slowly under t3, whose fourth moment is infinite: that is the point of the design)
    want = np.eye(16)
    want[:4, 8:12] = want[8:12, :4] = np.eye(4)  # cov(x[:4], y[:4]) = a = 1
    want[8:12, 8:12] = 2 * np.eye(4)  # var(y[:4]) = a² + 1
    for design in C.DESIGNS:
        x, y = C.cka_pair(np.random.default_rng(0), (400_000,), design=design)
        np.testing.assert_allclose(np.cov(np.concatenate([x, y], 1).T), want, atol=0.15)
    with pytest.raises(ValueError, match="design must be one of"):
        C.draw(np.random.default_rng(0), (3, 2), "cauchy")


def test_two_batches_give_no_interval_where_the_bootstrap_covered_half_the_time():
    assert C.cka_coverage(64, 32, datasets=100).no_interval == 100
    assert C.cka_coverage(64, 32, datasets=300, method=ev.PERCENTILE).rate < 0.6


def test_mean_attention_distance_interval_covers():
    for images in (64, 256):
        got = C.distance_coverage(images, datasets=2000, seed=1)
        assert got.population == pytest.approx(11.0) and got.rate >= 0.93, got.row()
    assert C.distance_coverage(3, datasets=10).no_interval == 10


def test_localization_rate_interval_covers_where_the_rate_is_not_swamped_by_noise():
    got = C.localization_coverage(*APP, datasets=100, seed=0, noise=2.0)
    assert got.population == 0.75 and got.rate >= 0.88, got.row()
    assert C.localization_coverage(*APP, datasets=100, seed=0, noise=2.0, method=ev.PERCENTILE).rate < 0.6
    w_own, w_nb = C.localization_weights(16, 4)
    assert np.mean(w_own > w_nb) == 0.75
