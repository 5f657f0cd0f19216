"""The benchmarks' verdicts (bench/verdicts.py): the sign test's interval for a median, and met / not met / can't tell.

The interval's coverage is checked by simulation (skewed and heavy-tailed draws whose median is known), not by
the binomial sum the benchmark uses; the verdicts on cases whose answer is plain.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import verdicts as tb


@pytest.mark.parametrize("n", [5, 6, 7, 8, 9, 11, 15])
def test_interval_covers_the_median_as_often_as_it_says(n):
    rng = np.random.default_rng(n)
    trials = 20000
    for name, draws, median in (("exponential", rng.exponential(size=(trials, n)), np.log(2.0)),
                                ("cauchy", rng.standard_cauchy(size=(trials, n)), 0.0)):
        _, _, cover = tb.median_interval(list(draws[0]))
        covered = 0
        for row in draws:
            lo, hi, _ = tb.median_interval(list(row))
            covered += lo <= median <= hi
        se = np.sqrt(cover * (1 - cover) / trials)
        assert abs(covered / trials - cover) < 5 * se, (name, covered / trials, cover)
        assert cover >= tb.LEVEL


def test_interval_is_the_widest_needed_and_no_wider():
    assert tb.median_interval([3.0, 1.0, 2.0, 5.0, 4.0])[:2] == (1.0, 5.0)  # 5 rounds: min..max, 93.75 %
    assert tb.median_interval([3.0, 1.0, 2.0, 5.0, 4.0])[2] == pytest.approx(1 - 2 / 32)
    lo, hi, cover = tb.median_interval([float(v) for v in range(8)])  # 8: the 2nd smallest and 2nd largest
    assert (lo, hi) == (1.0, 6.0) and cover == pytest.approx(1 - 2 * 9 / 256)
    lo, hi, cover = tb.median_interval([float(v) for v in range(10)])  # 10: the 3rd would give 89 % < 90 %
    assert (lo, hi) == (1.0, 8.0) and cover == pytest.approx(1 - 2 * 11 / 1024)


def test_verdicts():
    assert tb.verdict([0.93, 0.99, 1.0, 1.04, 1.05], 1.05) == "met"  # at the target counts
    assert tb.verdict([1.06, 1.2, 1.1, 1.07, 1.3], 1.05) == "not met"
    assert tb.verdict([0.994, 1.111, 1.17, 1.0, 1.05], 1.05) == "can't tell"
    assert tb.verdict([0.99, 0.98, 0.97, 0.995, 0.9], 1.0, below=True) == "met"
    assert tb.verdict([1.0, 1.01, 1.02, 1.0, 1.03], 1.0, below=True) == "not met"  # "below" is strict
    assert tb.verdict([0.9, 0.95, 0.97], 1.05).startswith("can't tell (3 rounds")  # all agree, but 75 % only
