"""Fig 7: skip against branch norms."""

from __future__ import annotations

import numpy as np

from ...stats.evidence import Estimate
from .base import Check, _learned, make_check


def finite_median(x: np.ndarray) -> np.ndarray:
    """(..., S, N) -> (...) median over the last two axes, infinite ratios (zero branches) left out."""
    import warnings

    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(x.shape[:-2] + (-1,))
    if np.isfinite(flat).all():  # the usual case; nanmedian's masked path costs ~10x more (coverage runs)
        return np.median(flat, axis=-1)
    with warnings.catch_warnings():  # all ratios infinite (zero-initialised branches): NaN, reported as can't tell
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(np.where(np.isfinite(flat), flat, np.nan), axis=-1)


def check_skips(vit: Estimate, cnn: Estimate, detail: str, effect: Estimate | None = None,
                twin: Estimate | None = None, note: str | None = None) -> Check:
    """Fig 7: pattern: the ViT's median ‖z‖/‖f(z)‖ above the CNN's; learned: the difference beyond the twins'."""
    return make_check("skips", vit, cnn, "CNN median ratio", detail,
                      learned=_learned(effect, twin, "untrained twins' ViT − CNN median ratio"), note=note)
