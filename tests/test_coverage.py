"""Coverage of the 95 % intervals by simulation (issue 28): many independent data sets from distributions with a
known population value, the interval built by vitlab's own code at the app's and the CLI's defaults, and how often
it covers. numpy float64 on features, no model; ``bench/coverage_bench.py`` runs the larger version whose figures
are in docs/evidence.md. With 300 data sets a coverage estimate has a standard error of ~1.3 points, so the bars
below (0.91) sit two of them under the 93 % wanted; the bench's 2000 data sets give the figures themselves."""

import numpy as np
import pytest

from vitlab.stats import coverage as C
from vitlab.stats import evidence as ev
from vitlab.table import ANALYSES

APP = (64, 16)  # app/lab.py's defaults: 64 images in batches of 16
CLI = (ANALYSES["cka"].options().images, ANALYSES["cka"].options().batch_size)  # vitlab cka: 256 in batches of 64


def test_population_cka_formula_matches_a_large_sample():
    assert C.large_sample_cka(seed=3) == pytest.approx(C.population_cka(), abs=3e-3)
    assert C.population_cka(a=0.0) == 0.0


@pytest.mark.parametrize("images,batch", [APP, CLI], ids=["app", "cli"])
def test_cka_interval_covers_at_the_defaults(images, batch):
    assert images // batch >= ev.MIN_UNITS
    got = C.cka_coverage(images, batch, datasets=300, seed=0)
    assert got.no_interval == 0 and got.rate >= 0.91, got.row()
    # the test can fail: the percentile bootstrap it replaced covers far less on the same data sets
    old = C.cka_coverage(images, batch, datasets=300, seed=0, method=ev.PERCENTILE)
    assert old.rate < 0.87, old.row()


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
