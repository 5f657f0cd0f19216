"""The benchmarks' verdicts on timing claims: the sign test's interval for the median of per-round ratios.

Rounds are interleaved, so each round's ratio (method over its baseline in the same round) is paired; the interval
for its median assumes neither normality nor a steady machine (one that speeds up or slows down mid-run moves
whole rounds). A claim is "met" or "not met" only when the whole interval is on one side of its target.
Checked by simulation in tests/test_bench_verdicts.py.
"""

from __future__ import annotations

import math
import statistics

LEVEL = 0.90  # the least coverage of the rounds' interval for the median ratio


def median_interval(values: list[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, coverage): the k-th smallest and k-th largest of ``values``, k as large as keeps the coverage
    1 - 2 P(Binomial(n, 1/2) < k) at ``level`` or above (5 values: min..max, 94 %). With fewer than 5 values no
    interval reaches 90 %: (min, max) and its lower coverage."""
    v, n = sorted(values), len(values)

    def coverage(k: int) -> float:  # P(k-th smallest <= median <= k-th largest)
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return v[k - 1], v[n - k], coverage(k)


def verdict(ratios: list[float], target: float, below: bool = False) -> str:
    """'met' when the whole median interval of the rounds' ratios is within the target (at or under it; with
    ``below``, under it), 'not met' when the whole interval is outside, else "can't tell"; also "can't tell"
    when there are too few rounds for a 90 % interval (fewer than 5)."""
    lo, hi, cover = median_interval(ratios)
    if cover < LEVEL:
        return f"can't tell ({len(ratios)} rounds; 5 give a 90 % interval)"
    inside = (lambda r: r < target) if below else (lambda r: r <= target)
    return "met" if inside(hi) else "not met" if not inside(lo) else "can't tell"


def interval_text(ratios: list[float]) -> str:
    """'median M, C % interval [lo, hi]'."""
    lo, hi, cover = median_interval(ratios)
    return f"median {statistics.median(ratios):.3f}, {100 * cover:.0f} % interval [{lo:.3f}, {hi:.3f}]"
