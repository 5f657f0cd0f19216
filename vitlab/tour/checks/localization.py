"""Figs 9-10: token-to-position localization, and CLS against GAP."""

from __future__ import annotations

from ...stats.evidence import Estimate
from .base import Check, _learned, make_check
from .words import GAP_CAVEAT


def check_localization(vit: Estimate, cnn: Estimate, detail: str, effect: Estimate | None = None,
                       twin: Estimate | None = None, note: str | None = None) -> Check:
    """Fig 9: pattern: chance-corrected localization of the ViT's last layer above the CNN's (and above chance);
    learned: the difference beyond the untrained twins'."""
    return make_check("localization", vit, cnn, "CNN chance-corrected rate", detail, floor=0.0,
                      learned=_learned(effect, twin, "untrained twins' ViT − CNN chance-corrected rate"), note=note)


def check_gap(cls: Estimate, gap: Estimate, detail: str, norm_moved: bool = True, note: str | None = None) -> Check:
    """Fig 10: chance-corrected localization of the CLS model above the GAP model's. ``norm_moved``: the GAP model's
    final LayerNorm sits after pooling (timm's default), so the pair differs in more than pooling (GAP_CAVEAT)."""
    caveat = f"; note: {GAP_CAVEAT}" if norm_moved else "; the two differ in pooling only, final LayerNorm in place"
    return make_check("gap", cls, gap, "GAP model's chance-corrected rate", f"{detail}{caveat}", note=note)
