"""The paper's claims, checked on the current models: one small test per figure of Raghu et al. 2021.

Each check reads an analysis result (never runs a model) and returns a :class:`Verdict`: whether these models
show the claim (None when the models cannot say, e.g. no ViT among them) and the numbers behind it, in words.
The criteria are deliberately plain comparisons (the paper's claims are qualitative); the evidence shows the
margins, so a reader can judge a narrow call. Used by the app's Paper tour.

Shapes: L layers (taps), H heads, S head subsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import VitlabError


@dataclass(frozen=True)
class Verdict:
    shown: bool | None  # None: these models cannot show or refute the claim
    evidence: str


@dataclass(frozen=True)
class Claim:
    figure: str
    title: str
    claim: str


CLAIMS: dict[str, Claim] = {
    "cka": Claim("Figs 1-2", "Representation structure",
                 "ViTs have a more uniform representation structure than ResNets: their layers are more similar "
                 "to each other, while ResNet similarity falls off in stages."),
    "distance": Claim("Figs 3-4", "Local and global attention",
                      "Lower ViT layers have both local and global heads; higher layers attend globally."),
    "heads": Claim("Fig 5", "Local heads resemble convolutions",
                   "The ViT's local attention heads are more similar to the ResNet's lower layers than its global "
                   "heads are."),
    "receptive": Claim("Fig 6", "Receptive fields",
                       "ViT receptive fields are larger than ResNet ones from the lowest layers on."),
    "skips": Claim("Fig 7", "Strong skip connections",
                   "ViT skip connections are much more influential than ResNet ones: the skip's norm dominates the "
                   "branch's (ratio ‖z‖/‖f(z)‖)."),
    "removal": Claim("Fig 8", "Skip removal",
                     "Removing a ViT block's skip connection changes the representations after that block sharply."),
    "localization": Claim("Figs 9-10", "Spatial localization",
                          "ViT tokens in higher layers keep their own position's information better than ResNet "
                          "positions; training with GAP instead of a CLS token weakens this."),
    "probes": Claim("Fig 11", "Linear probes",
                    "In a CLS-trained ViT the CLS token becomes a good representation only in the higher layers, "
                    "while the mean of the spatial tokens is better in the lower ones."),
    "scale": Claim("Fig 12", "Data scale",
                   "With less training data, the higher layers' representations differ most from the full-data "
                   "model's."),
}


def _off_diagonal_mean(m: np.ndarray) -> float:
    m = np.asarray(m, dtype=np.float64)
    mask = ~np.eye(m.shape[0], dtype=bool) & np.isfinite(m)
    if not mask.any():
        raise VitlabError("a self-CKA map needs at least two layers with finite CKA")
    return float(m[mask].mean())


def cka_uniformity(vit_self: np.ndarray, cnn_self: np.ndarray) -> Verdict:
    """Figs 1-2: mean off-diagonal self-CKA (L, L) of the ViT above the ResNet's."""
    v, c = _off_diagonal_mean(vit_self), _off_diagonal_mean(cnn_self)
    return Verdict(v > c, f"mean CKA between different layers: ViT {v:.3f}, ResNet {c:.3f}")


def attention_mixing(distance_px: np.ndarray) -> Verdict:
    """Figs 3-4: (L, H) mean distances; the first block's heads spread wider and sit lower than the last's."""
    d = np.asarray(distance_px, dtype=np.float64)
    if d.shape[0] < 2:
        return Verdict(None, "only one block measured")
    first, last = d[0], d[-1]
    spread_first, spread_last = float(np.ptp(first)), float(np.ptp(last))
    shown = bool(spread_first > spread_last and first.mean() < last.mean())
    return Verdict(shown, f"first block: heads from {first.min():.1f} to {first.max():.1f} px (mean {first.mean():.1f}); "
                          f"last block: {last.min():.1f} to {last.max():.1f} px (mean {last.mean():.1f})")


def local_heads_like_convolutions(subset_cka: np.ndarray) -> Verdict:
    """Fig 5: (S, Lb) CKA of head subsets, most local first, all heads last; local above global (mean over Lb)."""
    c = np.asarray(subset_cka, dtype=np.float64)
    if c.shape[0] < 3:
        return Verdict(None, "fewer than two head subsets")
    local, global_ = float(np.nanmean(c[0])), float(np.nanmean(c[-2]))
    return Verdict(local > global_, f"mean CKA with the other model's layers: most local heads {local:.3f}, "
                                    f"most global heads {global_:.3f}")


def wider_receptive_fields(vit_radius_frac: float, cnn_radius_frac: float) -> Verdict:
    """Fig 6: radius holding half the gradient of the first block, as a fraction of the image side."""
    return Verdict(bool(vit_radius_frac > cnn_radius_frac),
                   f"first block's 50 % radius: ViT {vit_radius_frac:.1%}, ResNet {cnn_radius_frac:.1%} of the image side")


def _finite_median(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(np.median(x)) if x.size else float("nan")


def stronger_skips(vit_ratio: np.ndarray, cnn_ratio: np.ndarray) -> Verdict:
    """Fig 7: median ‖z‖/‖f(z)‖ over sublayers and tokens (infinite ratios left out), ViT above ResNet."""
    v, c = _finite_median(vit_ratio), _finite_median(cnn_ratio)
    if not (np.isfinite(v) and np.isfinite(c)):
        return Verdict(None, "no finite norm ratios")
    return Verdict(v > c, f"median norm ratio: ViT {v:.2f}, ResNet {c:.2f}")


def sharp_change_after_removal(cross_diag: np.ndarray, block_of_layer: list[int], block: int) -> Verdict:
    """Fig 8: CKA of each layer with itself, unmodified vs ablated (L,); lower after the block than before it."""
    d = np.asarray(cross_diag, dtype=np.float64)
    idx = np.asarray(block_of_layer)
    before, after = d[idx < block], d[idx >= block]
    if not after.size:
        return Verdict(None, f"no layer at or after block {block}")
    b = float(before.mean()) if before.size else 1.0  # layers before the block are untouched: CKA 1
    a = float(after.mean())
    return Verdict(a < b, f"CKA of each layer with its ablated self: before block {block} {b:.3f}, "
                          f"from block {block} on {a:.3f} (lowest {after.min():.3f})")


def better_localization(first_rate: float, second_rate: float, first: str, second: str) -> Verdict:
    """Figs 9-10: fraction of spatial tokens of the last layer whose best-matching input patch is their own."""
    return Verdict(bool(first_rate > second_rate),
                   f"last layer, tokens localized at their own patch: {first} {first_rate:.0%}, {second} {second_rate:.0%}")


def cls_late_gap_early(cls_acc: np.ndarray, gap_acc: np.ndarray) -> Verdict:
    """Fig 11: probe accuracy per layer (L,) of the CLS token and of GAP; GAP better first, CLS improves by the end."""
    cls_acc, gap_acc = np.asarray(cls_acc, dtype=np.float64), np.asarray(gap_acc, dtype=np.float64)
    if cls_acc.size < 2:
        return Verdict(None, "fewer than two probed layers")
    shown = bool(gap_acc[0] > cls_acc[0] and cls_acc[-1] > cls_acc[0])
    return Verdict(shown, f"first layer: CLS {cls_acc[0]:.0%}, GAP {gap_acc[0]:.0%}; "
                          f"last layer: CLS {cls_acc[-1]:.0%}, GAP {gap_acc[-1]:.0%}")


def higher_layers_diverge(curves: list[np.ndarray], pairs: list[str]) -> Verdict:
    """Fig 12: per pair, the block-by-block CKA (L,) of the smaller-data vs the full model ends lower than it starts."""
    if not curves:
        return Verdict(None, "no checkpoint pair")
    parts, shown = [], True
    for name, c in zip(pairs, curves):
        c = np.asarray(c, dtype=np.float64)
        lower, upper = c[: max(1, len(c) // 2)].mean(), c[len(c) // 2:].mean()
        shown &= bool(upper < lower)
        parts.append(f"{name}: lower half {lower:.3f}, upper half {upper:.3f}")
    return Verdict(shown, "; ".join(parts))


# ------------------------------------------------------------------ the same checks, read from analysis results


def check_cka(report, vit: int, cnn: int) -> Verdict:
    """Figs 1-2 from a ``run.CKAReport`` over both models (``vit``, ``cnn``: their indices)."""
    return cka_uniformity(report.pair(vit, vit).cka, report.pair(cnn, cnn).cka)


def check_distance(result) -> Verdict:
    """Figs 3-4 from an ``attention.AttentionDistanceResult``."""
    return attention_mixing(result.distance_px)


def check_heads(result) -> Verdict:
    """Fig 5 from a ``heads.HeadSubsetResult``."""
    return local_heads_like_convolutions(result.cka)


def _radius_frac(rf) -> float:
    _, h, w = rf.maps.shape
    return float(rf.radius_px(0.5)[0] / np.sqrt(h * w))


def check_receptive(vit_rf, cnn_rf) -> Verdict:
    """Fig 6 from two ``receptive.ReceptiveFieldResult`` (each model's own input size)."""
    return wider_receptive_fields(_radius_frac(vit_rf), _radius_frac(cnn_rf))


def check_skips(report, vit_label: str, cnn_label: str) -> Verdict:
    """Fig 7 from a ``skips.SkipReport``."""
    by = {r.model: r for r in report.results}
    return stronger_skips(by[vit_label].ratio, by[cnn_label].ratio)


def check_removal(result) -> Verdict:
    """Fig 8 from an ``interventions.SkipRemovalResult`` over ViT/Mixer taps named ``blocks.{i}.*``."""
    blocks = [int(layer.split(".")[1]) for layer in result.cross.layers_a]
    return sharp_change_after_removal(np.diag(result.cross.cka), blocks, result.removal.block)


def check_localization(report, first_label: str, second_label: str) -> Verdict:
    """Figs 9-10 from a ``localization.LocalizationReport``: the last layer of each model."""
    last = {r.model: r for r in report.results}  # results are in layer order: the last one wins
    return better_localization(last[first_label].rate(), last[second_label].rate(),
                               first_label, second_label)


def check_probes(report, vit_label: str) -> Verdict:
    """Fig 11 from a ``probes.ProbeReport`` with 'cls' and 'gap' rows for the ViT."""
    frame = report.to_frame()
    part = frame[frame["model"] == vit_label].sort_values("layer_index")
    cls_acc = part[part["representation"] == "cls"]["accuracy"].to_numpy()
    gap_acc = part[part["representation"] == "gap"]["accuracy"].to_numpy()
    if not cls_acc.size or len(cls_acc) != len(gap_acc):
        return Verdict(None, f"{vit_label} has no CLS and GAP probes")
    return cls_late_gap_early(cls_acc, gap_acc)


def check_scale(comparison) -> Verdict:
    """Fig 12 from a ``checkpoints.CheckpointComparison``."""
    return higher_layers_diverge(comparison.curves, [f"{a} vs {b}" for a, b in comparison.pairs])
