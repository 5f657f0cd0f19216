"""Figs 1-2, 5, 8 and 12: the claims read from CKA maps (uniformity, heads against the CNN, skip removal, data scale)."""

from __future__ import annotations

import numpy as np

from ...errors import VitlabError
from ...stats.evidence import Estimate
from .base import Check, Learned, make_check


def off_diagonal_mean(m: np.ndarray) -> np.ndarray:
    """(..., L, L) self-CKA -> (...) mean over pairs of different layers (non-finite cells left out)."""
    m = np.asarray(m, dtype=np.float64)
    if m.shape[-1] < 2:
        raise VitlabError("a self-CKA map needs at least two layers")
    mask = ~np.eye(m.shape[-1], dtype=bool) & np.isfinite(m)
    with np.errstate(invalid="ignore"):
        return np.where(mask, m, 0).sum((-2, -1)) / mask.sum((-2, -1))


def cross_block_mean(m: np.ndarray, block_of_layer: list[int], block: int) -> np.ndarray:
    """(..., L, L) self-CKA -> (...) mean CKA between layers before ``block`` and layers after it (Fig 8)."""
    b = np.asarray(block_of_layer)
    before, after = np.flatnonzero(b < block), np.flatnonzero(b > block)
    if not before.size or not after.size:
        raise VitlabError(f"block {block} needs layers on both sides to compare before with after")
    return np.nanmean(np.asarray(m, dtype=np.float64)[..., before[:, None], after[None, :]], axis=(-2, -1))


def depth_drop(curve: np.ndarray) -> np.ndarray:
    """(..., L) block-by-block CKA -> (...) lower-half mean minus upper-half mean (> 0: the top diverges more)."""
    c = np.asarray(curve, dtype=np.float64)
    half = max(1, c.shape[-1] // 2)
    return np.nanmean(c[..., :half], -1) - np.nanmean(c[..., half:], -1)


def check_uniformity(gap: Estimate, twin_gap: Estimate | None, detail: str, note: str | None = None) -> Check:
    """Figs 1-2: pattern: (ViT − ResNet) mean off-diagonal self-CKA > 0 (the ResNet is the null); learned: the gap
    beyond the untrained twins' gap."""
    extra = f"; untrained twins: {twin_gap.text()}" if twin_gap is not None else ""
    return make_check("cka", gap, Estimate.exact(0.0), "no gap, the ResNet as uniform as the ViT", detail + extra,
                      learned=Learned(gap, twin_gap, "untrained twins' gap") if twin_gap is not None else None,
                      note=note)


def check_head_rank(neg_rho: Estimate, p_value: float, null_hi: float, detail: str, twin: Estimate | None = None,
                    alpha: float = 0.05, note: str | None = None) -> Check:
    """Fig 5: pattern: −Spearman(head distance, CKA with the other model's lower layers) > 0 with a head-label
    permutation p < alpha; learned: beyond the untrained twins' −ρ."""
    text = f"{detail}; permutation p = {p_value:.3g}"
    force = "can't tell" if (p_value >= alpha and neg_rho.value > 0) else None
    return make_check("heads", neg_rho, Estimate.exact(null_hi), "the head-label permutation null's 97.5 % point",
                      text, floor=0.0, force=force,
                      learned=Learned(neg_rho, twin, "untrained twins' −ρ") if twin is not None else None, note=note)


def check_removal(noskip: Estimate, normal: Estimate, block: int, detail: str, note: str | None = None) -> Check:
    """Fig 8: mean self-CKA across block ``block`` lower in the model retrained without its skip."""
    return make_check("removal", noskip, normal, "the same model with its skips", detail, direction="less",
                      note=note)


def check_scale(excess: Estimate, detail: str, note: str | None = None) -> Check:
    """Fig 12: the smaller-data model's block-by-block CKA with the full model falls from the lower to the upper
    half more than the other-seed model's does (the smallest such excess over the less-data pairs), beyond its
    paired interval: two separately trained ViTs diverge at the top anyway, so a drop alone cannot isolate data."""
    return make_check("scale", excess, Estimate.exact(0.0), "no more than another seed", detail, note=note)
