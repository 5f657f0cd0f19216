"""How often vitlab's 95 % intervals cover the value they estimate, by simulation (issue 28).

Each simulation draws many independent data sets from a distribution whose population value is known, builds the
interval with vitlab's own code (the accumulator and interval functions the app and the CLI use, on float64 numpy
features: no model), and counts how often it contains the population value.

- **CKA** (linear kernel, minibatch unbiased HSIC): x ~ N(0, I_d); y = (a·x[:h] + e, e'), e, e' ~ N(0, I).
  The population linear HSIC is ‖Σxy‖²_F, so the population CKA is ‖Σxy‖²_F / (‖Σxx‖_F ‖Σyy‖_F) =
  h a² / sqrt(d (h (a² + 1)² + d − h)) (:func:`population_cka`; ``large_sample_cka`` checks it on a large sample).
  The interval: :meth:`vitlab.stats.evidence.BootstrapCKA.evidence` (jackknife-t over batches) or, for comparison, the
  percentile bootstrap it replaced.
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

    @property
    def rate(self) -> float:
        """Share of the intervals given that covered; NaN when none was given (too few units every time)."""
        given = self.datasets - self.no_interval
        return self.covered / given if given else float("nan")

    def row(self) -> dict:
        return {"statistic": self.statistic, "images": self.images, "batch_size": self.batch_size,
                "units": self.images // self.batch_size, "method": self.method, "population": self.population,
                "datasets": self.datasets, "coverage": self.rate, "no_interval": self.no_interval,
                "mean_width": self.mean_width}


# ---------------------------------------------------------------- CKA


def population_cka(a: float = 1.0, d: int = 8, h: int = 4) -> float:
    """Population linear CKA of x ~ N(0, I_d) and y = (a·x[:h] + e, e')."""
    return h * a * a / np.sqrt(d * (h * (a * a + 1) ** 2 + d - h))


def cka_pair(rng: np.random.Generator, shape: tuple, a: float = 1.0, d: int = 8, h: int = 4):
    """(..., d) features x and y of the CKA simulation."""
    x = rng.standard_normal(shape + (d,))
    e = rng.standard_normal(shape + (d,))
    y = np.concatenate([a * x[..., :h] + e[..., :h], e[..., h:]], axis=-1)
    return x, y


def large_sample_cka(seed: int = 0, n: int = 400_000, a: float = 1.0, d: int = 8, h: int = 4) -> float:
    """Full-sample linear CKA on ``n`` draws (a check of :func:`population_cka`)."""
    x, y = cka_pair(np.random.default_rng(seed), (n,), a, d, h)
    x, y = x - x.mean(0), y - y.mean(0)
    sxy, sxx, syy = x.T @ y, x.T @ x, y.T @ y
    return float((sxy**2).sum() / np.sqrt((sxx**2).sum() * (syy**2).sum()))


def _grams(f: np.ndarray) -> np.ndarray:
    """(..., n, d) -> (..., n, n) linear Grams of the batch-centred features (float64, as vitlab.stats.cka.gram)."""
    f = f - f.mean(-2, keepdims=True)
    return f @ np.swapaxes(f, -1, -2)


def cka_coverage(images: int, batch_size: int, datasets: int = 300, seed: int = 0, a: float = 1.0,
                 method: str = ev.JACKKNIFE, resamples: int = 200) -> Coverage:
    """Coverage of the CKA interval at ``images`` in batches of ``batch_size`` (the accumulator's own code)."""
    rng = np.random.default_rng(seed)
    t = images // batch_size
    pop = population_cka(a)
    x, y = cka_pair(rng, (datasets, t, batch_size), a)
    gx, gy = _grams(x), _grams(y)
    covered = missing = 0
    widths = []
    for r in range(datasets):
        acc = ev.BootstrapCKA(["x"], ["y"])
        for b in range(t):
            acc.update(cka_mod.centred(gx[r, b][None]), cka_mod.centred(gy[r, b][None]))
        if method == ev.JACKKNIFE:
            e = acc.evidence(resamples, seed + r)
            lo, hi = float(e.lo[0, 0]), float(e.hi[0, 0])
        else:  # the percentile bootstrap over batches that vitlab used before issue 28
            reps = acc.replicates(ev.resample_indices(t, resamples, seed + r))
            lo, hi = (float(v[0, 0]) for v in ev.percentile_interval(reps))
        if not np.isfinite(lo):
            missing += 1
            continue
        covered += lo <= pop <= hi
        widths.append(hi - lo)
    return Coverage("CKA", images, batch_size, method, pop, datasets, covered, missing,
                    float(np.mean(widths)) if widths else float("nan"))


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
                    float(np.mean(2 * half[ok])) if ok.any() else float("nan"))


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
