"""Localization with the uncertainty of near-ties: each token's lead of its own position over the best other.

Raghu et al. 2021 (Sec. 7, Figs 9-10) ask whether a token of a late layer is most similar to the input patch at its
own position. The tour counted the tokens whose best-matching position (the largest token-by-patch CKA) is their
own: a rate that moves in steps of 1/G. Its jackknife over batches collapses when every leave-one-batch-out value
gives the same count, and an interval widened to ± half a step in that case does not grow with the uncertainty of a
token whose own position and a neighbour's are nearly tied: on the 10,000 Fashion-MNIST test images one zoo:vit-cls
token is such a near-tie (0.4373 against 0.4472), subsets flip it, and that interval covered 76-90 % (issue 50).

Here every spatial token g gets a continuous **lead**

    lead_g = CKA(token g, patch g) − max_{h ≠ g} CKA(token g, patch h)        (CKA units; > 0: localized)

with a jackknife t interval over batches (the leave-one-batch-out CKA maps). The count follows: a token is
localized when its lead is positive; it is **surely** localized when its lead's whole interval is above 0, surely not
when it is below 0, and a **near-tie** when the interval holds 0. The count's 95 % interval runs from the surely
localized tokens to those plus the near-ties, so it is as wide as the near-ties make it, and no wider: it misses
only when a token's lead interval lies wholly on the wrong side of 0 (at most ~2.5 % per token whose population lead
is near 0, none for the others). The **mean lead** over tokens (a smooth function of the per-batch sums) is the
continuous statistic beside it, with its own jackknife t interval.

Shapes: T batches (leave-one-out rows), N tokens (prefix first), G positions (= spatial tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .evidence import LEVEL, MIN_UNITS, Estimate, chance_corrected, jackknife_interval

LEADS = "jackknife t of each token's lead"  # the method of the count's interval


def token_leads(cka: np.ndarray, prefix: int) -> np.ndarray:
    """(..., N, G) token-by-position CKA -> (..., G) each spatial token's own-position CKA minus its best other
    position's; NaN for a token whose own cell or every other cell is undefined (constant features)."""
    c = np.asarray(cka, dtype=np.float64)[..., prefix:, :]
    g = c.shape[-1]
    if c.shape[-2] != g:
        from ..errors import VitlabError

        raise VitlabError(f"{c.shape[-2]} spatial tokens do not match a grid of {g} positions")
    own = np.diagonal(c, axis1=-2, axis2=-1)
    if g < 2:
        return np.full(own.shape, np.nan)
    others = np.where(np.eye(g, dtype=bool), -np.inf, np.where(np.isfinite(c), c, -np.inf)).max(-1)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(own) & np.isfinite(others), own - others, np.nan)


@dataclass(frozen=True)
class LocalizationEvidence:
    """One layer's localization: the rate and its chance-corrected form with the near-tie interval, the mean lead
    with its jackknife t interval, and the tokens' leads (G,) with their intervals (NaN: not counted)."""

    rate: Estimate
    corrected: Estimate
    lead: Estimate
    leads: np.ndarray
    leads_lo: np.ndarray
    leads_hi: np.ndarray
    positions: int

    @property
    def counted(self) -> int:
        return int(np.isfinite(self.leads).sum())

    @property
    def localized(self) -> int:
        return int((self.leads > 0).sum())

    @property
    def ties(self) -> int:
        """Tokens whose lead's interval holds 0 (none without an interval)."""
        with np.errstate(invalid="ignore"):
            return int(((self.leads_lo <= 0) & (self.leads_hi > 0)).sum())

    def tie_words(self) -> str:
        """"1 of 16 tokens is a near-tie: its own position leads or trails by less than its interval" (or none)."""
        if not np.isfinite(self.rate.lo):
            return ""
        n, k = self.counted, self.ties
        if k == 0:
            return f"none of its {n} tokens is a near-tie: each one's lead is clear of 0 beyond its interval"
        its = "its own position leads or trails the best other by less than its interval"
        if k == 1:
            return f"1 of {n} tokens is a near-tie: {its}"
        return f"{k} of {n} tokens are near-ties: their own position leads or trails the best other by less than " \
               f"the interval"


def localization_evidence(point: np.ndarray, loo: np.ndarray, prefix: int, unit: str = "batches",
                          level: float = LEVEL) -> LocalizationEvidence:
    """From the (N, G) token-by-position CKA and its (T, N, G) leave-one-unit-out maps: the rate of tokens whose lead
    is positive, with the interval [surely localized, surely localized + near-ties] / counted (the module docstring),
    its chance-corrected form, and the mean lead with its jackknife t interval. Below :data:`MIN_UNITS` units there is
    no interval (NaN, "too few")."""
    leads = token_leads(point, prefix)  # (G,)
    loo_leads = token_leads(loo, prefix)  # (T, G)
    positions = leads.shape[-1]
    units = len(loo_leads)
    counted = np.isfinite(leads)
    n = int(counted.sum())
    lo, hi = jackknife_interval(leads, loo_leads, level)  # NaN below MIN_UNITS
    with np.errstate(invalid="ignore"):
        hits = int((leads[counted] > 0).sum())
        sure, possible = int((lo[counted] > 0).sum()), int((hi[counted] > 0).sum())
    if n == 0:
        rate = Estimate(float("nan"), float("nan"), float("nan"), unit, units, LEADS)
        return LocalizationEvidence(rate, rate, rate, leads, lo, hi, positions)
    if units < MIN_UNITS:
        r_lo = r_hi = float("nan")
    else:
        r_lo, r_hi = sure / n, possible / n
    rate = Estimate(hits / n, r_lo, r_hi, unit, units, LEADS, bounds=(0.0, 1.0))
    corr = Estimate(*(float(chance_corrected(x, positions)) for x in (rate.value, r_lo, r_hi)), unit, units, LEADS,
                    bounds=(float(chance_corrected(0.0, positions)), 1.0))
    with np.errstate(invalid="ignore"):
        mean_loo = np.nanmean(np.where(counted, loo_leads, np.nan), axis=-1)
    mean = Estimate.jackknife(float(leads[counted].mean()), mean_loo, unit)  # a lead's range is [−1, 1]: not cut
    return LocalizationEvidence(rate, corr, mean, leads, lo, hi, positions)


def interval_difference(a: Estimate, b: Estimate) -> Estimate:
    """a − b where a and b are sets of counts (:func:`localization_evidence`): every difference the two intervals
    allow, [a.lo − b.hi, a.hi − b.lo]; it covers whenever both cover (a union bound, so it is conservative)."""
    bounds = None if a.bounds is None or b.bounds is None else (a.bounds[0] - b.bounds[1], a.bounds[1] - b.bounds[0])
    return Estimate(a.value - b.value, a.lo - b.hi, a.hi - b.lo, a.unit, min(a.units, b.units), a.method,
                    bounds=bounds)


def from_terms(xy: np.ndarray, xx: np.ndarray, yy: np.ndarray, prefix: int,
               level: float = LEVEL) -> LocalizationEvidence:
    """:func:`localization_evidence` of a token-by-patch CKA map from its per-batch HSIC terms (T, N, G), (T, N),
    (T, G) (``BootstrapCKA.terms``): the map over all batches and the leave-one-batch-out maps."""
    from .evidence import cka_replicates, jackknife_indices, ratio

    xy, xx, yy = (np.asarray(a, dtype=np.float64) for a in (xy, xx, yy))
    point = ratio(xy.sum(0), xx.sum(0), yy.sum(0))
    return localization_evidence(point, cka_replicates(xy, xx, yy, jackknife_indices(len(xy))), prefix,
                                 level=level)
