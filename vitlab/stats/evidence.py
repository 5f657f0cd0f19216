"""Evidence: a statistic with its uncertainty, its reference, and a verdict that can say "can't tell".

- **Jackknife over batches** (CKA and every smooth statistic kept as per-batch sums). Minibatch CKA (Nguyen et al.
  2021, eq. 3) is a ratio of sums of per-batch HSIC estimates; the batches are the natural resampling unit. Leaving
  out one batch at a time gives T values θ₋ₜ; the jackknife standard error sqrt((T−1)/T Σ(θ₋ₜ − θ̄)²) (Efron &
  Tibshirani 1993, ch. 11) with Student's t quantile on T − 1 degrees of freedom gives the interval θ ± t·se.
  The percentile bootstrap over the same batches covered a known population CKA only 50 % of the time at 2 batches,
  ~80 % at 4 and ~88 % at 8 (it ignores that T is small); the jackknife-t covered 93-96 % at 4 to 16 batches of 8
  or more Gaussian images, but 91-92 % with heavy-tailed (Student t, 3 df) features, missing mostly below. A CKA
  cell's interval is therefore Fieller's (:mod:`vitlab.stats.fieller`): the same jackknife over batches applied to
  the contrast N − c·D of the ratio's sums, inverted; it covered 93.6-98 % on both (``vitlab.stats.coverage``,
  ``bench/coverage_bench.py``, docs/evidence.md). Statistics formed from CKA cells (means, differences) keep the
  jackknife t of their leave-one-out values. Below :data:`MIN_UNITS` units no interval is given (NaN, "too few
  batches for an interval").
- **Percentile bootstrap** (B resamples, ``numpy.random.default_rng(seed)``, all indices drawn at once as a (B, T)
  array) stays for statistics that are not smooth in the unit means (a localized rate counts argmaxes; a median;
  a receptive-field radius is a quantile on the pixel grid; a rank correlation), where the jackknife fails.
- **Over images**: the same with per-image values (attention distances, receptive-field maps).
- Every :class:`Estimate` states its unit ("batches", "images", "draws"), how many there were, and its method.
- **Permutation null for CKA** (Gretton et al. 2008, Sec. 4; Kornblith et al. 2019 use the same null): inside each
  batch, pair image i of A with image π(i) of B: HSIC(K, P L Pᵀ). U-centring commutes with a permutation, so the
  centred Grams already held are permuted and reused (no forward pass, no new Gram). Null replicate p pairs every
  batch by its own p-th random permutation. One-sided p-value (1 + #{null ≥ observed}) / (1 + P) (Phipson &
  Smyth 2010: never 0). Reusing a few permutations per batch in random combinations across batches was tried
  and rejected: with 10 per batch, 8.2 % of p-values of independent features fell below 0.05.
- **References in the statistic's own convention**: uniform attention under the same prefix handling, chance-level
  localization 1/positions and the chance-corrected rate, receptive-field radii as fractions of the input side.
- **Verdict**: ``shown`` when the statistic's interval lies beyond the control's interval in the claimed direction;
  ``not shown`` when the point estimate does not go the claimed way at all; ``can't tell`` in between.

Shapes: T batches, B resamples, P permutations, La/Lb layers, n images in a batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import VitlabError
from . import cka as cka_mod
from .fieller import FIELLER, fieller_interval

LEVEL = 0.95
VERDICTS = ("shown", "not shown", "can't tell")
# Fewest resampling units for an interval. With 2 batches a bootstrap has 3 distinct resamples and its "interval" is
# the two single-batch values (it covered 50 %); the jackknife-t covers at 2 and 3 units only by being 12.7 and 4.3
# standard errors wide. From 4 units on it covered 93-96 % in every Gaussian setting simulated; with heavy tails the
# jackknife t of CKA fell to 91-92 %, Fieller's interval that replaced it for CKA kept 93.6-98 % (docs/evidence.md).
MIN_UNITS = 4
JACKKNIFE, PERCENTILE = "jackknife t", "percentile bootstrap"
ROUNDOFF = 1e-12  # relative: a statistic this close to its reference does not go the claimed way


# ---------------------------------------------------------------- resampling


def resample_indices(units: int, resamples: int, seed: int) -> np.ndarray:
    """(B, T) indices of ``units`` drawn with replacement, ``default_rng(seed)``."""
    if units < 1:
        raise VitlabError("a bootstrap needs at least one batch (or image) to resample")
    if resamples < 1:
        raise VitlabError(f"--bootstrap must be at least 1, not {resamples}")
    return np.random.default_rng(seed).integers(0, units, size=(resamples, units))


def jackknife_indices(units: int) -> np.ndarray:
    """(T, T − 1) indices: row t is every unit but t (leave-one-out), in the form of :func:`resample_indices`, so
    every ``replicates(idx)`` of a resample gives the jackknife values too. One unit has nothing to leave out: its
    one row is the unit itself, so the count still reads 1 and the interval is "too few units"."""
    if units < 1:
        raise VitlabError("an interval needs at least one batch (or image)")
    if units == 1:
        return np.zeros((1, 1), dtype=np.int64)
    keep = np.arange(units - 1, dtype=np.int64)
    return keep[None, :] + (keep[None, :] >= np.arange(units)[:, None])  # row t: 0 .. t − 1, then t + 1 .. T − 1


@lru_cache(maxsize=256)
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile, cached: scipy's ``ppf`` costs ~0.5 ms a call, which dominated coverage runs that form
    thousands of intervals (bench/coverage_real.py)."""
    from scipy.stats import t as student

    return float(student.ppf(q, df))


def jackknife_interval(value: np.ndarray, loo: np.ndarray, level: float = LEVEL,
                       bias_corrected: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """value ± t_{T−1} · jackknife se, from (T, ...) leave-one-out values; NaN below :data:`MIN_UNITS` units.
    ``bias_corrected``: centred instead on :func:`tukey_estimate`, the mean of the pseudo-values (Tukey's interval)."""
    loo = np.asarray(loo, dtype=np.float64)
    units = loo.shape[0]
    value = np.asarray(value, dtype=np.float64)
    if units < MIN_UNITS:
        nan = np.full(np.broadcast(value, loo[0]).shape, np.nan)
        return nan, nan.copy()
    with np.errstate(invalid="ignore"):
        se = np.sqrt((units - 1) / units * ((loo - loo.mean(0)) ** 2).sum(0))
    half = t_quantile(0.5 + level / 2, units - 1) * se
    centre = tukey_estimate(value, loo) if bias_corrected else value
    return centre - half, centre + half


def tukey_estimate(value: np.ndarray, loo: np.ndarray) -> np.ndarray:
    """The jackknife's bias-corrected estimate from the (T, ...) leave-one-out values: the mean of the pseudo-values
    T · value − (T − 1) · loo_t, i.e. value − (T − 1)(mean(loo) − value) (Quenouille 1956; Tukey 1958; Efron & Tibshirani
    1993, eq. 11.5). It removes the O(1/T) bias of a smooth statistic such as a ratio of sums; the jackknife se is the
    pseudo-values' standard error, so value ± t · se becomes Tukey's interval centred here."""
    loo = np.asarray(loo, dtype=np.float64)
    return loo.shape[0] * np.asarray(value, dtype=np.float64) - (loo.shape[0] - 1) * loo.mean(0)


def mean_half_width(std: float, n: int, level: float = 0.95) -> float:
    """Half-width of the t interval of a mean over n images from the population std (ddof 0): t_{n−1} s/√(n−1),
    i.e. the jackknife-t interval of a mean; NaN below :data:`MIN_UNITS` images.
    (1.96 σ/√n, used before, is narrower than it should be at few images.)"""
    if n < MIN_UNITS:
        return float("nan")
    return float(t_quantile(0.5 + level / 2, n - 1) * std / np.sqrt(n - 1))


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over axis 0 of (B, ...) resampled statistics; NaN resamples are left out."""
    import warnings

    tail = 100 * (1 - level) / 2
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all resamples NaN (e.g. infinite ratios): a NaN interval
        lo, hi = np.nanpercentile(np.asarray(samples, dtype=np.float64), [tail, 100 - tail], axis=0)
    return lo, hi


def resample_counts(idx: np.ndarray, units: int) -> np.ndarray:
    """(B, k) indices into ``units`` -> (B, units) float64: how often each resample draws each unit."""
    idx = np.asarray(idx)
    counts = np.zeros((idx.shape[0], units))
    np.add.at(counts, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()), 1.0)
    return counts


def resampled_sums(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(n, ...) per-unit values, (B, k) indices -> (B, ...) sums of the resamples, as a product of the resamples'
    counts with the values: memory O(B · size of one value), never the (B, k, ...) gathered copy (for 200 resamples
    of 32 gradient maps of 224 × 224 px that copy was 2.6 GB; issue 51)."""
    v = np.asarray(values, dtype=np.float64)
    out = resample_counts(idx, v.shape[0]) @ v.reshape(v.shape[0], -1)
    return out.reshape((len(out),) + v.shape[1:])


def mean_replicates(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(n, ...) per-unit values, (B, k) indices -> (B, ...) means of the resamples (:func:`resampled_sums`)."""
    return resampled_sums(values, idx) / np.asarray(idx).shape[1]


def mean_estimate(values: np.ndarray, unit: str = "draws", bounds: tuple[float, float] | None = None,
                  resolution: float = 0.0) -> Estimate:
    """The mean of per-unit values (n,) (e.g. few-shot draws) with its jackknife-t interval (for a mean: the
    t interval, mean ± t_{n−1} s/√n); ``bounds`` and ``resolution`` as in :meth:`Estimate.jackknife`."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return Estimate(float(values.mean()), np.nan, np.nan, unit, len(values), JACKKNIFE)
    return Estimate.jackknife(float(values.mean()), mean_replicates(values, jackknife_indices(len(values))), unit,
                              bounds=bounds, resolution=resolution)


def ratio_replicates(sums: np.ndarray, counts: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(T, ...) per-batch sums, (T,) per-batch counts -> (B, ...) resampled sum / resampled count."""
    s = resampled_sums(sums, idx)
    c = resampled_sums(counts, idx)
    return s / c.reshape(c.shape + (1,) * (s.ndim - 1))


def bounded_jackknife(value: float, loo: np.ndarray, low: float, high: float, level: float = LEVEL,
                      bias_corrected: bool = False) -> tuple[float, float, str]:
    """(lo, hi, note): the jackknife-t interval of a statistic that cannot leave [low, high] (a CKA, a rate, a
    difference of them), formed on the logit scale of the range and mapped back, so it stays inside the range and
    bends towards the middle near a bound, as the statistic's own spread does. The t interval on the raw scale is
    symmetric and reached past ±1 for differences of rates at a few batches (issue 33). When the value or a
    leave-one-out value sits on a bound the logit is infinite: the raw interval is then clipped to the range, and
    the note says so. NaN below :data:`MIN_UNITS` units (note ''). ``bias_corrected``: Tukey's interval, centred on
    the mean of the pseudo-values on the same scale (:func:`tukey_estimate`)."""
    loo = np.asarray(loo, dtype=np.float64).ravel()
    if not high > low:
        raise VitlabError(f"a bounded interval needs low < high, not [{low}, {high}]")
    if len(loo) < MIN_UNITS or not np.isfinite(value):
        return float("nan"), float("nan"), ""
    vals = np.append(loo, value)
    if np.all((vals > low) & (vals < high)):
        from scipy.special import expit, logit

        if np.isinf(high):  # bounded below only (a ratio of norms): the log scale of x − low
            lo_t, hi_t = jackknife_interval(np.log(value - low), np.log(loo - low), level, bias_corrected)
            return float(low + np.exp(lo_t)), float(low + np.exp(hi_t)), f"on the log scale above {low:.3g}"
        span = high - low
        lo_t, hi_t = jackknife_interval(logit((value - low) / span), logit((loo - low) / span), level, bias_corrected)
        return (float(low + span * expit(lo_t)), float(low + span * expit(hi_t)),
                f"on the logit scale of [{low:.3g}, {high:.3g}]")
    lo, hi = jackknife_interval(value, loo, level, bias_corrected)
    # a value past the range by estimator noise (an unbiased CKA a hair below 0) stays inside its own interval
    low, high = min(low, value), max(high, value)
    clo, chi = float(np.clip(lo, low, high)), float(np.clip(hi, low, high))
    note = f"clipped to [{low:.3g}, {high:.3g}]" if (clo, chi) != (float(lo), float(hi)) else ""
    return clo, chi, note


@dataclass(frozen=True)
class Estimate:
    """A number with its 95 % interval (lo, hi), the interval's resampling ``unit`` ("batches", "images",
    "draws"), how many ``units`` there were and its ``method``; lo = hi = value with no unit: exact (a fixed
    reference). Fewer than :data:`MIN_UNITS` units: lo = hi = NaN, "too few ... for an interval". ``note`` says
    how the interval was kept inside the statistic's range or widened to its resolution (issue 33)."""

    value: float
    lo: float
    hi: float
    unit: str = ""
    units: int = 0
    method: str = ""
    note: str = ""
    bounds: tuple[float, float] | None = None  # the statistic's range, when it has one: an interval spanning it says so

    @classmethod
    def exact(cls, value: float) -> Estimate:
        return cls(float(value), float(value), float(value))

    @classmethod
    def from_samples(cls, value: float, samples: np.ndarray, level: float = LEVEL, unit: str = "",
                     units: int = 0, bounds: tuple[float, float] | None = None,
                     resolution: float = 0.0) -> Estimate:
        """Percentile bootstrap interval of (B,) resampled values; NaN when ``units`` is below MIN_UNITS.
        ``bounds``: the statistic's range (the interval is cut to it, said in the note); ``resolution``: the
        smallest step the statistic can take (a pixel of the grid, one token of a rate): an interval narrower than
        that is widened to it (:meth:`widened`)."""
        if unit and units < MIN_UNITS:
            return cls(float(value), np.nan, np.nan, unit, units, PERCENTILE)
        lo, hi = percentile_interval(np.asarray(samples, dtype=np.float64).ravel(), level)
        e = cls(float(value), float(lo), float(hi), unit, units, PERCENTILE)
        e = e.clipped(*bounds) if bounds is not None else e
        return e.widened(resolution, bounds)

    @classmethod
    def jackknife(cls, value: float, loo: np.ndarray, unit: str, level: float = LEVEL,
                  bounds: tuple[float, float] | None = None, resolution: float = 0.0,
                  bias_corrected: bool = False) -> Estimate:
        """Jackknife-t interval from the (T,) leave-one-unit-out values (``jackknife_indices``); with ``bounds``
        on the logit scale of that range (:func:`bounded_jackknife`); ``resolution`` as in :meth:`from_samples`.
        ``bias_corrected``: Tukey's interval, centred on the mean of the pseudo-values (:func:`tukey_estimate`, on
        the interval's scale) while ``value`` stays the plain estimate; should ``value`` fall outside, the interval
        is stretched to reach it, and the note says so."""
        loo = np.asarray(loo, dtype=np.float64).ravel()
        if bounds is None:
            lo, hi = jackknife_interval(value, loo, level, bias_corrected)
            note = ""
        else:
            lo, hi, note = bounded_jackknife(float(value), loo, *bounds, level=level, bias_corrected=bias_corrected)
        if bias_corrected and np.isfinite(lo) and np.isfinite(hi):
            note = _join("bias-corrected (Tukey)", note)
            if not lo <= value <= hi:
                lo, hi = min(lo, value), max(hi, value)
                note = _join(note, "stretched to reach the plain estimate")
        return cls(float(value), float(lo), float(hi), unit, len(loo), JACKKNIFE, note,
                   _range(bounds)).widened(resolution, bounds)

    def clipped(self, low: float, high: float) -> Estimate:
        """The interval cut to the statistic's range [low, high] (a rate, a chance-corrected rate): the cut never
        removes a possible value; the note says so when it cut anything."""
        lo, hi = float(np.clip(self.lo, low, high)), float(np.clip(self.hi, low, high))
        cut = (np.isfinite(self.lo) and lo != self.lo) or (np.isfinite(self.hi) and hi != self.hi)
        note = _join(self.note, f"clipped to [{low:.3g}, {high:.3g}]") if cut else self.note
        return Estimate(self.value, lo, hi, self.unit, self.units, self.method, note, _range((low, high)))

    def widened(self, resolution: float, bounds: tuple[float, float] | None = None) -> Estimate:
        """An interval narrower than ``resolution`` (the statistic's smallest step: every resample landed on the
        same grid point) widened to value ± resolution / 2 (inside ``bounds``), and the note says so: a zero-width
        interval would claim an exactness a quantile on a grid does not have. Exact values are left alone."""
        if not (resolution > 0 and self.unit and np.isfinite(self.lo) and np.isfinite(self.hi)):
            return self
        if self.hi - self.lo >= resolution:
            return self
        lo, hi = min(self.lo, self.value - resolution / 2), max(self.hi, self.value + resolution / 2)
        if bounds is not None:
            lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
        return Estimate(self.value, float(lo), float(hi), self.unit, self.units, self.method,
                        _join(self.note, f"below one step of the statistic ({resolution:.3g}): widened to ± half a "
                                         "step"), self.bounds if bounds is None else _range(bounds))

    @property
    def too_few(self) -> bool:
        """An interval was wanted but there were too few units for one."""
        return bool(self.unit) and self.units < MIN_UNITS

    @property
    def basis(self) -> str:
        """What the interval rests on, in words: "jackknife t over 8 batches" (and its note)."""
        if not self.unit:
            return "exact" if self.lo == self.hi == self.value else ""
        if self.too_few:
            return f"too few {self.unit} for an interval ({self.units} < {MIN_UNITS})"
        return _join(f"{self.method} over {self.units} {self.unit}", self.note)

    def text(self, fmt: str = ".3f") -> str:
        """"0.074 [0.055, 0.093]" in words that never read "nan": "not measured" for a NaN value, "too few
        batches for an interval" below MIN_UNITS, "(no interval)" when none was formed; more digits (up to 6)
        when the interval's ends would print as the value; "uninformative at this size" when the interval spans the
        statistic's whole range (``bounds``)."""
        return format_estimate(self.value, self.lo, self.hi, self.unit, self.units, fmt, self.bounds)

    @property
    def uninformative(self) -> bool:
        """The interval spans the statistic's whole range: these images say nothing about it (:func:`whole_range`)."""
        return whole_range(self.lo, self.hi, self.bounds)


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a and b else a or b


def _range(bounds) -> tuple[float, float] | None:
    return None if bounds is None else (float(bounds[0]), float(bounds[1]))


UNINFORMATIVE = "uninformative at this size: raise --images"


def whole_range(lo: float, hi: float, bounds: tuple[float, float] | None) -> bool:
    """Whether the interval [lo, hi] spans the whole finite range ``bounds`` of its statistic (within 1e-9 of the
    range's span): such an interval says nothing; more images can. A half-open range (a ratio's (0, ∞)) is never
    spanned, nor is any range by a missing interval."""
    if bounds is None or not all(np.isfinite([lo, hi, *bounds])):
        return False
    tol = 1e-9 * (bounds[1] - bounds[0])
    return bool(lo <= bounds[0] + tol and hi >= bounds[1] - tol)


def number(value: float, fmt: str = ".3f") -> str:
    """``format(value, fmt)`` with the minus sign "−" (U+2212) of words, not the hyphen "-" (issue 50)."""
    text = format(value, fmt)
    return "−" + text[1:] if text.startswith("-") else text


def format_estimate(value: float, lo: float, hi: float, unit: str = "", units: int = 0, fmt: str = ".3f",
                    bounds: tuple[float, float] | None = None) -> str:
    """The words of :meth:`Estimate.text` from plain numbers (a tour.csv row's columns): "0.074 [0.055, 0.093]",
    negative numbers with "−"; an interval that spans the statistic's whole range ``bounds`` (e.g. [0, 1] for CKA)
    ends "(uninformative at this size: raise --images)"."""
    if not np.isfinite(value):
        return "not measured"
    if unit and units < MIN_UNITS:
        return f"{number(value, fmt)} (too few {unit} for an interval: {units} < {MIN_UNITS})"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{number(value, fmt)} (no interval)"
    if lo == hi == value:
        return number(value, fmt)
    if fmt.endswith("f") and fmt[1:-1].isdigit():
        digits = int(fmt[1:-1])
        while digits < 6 and f"{lo:.{digits}f}" == f"{hi:.{digits}f}":
            digits += 1
        fmt = f".{digits}f"
    text = f"{number(value, fmt)} [{number(lo, fmt)}, {number(hi, fmt)}]"
    return f"{text} ({UNINFORMATIVE})" if whole_range(lo, hi, bounds) else text


def verdict(stat: Estimate, control: Estimate, direction: str = "greater", floor: float | None = None) -> str:
    """'shown' | 'not shown' | "can't tell" for the claim "stat is ``direction`` than control".

    shown: the statistic's interval lies wholly beyond the control's interval (and beyond ``floor``, a fixed
    reference such as zero, when given). not shown: the point estimate does not go the claimed way (at or on the
    wrong side of the control or the floor). can't tell: it goes the claimed way but the intervals overlap.
    """
    if direction not in ("greater", "less"):
        raise VitlabError(f"direction must be 'greater' or 'less', not '{direction}'")
    s = 1.0 if direction == "greater" else -1.0
    v, lo = s * stat.value, min(s * stat.lo, s * stat.hi)
    c, c_hi = s * control.value, max(s * control.lo, s * control.hi)
    refs = [(c, c_hi)] + ([(s * floor, s * floor)] if floor is not None else [])
    values = [v, lo, c, c_hi]
    if not all(np.isfinite(values)):
        return "can't tell"
    # within float64 round-off of the reference is no difference (a model against itself: 2e-16, not a claim)
    if any(v <= ref + ROUNDOFF * max(1.0, abs(ref)) for ref, _ in refs):
        return "not shown"
    if all(lo > ref_hi for _, ref_hi in refs):
        return "shown"
    return "can't tell"


# ---------------------------------------------------------------- CKA with per-batch terms and a permutation null


@dataclass
class CKAEvidence:
    """CKA (La, Lb) with its interval over batches (Fieller's with jackknife variances, :func:`cka_interval`; NaN
    below MIN_UNITS batches) and its permutation null."""

    cka: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    p_null: np.ndarray  # one-sided: the chance that shuffled pairings give this much similarity
    null_lo: np.ndarray
    null_hi: np.ndarray
    resamples: int
    permutations: int
    batches: int
    method: str = FIELLER

    def transposed(self) -> CKAEvidence:
        return CKAEvidence(self.cka.T, self.lo.T, self.hi.T, self.p_null.T, self.null_lo.T, self.null_hi.T,
                           self.resamples, self.permutations, self.batches, self.method)

    def interval_info(self) -> dict:
        """The interval's unit, how many and the method (CSV columns, run.json)."""
        return interval_columns("batches", self.batches, self.method)

    def columns(self, i: int, j: int) -> dict:
        """The CSV columns of one cell."""
        return {"cka_lo": float(self.lo[i, j]), "cka_hi": float(self.hi[i, j]), **self.interval_info(),
                "p_null": float(self.p_null[i, j]), "null_lo": float(self.null_lo[i, j]),
                "null_hi": float(self.null_hi[i, j])}


def interval_columns(unit: str, units: int, method: str) -> dict:
    """interval_unit, interval_units, interval_method: what every table with an interval says about it; the
    method reads "too few UNIT for an interval (T < 4)" when there was none."""
    if units < MIN_UNITS:
        method = f"too few {unit} for an interval ({units} < {MIN_UNITS})"
    return {"interval_unit": unit, "interval_units": int(units), "interval_method": method}


class BootstrapCKA(cka_mod.MinibatchCKA):
    """A :class:`~vitlab.stats.cka.MinibatchCKA` that also keeps every batch's HSIC terms and P permuted cross terms.

    Memory: T x (La·Lb + La + Lb) + T x P x La·Lb floats; P = 0 keeps no null. The permutations of batch t come
    from ``default_rng([seed, t])``, t the batch's ``key`` (its global number in the run's batch plan; by default
    the count of this accumulator's updates), so a run is reproducible and a batch gets the same permutations on
    whichever rank computes it. Under torchrun :func:`vitlab.engine.dist.all_reduce_accumulators` gathers every rank's
    terms and puts them back in key order (:meth:`keyed_terms`), so the resamples are a single process's.
    """

    def __init__(self, layers_a: list[str], layers_b: list[str], estimator: str = "unbiased", permutations: int = 0,
                 seed: int = 0):
        super().__init__(layers_a, layers_b, estimator)
        self.permutations, self.seed = int(permutations), int(seed)
        self.keys: list = []  # each batch's global number: ranks' terms are put back in this order (vitlab.engine.dist)
        self.sizes: list[int] = []  # each batch's images
        self.terms_xy: list[np.ndarray] = []
        self.terms_xx: list[np.ndarray] = []
        self.terms_yy: list[np.ndarray] = []
        self.null_xy: list[np.ndarray] = []

    def update(self, ca: np.ndarray, cb: np.ndarray | None = None, key: int | None = None) -> None:
        """One batch's centred Grams: the base class's sums (through :meth:`add`, which keeps the batch's terms)
        and, with ``permutations``, this batch's null. ``key``: the batch's global number (class docstring)."""
        key = len(self.terms_xy) if key is None else int(key)
        if self.permutations:
            self.null_xy.append(self._null(ca, ca if cb is None else cb, (len(self.layers_a), len(self.layers_b)),
                                           key))
        self._key = key
        try:
            super().update(ca, cb)
        finally:
            self._key = None

    def add(self, xy: np.ndarray, xx: np.ndarray, yy: np.ndarray, n: int, key: int | None = None) -> None:
        """One batch's HSIC estimates formed on the device (vitlab.stats.device_cka); keeps them as this batch's terms.
        The permutation null needs the centred Grams themselves: with ``permutations`` the runner calls update."""
        key = getattr(self, "_key", None) if key is None else int(key)
        super().add(xy, xx, yy, n)
        self.keys.append(len(self.terms_xy) if key is None else key)
        self.sizes.append(int(n))
        self.terms_xy.append(np.asarray(xy))
        self.terms_xx.append(np.asarray(xx))
        self.terms_yy.append(np.asarray(yy))

    def keyed_terms(self) -> list:
        """``[(key, (xy, xx, yy, n, null or None)), ...]``: this process's per-batch terms, for an ordered gather."""
        nulls = self.null_xy if self.null_xy else [None] * len(self.keys)
        return list(zip(self.keys, zip(self.terms_xy, self.terms_xx, self.terms_yy, self.sizes, nulls)))

    def load_keyed_terms(self, keyed: list) -> BootstrapCKA:
        """Become the accumulator of the batches ``keyed`` (every rank's terms, in key order): the sums are added
        again in that order, so they are a single process's to the last bit."""
        fresh = BootstrapCKA(self.layers_a, self.layers_b, self.estimator, self.permutations, self.seed)
        for key, (xy, xx, yy, n, null) in keyed:
            fresh.add(xy, xx, yy, n, key=key)
            if self.permutations:
                fresh.null_xy.append(null)
        self.__dict__.update(fresh.__dict__)
        return self

    def _null(self, ca: np.ndarray, cb: np.ndarray, shape: tuple, key: int) -> np.ndarray:
        """(P, La, Lb) cross HSIC of B's Grams under P random pairings of this batch (a loop of small GEMMs: on
        these CPUs gathering all P permuted Grams for one GEMM measured ~10x slower)."""
        rng = np.random.default_rng([self.seed, key])
        n = ca.shape[-1]
        null = np.empty((self.permutations,) + shape)
        for p in range(self.permutations):
            perm = rng.permutation(n)
            null[p] = cka_mod.hsic_all_pairs(ca, cb[:, perm][:, :, perm], self.estimator)
        return null

    def merge(self, other: BootstrapCKA) -> BootstrapCKA:
        super().merge(other)
        self.keys += other.keys
        self.sizes += other.sizes
        self.terms_xy += other.terms_xy
        self.terms_xx += other.terms_xx
        self.terms_yy += other.terms_yy
        self.null_xy += other.null_xy
        return self

    def terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(T, La, Lb), (T, La), (T, Lb): every batch's HSIC(K, L), HSIC(K, K), HSIC(L, L)."""
        if not self.terms_xy:
            raise VitlabError("no batch was accumulated: CKA needs at least one batch of 4 or more images")
        return np.stack(self.terms_xy), np.stack(self.terms_xx), np.stack(self.terms_yy)

    def replicates(self, idx: np.ndarray) -> np.ndarray:
        """(B, La, Lb) CKA of each resample of batches ``idx`` (B, T)."""
        return cka_replicates(*self.terms(), idx)

    def evidence(self, resamples: int, seed: int, level: float = LEVEL) -> CKAEvidence:
        """Interval (:func:`cka_interval`: Fieller's over batches; NaN below MIN_UNITS), p-value and null band of
        every cell.
        ``resamples`` and ``seed`` are recorded (the null's permutations are seeded at update)."""
        xy, xx, yy = self.terms()
        cka = ratio(xy.sum(0), xx.sum(0), yy.sum(0))
        lo, hi = cka_interval(xy, xx, yy, level)
        if self.null_xy:
            null = ratio(np.stack(self.null_xy).sum(0), xx.sum(0), yy.sum(0))  # (P, La, Lb)
            p = (1 + (null >= cka[None]).sum(0)) / (1 + null.shape[0])
            null_lo, null_hi = percentile_interval(null, level)
        else:
            p = null_lo = null_hi = np.full_like(cka, np.nan)
        return CKAEvidence(cka, lo, hi, p, null_lo, null_hi, resamples, self.permutations, len(xy))


def ratio(xy: np.ndarray, xx: np.ndarray, yy: np.ndarray) -> np.ndarray:
    """CKA from summed HSIC terms: (..., La, Lb), (..., La), (..., Lb); NaN where a self term is not positive."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (xx[..., :, None] > 0) & (yy[..., None, :] > 0)
        return np.where(ok, xy / np.sqrt(xx[..., :, None] * yy[..., None, :]), np.nan)


def cka_interval(xy: np.ndarray, xx: np.ndarray, yy: np.ndarray, level: float = LEVEL):
    """(La, Lb) interval of minibatch CKA from the per-batch terms (T, La, Lb), (T, La), (T, Lb): Fieller's, with
    jackknife variances of the contrast N − c·D over batches (:func:`vitlab.stats.fieller.fieller_interval`), cut to
    CKA's range [0, 1] (the whole range where the batches do not bound the denominator away from 0); NaN below
    :data:`MIN_UNITS` batches. It replaced the jackknife t, which covered 91-92 % under heavy tails (issue 40)."""
    units = len(xy)
    if units < MIN_UNITS:
        nan = np.full(xy.shape[1:], np.nan)
        return nan, nan.copy()
    idx = jackknife_indices(units)
    sx, sy = xx.sum(0), yy.sum(0)
    with np.errstate(invalid="ignore"):
        den = np.sqrt(sx[:, None] * sy[None, :])
        den_loo = np.sqrt(xx[idx].sum(1)[:, :, None] * yy[idx].sum(1)[:, None, :])
    lo, hi, _ = fieller_interval(xy.sum(0), den, xy[idx].sum(1), den_loo, level)
    ok = np.isfinite(ratio(xy.sum(0), sx, sy))  # a non-positive self term: no CKA, no interval
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def cka_replicates(xy: np.ndarray, xx: np.ndarray, yy: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(B, La, Lb) CKA of each resample ``idx`` (B, T) of the per-batch terms (T, La, Lb), (T, La), (T, Lb)."""
    return ratio(xy[idx].sum(1), xx[idx].sum(1), yy[idx].sum(1))


# ---------------------------------------------------------------- references in the statistic's own convention


def uniform_distance(dist: np.ndarray, prefix: int, renormalise: bool = False) -> float:
    """Mean attention distance of uniform attention over all N = prefix + Ns keys, in the statistic's convention.

    ``attention.mean_distance_per_image`` drops prefix keys; without renormalising, their mass counts as distance 0,
    so uniform attention scores Ns/N times the mean patch distance; renormalised rows score the mean itself.
    """
    d = np.asarray(dist, dtype=np.float64)
    ns = d.shape[0]
    mean = float(d.mean())
    return mean if renormalise else mean * ns / (ns + prefix)


def chance_level(positions: int) -> float:
    """Localization chance level: a token's best-matching patch is its own with probability 1/positions."""
    if positions < 1:
        raise VitlabError(f"a localization grid needs at least one position, not {positions}")
    return 1.0 / positions


def chance_corrected(rate, positions: int):
    """(rate − chance) / (1 − chance): 0 at chance, 1 when every token is localized (Cohen's kappa form)."""
    c = chance_level(positions)
    if c >= 1:
        return np.full_like(np.asarray(rate, dtype=np.float64), np.nan)
    return (np.asarray(rate, dtype=np.float64) - c) / (1 - c)


def localized_rate(cka: np.ndarray, prefix: int, keep: np.ndarray | None = None) -> np.ndarray:
    """(..., T, G) token-by-position CKA -> (...) fraction of spatial tokens whose best position is their own;
    ``keep`` (G,) bool: only those spatial tokens count (flagged high-norm tokens left out). A token with no defined
    cell (every CKA of its row NaN: constant features, e.g. identical images) has no best position and is not
    counted; with no token left the rate is NaN (undefined), never chance."""
    c = np.asarray(cka, dtype=np.float64)[..., prefix:, :]
    if c.shape[-2] != c.shape[-1]:
        raise VitlabError(f"{c.shape[-2]} spatial tokens do not match a grid of {c.shape[-1]} positions")
    finite = np.isfinite(c)
    best = np.argmax(np.where(finite, c, -np.inf), axis=-1)
    counted = finite.any(-1)  # (..., G)
    if keep is not None:
        counted = counted & np.asarray(keep, dtype=bool)
    hits, count = ((best == np.arange(c.shape[-1])) & counted).sum(-1), counted.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, hits / np.maximum(count, 1), np.nan)  # nothing left to count: NaN


def radius_fraction(maps: np.ndarray, mass: float = 0.5) -> np.ndarray:
    """(..., H, W) gradient maps -> (...) radius of the centred disc holding ``mass`` of each map, / sqrt(H·W)."""
    m = np.asarray(maps, dtype=np.float64)
    h, w = m.shape[-2:]
    yy, xx = np.mgrid[0:h, 0:w]
    r = np.hypot(yy + 0.5 - h / 2, xx + 0.5 - w / 2).ravel()
    order = np.argsort(r, kind="stable")
    flat = m.reshape(-1, h * w)[:, order]
    cum = np.cumsum(flat, axis=1)
    k = np.array([np.searchsorted(c, mass * c[-1]) if c[-1] > 0 else -1 for c in cum])
    out = np.where(k >= 0, r[order][np.clip(k, 0, None)], np.nan)
    return (out / np.sqrt(h * w)).reshape(m.shape[:-2])


def spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rank correlation of x (H,) with each row of y (..., H) (average ranks for ties)."""
    from scipy.stats import rankdata

    rx = rankdata(np.asarray(x, dtype=np.float64))
    ry = rankdata(np.asarray(y, dtype=np.float64), axis=-1)
    rx, ry = rx - rx.mean(), ry - ry.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ry @ rx) / np.sqrt((ry**2).sum(-1) * (rx**2).sum())
