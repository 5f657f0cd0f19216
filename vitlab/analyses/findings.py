"""Number formatting for the analysis pages, in one convention (issue 33). A page that speaks of a claim of the
paper shows the tour's own check for it (``vitlab.tour``, via app/claim.py; issue 37): nothing here words a claim.
A :class:`Finding` says what a page measured that no claim of the tour covers (a skip removed at inference, token
norms), with every number's 95 % interval, its unit and count.

One helper, :func:`interval_caption`, formats that convention ("bars: 95 % jackknife t over 4 batches of 16 images")
for every headline number and every error bar; :func:`say` writes an :class:`~vitlab.stats.evidence.Estimate` as
"0.62 [0.58, 0.66]" and never as "nan". Pure: no model, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..stats.evidence import JACKKNIFE, MIN_UNITS, Estimate, jackknife_indices, mean_half_width


@dataclass(frozen=True)
class Finding:
    """``ours``: the answer on these models (statistic in words, value, interval, unit and count); ``why``: in its
    place, why the page's chart cannot speak to the claim. Exactly one of them is set."""

    ours: str | None = None
    why: str | None = None


def interval_basis(unit: str, units: int, method: str = JACKKNIFE, batch_size: int | None = None) -> str:
    """What a 95 % interval rests on: "95 % jackknife t over 4 batches of 16 images"; below
    :data:`~vitlab.stats.evidence.MIN_UNITS` units: "no interval: too few batches for one (2 < 4)"."""
    if units < MIN_UNITS:
        return f"no interval: too few {unit} for one ({units} < {MIN_UNITS})"
    of = f" of {batch_size} images" if batch_size and unit == "batches" else ""
    return f"95 % {method} over {units} {unit}{of}"


def interval_caption(unit: str, units: int, method: str = JACKKNIFE, batch_size: int | None = None,
                     what: str = "bars") -> str:
    """The caption of error bars or bracketed intervals, in the one convention of every page:
    "bars: 95 % jackknife t over 4 batches of 16 images"."""
    return f"{what}: {interval_basis(unit, units, method, batch_size)}"


def _fmt(x: float, fmt: str) -> str:
    return format(x, fmt) if math.isfinite(x) else ("infinite" if math.isinf(x) else "undefined")


def say(e: Estimate, fmt: str = ".2f", unit: str = "") -> str:
    """"0.62 [0.58, 0.66]" (``unit`` after the value, e.g. " px"); "0.62 (no interval)" when there was none; an
    undefined value reads "undefined", never "nan"."""
    value = _fmt(e.value, fmt) + unit
    if not math.isfinite(e.value):
        return value
    if e.lo == e.hi == e.value and not e.unit:  # an exact reference; a resampled interval is shown even when flat
        return value
    if not (math.isfinite(e.lo) and math.isfinite(e.hi)):
        return f"{value} (no interval)"
    return f"{value} [{_fmt(e.lo, fmt)}, {_fmt(e.hi, fmt)}]"


def jackknife(value: float, loo: np.ndarray, unit: str) -> Estimate:
    """An Estimate from a point value and its (T,) leave-one-unit-out values (NaN interval below MIN_UNITS)."""
    return Estimate.jackknife(float(value), np.asarray(loo, dtype=np.float64).ravel(), unit)


def mean_over_images(values: np.ndarray) -> Estimate:
    """The mean of per-image values (n,) with its jackknife-t interval over the images."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return Estimate(float(v.mean()), np.nan, np.nan, "images", len(v), JACKKNIFE)
    return jackknife(v.mean(), v[jackknife_indices(len(v))].mean(1), "images")


def mean_from_moments(mean: float, std: float, n: int) -> Estimate:
    """A mean over ``n`` images from its population std (ddof 0): the jackknife-t interval of a mean
    (``mean_half_width``), so a page can give it without the per-image values."""
    half = mean_half_width(float(std), int(n))
    return Estimate(float(mean), float(mean - half), float(mean + half), "images", int(n), JACKKNIFE)


def rate_over_images(rate: float, n: int) -> Estimate:
    """A share of ``n`` images (0/1 outcomes, e.g. top-1 accuracy): the t interval of their mean, cut to [0, 1]."""
    rate = float(rate)
    return mean_from_moments(rate, math.sqrt(max(rate * (1 - rate), 0.0)), n).clipped(0.0, 1.0)
