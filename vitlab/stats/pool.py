"""The interval of a mean over few-shot draws from one pool of images: the draws' spread plus the pool's own variance.

A few-shot probe's accuracy (``vitlab probe``, the Linear probes page) and the tour's Fig 11 margin are means over D
draws (train, held-out and test images) from one pool of extracted features. Given the pool the draws are
independent, so

    Var(mean over D draws) = Var(E[value | pool]) + E[Var(value | pool)] / D.

The t interval over the draws alone, s²/D with s² their sample variance, estimates the second part and misses the
first, the covariance of two draws from one pool: they share its images (at the tour's pool of 500 each draw takes
400). On real activations that interval covered 90 % (docs/evidence.md). With each draw's probes and split held
fixed, the covariance through the test images two draws share is a covariance of means over the pool's images,
which a delete-a-group jackknife over G groups of them estimates (:func:`left_out_means` gives the replicates,
:func:`pool_variance` the two parts). It is the larger part of that covariance but not all of it: the draws also
share training and held-out images, whose effect on a refitted probe is far from additive, and a jackknife that
refits the probes overstates it (the Efron-Stein bias; deleting training images also breaks the draws' shots per
class). With the conservative degrees of freedom min(D − 1, G − 1) the interval covered 95 % on the zoo's Fig 11
margin (bench/coverage_real_rf.py).

Shapes: D draws, G groups of the pool's images, n_d test images of draw d.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import VitlabError
from . import evidence as ev
from .evidence import Estimate

POOL_T = "t"  # the interval's method: a t interval over the draws plus the pool's variance (pool_variance)
POOL_GROUPS = 10  # groups of the pool's images, each left out in turn (pool_groups, left_out_means)


def pool_groups(n: int, groups: int, seed: int) -> np.ndarray:
    """(n,) group of each pool image: a ``default_rng(seed)`` permutation of 0 .. n − 1 modulo ``groups``, so the
    groups differ in size by at most one image."""
    if not 2 <= groups <= n:
        raise VitlabError(f"the pool jackknife needs between 2 and {n} groups of images, not {groups}")
    return np.random.default_rng(seed).permutation(n) % groups


def left_out_means(values: Sequence[np.ndarray], groups_of: Sequence[np.ndarray], groups: int) -> np.ndarray:
    """(G, D) delete-a-group jackknife replicates of D per-draw means: entry (g, d) is the mean of draw d's
    per-test-image ``values[d]`` (n_d,) (a probe's hits: 1 right, 0 wrong) over its test images outside group g,
    ``groups_of[d]`` (n_d,) their groups (:func:`pool_groups` at the draw's test images); NaN when every test image
    of draw d is in group g. The probes stay as fitted on the whole draw."""
    if len(values) != len(groups_of):
        raise VitlabError(f"left_out_means needs one group array per draw: {len(values)} draws, {len(groups_of)} "
                          "group arrays")
    out = np.empty((groups, len(values)))
    for d, (v, g) in enumerate(zip(values, groups_of)):
        v, g = np.asarray(v, dtype=np.float64), np.asarray(g)
        if v.shape != g.shape or v.ndim != 1:
            raise VitlabError(f"draw {d}: per-image values {v.shape} and their groups {g.shape} differ")
        sums = np.bincount(g, weights=v, minlength=groups)
        counts = np.bincount(g, minlength=groups)
        kept = len(v) - counts
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, d] = np.where(kept > 0, (v.sum() - sums) / kept, np.nan)
    return out


def pool_variance(values: np.ndarray, replicates: np.ndarray) -> tuple[float, float, float]:
    """(within, shared, df) of the mean of D per-draw ``values``, whose variance is estimated as within + shared:

    - within = s² / D, s² the draws' sample variance: what the t interval over the draws alone had;
    - shared = C, the covariance of two draws' values through the pool's images they both test on: the mean over
      pairs of draws d ≠ d' of the delete-a-group jackknife covariance (G − 1) / G · Σ_g (r_gd − r̄_d)(r_gd' − r̄_d')
      of the (G, D) ``replicates`` (:func:`left_out_means`), floored at 0 (a covariance of two draws from one pool is
      a variance: Var(E[value | pool]));
    - df = min(D − 1, G − 1), the conservative degrees of freedom of a sum of two variance estimates (the
      Behrens-Fisher problem's; Welch-Satterthwaite's would be larger: on the zoo's Fig 11 margin it covered 93.0 %,
      the conservative df 95 %)."""
    values = np.asarray(values, dtype=np.float64)
    replicates = np.asarray(replicates, dtype=np.float64)
    d, g = len(values), replicates.shape[0]
    if replicates.ndim != 2 or replicates.shape[1] != d or g < 2 or d < 2:
        raise VitlabError(f"the pool's interval needs (groups ≥ 2, {d}) pool-jackknife replicates of at least 2 "
                          f"draws, not {replicates.shape}")
    centred = replicates - replicates.mean(0)
    cov = (g - 1) / g * centred.T @ centred
    shared = float((cov.sum() - np.trace(cov)) / (d * (d - 1)))
    # NaN stays NaN (a replicate with no test image left): max(0.0, nan) would read it as 0
    return float(values.var(ddof=1)) / d, max(0.0, shared) if np.isfinite(shared) else np.nan, float(min(d, g) - 1)


def pool_note(groups: int) -> str:
    """What the interval adds to a t over the draws, in words (an :class:`Estimate`'s note, a table's method)."""
    return f"with the pool's own variance from a jackknife over {groups} groups of its images"


def pool_estimate(values: np.ndarray, replicates: np.ndarray, bounds: tuple[float, float],
                  resolution: float = 0.0) -> Estimate:
    """The mean of D per-draw ``values`` with the t interval of :func:`pool_variance` (the draws' spread plus the
    pool's own variance, from the (G, D) ``replicates``), cut to the statistic's range ``bounds`` and widened to its
    ``resolution`` (:meth:`Estimate.widened`). Fewer than :data:`vitlab.stats.evidence.MIN_UNITS` draws: no
    interval; a replicate that is not finite (a draw whose test images all lie in one group): lo = hi = NaN."""
    values = np.asarray(values, dtype=np.float64)
    value = float(values.mean())
    if len(values) < ev.MIN_UNITS:
        return Estimate(value, np.nan, np.nan, "draws", len(values), POOL_T)
    within, shared, df = pool_variance(values, replicates)
    half = ev.t_quantile(0.5 + ev.LEVEL / 2, int(df)) * np.sqrt(within + shared)
    e = Estimate(value, value - half, value + half, "draws", len(values), POOL_T, pool_note(len(replicates)))
    return e.clipped(*bounds).widened(resolution, bounds)
