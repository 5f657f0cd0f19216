"""Deletion and insertion curves of one image for an ordering of its cells, and their area (the maths of
``vitlab attribution``'s faithfulness scores).

    cell_scores(map (gh, gw), (H, W), cell_px, smooth) -> (ch, cw) mean score per cell
    cell_order(scores) -> (order of the cells, steps at which the curve is measured)
    curves(loaded, x (C, H, W), target, orders, cell_px, baseline, steps=...) -> (K, 2, n + 1) deletion, insertion
    auc(curves (..., n + 1)) -> (...) area over the fraction of cells

Faithfulness (Petsiuk et al. 2018, RISE, Sec. 4.1): the model's input is cut into square cells of ``cell_px``
pixels (default: the patch size of a token model, side // 14 for a CNN). A map is resampled to pixels (nearest for
token maps, bilinear for Grad-CAM) and averaged per cell; cells are ordered by that score, most important first.
**Ties** (cells of exactly equal score: the zeros of a discarding rollout, Grad-CAM's ReLU) go together: the model
is evaluated only after the whole tied group is removed (or inserted), and the curve is linear across the group,
so a score never depends on a random draw or on where the tied cells lie (a random tie order moved one zoo image's
deletion AUC by up to 0.047, issue 40). **Deletion** replaces the cells of the original image, in that order, by the
baseline; **insertion** starts from the baseline and restores them. The baseline fill is ``mean`` (0 in the
normalised input: the data set's mean pixel; the default) or ``black`` (pixel value 0). The curve is the softmax
probability of the target class after each step (n + 1 points); its score is the area under it over the fraction
of cells, by the trapezoid rule. Deletion: lower is better; insertion: higher is better.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.models import LoadedModel

BASELINES = ("mean", "black")


def default_cell_px(loaded: LoadedModel) -> int:
    """The patch side of a token model; side // 14 for a CNN (14 x 14 cells at 224 px)."""
    patch = taps_mod.patch_size(loaded.model)
    if patch is not None:
        return int(patch[0])
    _, h, w = loaded.data_config["input_size"]
    return max(1, int(np.sqrt(h * w)) // 14)


def cell_grid(hw: tuple[int, int], cell_px: int) -> tuple[int, int]:
    return (-(-hw[0] // cell_px), -(-hw[1] // cell_px))


def cell_scores(grid: np.ndarray, hw: tuple[int, int], cell_px: int, smooth: bool) -> np.ndarray:
    """A map (gh, gw) resampled to the input's pixels (nearest, or bilinear if ``smooth``), mean per cell (ch, cw)."""
    import torch
    import torch.nn.functional as F

    t = torch.as_tensor(np.asarray(grid, dtype=np.float64))[None, None]
    mode = {"mode": "bilinear", "align_corners": False} if smooth else {"mode": "nearest"}
    pix = F.interpolate(t, size=tuple(hw), **mode)
    return F.avg_pool2d(pix, cell_px, ceil_mode=True)[0, 0].numpy()  # partial edge cells: mean of their pixels


def cell_order(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cells by descending score (ties by cell index, which does not matter: see ``steps``), and the steps at
    which the curve is measured: 0, the end of each group of exactly tied cells, n. A flat map is one group."""
    flat = np.asarray(scores, dtype=np.float64).ravel()
    order = np.argsort(-flat, kind="stable")
    ends = np.flatnonzero(np.diff(flat[order]) != 0) + 1
    return order, np.concatenate([[0], ends, [flat.size]])


def _step_masks(order: np.ndarray, hw: tuple[int, int], cell_px: int):
    """(n + 1, 1, H, W) masks: step s covers the first s cells of ``order``."""
    import torch

    ch, cw = cell_grid(hw, cell_px)
    cell_of = (np.arange(hw[0])[:, None] // cell_px) * cw + np.arange(hw[1])[None, :] // cell_px  # (H, W)
    rank = np.empty(ch * cw, dtype=np.int64)
    rank[order] = np.arange(len(order))
    pix_rank = rank[cell_of]  # when each pixel's cell goes
    steps = np.arange(len(order) + 1)[:, None, None]
    return torch.as_tensor(pix_rank[None] < steps, dtype=torch.float32)[:, None]


def coarse_first(m: int) -> np.ndarray:
    """Positions 0..m of a curve's measured steps in the order they are measured: both ends, then coarse to fine
    (the multiples of the largest power of two first: 128, then 64 and 192, then 32, 96, ...), so that the points
    measured so far always span the whole curve and the straight lines between them are a fair first estimate."""
    inner = np.arange(1, m)
    return np.concatenate([[0, m], inner[np.lexsort((inner, -(inner & -inner)))]]).astype(np.int64)


def curves(loaded: LoadedModel, x, target: int, orders: Sequence[np.ndarray], cell_px: int, baseline: str,
           batch_size: int = 64, steps: Sequence[np.ndarray | None] | None = None,
           check: Callable[[str], None] | None = None, seen: Callable[[int, np.ndarray, int, int], None] | None = None,
           first: int = 16) -> np.ndarray:
    """Deletion and insertion curves of one image x (C, H, W) for each cell order: (len(orders), 2, n + 1).

    ``steps[k]`` (from ``cell_order``; None: every step): the model is run only after those steps, and the curve
    is linear in between (a tied group leaves together). The steps are measured coarse to fine (:func:`coarse_first`),
    deletion and insertion of a step in the same forward of at most ``batch_size`` masked images (``first`` in the
    first forward of each order: an early estimate comes soon). ``check(where)`` (``Run.check``) is called before
    each forward, so that a run asked to stop does so between them; ``seen(k, curve (2, n + 1), measured, of)`` after
    each: order k's curve over the ``measured`` of its ``of`` steps measured so far, straight between them (when
    ``measured == of``, the curve itself)."""
    import torch

    if baseline not in BASELINES:
        raise VitlabError(f"baseline must be one of {', '.join(BASELINES)}, not '{baseline}'")
    hw = tuple(x.shape[-2:])
    if baseline == "mean":
        base = torch.zeros_like(x)
    else:
        mean = torch.as_tensor(loaded.data_config["mean"], dtype=x.dtype, device=x.device)[:, None, None]
        std = torch.as_tensor(loaded.data_config["std"], dtype=x.dtype, device=x.device)[:, None, None]
        base = ((0 - mean) / std).expand_as(x)
    out = []
    for k, order in enumerate(orders):
        every = np.arange(len(order) + 1)
        when = every if steps is None or steps[k] is None else np.asarray(steps[k])
        masks = _step_masks(order, hw, cell_px)  # (n + 1, 1, H, W)
        seq = coarse_first(len(when) - 1)
        measured = np.full((2, len(when)), np.nan)  # deletion, insertion at each of ``when``
        done = 0
        while done < len(seq):
            pos = seq[done:done + max(1, (first if done == 0 else batch_size) // 2)]
            m = masks[torch.as_tensor(when[pos])].to(x.device)
            batch = torch.cat([x[None] * (1 - m) + base[None] * m, base[None] * (1 - m) + x[None] * m])
            if check is not None:
                check(f"masked images {2 * done + 1}-{2 * (done + len(pos))} of {2 * len(seq)}")
            with torch.no_grad(), taps_mod.model_lock(loaded.model):  # never under another run's surgery or capture
                measured[:, pos] = loaded.model(batch).double().softmax(-1)[:, target].cpu().numpy().reshape(2, -1)
            done += len(pos)
            if seen is not None:
                got = np.sort(seq[:done])
                seen(k, np.stack([np.interp(every, when[got], c[got]) for c in measured]), done, len(seq))
        out.append(np.stack([np.interp(every, when, c) for c in measured]))
    return np.stack(out)


def auc(curve: np.ndarray) -> np.ndarray:
    """Area under curves (..., n + 1) over the fraction of cells in [0, 1] (trapezoid rule)."""
    x = np.linspace(0.0, 1.0, curve.shape[-1])
    return np.trapezoid(curve, x, axis=-1)
