"""Plain float64 implementations of the published formulas, shared by the tests as the independent reference.

Deliberately naive (no U-centring, no batching tricks): they transcribe the papers, not vitlab's code.
"""

from __future__ import annotations

import numpy as np


def hsic1_song(K: np.ndarray, L: np.ndarray) -> float:
    """Song et al. 2012, eq. 5: the three-term unbiased estimator HSIC_1, in float64."""
    n = K.shape[0]
    K, L = K.astype(np.float64).copy(), L.astype(np.float64).copy()
    np.fill_diagonal(K, 0)
    np.fill_diagonal(L, 0)
    one = np.ones(n)
    t1 = np.trace(K @ L)
    t2 = (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
    t3 = 2 / (n - 2) * (one @ K @ L @ one)
    return float((t1 + t2 - t3) / (n * (n - 3)))


def linear_gram64(X: np.ndarray) -> np.ndarray:
    """Linear Gram of mean-centred features (n, ...) flattened to (n, F), in float64.

    Centring is an exact invariance of linear HSIC; it keeps the reference itself well conditioned.
    """
    X = np.asarray(X).reshape(len(X), -1).astype(np.float64)
    X = X - X.mean(0)
    return X @ X.T


def cka64(X: np.ndarray, Y: np.ndarray) -> float:
    """Linear CKA of one batch with the unbiased estimator."""
    K, L = linear_gram64(X), linear_gram64(Y)
    return hsic1_song(K, L) / np.sqrt(hsic1_song(K, K) * hsic1_song(L, L))


def fieller_jackknife(xy: np.ndarray, xx: np.ndarray, yy: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Fieller (1954) for minibatch CKA N/D from per-batch terms (T,), by root finding: the c where the jackknife t
    statistic of the contrast mean(HSIC_xy) − c·D̄ over batches (a plain loop leaving each batch out) equals Student's
    t quantile on T − 1 df, on each side of the estimate (not cut to [0, 1]; an unbounded side raises)."""
    from scipy.optimize import brentq
    from scipy.stats import t as student

    t = len(xy)
    q = student.ppf(0.5 + level / 2, t - 1)
    keep = [[u for u in range(t) if u != s] for s in range(t)]
    n_full, d_full = xy.sum() / t, np.sqrt(xx.sum() * yy.sum()) / t
    n_loo = np.array([xy[k].sum() / (t - 1) for k in keep])
    d_loo = np.array([np.sqrt(xx[k].sum() * yy[k].sum()) / (t - 1) for k in keep])

    def excess(c):  # > 0 outside the interval
        g_loo = n_loo - c * d_loo
        var = (t - 1) / t * ((g_loo - g_loo.mean()) ** 2).sum()
        return (n_full - c * d_full) ** 2 - q * q * var

    theta = n_full / d_full
    return brentq(excess, theta - 50, theta, xtol=1e-14), brentq(excess, theta, theta + 50, xtol=1e-14)
