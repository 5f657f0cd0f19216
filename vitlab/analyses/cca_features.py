"""SVCCA and PWCCA on the features of all images: which features (the layer's own, or a CountSketch beyond a byte
budget), the shift a sketch causes, and the maps.

    plan_features(widths, images, params) -> 0 (own features) | sketch width w
    FeatureStatistic(taps, tokens, w, seed)   cached per batch: {"f<k>": (n, P_k) float32} for the k-th tap
    cca_maps(feats_a, feats_b, d, measures) -> {measure: (La, Lb)}
    measure_shift(own, w, seed, measures, d) -> {measure: mean / max |sketched − own| on images that fit}

Why: CCA's whitening is not a sum over batches, so the features of every image are held at once and centred over
all of them. A CountSketch to 256 columns moved SVCCA on the zoo pair by 0.051 on average (max 0.168), a bias, not
noise (issue 40), so a sketch is used only where the features do not fit, at the widest width that fits, and its
shift is measured and recorded. The budget (``cca_memory_mib``) counts, per model, float32 features and float64 SVD
bases (12 bytes a value), plus the float64 working set of the widest tap's SVD (24 bytes a value).

Shapes: N images in all, n in a batch, P_k the width of tap k's features, L taps, d SVD directions, w sketch width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..engine.run import Statistic
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..options import DataOptions, option
from ..stats import measures as ms


@dataclass(frozen=True)
class MeasureParams(DataOptions):
    """The parameters of the measures (shared by ``vitlab similarity`` and ``vitlab compare-models``)."""

    tokens: str = option("all", "representation: all tokens flattened, CLS token, or mean of spatial tokens",
                         choices=("all", "cls", "gap"))
    rbf_threshold: float = option(1.0, "RBF CKA width as a fraction of the median distance")
    pca_dims: int = option(256, "Procrustes: PCA to k = min(batch - 1, this) dimensions per batch")
    svd_dims: int = option(20, "SVCCA/PWCCA-SVD20: number of top SVD directions kept per side")
    sketch_dims: int = option(0, "SVCCA/PWCCA: 0 = the layer's own features when they fit in --cca-memory-mib, "
                                 "else the widest CountSketch that fits; a positive width forces that sketch")
    sketch_seed: int = option(0, "SVCCA/PWCCA: seed of the CountSketch")
    cca_memory_mib: int = option(2048, "SVCCA/PWCCA: memory budget (MiB) for the features of all images")
    knn_k: int = option(10, "mutual k-NN: neighbours per image, within its batch")


@dataclass(frozen=True)
class FeatureStatistic(Statistic):
    """Per-batch features of every tap, {"f<k>": (n, P_k) float32} for the k-th tap: the layer's own (``dims`` 0)
    or, for a tap wider than ``dims``, its CountSketch to ``dims`` columns. What CCA needs over all images."""

    taps_: tuple[str, ...] | None = None
    tokens: str = "all"
    dims: int = 0
    seed: int = 0
    name: str = "cca-features"
    version: int = 1

    def taps(self, loaded) -> list[str]:
        return list(self.taps_) if self.taps_ else taps_mod.default_taps(loaded.model)

    def params(self, loaded) -> dict:
        return {"taps": self.taps(loaded), "tokens": self.tokens, "dims": self.dims, "seed": self.seed}

    def compute(self, acts: dict, loaded, batch) -> dict[str, np.ndarray]:
        out = {}
        for k, t in enumerate(self.taps(loaded)):
            f = taps_mod.features(acts[t], loaded.model, self.tokens).float()
            out[f"f{k}"] = (ms.count_sketch(f, self.dims, self.seed) if 0 < self.dims < f.shape[1] else f).cpu().numpy()
        return out


def stacked(found: dict) -> list[np.ndarray]:
    """A FeatureStatistic's arrays of one batch, in tap order."""
    return [found[f"f{k}"] for k in range(len(found))]


CCA_MEASURES = tuple(m for m, info in ms.MEASURES.items() if info.source == "features")


@dataclass(frozen=True)
class TapBases:
    """One tap's SVD of its features centred over all images: the top-d basis (SVCCA, PWCCA-SVD20) and, when
    ``pwcca`` is asked for, the basis of every direction up to the rank (CCA over all neurons)."""

    top: ms.SVDBasis
    full: ms.SVDBasis | None
    images: int


def tap_bases(x: np.ndarray, d: int, full: bool) -> TapBases:
    b = ms.svd_basis(x, None)
    return TapBases(b.top(d), b if full else None, len(x))


def cca_maps(feats_a: Sequence[np.ndarray], feats_b: Sequence[np.ndarray] | None, d: int,
             measures: Sequence[str] = CCA_MEASURES, bases_a: list | None = None, bases_b: list | None = None
             ) -> dict[str, np.ndarray]:
    """Per tap (N, P_l) features of all images of A and B -> {measure: (La, Lb) map} for the CCA measures asked
    for. ``feats_b=None`` compares A with itself; bases can be passed in to reuse each tap's SVD."""
    full = "pwcca" in measures
    bases_a = bases_a or [tap_bases(x, d, full) for x in feats_a]
    bases_b = bases_a if feats_b is None and bases_b is None else (bases_b or [tap_bases(x, d, full) for x in feats_b])
    out = {m: np.empty((len(bases_a), len(bases_b))) for m in measures if m in CCA_MEASURES}
    for i, a in enumerate(bases_a):
        for j, b in enumerate(bases_b):
            if "svcca" in out or "pwcca-svd20" in out:
                sv, pw = ms.cca_pair(a.top, b.top)
                for m, v in (("svcca", sv), ("pwcca-svd20", pw)):
                    if m in out:
                        out[m][i, j] = v
            if "pwcca" in out:
                out["pwcca"][i, j] = np.nan if undefined(a, b) else ms.pwcca_all(a.full, b.full)
    return out


def undefined(a: TapBases, b: TapBases) -> bool:
    """PWCCA over all neurons is not determined by the data when the two ranks add up to more than N: the feature
    spaces then share a subspace of 2 or more dimensions on which every canonical correlation is 1, any orthonormal
    basis of it is a set of canonical variates, and the L1 weights α_i change with that arbitrary basis."""
    return a.full is not None and b.full is not None and a.full.rank + b.full.rank > a.images


def undefined_reason(images: int) -> str:
    """Why a ``pwcca`` cell is undefined and what to do, in the words ``vitlab similarity`` and ``compare-models``
    share."""
    return (f"the two layers' ranks add up to more than the {images} images (a layer as wide as the image set, as "
            "with all tokens), so canonical correlations of 1 by construction make Morcos et al.'s weights "
            "arbitrary; CCA over all neurons needs more images than the two ranks together: use pwcca-svd20, "
            "--tokens cls / gap (GAP or CLS features), or more images")


# ---------------------------------------------------------------- which features CCA runs on, and what that costs


def feature_widths(loaded, tokens: str) -> list[int]:
    """Width P of every default tap's features (one forward of a blank input): the byte budget needs it before
    the pass, since the features' cache key says whether they are sketched."""
    import torch

    taps = taps_mod.default_taps(loaded.model)
    x = torch.zeros(1, *loaded.data_config["input_size"], device=loaded.device)
    with taps_mod.capture(loaded.model, taps) as acts, torch.inference_mode():
        loaded.model(x)
    return [int(taps_mod.features(acts[t], loaded.model, tokens).shape[1]) for t in taps]


def feature_bytes(images: int, widths: Sequence[Sequence[int]]) -> int:
    """Peak bytes of CCA over ``images`` images: per model its float32 features and float64 SVD bases (12 bytes a
    value), plus the float64 working set of the widest tap's SVD (its centred copy and factors, 24 bytes a value)."""
    return 12 * images * sum(sum(w) for w in widths) + 24 * images * max(max(w) for w in widths)


# SVCCA's |sketched − own| on the zoo pair (512 images, all tokens), mean and max over every cell, per sketch width:
# 256 and 1024 from bench/cca_sketch_zoo.py, 4096 from issue 40 (every tap sketched). PWCCA-SVD20 moves less. The
# shift shrinks as the width grows (about as w^-0.8 here), so a width's expected shift is at most that of the widest
# measured width not above it.
SKETCH_SHIFT = {256: (0.047, 0.164), 1024: (0.015, 0.061), 4096: (0.005, 0.024)}
SHIFT_LIMIT = 0.01  # the mean shift a sketch may cause before vitlab warns


def expected_shift(width: int) -> dict:
    """{"mean", "max", "measured_at"}: the shift measured at the widest width in ``SKETCH_SHIFT`` not above
    ``width`` (an upper bound for ``width``); None values below the narrowest measured width."""
    at = max((w for w in SKETCH_SHIFT if w <= width), default=None)
    mean, mx = SKETCH_SHIFT[at] if at else (None, None)
    return {"mean": mean, "max": mx, "measured_at": at}


def safe_sketch_width(limit: float = SHIFT_LIMIT) -> int:
    """The narrowest measured width whose mean shift is below ``limit`` (4096 for 0.01)."""
    return min(w for w, (mean, _) in SKETCH_SHIFT.items() if mean < limit)


def plan_features(widths: Sequence[Sequence[int]], images: int, p: MeasureParams) -> int:
    """0 when every model's own features fit ``cca_memory_mib``; else the widest power-of-two sketch that fits
    (taps narrower than it stay whole): at least ``safe_sketch_width()`` (expected mean shift below 0.01) whenever
    that fits, and the narrower the sketch the larger the shift (``expected_shift``). A forced ``sketch_dims`` is
    used as given."""
    if p.sketch_dims:
        return p.sketch_dims
    budget = p.cca_memory_mib * 2**20
    if feature_bytes(images, widths) <= budget:
        return 0
    w = 2 ** int(np.log2(max(max(x) for x in widths)))
    while w >= max(p.svd_dims, 2):
        if feature_bytes(images, [[min(x, w) for x in ws] for ws in widths]) <= budget:
            return w
        w //= 2
    raise VitlabError(f"SVCCA/PWCCA: the features of {images} images do not fit in --cca-memory-mib "
                      f"{p.cca_memory_mib}, even sketched to {max(p.svd_dims, 2)} columns: raise it, use fewer images, "
                      "or --tokens cls / gap")


def shift_images(widths: Sequence[Sequence[int]], images: int, p: MeasureParams) -> int:
    """How many images' own features fit the budget: the sample on which a sketch's shift is measured."""
    return int(min(images, (p.cca_memory_mib * 2**20) // feature_bytes(1, widths)))


def measure_shift(own: list, sketch_dims: int, seed: int, measures: Sequence[str], d: int) -> dict:
    """{measure: {"mean", "max", "images"}} of |sketched − own| over every cell of every ordered pair of models, from
    per model, per tap (m, P) own features of the same m images (the sketch is linear and its map depends only on
    (seed, P): sketching these equals the cached per-batch sketches of the same images)."""
    import torch

    def sketch(x):
        if x.shape[1] <= sketch_dims:
            return x
        return ms.count_sketch(torch.from_numpy(np.ascontiguousarray(x)), sketch_dims, seed).numpy()

    asked = [m for m in measures if m in CCA_MEASURES]
    full = "pwcca" in asked
    bases = [[tap_bases(x, d, full) for x in f] for f in own]
    sk = [[tap_bases(sketch(x), d, full) for x in f] for f in own]
    diffs: dict[str, list] = {m: [] for m in asked}
    for i in range(len(own)):
        for j in range(len(own)):
            a = cca_maps(own[i], own[j], d, asked, bases[i], bases[j])
            b = cca_maps(own[i], own[j], d, asked, sk[i], sk[j])
            for m in asked:
                v = np.abs(a[m] - b[m]).ravel()
                diffs[m].append(v[np.isfinite(v)])
    out = {}
    for m, parts in diffs.items():
        v = np.concatenate(parts)
        out[m] = {"mean": float(v.mean()) if v.size else None, "max": float(v.max()) if v.size else None,
                  "images": int(len(own[0][0]))}
    return out
