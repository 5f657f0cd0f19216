"""Fig 6: receptive-field growth across the first block."""

from __future__ import annotations

from ...stats.evidence import Estimate
from .base import Check, _learned, make_check


def check_growth(vit_growth: Estimate, cnn_growth: Estimate, detail: str, effect: Estimate | None = None,
                 twin: Estimate | None = None, note: str | None = None) -> Check:
    """Fig 6: pattern: the first block's attention widens the field (50 % radius, fraction of the input side) more
    than the CNN's first block widens its own input's field; learned: that difference (``effect``) beyond the
    untrained twins'."""
    return make_check("receptive", vit_growth, cnn_growth, "CNN first block's growth", detail,
                      learned=_learned(effect, twin, "untrained twins' ViT − CNN growth"), note=note)
