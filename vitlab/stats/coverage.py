"""How often vitlab's 95 % intervals cover the value they estimate, by simulation (issue 28).

Each simulation draws many independent data sets from a distribution whose population value is known, builds the
interval with vitlab's own code (the accumulator and interval functions the app and the CLI use, on float64 numpy
features: no model), and counts how often it contains the population value.

- **CKA** (linear kernel, minibatch unbiased HSIC): x, e, e' with independent unit-variance coordinates; y =
  (a·x[:h] + e, e'). Designs (:func:`draw`): Gaussian, Student t with 3 df per coordinate (same second moments,
  heavy tails), and multivariate t (one heavy-tailed scale per image). The population linear HSIC is ‖Σxy‖²_F in
  every design, so the population CKA is ‖Σxy‖²_F / (‖Σxx‖_F ‖Σyy‖_F) = h a² / sqrt(d (h (a² + 1)² + d − h))
  (:func:`population_cka`; ``large_sample_cka`` checks it on a large sample). Per-batch terms are formed for all
  data sets at once (:func:`cka_terms`; Song's HSIC_1 from the features, equal to the accumulator's U-centred
  Grams) and every candidate interval (:data:`CKA_METHODS`) is built from the same terms; the app's
  (:func:`vitlab.stats.evidence.cka_interval`, Fieller's) through the same :func:`vitlab.stats.fieller.fieller_interval`
  (the tests check it equals ``BootstrapCKA.evidence`` data set by data set).
- **Mean attention distance** of a head: per-image distances from a skewed (gamma) distribution with a known mean;
  the interval of :class:`vitlab.analyses.attention.AttentionDistanceResult` (t interval of the mean over images).
- **Localization rate**: a G = 16 position grid (4 × 4, one CLS token); image i has a feature vector p_g at each
  position; token g holds w_own·p_g + w_nb·p_(g+1) + noise. The population token-by-position CKA is
  w_g'² / (Σw² + σ²) (the same algebra as above), so token g is localized when w_own > w_nb: the population rate is
  the share of such tokens. The interval: the jackknife-t over batches of ``vitlab.analyses.localization``.

Shapes: R data sets, T batches, n images per batch, d features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import cka as cka_mod
from . import evidence as ev


@dataclass(frozen=True)
class Coverage:
    """How often the interval covered the population value over ``datasets`` independent data sets."""

    statistic: str
    images: int
    batch_size: int
    method: str
    population: float
    datasets: int
    covered: int
    no_interval: int  # data sets where no interval was given (too few units)
    mean_width: float
    design: str = "gaussian"
    below: int = 0  # misses with the whole interval below the population value
    whole: int = 0  # intervals that span the statistic's whole range (CKA: [0, 1]): nothing learned

    @property
    def rate(self) -> float:
        """Share of the intervals given that covered; NaN when none was given (too few units every time)."""
        given = self.datasets - self.no_interval
        return self.covered / given if given else float("nan")

    @property
    def se(self) -> float:
        """Monte-Carlo standard error of :attr:`rate`, sqrt(p (1 − p) / R)."""
        given = self.datasets - self.no_interval
        return float(np.sqrt(self.rate * (1 - self.rate) / given)) if given else float("nan")

    def bounds(self, z: float = 1.645) -> tuple[float, float]:
        """Wilson score interval of the true coverage (z = 1.645: each bound one-sided 95 %)."""
        n = self.datasets - self.no_interval
        if not n:
            return float("nan"), float("nan")
        p = self.rate
        mid, half = (p + z * z / (2 * n)), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return float((mid - half) / (1 + z * z / n)), float((mid + half) / (1 + z * z / n))

    def row(self) -> dict:
        return {"statistic": self.statistic, "design": self.design, "images": self.images,
                "batch_size": self.batch_size, "units": self.images // self.batch_size, "method": self.method,
                "population": self.population, "datasets": self.datasets, "coverage": self.rate, "se": self.se,
                "below": self.below, "whole_range": self.whole, "no_interval": self.no_interval,
                "mean_width": self.mean_width}


# ---------------------------------------------------------------- CKA

DESIGNS = ("gaussian", "t3", "t3 per image")
LOG, LOGIT, BOOT_T, BCA = "jackknife t, log scale", "jackknife t, logit scale", "bootstrap t", "BCa bootstrap"
CKA_METHODS = (ev.FIELLER, ev.JACKKNIFE, LOG, LOGIT, BOOT_T, BCA, ev.PERCENTILE)


def population_cka(a: float = 1.0, d: int = 8, h: int = 4) -> float:
    """Population linear CKA of x and y = (a·x[:h] + e, e'), x, e, e' with independent unit-variance coordinates
    (it depends on second moments only: the same for every design)."""
    return h * a * a / np.sqrt(d * (h * (a * a + 1) ** 2 + d - h))


def draw(rng: np.random.Generator, shape: tuple, design: str = "gaussian") -> np.ndarray:
    """(..., d) features of unit variance: ``gaussian`` N(0, 1); ``t3`` independent Student t (3 df) / sqrt(3) (the
    same second moments, infinite fourth: an image's features have outliers); ``t3 per image`` a Gaussian vector
    divided by one sqrt(χ²₃/3) per image (multivariate t, 3 df): whole images with a large norm."""
    if design == "gaussian":
        return rng.standard_normal(shape)
    if design == "t3":
        return rng.standard_t(3, size=shape) / np.sqrt(3.0)
    if design == "t3 per image":
        return rng.standard_normal(shape) / np.sqrt(rng.chisquare(3, size=shape[:-1] + (1,)))
    raise ValueError(f"design must be one of {DESIGNS}, not {design!r}")


def cka_pair(rng: np.random.Generator, shape: tuple, a: float = 1.0, d: int = 8, h: int = 4,
             design: str = "gaussian"):
    """(..., d) features x and y of the CKA simulation."""
    x = draw(rng, shape + (d,), design)
    e = draw(rng, shape + (d,), design)
    y = np.concatenate([a * x[..., :h] + e[..., :h], e[..., h:]], axis=-1)
    return x, y


def large_sample_cka(seed: int = 0, n: int = 400_000, a: float = 1.0, d: int = 8, h: int = 4,
                     design: str = "gaussian") -> float:
    """Full-sample linear CKA on ``n`` draws (a check of :func:`population_cka`)."""
    x, y = cka_pair(np.random.default_rng(seed), (n,), a, d, h, design)
    x, y = x - x.mean(0), y - y.mean(0)
    sxy, sxx, syy = x.T @ y, x.T @ x, y.T @ y
    return float((sxy**2).sum() / np.sqrt((sxx**2).sum() * (syy**2).sum()))


def _grams(f: np.ndarray) -> np.ndarray:
    """(..., n, d) -> (..., n, n) linear Grams of the batch-centred features (float64, as vitlab.stats.cka.gram)."""
    f = f - f.mean(-2, keepdims=True)
    return f @ np.swapaxes(f, -1, -2)


def linear_hsic1(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(..., n, d), (..., n, d') -> (...) Song's unbiased HSIC_1 of the linear Grams of the batch-centred features,
    from the features (O(n d²), no n × n Gram): with K = XXᵀ, k = diag K and X centred, K̃1 = −k, so
    HSIC_1 = (‖XᵀY‖²_F − kᵀl + Σk Σl / ((n−1)(n−2)) − 2 kᵀl / (n−2)) / (n (n−3)) (Song et al. 2012, eq. 5). The
    same number as the accumulator's U-centred Grams (:func:`vitlab.stats.cka.u_center`; the tests check both)."""
    n = x.shape[-2]
    x, y = x - x.mean(-2, keepdims=True), y - y.mean(-2, keepdims=True)
    k, l = (x * x).sum(-1), (y * y).sum(-1)
    cross = (np.swapaxes(x, -1, -2) @ y) ** 2
    kl = (k * l).sum(-1)
    return (cross.sum((-1, -2)) - kl + k.sum(-1) * l.sum(-1) / ((n - 1) * (n - 2)) - 2 * kl / (n - 2)) / (n * (n - 3))


def cka_terms(images: int, batch_size: int, datasets: int, seed: int = 0, a: float = 1.0,
              design: str = "gaussian") -> np.ndarray:
    """(R, T, 3) per-batch unbiased HSIC(K, L), HSIC(K, K), HSIC(L, L) of R data sets (:func:`linear_hsic1`),
    drawn a few data sets at a time to bound memory."""
    rng = np.random.default_rng(seed)
    t, n = images // batch_size, batch_size
    chunk = max(1, 2**20 // (t * n))
    out = []
    for start in range(0, datasets, chunk):
        x, y = cka_pair(rng, (min(chunk, datasets - start), t, n), a, design=design)
        out.append(np.stack([linear_hsic1(x, y), linear_hsic1(x, x), linear_hsic1(y, y)], -1))
    return np.concatenate(out)


def cka_intervals(terms: np.ndarray, method: str, resamples: int = 200, seed: int = 0):
    """(lo, hi) of every data set's CKA interval from its (R, T, 3) terms, with vitlab's interval functions."""
    t = terms.shape[1]
    xy, xx, yy = (np.moveaxis(terms[..., k], 1, 0) for k in range(3))  # (T, R) each
    den = np.sqrt(xx.sum(0) * yy.sum(0))
    value = xy.sum(0) / den
    idx = ev.jackknife_indices(t)
    loo_num, loo_den = xy[idx].sum(1), np.sqrt(xx[idx].sum(1) * yy[idx].sum(1))  # (T, R)
    if method == ev.FIELLER:  # the app's: vitlab.stats.evidence.cka_interval
        return ev.fieller_interval(xy.sum(0), den, loo_num, loo_den, ev.LEVEL)[:2]
    loo = loo_num / loo_den
    if method == ev.JACKKNIFE:
        return ev.jackknife_interval(value, loo)
    if method in (LOG, LOGIT):  # a variance-stabilising scale where every value is inside it, else the raw scale
        from scipy.special import expit, logit

        f, g = (np.log, np.exp) if method == LOG else (logit, expit)
        inside = (value > 0) & np.all(loo > 0, 0) & ((value < 1) & np.all(loo < 1, 0) if method == LOGIT else True)
        with np.errstate(invalid="ignore", divide="ignore"):
            lo_t, hi_t = ev.jackknife_interval(f(value), f(loo))
        raw = ev.jackknife_interval(value, loo)
        return np.where(inside, g(lo_t), raw[0]), np.where(inside, g(hi_t), raw[1])
    return _bootstrap_interval(terms, value, loo, method, resamples, seed)


def _bootstrap_interval(terms: np.ndarray, value, loo, method: str, resamples: int, seed: int):
    """Percentile, studentised (inner jackknife se) and BCa bootstraps over batches (Efron & Tibshirani 1993, ch.
    12, 14); all data sets share the (B, T) resample indices of ``seed``."""
    from scipy.stats import norm

    t = terms.shape[1]
    idx = ev.resample_indices(t, resamples, seed)
    rs = terms[:, idx]  # (R, B, T, 3)
    tot = rs.sum(2)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = tot[..., 0] / np.sqrt(tot[..., 1] * tot[..., 2])  # (R, B)
        if method == ev.PERCENTILE:
            return ev.percentile_interval(boot.T)
        if method == BOOT_T:
            left = tot[:, :, None, :] - rs  # each resample's leave-one-out sums (R, B, T, 3)
            inner = left[..., 0] / np.sqrt(left[..., 1] * left[..., 2])
            se_b = np.sqrt((t - 1) / t * ((inner - inner.mean(2, keepdims=True)) ** 2).sum(2))
            se = np.sqrt((t - 1) / t * ((loo - loo.mean(0)) ** 2).sum(0))
            stud = (boot - value[:, None]) / se_b
            q_lo, q_hi = ev.percentile_interval(np.where(np.isfinite(stud), stud, np.nan).T)
            return value - q_hi * se, value - q_lo * se
        if method != BCA:
            raise ValueError(f"method must be one of {CKA_METHODS}, not {method!r}")
        z0 = norm.ppf((boot < value[:, None]).mean(1) + 0.5 * (boot == value[:, None]).mean(1))
        dev = loo.mean(0) - loo
        acc = (dev**3).sum(0) / (6 * ((dev**2).sum(0)) ** 1.5)
        z = norm.ppf([0.025, 0.975])[:, None]
        share = norm.cdf(z0 + (z0 + z) / (1 - acc * (z0 + z)))  # (2, R) adjusted percentile levels
    srt = np.sort(boot, 1)
    pick = np.clip(np.nan_to_num(share * resamples, nan=0).astype(int), 0, resamples - 1)
    return np.take_along_axis(srt, pick[0][:, None], 1)[:, 0], np.take_along_axis(srt, pick[1][:, None], 1)[:, 0]


def cka_coverages(images: int, batch_size: int, datasets: int = 300, seed: int = 0, a: float = 1.0,
                  design: str = "gaussian", methods: tuple = CKA_METHODS, resamples: int = 200) -> dict:
    """{method: Coverage} of the CKA interval at ``images`` in batches of ``batch_size`` on the same data sets."""
    pop = population_cka(a)
    t = images // batch_size
    terms = cka_terms(images, batch_size, datasets, seed, a, design)
    out = {}
    for m in methods:
        if t < ev.MIN_UNITS and m != ev.PERCENTILE:  # as the app: no interval below MIN_UNITS batches
            out[m] = Coverage("CKA", images, batch_size, m, pop, datasets, 0, datasets, float("nan"), design)
            continue
        lo, hi = (np.asarray(v, dtype=np.float64) for v in cka_intervals(terms, m, resamples, seed))
        ok = np.isfinite(lo) & np.isfinite(hi)
        hit = ok & (lo <= pop) & (pop <= hi)
        out[m] = Coverage("CKA", images, batch_size, m, pop, datasets, int(hit.sum()), int((~ok).sum()),
                          float(np.mean((hi - lo)[ok])) if ok.any() else float("nan"), design,
                          int((ok & (hi < pop)).sum()), int((ok & (lo <= 0) & (hi >= 1)).sum()))
    return out


def cka_coverage(images: int, batch_size: int, datasets: int = 300, seed: int = 0, a: float = 1.0,
                 method: str = ev.FIELLER, resamples: int = 200, design: str = "gaussian") -> Coverage:
    """Coverage of one CKA interval ``method`` (default: the one the app shows, :func:`vitlab.stats.evidence.
    cka_interval`)."""
    return cka_coverages(images, batch_size, datasets, seed, a, design, (method,), resamples)[method]


# ---------------------------------------------------------------- mean attention distance


def distance_coverage(images: int, datasets: int = 1000, seed: int = 0, shape: float = 2.0,
                      scale: float = 1.5, offset: float = 8.0) -> Coverage:
    """Coverage of a head's mean attention distance interval (per-image distances offset + Gamma(shape, scale),
    population mean offset + shape·scale px) with the interval of
    :class:`vitlab.analyses.attention.AttentionDistanceResult` (:func:`vitlab.stats.evidence.mean_half_width`)."""
    from .evidence import mean_half_width

    rng = np.random.default_rng(seed)
    pop = offset + shape * scale
    d = offset + rng.gamma(shape, scale, size=(datasets, images))
    mean, std = d.mean(1), d.std(1)  # the accumulator's mean and population std over images
    half = np.array([mean_half_width(s, images) for s in std])
    ok = np.isfinite(half)
    hits = int(((mean - half <= pop) & (pop <= mean + half))[ok].sum())
    return Coverage("mean attention distance", images, 1, ev.JACKKNIFE, pop, datasets, hits, int((~ok).sum()),
                    float(np.mean(2 * half[ok])) if ok.any() else float("nan"), "gamma",
                    int(((mean + half < pop) & ok).sum()))


# ---------------------------------------------------------------- localization rate


def localization_weights(positions: int = 16, lost: int = 4, own: float = 1.0, other: float = 0.5):
    """(G,) own-patch and neighbour-patch weights: the first ``lost`` tokens hold their neighbour more than
    their own patch (population rate (G − lost) / G)."""
    w_own = np.full(positions, own)
    w_nb = np.full(positions, other)
    w_own[:lost], w_nb[:lost] = other, own
    return w_own, w_nb


def localization_coverage(images: int, batch_size: int, datasets: int = 200, seed: int = 0, noise: float = 1.0,
                          lost: int = 4, method: str = ev.JACKKNIFE, resamples: int = 200, d: int = 3) -> Coverage:
    """Coverage of the localized rate's interval (jackknife-t over batches, as ``vitlab.analyses.localization``; or the
    percentile bootstrap it replaced) on a 4 × 4 grid with one CLS token; ``noise`` sets how hard it is."""
    g = 16
    w_own, w_nb = localization_weights(g, lost)
    pop = float(np.mean(w_own > w_nb))
    rng = np.random.default_rng(seed)
    t = images // batch_size
    covered = missing = 0
    widths = []
    nb = (np.arange(g) + 1) % g
    for r in range(datasets):
        p = rng.standard_normal((t, batch_size, g, d))  # patch features per position
        tokens = (w_own[:, None] * p + w_nb[:, None] * p[:, :, nb] + noise * rng.standard_normal(p.shape))
        cls = p.mean(2, keepdims=True) + noise * rng.standard_normal((t, batch_size, 1, d))
        tok = np.concatenate([cls, tokens], axis=2)  # (T, n, 1 + G, d)
        acc = ev.BootstrapCKA([str(k) for k in range(1 + g)], [str(k) for k in range(g)])
        for b in range(t):
            acc.update(cka_mod.centred(_grams(np.moveaxis(tok[b], 1, 0))),
                       cka_mod.centred(_grams(np.moveaxis(p[b], 1, 0))))
        if t < ev.MIN_UNITS:
            missing += 1
            continue
        rate = float(ev.localized_rate(ev.ratio(acc.xy, acc.xx, acc.yy), 1))
        if method == ev.JACKKNIFE:  # as vitlab.analyses.localization and the tour
            lo, hi = ev.jackknife_interval(rate, ev.localized_rate(acc.replicates(ev.jackknife_indices(t)), 1))
        else:
            lo, hi = ev.percentile_interval(ev.localized_rate(acc.replicates(ev.resample_indices(t, resamples,
                                                                                                 seed + r)), 1))
        covered += lo <= pop <= hi
        widths.append(hi - lo)
    return Coverage("localization rate", images, batch_size, method, pop, datasets, covered, missing,
                    float(np.mean(widths)) if widths else float("nan"))
