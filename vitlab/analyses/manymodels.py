"""Many models at once: a models x models similarity matrix per relative depth, and a 2-D map of the models.

    compare_models(models, source, CompareOptions(depths=(0.25, 0.5, 0.75, 1.0), measure="cka"), run)
        -> ManyModelsResult     matrices (D, M, M), classical-MDS coordinates (D, M, 2)

Relative depth t in (0, 1] picks tap ceil(t L) - 1 of a model's L default CKA taps (t = 1: the last one). The
per-batch statistics are the same cached entries as ``vitlab cka`` and ``vitlab similarity`` (all default taps),
so each model runs once over the images however many pairs and depths it is in, and a rerun runs no model.
The models at one depth are stacked as the "layers" of one representation, so every pair comes from one call of
the same kernels as the layer x layer maps.

The embedding is Torgerson's classical MDS of the distances ``measures.as_distance`` (Procrustes' angle; for a
similarity s, sqrt(2 - 2 s)); PWCCA, which is not symmetric, is averaged with its transpose first.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.context import Run
from ..engine.run import stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import ImageSource, select
from ..options import option
from ..stats import measures as ms
from . import cca_features as cf
from .similarity import (
    MeasureParams,
    PairAccumulator,
    SimilarityOptions,
    _Derived,
    _min_batch,
    check_params,
    statistics_for,
)


def parse_depths(text: str | Sequence[float]) -> tuple[float, ...]:
    """'0.25,0.5,1' or a sequence -> checked relative depths in (0, 1]."""
    try:
        vals = [float(v) for v in (text.split(",") if isinstance(text, str) else text) if str(v).strip()]
    except ValueError:
        raise VitlabError(f"--depth takes comma-separated numbers in (0, 1], e.g. 0.25,0.5,1; not '{text}'") from None
    if not vals or any(not 0 < v <= 1 for v in vals):
        raise VitlabError(f"relative depths must lie in (0, 1] (1 = the last tap), not {vals}")
    return tuple(vals)


def tap_at(taps: list[str], depth: float) -> str:
    return taps[max(0, math.ceil(depth * len(taps)) - 1)]


@dataclass(frozen=True)
class CompareOptions(MeasureParams):
    """Options of ``vitlab compare-models``: the measure's parameters, which measure, which depths."""

    depths: tuple[float, ...] | str = option((0.25, 0.5, 0.75, 1.0), "relative depths in (0, 1], comma-separated; "
                                             "t picks tap ceil(t L) - 1 of L", flag="--depth")
    measure: str = option("cka", "the measure", choices=tuple(ms.MEASURES))

    def __post_init__(self):
        ms.check_measures([self.measure])
        check_params(self)
        parse_depths(self.depths)

    def similarity_options(self) -> SimilarityOptions:
        common = {f.name: getattr(self, f.name) for f in dataclasses.fields(MeasureParams)}
        return SimilarityOptions(measures=(self.measure,), **common)


@dataclass
class ManyModelsResult:
    labels: list[str]
    depths: tuple[float, ...]
    taps: list[list[str]]  # [model][depth]
    measure: str
    matrices: np.ndarray  # (D, M, M) the measure
    coords: np.ndarray  # (D, M, 2) classical MDS
    explained: np.ndarray  # (D,) share of B's positive eigenvalue mass in the 2-D plane
    images: int
    batches: int
    loo: np.ndarray | None = None  # (D, T, M, M) the measure with each batch left out (Gram measures; jackknife)
    cca: dict = field(default_factory=dict)  # SVCCA/PWCCA: which features, and a sketch's expected shift
    warnings: list[str] = field(default_factory=list)

    def estimate(self, k: int, i: int, j: int):
        """The measure between models i and j at depth k with its 95 % jackknife-t interval over batches (none for
        SVCCA/PWCCA, which run once over all images)."""
        from ..stats.evidence import Estimate
        from .findings import jackknife

        value = float(self.matrices[k, i, j])
        if self.loo is None:
            return Estimate(value, np.nan, np.nan, "batches", self.batches, "")
        return jackknife(value, self.loo[k, :, i, j], "batches")

    def to_frame(self):
        import pandas as pd

        rows = [{"depth": d, "measure": self.measure, "model_a": a, "tap_a": self.taps[i][k], "model_b": b,
                 "tap_b": self.taps[j][k], "value": float(self.matrices[k, i, j])}
                for k, d in enumerate(self.depths) for i, a in enumerate(self.labels)
                for j, b in enumerate(self.labels)]
        return pd.DataFrame(rows)

    def coords_frame(self):
        import pandas as pd

        return pd.DataFrame([{"depth": d, "model": m, "tap": self.taps[i][k], "x": float(self.coords[k, i, 0]),
                              "y": float(self.coords[k, i, 1]), "explained": float(self.explained[k])}
                             for k, d in enumerate(self.depths) for i, m in enumerate(self.labels)])

    def headline(self) -> list[str]:
        return self.summary()

    def summary(self) -> list[str]:
        """Per depth: the most and the least alike pair of different models, each with its interval."""
        from .findings import interval_caption, say

        lines = []
        sim = ms.as_similarity(self.measure, self.matrices)
        iu = np.triu_indices(len(self.labels), 1)
        for k, d in enumerate(self.depths):
            if not iu[0].size:
                break
            vals = sim[k][iu]
            hi, lo = int(np.nanargmax(vals)), int(np.nanargmin(vals))
            pair = lambda p: f"{self.labels[iu[0][p]]} and {self.labels[iu[1][p]]}"
            ea, eb = (self.estimate(k, iu[0][p], iu[1][p]) for p in (hi, lo))
            overlap = hi != lo and np.isfinite([ea.lo, ea.hi, eb.lo, eb.hi]).all() and \
                max(ea.lo, eb.lo) <= min(ea.hi, eb.hi)
            lines.append(f"depth {d:g}: most alike {pair(hi)} ({say(ea, '.3f')}), least alike {pair(lo)} "
                         f"({say(eb, '.3f')})" + ("; their intervals overlap, so this ranking is not clear"
                                                  if overlap else ""))
        if lines:
            size = self.images // self.batches if self.batches and self.images % self.batches == 0 else None
            lines.append(f"{self.measure}; " + (interval_caption("batches", self.batches, batch_size=size,
                                                                 what="intervals")
                                               if self.loo is not None else
                                               "no intervals: this measure runs once over all images"))
        return lines


def compare_models(models: Sequence, source: ImageSource, opts: CompareOptions = CompareOptions(),
                   run: Run | None = None) -> ManyModelsResult:
    """The measure between every two models at each relative depth, and their MDS map."""
    run = run or Run()
    if len(models) < 2:
        raise VitlabError(f"compare-models needs at least two models, not {len(models)}")
    sim, measure = opts.similarity_options(), opts.measure
    depths = parse_depths(opts.depths)
    all_taps = [taps_mod.default_taps(m.model) for m in models]
    idx = [[all_taps[i].index(tap_at(all_taps[i], d)) for d in depths] for i in range(len(models))]
    n_images = len(select(source, sim.images, sim.shuffle))
    cca = ms.MEASURES[measure].source == "features"
    widths = [[w[j] for j in idx[i]] for i, w in enumerate(cf.feature_widths(m, sim.tokens) for m in models)] \
        if cca else []
    sketch = cf.plan_features(widths, n_images, sim) if cca else 0
    stats = [statistics_for([measure], sim, sketch=sketch) for _ in models]
    accs = [PairAccumulator([measure], len(models), len(models)) for _ in depths]
    kept: list = []  # per batch: (batch number, (images, per depth: each model's features there, or None))
    for batch, found in stream(models, source, select(source, sim.images, sim.shuffle), sim.batch_size, stats,
                               run, min_batch=_min_batch(sim)):
        per_depth = []
        with ms.blas_single_thread():
            for k in range(len(depths)):
                if ms.MEASURES[measure].source == "gram":
                    stack = np.stack([f["gram"]["grams"][idx[i][k]] for i, f in enumerate(found)])
                    d = _Derived(stack, sim)
                    accs[k].update(d, d, batch.index)
                    per_depth.append(None)
                else:
                    per_depth.append([cf.stacked(f["cca-features"])[idx[i][k]] for i, f in enumerate(found)])
        kept.append((batch.index, (len(batch.ids), per_depth)))
    # torchrun: every rank's per-batch increments and sketches, in batch order (as in one process)
    run.reduce_accumulators(accs)
    kept = run.gather_ordered(kept, "compare-models batches")
    images, batches = sum(n for n, _ in kept), len(kept)
    sketches = [[per[k] for _, per in kept if per[k] is not None] for k in range(len(depths))]
    if batches == 0:
        raise VitlabError(f"no batch of {_min_batch(sim)} or more readable images: compare-models needs one")
    with ms.blas_single_thread():
        mats = np.stack([_matrix(acc, sk, measure, sim, d, [m.label for m in models])
                         for acc, sk, d in zip(accs, sketches, depths)])
        coords, explained = _embed(mats, measure)
    taps = [[all_taps[i][j] for j in idx[i]] for i in range(len(models))]
    loo = np.stack([_leave_one_out(acc, measure) for acc in accs]) \
        if ms.MEASURES[measure].source == "gram" and batches >= 2 else None
    res = ManyModelsResult([m.label for m in models], depths, taps, measure, mats, coords, explained, images,
                           batches, loo)
    if cca:
        res.cca, res.warnings = _sketch_record(widths, sketch, sim)
    return res


def _sketch_record(widths: list, sketch: int, sim: SimilarityOptions) -> tuple[dict, list[str]]:
    """Which features SVCCA/PWCCA ran on and, for a sketch, the shift expected at its width (``vitlab similarity``
    also measures it)."""
    if sketch >= max(max(w) for w in widths):
        sketch = 0  # every tap is narrower than the sketch: each is kept whole
    info = {"features": "own" if not sketch else f"CountSketch to {sketch} columns (taps wider than that)",
            "sketch_dims": sketch, "memory_mib": sim.cca_memory_mib}
    if not sketch:
        return info, []
    info["expected_shift"] = exp = cf.expected_shift(sketch)
    if exp["mean"] is not None and exp["mean"] < cf.SHIFT_LIMIT:
        return info, []
    return info, [f"SVCCA/PWCCA ran on a {sketch}-column CountSketch, whose expected mean shift from the layer's own "
                  f"features is not below {cf.SHIFT_LIMIT} (that needs {cf.safe_sketch_width()} columns or more; "
                  "`vitlab similarity` measures it): raise --cca-memory-mib, use --tokens cls / gap or fewer images"]


def _leave_one_out(acc: PairAccumulator, measure: str) -> np.ndarray:
    """(T, M, M) a Gram measure with each batch left out, from the accumulator's per-batch increments (as
    ``PairAccumulator.compute`` forms it: CKA a ratio of summed HSIC, Procrustes a mean, mutual k-NN a share)."""
    from ..stats.evidence import cka_replicates, jackknife_indices

    incs = [inc for _, inc in sorted(acc.terms, key=lambda t: t[0])]
    idx = jackknife_indices(len(incs))
    if measure in ("cka", "cka-rbf"):
        xy, xx, yy = (np.stack([np.asarray(inc[measure][p], dtype=np.float64) for inc in incs]) for p in range(3))
        return cka_replicates(xy, xx, yy, idx)
    if measure == "procrustes":
        return np.stack([np.asarray(inc["angle"], dtype=np.float64) for inc in incs])[idx].mean(1)
    if measure == "mutual-knn":
        shared = np.stack([np.asarray(inc["knn"][0], dtype=np.float64) for inc in incs])
        slots = np.array([float(inc["knn"][1]) for inc in incs])
        return shared[idx].sum(1) / slots[idx].sum(1)[:, None, None]
    raise VitlabError(f"no leave-one-out form for {measure}")


def _matrix(acc: PairAccumulator, sketches: list, measure: str, sim: SimilarityOptions, depth: float,
            labels: list[str]) -> np.ndarray:
    if ms.MEASURES[measure].source == "gram":
        return acc.compute()[measure]
    feats = [np.concatenate([b[i] for b in sketches]) for i in range(len(sketches[0]))]  # per model (N, P)
    bases = [cf.tap_bases(x, sim.svd_dims, measure == "pwcca") for x in feats]
    bad = [(labels[i], labels[j]) for i in range(len(bases)) for j in range(i, len(bases))
           if cf.undefined(bases[i], bases[j])]
    if bad:  # the map needs every distance: an undefined cell is an error here, a NaN cell in ``vitlab similarity``
        pairs = ", ".join(f"{a} and {b}" if a != b else f"{a} with itself" for a, b in bad[:3])
        pairs += ", ..." if len(bad) > 3 else ""
        raise VitlabError(f"pwcca is undefined at depth {depth:g} for {len(bad)} of "
                          f"{len(bases) * (len(bases) + 1) // 2} model pairs ({pairs}): "
                          f"{cf.undefined_reason(len(feats[0]))}")
    return cf.cca_maps(feats, None, sim.svd_dims, (measure,), bases)[measure]


def _embed(mats: np.ndarray, measure: str) -> tuple[np.ndarray, np.ndarray]:
    coords, explained = [], []
    for m in mats:
        d = ms.as_distance(measure, (m + m.T) / 2)
        np.fill_diagonal(d, 0.0)  # a model with itself: 0 by definition (rounding leaves ~1e-8)
        if not np.all(np.isfinite(d)):
            raise VitlabError(f"{measure} between some models is NaN (constant features at that depth): "
                              "no embedding can be drawn; see the matrix for which")
        xy, lam = ms.classical_mds(d, 2)
        pos = lam[lam > 0]
        explained.append(float(np.sum(np.maximum(lam[:2], 0)) / pos.sum()) if pos.size else float("nan"))
        coords.append(xy)
    return np.stack(coords), np.array(explained)
