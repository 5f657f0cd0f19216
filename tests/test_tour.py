"""The paper-tour claim checks: each flips with its criterion on hand-made results whose answer is known."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from vitlab import tour
from vitlab.localization import LocalizationResult


def staged(n: int, stages: int) -> np.ndarray:
    """Self-CKA of a model in ``stages`` blocks: 1 within a stage, 0.2 across."""
    s = np.repeat(np.arange(stages), n // stages)
    return np.where(s[:, None] == s[None, :], 1.0, 0.2)


def test_cka_uniformity_prefers_the_more_uniform_model():
    uniform = np.full((6, 6), 0.9)
    np.fill_diagonal(uniform, 1.0)
    assert tour.cka_uniformity(uniform, staged(6, 3)).shown is True
    assert tour.cka_uniformity(staged(6, 3), uniform).shown is False
    v = tour.cka_uniformity(uniform, staged(6, 3))
    # off-diagonal mean of the staged map: 6 of 30 entries are 1, 24 are 0.2
    assert "0.900" in v.evidence and f"{(6 * 1 + 24 * 0.2) / 30:.3f}" in v.evidence


def test_attention_mixing():
    assert tour.attention_mixing(np.array([[5.0, 20, 40], [38, 40, 42]])).shown is True
    assert tour.attention_mixing(np.array([[38.0, 40, 42], [5, 20, 40]])).shown is False
    assert tour.attention_mixing(np.array([[1.0, 2.0]])).shown is None


def test_local_heads_like_convolutions():
    c = np.array([[0.8, 0.7], [0.5, 0.5], [0.2, 0.3], [0.6, 0.6]])  # local, middle, global, all heads
    assert tour.local_heads_like_convolutions(c).shown is True
    assert tour.local_heads_like_convolutions(c[[2, 1, 0, 3]]).shown is False
    assert tour.local_heads_like_convolutions(c[:2]).shown is None


def test_stronger_skips_leaves_out_infinite_ratios():
    vit = np.array([[5.0, 6.0], [np.inf, 7.0]])
    cnn = np.array([[1.0], [2.0], [np.inf]])
    v = tour.stronger_skips(vit, cnn)
    assert v.shown is True and "ViT 6.00" in v.evidence and "ResNet 1.50" in v.evidence
    assert tour.stronger_skips(np.array([np.inf]), cnn).shown is None


def test_sharp_change_after_removal():
    v = tour.sharp_change_after_removal(np.array([1.0, 1.0, 0.4, 0.5]), [0, 0, 1, 1], 1)
    assert v.shown is True and "0.450" in v.evidence
    assert tour.sharp_change_after_removal(np.ones(4), [0, 0, 1, 1], 1).shown is False
    assert tour.sharp_change_after_removal(np.ones(2), [0, 0], 3).shown is None
    result = SimpleNamespace(cross=SimpleNamespace(layers_a=["blocks.0.resid_mid", "blocks.0.resid_post",
                                                             "blocks.1.resid_mid", "blocks.1.resid_post"],
                                                   cka=np.diag([1.0, 1.0, 0.3, 0.2])),
                             removal=SimpleNamespace(block=1))
    assert tour.check_removal(result).shown is True


def _loc(model: str, cka: np.ndarray, prefix: int = 1) -> LocalizationResult:
    return LocalizationResult(model, "blocks.5.resid_post", (2, 2), prefix, cka, 16)


def test_check_localization_counts_tokens_best_matched_at_their_own_patch():
    own = np.vstack([np.full(4, 0.1), np.eye(4) * 0.8 + 0.1])  # CLS row, then each token best at its own patch
    half = own.copy()
    half[1] = [0.1, 0.9, 0.1, 0.1]  # token 0 best at patch 1
    half[2] = [0.9, 0.1, 0.1, 0.1]  # token 1 best at patch 0
    report = SimpleNamespace(results=[_loc("vit", own), _loc("cnn", half)])
    v = tour.check_localization(report, "vit", "cnn")
    assert v.shown is True and "vit 100%" in v.evidence and "cnn 50%" in v.evidence
    assert tour.check_localization(report, "cnn", "vit").shown is False


def test_check_probes_and_scale():
    rows = [{"model": "vit", "layer_index": i, "representation": r, "accuracy": a}
            for i, (c, g) in enumerate([(0.3, 0.6), (0.5, 0.6), (0.8, 0.7)]) for r, a in (("cls", c), ("gap", g))]
    report = SimpleNamespace(to_frame=lambda: pd.DataFrame(rows))
    v = tour.check_probes(report, "vit")
    assert v.shown is True and "CLS 30%" in v.evidence
    assert tour.check_probes(report, "other").shown is None
    comparison = SimpleNamespace(curves=[np.array([0.95, 0.9, 0.6, 0.5])], pairs=[("small", "full")])
    assert tour.check_scale(comparison).shown is True
    comparison.curves = [np.array([0.5, 0.6, 0.9, 0.95])]
    assert tour.check_scale(comparison).shown is False


def test_every_claim_names_a_figure():
    assert set(tour.CLAIMS) == {"cka", "distance", "heads", "receptive", "skips", "removal", "localization", "probes",
                                "scale"}
    assert all(c.figure.startswith("Fig") and c.claim for c in tour.CLAIMS.values())


@pytest.mark.parametrize("bad", [np.full((1, 1), 1.0), np.full((2, 2), np.nan)])
def test_cka_uniformity_needs_two_finite_layers(bad):
    from vitlab.errors import VitlabError

    with pytest.raises(VitlabError):
        tour.cka_uniformity(bad, staged(4, 2))
