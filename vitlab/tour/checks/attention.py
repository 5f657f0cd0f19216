"""Figs 3-4: local and global attention heads."""

from __future__ import annotations

import numpy as np

from ...stats.evidence import Estimate
from .base import Check, Learned, make_check


def head_locality(distance: np.ndarray, uniform: float) -> np.ndarray:
    """(..., H) head distances -> (...) 1 − (most local head) / (uniform attention's distance, same convention)."""
    return 1.0 - np.asarray(distance, dtype=np.float64).min(-1) / uniform


def check_locality(locality: Estimate, twin: Estimate | None, margin: float, detail: str,
                   note: str | None = None) -> Check:
    """Figs 3-4: pattern: the most local first-block head attends closer than uniform attention (same convention,
    locality 0) by at least ``margin`` (a fraction of the uniform distance), beyond its interval; learned: more
    local than the untrained twin's most local head."""
    return make_check("distance", locality, Estimate.exact(0.0), f"uniform attention at 0, local from {margin:.2f}",
                      f"{detail}; a head counts as local when it attends ≥ {margin:.0%} closer than uniform",
                      floor=margin, learned=Learned(locality, twin, "untrained twin's most local head")
                      if twin is not None else None, note=note)
