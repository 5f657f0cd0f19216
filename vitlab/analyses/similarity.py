"""Many measures between the taps of several models, streamed and cached like CKA, and where they agree.

    similarity(models, source, SimilarityOptions(measures=...), run) -> SimilarityReport   (La, Lb) map per measure
    agreement(report, a, b) -> AgreementResult      rank correlation between measures, the paper's Figs 1-2 checks

Where the numbers come from (each model's statistics are computed once per batch, however many pairs it is in):

- linear CKA, RBF CKA, Procrustes, mutual k-NN: the runner's cached per-batch linear Grams (``GramStatistic``,
  the same cache entries as ``vitlab cka``). RBF kernels come from the linear Gram (``cka.rbf_from_linear``);
  PCA to k and k-NN sets from its eigenvectors and cosines (``vitlab.stats.measures``). Per batch, each model's derived
  arrays (``_Derived``) are formed once and shared by every pair.
- SVCCA, PWCCA: a cached per-batch ``FeatureStatistic``; the features of all images are kept (float32) and CCA
  runs once over all images, centred over all of them, each tap's SVD once per model. They are the layer's own
  features when every model's fit the byte budget ``cca_memory_mib`` (``plan_features``: N x sum of tap widths x
  12 bytes per model, for the float32 features and the float64 SVD bases of each tap, plus the float64 working set
  of the widest tap's SVD, 24 x N x width); beyond it, each tap wider than w goes through a fixed CountSketch to
  w columns, w the widest power of two that fits, and the shift this causes is measured on the images whose whole
  features do fit (``measure_shift``) and recorded with the report.

Minibatch conventions, stated: CKA sums per-batch HSIC (Nguyen et al. 2021); Procrustes is the mean of per-batch
distances (a mean of metrics is a metric); mutual k-NN looks for neighbours within the batch. With
``batch_size >= images`` all three are the full-set measures.

Under torchrun each rank takes its share of the batches (``run.shard``); the Gram-based measures' per-batch
increments are gathered and added in batch order (``run.reduce_accumulators``, ``PairAccumulator.keyed_terms``)
and so are the per-batch sketches (``run.gather_ordered``): CCA runs over the same (N, P) matrices as in one
process, and every map equals a single process's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.context import Run
from ..engine.run import GramStatistic, Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import ImageSource, select
from ..options import option
from ..stats import cka as cka_mod
from ..stats import measures as ms
from . import cca_features as cf
from .cca_features import MeasureParams  # defined beside the features it sizes; imported from here as before


@dataclass(frozen=True)
class SimilarityOptions(MeasureParams):
    """Options of ``vitlab similarity``."""

    measures: tuple[str, ...] = option(ms.DEFAULT_MEASURES, f"measures, comma-separated, of {', '.join(ms.MEASURES)}",
                                       kind="strs", flag="--measure")

    def __post_init__(self):
        ms.check_measures(self.measures)
        check_params(self)

    def settings(self, measure: str) -> str:
        return describe(self, measure)


def check_params(p: MeasureParams) -> None:
    for name in ("pca_dims", "svd_dims", "knn_k", "batch_size", "cca_memory_mib"):
        if getattr(p, name) < 1:
            raise VitlabError(f"{name.replace('_', '-')} must be positive, not {getattr(p, name)}")
    if p.sketch_dims < 0:
        raise VitlabError(f"sketch-dims must be 0 (automatic) or a positive width, not {p.sketch_dims}")
    if 0 < p.sketch_dims < p.svd_dims:
        raise VitlabError(f"svd-dims ({p.svd_dims}) cannot exceed sketch-dims ({p.sketch_dims})")


def describe(p: MeasureParams, measure: str) -> str:
    """The parameters a measure's values depend on, in words (for captions and run.json)."""
    return {"cka": "unbiased HSIC_1, summed over batches",
            "cka-rbf": f"RBF threshold {p.rbf_threshold} x median distance, unbiased HSIC_1",
            "procrustes": f"PCA to k = min(batch - 1, {p.pca_dims}) per batch, mean over batches",
            "svcca": f"top {p.svd_dims} SVD directions of {_feature_words(p)}, centred over all images",
            "pwcca": f"CCA over all neurons (Morcos et al.) of {_feature_words(p)}, centred over all images",
            "pwcca-svd20": f"top {p.svd_dims} SVD directions of {_feature_words(p)}, weights from A",
            "mutual-knn": f"k = {p.knn_k} within each batch of {p.batch_size}"}[measure]


def _feature_words(p: MeasureParams) -> str:
    if p.sketch_dims:
        return f"a {p.sketch_dims}-column CountSketch (forced)"
    return f"the layer's own features (a CountSketch only beyond {p.cca_memory_mib} MiB)"


class _Derived:
    """One batch's arrays of one stack of taps, each formed once on first use and shared by every pair."""

    def __init__(self, grams: np.ndarray, opts: SimilarityOptions):
        self.grams, self.opts = grams, opts
        self.n = grams.shape[-1]

    @functools.cached_property
    def linear(self) -> np.ndarray:
        return cka_mod.u_center(self.grams)

    @functools.cached_property
    def rbf(self) -> np.ndarray:
        import torch

        k = cka_mod.rbf_from_linear(torch.from_numpy(np.asarray(self.grams, dtype=np.float64)), self.opts.rbf_threshold)
        return cka_mod.u_center(k.numpy())

    @functools.cached_property
    def pca(self) -> np.ndarray:
        return ms.pca_scores(self.grams, min(self.n - 1, self.opts.pca_dims))

    @functools.cached_property
    def knn(self) -> np.ndarray:
        return ms.knn_membership(self.grams, self.opts.knn_k)


GRAM_MEASURES = tuple(m for m, info in ms.MEASURES.items() if info.source == "gram")


class PairAccumulator:
    """Float64 sums of every Gram-based measure between a stack of La taps and a stack of Lb taps.

    Each batch's increments are kept with the batch's global number (``keyed_terms``): under torchrun
    ``vitlab.engine.dist.all_reduce_accumulators`` gathers every rank's and adds them again in batch order, so the maps
    are a single process's to the last bit (the agreement view ranks them: a tie must stay a tie).
    """

    def __init__(self, measures: Sequence[str], la: int, lb: int):
        self.measures = [m for m in measures if m in GRAM_MEASURES]
        self.shape = (la, lb)
        self._reset()
        self.terms: list = []  # (batch number, that batch's increments)

    def _reset(self) -> None:
        la, lb = self.shape
        self.cka = {m: cka_mod.MinibatchCKA(list(range(la)), list(range(lb))) for m in ("cka", "cka-rbf")
                    if m in self.measures}
        self.angle_sum, self.knn_shared = np.zeros((la, lb)), np.zeros((la, lb))
        self.batches, self.knn_slots = 0, 0

    def update(self, da: _Derived, db: _Derived, key: int | None = None) -> None:
        same = da is db
        inc: dict = {}
        for m, acc in self.cka.items():
            ca = da.linear if m == "cka" else da.rbf
            cb = ca if same else (db.linear if m == "cka" else db.rbf)
            sa = cka_mod.hsic_self(ca, acc.estimator)
            inc[m] = (cka_mod.hsic_all_pairs(ca, cb, acc.estimator), sa, sa if same else
                      cka_mod.hsic_self(cb, acc.estimator), ca.shape[-1])
        if "procrustes" in self.measures:
            inc["angle"] = ms.procrustes_angles(da.pca, db.pca)
        if "mutual-knn" in self.measures:
            inc["knn"] = (ms.mutual_knn_counts(da.knn, db.knn), da.n * da.opts.knn_k)
        self.terms.append((len(self.terms) if key is None else int(key), inc))
        self._add(inc)

    def _add(self, inc: dict) -> None:
        for m, acc in self.cka.items():
            acc.add(*inc[m])
        if "angle" in inc:
            self.angle_sum += inc["angle"]
        if "knn" in inc:
            self.knn_shared += inc["knn"][0]
            self.knn_slots += inc["knn"][1]
        self.batches += 1

    def keyed_terms(self) -> list:
        return list(self.terms)

    def load_keyed_terms(self, keyed: list) -> PairAccumulator:
        """Become the accumulator of the batches ``keyed`` (every rank's, in batch order)."""
        self._reset()
        self.terms = list(keyed)
        for _, inc in self.terms:
            self._add(inc)
        return self

    def state(self) -> dict[str, np.ndarray]:
        out = {"angle_sum": self.angle_sum, "knn_shared": self.knn_shared,
               "counts": np.array([self.batches, self.knn_slots])}
        for m, acc in self.cka.items():
            out.update({f"{m}/{k}": v for k, v in acc.state().items()})
        return out

    def compute(self) -> dict[str, np.ndarray]:
        out = {m: acc.compute().cka for m, acc in self.cka.items()}
        if "procrustes" in self.measures:
            out["procrustes"] = self.angle_sum / self.batches
        if "mutual-knn" in self.measures:
            out["mutual-knn"] = self.knn_shared / self.knn_slots
        return out


def statistics_for(measures: Sequence[str], opts: SimilarityOptions, taps_: tuple[str, ...] | None = None,
                   sketch: int = 0) -> list[Statistic]:
    """The per-batch statistics the measures need: the shared Gram, and the features only for SVCCA/PWCCA
    (``sketch``: 0 for the layer's own features, else the CountSketch width of ``plan_features``)."""
    stats: list[Statistic] = []
    if any(ms.MEASURES[m].source == "gram" for m in measures):
        stats.append(GramStatistic(taps_, opts.tokens))
    if any(ms.MEASURES[m].source == "features" for m in measures):
        stats.append(cf.FeatureStatistic(taps_, opts.tokens, sketch, opts.sketch_seed))
    return stats


@dataclass
class SimilarityReport:
    """Every measure between the taps of every ordered pair of models (each model with itself included)."""

    labels: list[str]
    families: list[str]
    layers: list[list[str]]
    maps: dict[tuple[str, int, int], np.ndarray]  # (measure, i, j) -> (L_i, L_j)
    opts: SimilarityOptions
    images: int
    batches: int
    warnings: list[str] = field(default_factory=list)
    cca: dict = field(default_factory=dict)  # SVCCA/PWCCA: which features, the budget, a sketch's measured shift
    explained_nans: dict = field(default_factory=dict)  # (measure, i, j) -> NaN cells a specific warning explains

    @property
    def measures(self) -> list[str]:
        return list(dict.fromkeys(m for m, _, _ in self.maps))

    def pair_frame(self, measure: str, i: int, j: int):
        import pandas as pd

        values = self.maps[(measure, i, j)]
        la, lb = self.layers[i], self.layers[j]
        return pd.DataFrame({"measure": measure, "model_a": self.labels[i], "layer_a": np.repeat(la, len(lb)),
                             "model_b": self.labels[j], "layer_b": np.tile(lb, len(la)),
                             "value": values.ravel()})

    def to_frame(self):
        import pandas as pd

        return pd.concat([self.pair_frame(*key) for key in self.maps], ignore_index=True)

    def headline(self) -> list[str]:
        """The agreement view's sentences for the first two models when there are two measures or more."""
        from ..stats.agreement import agreement

        lines = [f"{len(self.measures)} measure(s) between {len(self.labels)} model(s) over {self.images} images"]
        if len(self.labels) >= 2 and len(self.measures) >= 2:
            lines += agreement(self, 0, 1).summary()
        return lines


def _nan_warnings(report: SimilarityReport) -> list[str]:
    out = []
    for (m, i, j), v in report.maps.items():
        bad = int(np.sum(~np.isfinite(v))) - report.explained_nans.get((m, i, j), 0)
        if bad > 0:
            out.append(f"{m}: {bad} of {v.size} values between {report.labels[i]} and {report.labels[j]} are NaN "
                       "(a tap with constant or rank-deficient features)")
    return out


def similarity(models: Sequence, source: ImageSource, opts: SimilarityOptions = SimilarityOptions(),
               run: Run | None = None) -> SimilarityReport:
    """Every requested measure between all default taps of every pair of models, one pass per model."""
    run = run or Run()
    if not models:
        raise VitlabError("give at least one model")
    measures = list(opts.measures)
    indices = select(source, opts.images, opts.shuffle)
    cca = [m for m in measures if m in cf.CCA_MEASURES]
    widths = [cf.feature_widths(m, opts.tokens) for m in models] if cca else []
    sketch = cf.plan_features(widths, len(indices), opts) if cca else 0
    stats = [statistics_for(measures, opts, sketch=sketch) for _ in models]
    layers = [taps_mod.default_taps(m.model) for m in models]
    k = len(models)
    pairs = [(i, j) for i in range(k) for j in range(i, k)]
    accs = {p: PairAccumulator(measures, len(layers[p[0]]), len(layers[p[1]])) for p in pairs}
    kept: list = []  # per batch: (batch number, (images, [per model: its per-tap features or None]))
    for batch, found in stream(models, source, indices, opts.batch_size, stats, run,
                               min_batch=_min_batch(opts)):
        with ms.blas_single_thread():
            _fold(accs, found, opts, batch.index)
        kept.append((batch.index, (len(batch.ids), [cf.stacked(f["cca-features"]) if "cca-features" in f else None
                                                     for f in found])))
    run.reduce_accumulators(list(accs.values()))
    kept = run.gather_ordered(kept, "similarity batches")  # every rank's, in batch order
    images, batches = sum(n for n, _ in kept), len(kept)
    if batches == 0:
        raise VitlabError("no batch was usable: the measures need at least one batch of "
                          f"{_min_batch(opts)} or more readable images")
    feats = _all_images(kept, k) if cca else []
    kept = []
    report = SimilarityReport([m.label for m in models], [taps_mod.family(m.model) for m in models], layers, {},
                              opts, images, batches)
    with ms.blas_single_thread():
        report.maps = _collect(accs, feats, measures, opts, report)
    report.warnings = _nan_warnings(report) + report.warnings
    if cca:
        _record_features(report, models, source, indices, widths, sketch, run)
    return report


def _all_images(kept: list, k: int) -> list[list[np.ndarray]]:
    """Per model, per tap: the (N, P) features of all images, batches stacked in order."""
    per_model = [[per[i] for _, per in kept if per[i] is not None] for i in range(k)]
    return [[np.concatenate([b[t] for b in bs]) for t in range(len(bs[0]))] if bs else [] for bs in per_model]


def _record_features(report: SimilarityReport, models, source, indices, widths, sketch: int, run: Run) -> None:
    """report.cca: the features SVCCA/PWCCA ran on, the budget, and with a sketch its shift measured on the first
    images whose own features fit (an extra pass over them, cached like every statistic)."""
    opts = report.opts
    if sketch >= max(max(w) for w in widths):
        sketch = 0  # every tap is narrower than the sketch: each is kept whole
    info: dict = {"features": "own" if not sketch else f"CountSketch to {sketch} columns (taps wider than that)",
                  "sketch_dims": sketch, "memory_mib": opts.cca_memory_mib,
                  "own_features_mib": round(cf.feature_bytes(report.images, widths) / 2**20, 1), "shift": None}
    if sketch:
        info["expected_shift"] = cf.expected_shift(sketch)
        exp = info["expected_shift"]["mean"]
        if not opts.sketch_dims and (exp is None or exp >= cf.SHIFT_LIMIT):
            report.warnings.append(
                f"SVCCA/PWCCA: only a {sketch}-column CountSketch fits --cca-memory-mib {opts.cca_memory_mib}; "
                + (f"at {info['expected_shift']['measured_at']} columns the sketch moved SVCCA by {exp:.3f} on "
                   "average" if exp is not None else "narrower than any width whose shift was measured")
                + f" (below {cf.SHIFT_LIMIT} needs {cf.safe_sketch_width()} columns or more): raise "
                "--cca-memory-mib, use --tokens cls / gap or fewer images")
        m = cf.shift_images(widths, report.images, opts)
        if m < max(2 * opts.svd_dims, cka_mod.MIN_UNBIASED_BATCH):
            info["shift_note"] = (f"not measured: only {m} images' own features fit in {opts.cca_memory_mib} MiB; "
                                  "raise --cca-memory-mib")
        else:
            own_stats = [[cf.FeatureStatistic(None, opts.tokens, 0, opts.sketch_seed)] for _ in models]
            got = [(b.index, [cf.stacked(f["cca-features"]) for f in found]) for b, found in
                   stream(models, source, indices[:m], opts.batch_size, own_stats, run, min_batch=1)]
            got = run.gather_ordered(got, "similarity shift batches")
            own = [[np.concatenate([per[i][t] for per in got]) for t in range(len(got[0][i]))]
                   for i in range(len(models))]
            with ms.blas_single_thread():
                info["shift"] = cf.measure_shift(own, sketch, opts.sketch_seed, opts.measures, opts.svd_dims)
            worst = {k: v for k, v in info["shift"].items() if v["mean"] is not None and v["mean"] > cf.SHIFT_LIMIT}
            if worst:
                report.warnings.append(
                    f"SVCCA/PWCCA ran on a {sketch}-column CountSketch; on the first {m} images it moves "
                    + ", ".join(f"{k} by {v['mean']:.3f} on average (up to {v['max']:.3f})" for k, v in worst.items())
                    + " from the layer's own features: raise --cca-memory-mib, use --tokens cls / gap or fewer images")
    report.cca = info


def _fold(accs: dict, found: list[dict], opts: SimilarityOptions, key: int) -> None:
    """Add batch ``key``: each model's derived arrays are formed once, then every pair's accumulator reads them."""
    derived = [_Derived(f["gram"]["grams"], opts) if "gram" in f else None for f in found]
    for (i, j), acc in accs.items():
        if acc.measures:
            acc.update(derived[i], derived[j], key)


def _min_batch(opts: SimilarityOptions) -> int:
    need = cka_mod.MIN_UNBIASED_BATCH
    if "mutual-knn" in opts.measures:
        need = max(need, opts.knn_k + 1)
    return need


def _collect(accs: dict, feats: list, measures: list[str], opts: SimilarityOptions, report: SimilarityReport) -> dict:
    maps: dict[tuple[str, int, int], np.ndarray] = {}
    for (i, j), acc in accs.items():
        for m, v in acc.compute().items() if acc.measures else ():
            maps[(m, i, j)] = v
            if i != j:
                maps[(m, j, i)] = v.T
    cca = [m for m in measures if m in cf.CCA_MEASURES]
    if cca:
        bases = [[cf.tap_bases(x, opts.svd_dims, "pwcca" in cca) for x in f] for f in feats]
        for i in range(len(feats)):
            for j in range(len(feats)):
                for m, v in cf.cca_maps(feats[i], feats[j], opts.svd_dims, cca, bases[i], bases[j]).items():
                    maps[(m, i, j)] = v
                bad = sum(cf.undefined(a, b) for a in bases[i] for b in bases[j]) if "pwcca" in cca else 0
                if bad:
                    report.explained_nans[("pwcca", i, j)] = bad
                    report.warnings.append(
                        f"pwcca: {bad} of {len(bases[i]) * len(bases[j])} cells between {report.labels[i]} and "
                        f"{report.labels[j]} are undefined (NaN): {cf.undefined_reason(report.images)}")
    order = {m: n for n, m in enumerate(measures)}
    return dict(sorted(maps.items(), key=lambda kv: (order[kv[0][0]], kv[0][1], kv[0][2])))


# ---------------------------------------------------------------- the Similarity page's lead (issue 33)


def off_diagonal_mean(m: np.ndarray) -> np.ndarray:
    """(..., L, L) self-CKA -> (...) mean over pairs of different layers (NaN cells left out): how uniform a
    model's representations are across depth (Figs 1-2: higher = more uniform)."""
    m = np.asarray(m, dtype=np.float64)
    off = ~np.eye(m.shape[-1], dtype=bool)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(m[..., off], axis=-1)


def cell_estimate(result: cka_mod.CKAResult, i: int, j: int):
    """The CKA of one cell with its interval over batches (``Estimate``): the one of ``cka.csv`` and the heatmap,
    Fieller's (``vitlab.stats.evidence.cka_interval``)."""
    from ..stats.evidence import Estimate

    e = result.evidence
    if e is None:
        return Estimate(float(result.cka[i, j]), np.nan, np.nan, "batches", 0, "")
    return Estimate(float(result.cka[i, j]), float(e.lo[i, j]), float(e.hi[i, j]), "batches", e.batches, e.method)


def uniformity(result: cka_mod.CKAResult):
    """Mean CKA between different layers of one model with itself, with its jackknife-t interval over batches."""
    from ..stats.evidence import Estimate
    from .findings import jackknife

    value = off_diagonal_mean(result.cka)
    if result.loo is None:
        return Estimate(float(value), np.nan, np.nan, "batches", 0, "")
    return jackknife(value, off_diagonal_mean(result.loo), "batches")
