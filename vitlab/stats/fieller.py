"""The interval of a ratio of sums over batches (minibatch CKA) by Fieller's method with jackknife variances (issue 40).

Minibatch CKA is θ = N / D, N = Σₜ HSIC(K, L)ₜ and D = sqrt(Σₜ HSIC(K, K)ₜ · Σₜ HSIC(L, L)ₜ). The jackknife t
interval θ ± t·se linearises the ratio at θ. Fieller (1954) instead inverts a test: c is in the interval when the
jackknife t statistic of the *linear* contrast N − c·D, |N − c·D| / se(N − c·D), is at most Student's t quantile on
T − 1 degrees of freedom. se(N − c·D) changes with c, so the set is asymmetric: it reaches further away from zero when
the denominator is uncertain, which is where the sampling distribution of the ratio has its long tail (a batch with
an outlier image inflates the self terms, so a low θ is common and a high θ rare). At c = θ the contrast is zero, so
the interval always holds θ; where D is certain it is the jackknife t interval.

With heavy-tailed features (Student t, 3 df) the jackknife t covered 91-92 % at 64/16, 256/32 and 1024/64 images/batch
size, missing mostly with the whole interval below the population value; Fieller's covered 93.6-98 % on the same data
sets and 94-96 % on Gaussian ones, with about the same width there (``vitlab.stats.coverage``, docs/evidence.md).

Algebra (scaled by D so that nothing large cancels): with the leave-one-batch-out means n₋ₜ = N₋ₜ/(T−1) and
d₋ₜ = D₋ₜ/(T−1), divided by the full-sample mean D/T, rₜ = n₋ₜ − θ·d₋ₜ and uₜ = d₋ₜ, the contrast at c = θ + δ
has jackknife variance V(δ) = Vrr − 2δ·Vru + δ²·Vuu, (Vxy = (T−1)/T Σ(xₜ − x̄)(yₜ − ȳ)), and δ is in the interval
when δ² ≤ q²·V(δ): (1 − q²Vuu) δ² + 2q²Vru δ − q²Vrr ≤ 0. When 1 − q²Vuu ≤ 0 (the denominator's own t statistic
is below q: the batches do not bound D away from 0) the set is unbounded, and the interval is the statistic's whole
range.

Shapes: T units (batches) on axis 0 of the leave-one-out arrays; any trailing shape (La, Lb) is elementwise.
"""

from __future__ import annotations

import numpy as np

FIELLER = "jackknife Fieller"


def fieller_interval(num: np.ndarray, den: np.ndarray, num_loo: np.ndarray, den_loo: np.ndarray, level: float,
                     low: float = 0.0, high: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, unbounded) of θ = num / den from the full-sample ``num``, ``den`` (...) and the leave-one-unit-out
    ``num_loo``, ``den_loo`` (T, ...): sums over the T units and over the T − 1 left in (for CKA, D is the geometric
    mean of two such sums).
    Where the set is unbounded (``unbounded`` True) the interval is [low, high] widened to hold θ; a bounded interval
    is cut to the same range (the population value cannot lie outside it). NaN where θ or a leave-one-out ratio is
    not finite; no minimum of units is applied here (the caller's :data:`~vitlab.stats.evidence.MIN_UNITS`)."""
    from scipy.stats import t as student

    num_loo, den_loo = np.asarray(num_loo, dtype=np.float64), np.asarray(den_loo, dtype=np.float64)
    units = num_loo.shape[0]
    den = np.asarray(den, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        theta = np.asarray(num, dtype=np.float64) / den
        # sums over T − 1 and over T units to means, as shares of the full-sample mean of D
        u = units / (units - 1) * den_loo / den
        n = units / (units - 1) * num_loo / den
        r = n - theta * u
        r, u = r - r.mean(0), u - u.mean(0)
        k = (units - 1) / units
        vrr, vru, vuu = k * (r * r).sum(0), k * (r * u).sum(0), k * (u * u).sum(0)
        q2 = student.ppf(0.5 + level / 2, units - 1) ** 2
        a = 1.0 - q2 * vuu
        bounded = a > 0
        root = np.sqrt(np.maximum(q2 * q2 * vru * vru + a * q2 * vrr, 0.0))
        safe = np.where(bounded, a, 1.0)
        lo = theta + np.where(bounded, (-q2 * vru - root) / safe, -np.inf)
        hi = theta + np.where(bounded, (-q2 * vru + root) / safe, np.inf)
        ok = np.isfinite(theta) & np.all(np.isfinite(num_loo / den_loo), axis=0)
    lo = np.where(ok, np.clip(lo, np.minimum(low, theta), np.maximum(high, theta)), np.nan)
    hi = np.where(ok, np.clip(hi, np.minimum(low, theta), np.maximum(high, theta)), np.nan)
    return lo, hi, ok & ~bounded
