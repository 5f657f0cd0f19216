"""How much does one CKA value depend on a few directions, a few batches, or one image?

    sensitivity((a, b), source, layer_a, layer_b, SensitivityOptions(), run) -> SensitivityResult

For one cell of a CKA map (linear, unbiased minibatch CKA of ``layer_a`` of model A and ``layer_b`` of model B),
from the cached per-batch Grams (no forward pass when they are cached):

- remove the top-k principal components of one side (k = 1, 2, 5, 10): Ding et al. 2021 show CKA can be carried
  by a few high-variance directions. PCs are those of each batch (``measures.remove_top_pcs`` on the batch's
  Gram), the unit the minibatch estimator works in;
- leave one batch out (the largest change over batches) and leave one image out (the most influential image:
  the largest change when its row and column leave its batch's Grams; Davari et al. 2023 show single images
  can move CKA);
- the share of each side's Gram energy (squared Frobenius norm) in its top direction, averaged over batches.

Under torchrun each rank computes its share of the batches' Grams; the cell's Grams (n x n per batch) are
gathered in batch order and every check runs on them as in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.context import Run
from ..engine.run import GramStatistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import ImageSource, select
from ..options import DataOptions, option
from ..stats import cka as cka_mod
from ..stats import measures as ms


@dataclass(frozen=True)
class SensitivityOptions(DataOptions):
    """Options of ``vitlab cka-sensitivity``: the cell (a tap of each model) and the checks."""

    layer_a: str = option("", "tap of the first model (see `vitlab taps`)", required=True)
    layer_b: str = option("", "tap of the other model", required=True)
    tokens: str = option("all", "representation: all tokens flattened, CLS token, or mean of spatial tokens",
                         choices=("all", "cls", "gap"))
    pcs: tuple[int, ...] = option((1, 2, 5, 10), "numbers of top principal components to remove", kind="ints")


def _terms(ga: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """(..., n, n) Grams of A and B -> (..., 3) unbiased HSIC_1 of (A, B), (A, A), (B, B)."""
    ua, ub = cka_mod.u_center(ga), cka_mod.u_center(gb)
    n = ga.shape[-1]
    norm = n * (n - 3)
    return np.stack([(ua * ub).sum((-1, -2)), (ua * ua).sum((-1, -2)), (ub * ub).sum((-1, -2))], -1) / norm


def _cka(t: np.ndarray) -> float:
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(t[..., 0] / np.sqrt(t[..., 1] * t[..., 2]))


def _leave_one_image_out(ga: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """(n, n) Grams -> (n, 3) the batch's HSIC terms with image i removed (linear HSIC_1 does not depend on the
    batch mean the Gram was centred with, so the submatrix is a valid Gram of the remaining images)."""
    n = ga.shape[-1]
    keep = np.array([np.delete(np.arange(n), i) for i in range(n)])
    return _terms(ga[keep[:, :, None], keep[:, None, :]], gb[keep[:, :, None], keep[:, None, :]])


@dataclass
class SensitivityResult:
    model_a: str
    model_b: str
    layer_a: str
    layer_b: str
    cka: float
    rows: list[dict]
    images: int
    batches: int

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def headline(self) -> list[str]:
        f = self.to_frame()
        return [f[["check", "side", "k", "value", "change", "detail"]].to_string(index=False), self.summary()]

    def summary(self) -> str:
        f = self.to_frame()
        moves = f[f["check"] != "top-direction energy share"]
        worst = moves.iloc[int(np.nanargmax(np.abs(moves["change"].to_numpy())))] if len(moves) > 1 else None
        text = f"CKA {self.cka:.4f}"
        if worst is not None:
            text += f"; the largest change is {worst['change']:+.4f} ({worst['check']}, {worst['side']})"
        pcs = f[f["check"] == "remove top PCs"]
        negative = pcs[pcs["value"] < 0]
        if len(negative):
            text += (f"; below 0 after removing top PCs (k = {', '.join(str(k) for k in sorted(set(negative['k'])))})"
                     ": each batch's own top PCs are removed, a projection chosen from the same images, which "
                     "biases minibatch CKA downwards, the more the smaller the batch (on simulated features whose "
                     "CKA after removing 5 PCs is 0.50 at 1024 images, batches of 16 read -0.18, of 64 0.31): "
                     "not anti-similarity; read these rows at larger batches")
        skipped = pcs[pcs["value"].isna()]
        if len(skipped):
            text += (f"; k = {', '.join(str(k) for k in sorted(set(skipped['k'])))} not run: more than half of a "
                     "batch's directions")
        return text


def _collect(models, source, layer_a, layer_b, opts, run):
    stats = [[GramStatistic(None, opts.tokens)] for _ in models]
    idx = []
    for m, layer in zip(models, (layer_a, layer_b)):
        names = taps_mod.default_taps(m.model)
        if layer not in names:
            raise VitlabError(f"{m.label} has no CKA tap '{layer}'; its taps are {', '.join(names)}")
        idx.append(names.index(layer))
    kept = []  # per batch: (batch number, (Gram of A's tap, Gram of B's tap, image ids))
    for batch, found in stream(models, source, select(source, opts.images, opts.shuffle), opts.batch_size, stats,
                               run):
        kept.append((batch.index, (np.asarray(found[0]["gram"]["grams"][idx[0]], dtype=np.float64),
                                   np.asarray(found[1]["gram"]["grams"][idx[1]], dtype=np.float64),
                                   list(batch.ids))))
    # torchrun: the cell's per-batch Grams (n x n each, small) of every rank in batch order, so the leave-one-out
    # checks and batch numbers below are a single process's
    kept = run.gather_ordered(kept, "cka-sensitivity batches")
    ga, gb, ids = ([k[i] for k in kept] for i in range(3))
    if not ga:
        raise VitlabError("no batch of 4 or more readable images: sensitivity needs at least one")
    return ga, gb, ids


def sensitivity(a, b, source: ImageSource, opts: SensitivityOptions, run: Run | None = None) -> SensitivityResult:
    """The checks above for the cell (``opts.layer_a`` of model a, ``opts.layer_b`` of model b)."""
    run = run or Run()
    models, layer_a, layer_b = [a, b], opts.layer_a, opts.layer_b
    ga, gb, ids = _collect(models, source, layer_a, layer_b, opts, run)
    with ms.blas_single_thread():
        per_batch = np.stack([_terms(a, b) for a, b in zip(ga, gb)])  # (batches, 3)
        total = per_batch.sum(0)
        base = _cka(total)
        rows = [{"check": "baseline", "side": "", "k": 0, "value": base, "change": 0.0, "detail": ""}]
        rows += _pc_rows(ga, gb, base, opts.pcs)
        rows += _leave_out_rows(ga, gb, ids, per_batch, total, base)
        for side, grams in (("A", ga), ("B", gb)):
            share = float(np.mean([ms.top_energy_share(g[None])[0] for g in grams]))
            rows.append({"check": "top-direction energy share", "side": side, "k": 1, "value": share,
                         "change": float("nan"), "detail": "λ1² / Σλ² of the centred Gram, mean over batches"})
    return SensitivityResult(models[0].label, models[1].label, layer_a, layer_b, base, rows,
                             sum(len(i) for i in ids), len(ids))


def max_pcs(n: int) -> int:
    """The most top PCs removed from a batch of ``n`` images: at least half of its n − 1 centred directions stay
    (issue 33: k = 10 on 16-image batches read −0.49). Removing a batch's own PCs biases minibatch CKA downwards even
    within this limit (simulated: a true 0.50 after 5 PCs reads −0.18 at batches of 16, 0.31 at 64, 0.50 at 1024);
    ``SensitivityResult.summary`` says so when a value falls below 0."""
    return (n - 1) // 2


def _pc_rows(ga, gb, base, pcs) -> list[dict]:
    rows = []
    n_min = min(g.shape[-1] for g in ga)
    for side in ("A", "B"):
        for k in pcs:
            if k > max_pcs(n_min):
                rows.append({"check": "remove top PCs", "side": side, "k": int(k), "value": float("nan"),
                             "change": float("nan"), "detail": f"not run: a batch of {n_min} images has {n_min - 1} "
                             f"directions after centring; removing {k} would leave fewer than half of them, where "
                             f"the unbiased estimator is mostly noise (k ≤ {max_pcs(n_min)} here; batches of "
                             f"{2 * k + 1} or more images allow k = {k})"})
                continue
            t = sum(_terms(ms.remove_top_pcs(a[None], k)[0] if side == "A" else a,
                           ms.remove_top_pcs(b[None], k)[0] if side == "B" else b) for a, b in zip(ga, gb))
            v = _cka(t)
            rows.append({"check": "remove top PCs", "side": side, "k": int(k), "value": v, "change": v - base,
                         "detail": "per-batch principal components" + (
                             "; below 0: downward bias of removing the batch's own PCs, not "
                             "anti-similarity" if v < 0 else "")})
    return rows


def _leave_out_rows(ga, gb, ids, per_batch, total, base) -> list[dict]:
    rows = []
    if len(ga) > 1:
        lobo = np.array([_cka(total - t) for t in per_batch])
        b = int(np.nanargmax(np.abs(lobo - base)))
        rows.append({"check": "leave one batch out", "side": "both", "k": 0, "value": float(lobo[b]),
                     "change": float(lobo[b] - base), "detail": f"batch {b} ({len(ga)} batches; CKA range "
                     f"{np.nanmin(lobo):.4f} to {np.nanmax(lobo):.4f})"})
    best = (0.0, float("nan"), "")
    for b, (a, g) in enumerate(zip(ga, gb)):
        if a.shape[-1] - 1 < cka_mod.MIN_UNBIASED_BATCH:
            continue
        loo = _leave_one_image_out(a, g)  # (n, 3)
        vals = np.array([_cka(total - per_batch[b] + t) for t in loo])
        i = int(np.nanargmax(np.abs(vals - base)))
        if abs(vals[i] - base) >= abs(best[0]) or best[2] == "":
            best = (float(vals[i] - base), float(vals[i]), ids[b][i])
    if best[2]:
        rows.append({"check": "leave one image out", "side": "both", "k": 0, "value": best[1], "change": best[0],
                     "detail": f"most influential image: {best[2]}"})
    return rows
