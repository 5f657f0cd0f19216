"""CKA between two checkpoints of one architecture, block by block (Raghu et al. 2021, Sec. 7, Fig 12, App. G.1).

The paper trains ViTs on 3 %, 10 % and 100 % of JFT and plots, per block, the CKA between the representation of the
smaller-data model and of the full model: the diagonal of the A-vs-B minibatch CKA matrix over matching taps.
Any two checkpoints of the same architecture work: the zoo's data-scale models, hub pairs such as
``vit_base_patch32_224.augreg_in1k`` vs ``.augreg_in21k``, or a pretrained model and its fine-tuned version.

Every model's per-batch Grams are cached (``run.GramStatistic``), so a model shared by several pairs, or already
used in a CKA run over the same images, is not run again.

    pairs ─run.cka (all distinct models, one pass)─► CKA (La x Lb) per pair ─diagonal─► CheckpointComparison
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..engine.context import Run, RunInfo
from ..engine.run import CKAOptions, GramStatistic, cka
from ..errors import VitlabError
from ..inputs.data import ImageSource
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..stats.cka import CKAResult


@dataclass
class CheckpointComparison:
    """Per pair: the block-by-block CKA curve (the diagonal of its CKA matrix) and the full matrix."""

    pairs: list[tuple[str, str]]
    layers: list[list[str]]  # matching taps of each pair
    curves: list[np.ndarray]  # (L,) per pair
    matrices: list[CKAResult]
    images: int
    info: RunInfo
    warnings: list[str]

    def to_frame(self):
        """One row per pair and layer: pair, model_a, model_b, layer, layer_index, depth ((i+1)/L), cka."""
        import pandas as pd

        rows = []
        for k, ((a, b), layers, curve) in enumerate(zip(self.pairs, self.layers, self.curves)):
            for i, (layer, v) in enumerate(zip(layers, curve)):
                rows.append({"pair": f"{a} vs {b}", "model_a": a, "model_b": b, "layer": layer, "layer_index": i,
                             "depth": (i + 1) / len(layers), "cka": float(v), **self._interval(k, i)})
        return pd.DataFrame(rows)

    @property
    def batches(self) -> int:
        """Batches behind the intervals (0: none)."""
        ev = self.matrices[0].evidence if self.matrices else None
        return 0 if ev is None else int(ev.batches)

    def _interval(self, k: int, i: int) -> dict:
        """cka_lo, cka_hi and the interval's unit columns of layer ``i`` of pair ``k`` (none without evidence)."""
        ev = self.matrices[k].evidence
        if ev is None:
            return {}
        return {"cka_lo": float(ev.lo[i, i]), "cka_hi": float(ev.hi[i, i]), **ev.interval_info()}

    def curve_estimates(self, k: int):
        """(lower, upper) halves of pair ``k``'s block-by-block CKA: each the mean over its layers with its 95 %
        jackknife-t interval over batches."""
        from ..stats.evidence import Estimate
        from .findings import jackknife

        curve, res = self.curves[k], self.matrices[k]
        half = max(1, len(curve) // 2)
        out = []
        for cols in (slice(0, half), slice(half, None)):
            value = float(np.nanmean(curve[cols])) if len(curve[cols]) else np.nan
            if res.loo is None or not len(curve[cols]):
                out.append(Estimate(value, np.nan, np.nan, "batches", 0, ""))
                continue
            loo = np.nanmean(np.diagonal(res.loo, axis1=1, axis2=2)[:, cols], axis=-1)
            out.append(jackknife(value, loo, "batches"))
        return tuple(out)


    def headline(self) -> list[str]:
        lines = [f"{a} vs {b}: CKA {curve[0]:.3f} (first layer) ... {curve[-1]:.3f} (last layer)"
                 for (a, b), curve in zip(self.pairs, self.curves)]
        return lines + [f"over {self.images} images"]


@dataclass(frozen=True)
class CheckpointOptions(DataOptions):
    """Options of the checkpoint comparison (``vitlab compare-checkpoints``)."""

    tokens: str = option("all", "representation: all tokens flattened, CLS token, or mean of spatial tokens",
                         choices=("all", "cls", "gap"))


def compare_checkpoints(pairs: Sequence[tuple[LoadedModel, LoadedModel]], source: ImageSource,
                        opts: CheckpointOptions = CheckpointOptions(), run: Run | None = None
                        ) -> CheckpointComparison:
    """Block-by-block CKA of each (A, B) pair over the same images (cf. Fig 12).

    ``run.shard`` and ``run.reduce`` (``vitlab.dist``) run it under torchrun, as ``run.cka``.
    """
    if not pairs:
        raise VitlabError("give at least one pair of checkpoints")
    models: list[LoadedModel] = []
    index: dict[int, int] = {}
    for a, b in pairs:
        for m in (a, b):
            if id(m) not in index:
                index[id(m)] = len(models)
                models.append(m)
    stat = GramStatistic(tokens=opts.tokens)
    for a, b in pairs:
        ta, tb = stat.taps(a), stat.taps(b)
        if ta != tb:
            raise VitlabError(f"{a.label} and {b.label} are not the same architecture (their taps differ: "
                              f"{len(ta)} vs {len(tb)}, e.g. {ta[0]} / {tb[0]}): compare checkpoints of one model")
    report = cka(models, source, CKAOptions(opts.images, opts.batch_size, opts.shuffle), run, statistic=stat)
    matrices = [report.pair(index[id(a)], index[id(b)]) for a, b in pairs]
    return CheckpointComparison([(a.label, b.label) for a, b in pairs], [r.layers_a for r in matrices],
                                [np.diag(r.cka).copy() for r in matrices], matrices, report.images, report.info,
                                report.warnings)
