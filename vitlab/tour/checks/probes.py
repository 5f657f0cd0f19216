"""Fig 11: CLS and GAP linear probes."""

from __future__ import annotations

from ...stats.evidence import Estimate
from .base import Check, _learned, make_check


def check_probes(margin: Estimate, twin: Estimate | None, detail: str, note: str | None = None) -> Check:
    """Fig 11: pattern: min(GAP − CLS at the first layer, CLS last − CLS first) > 0; learned: beyond the untrained
    twin's margin."""
    return make_check("probes", margin, Estimate.exact(0.0), "no margin", detail,
                      learned=_learned(margin, twin, "untrained twin's margin"), note=note)
