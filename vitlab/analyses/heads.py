"""Local vs global attention heads compared with another model's lower layers (Raghu et al. 2021, Sec. 4.1, Fig. 5).

The paper sorts the attention heads of ViT's lowest block(s) by mean attention distance and computes the CKA of
subsets of heads, from the most local to the most global, with the lower layers of a ResNet: local heads are
the most ResNet-like. The paper leaves the tensor and the subsets open; vitlab's choices:

- tensor: each head's own output, ``softmax(q kᵀ · scale) @ v`` (B, N, Dh), i.e. the head's slice of the attention
  output before the output projection (which mixes heads). It is recomputed from the captured block input and
  attention probabilities with the block's own ``norm1`` and ``qkv`` (a test checks that concatenating the heads and
  applying ``proj`` gives the captured attention branch exactly);
- features: spatial tokens only (prefix tokens dropped), flattened: (B, Ns·Dh) per head (``tokens='gap'``: the
  mean over spatial tokens, (B, Dh));
- a subset's representation is the concatenation of its heads' features. Its linear Gram matrix is the sum of the
  heads' (batch-centred) Grams, so one Gram per head per batch serves every subset;
- subsets: heads of the chosen blocks pooled and sorted by mean attention distance (ascending, on the same
  images), then every window of ``size`` consecutive heads (stride 1; default size = a quarter of the heads,
  at least 1), plus the set of all heads as a reference;
- the other model's layers: its default CKA taps, first half (``other_taps`` to choose), features flattened.

Shapes: B batch, H heads, N tokens, Dh head width, n images in a Gram, S subsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..engine.context import Run
from ..engine.run import GramStatistic, Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import ImageSource, select
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..stats import cka as cka_mod
from ..stats.evidence import BootstrapCKA, cka_interval, jackknife_indices, uniform_distance
from .attention import (AttentionDistanceAccumulator, AttentionDistanceStatistic, distance_matrix, image_side,
                        probs_taps, require_vit)

HEAD_TOKENS = ("spatial", "gap")


def head_outputs(block, x, probs):
    """Per-head attention outputs (B, H, N, Dh) = probs @ v, with v from the block input ``x`` (B, N, D)."""
    attn = block.attn
    b, n, _ = x.shape
    if not hasattr(attn, "qkv"):
        raise VitlabError(f"per-head outputs need a fused qkv projection; {type(attn).__name__} has none")
    v = attn.qkv(block.norm1(x)).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)[2]
    return probs.to(v.dtype) @ v


def head_features(out, prefix: int, tokens: str = "spatial"):
    """(B, H, N, Dh) head outputs -> (H, B, F) features of each head (prefix tokens dropped)."""
    if tokens not in HEAD_TOKENS:
        raise VitlabError(f"head tokens must be one of {', '.join(HEAD_TOKENS)}, not '{tokens}'")
    sp = out[:, :, prefix:].transpose(0, 1)  # (H, B, Ns, Dh)
    return sp.mean(2) if tokens == "gap" else sp.reshape(sp.shape[0], sp.shape[1], -1)


@dataclass(frozen=True)
class HeadGramStatistic(Statistic):
    """Linear Gram matrices of every head's output in ``blocks``: {'grams': (len(blocks)·H, n, n)} (float32).

    The per-batch unit from which the CKA of any subset of heads follows (Raghu et al. 2021, Fig. 5; CKA as in
    Kornblith et al. 2019, eq. 4, estimated over minibatches, Nguyen et al. 2021, eq. 3).
    """

    blocks: tuple[int, ...] = (0,)
    tokens: str = "spatial"
    name: str = "head_grams"
    version: int = 2  # 2: flat features give a zero Gram (cka.drop_roundoff)

    def taps(self, loaded: LoadedModel) -> list[str]:
        return probs_taps(loaded, self.blocks) + [f"blocks.{b}.resid_pre" for b in self.blocks]

    def params(self, loaded: LoadedModel) -> dict:
        return {"blocks": list(self.blocks), "tokens": self.tokens}

    def compute(self, acts: dict, loaded: LoadedModel, batch) -> dict[str, np.ndarray]:
        import torch

        prefix = taps_mod.num_prefix_tokens(loaded.model)
        grams = []
        with torch.no_grad():
            for b in self.blocks:
                out = head_outputs(loaded.model.blocks[b], acts[f"blocks.{b}.resid_pre"],
                                   acts[f"blocks.{b}.attn_probs"])
                grams += [cka_mod.gram(f) for f in head_features(out, prefix, self.tokens)]
        return {"grams": torch.stack(grams).cpu().numpy()}


@dataclass
class HeadSubsetResult:
    """CKA of head subsets (most local first) of ``model_a`` with the layers of ``model_b``."""

    model_a: str
    model_b: str
    heads: list[str]  # 'b{block}.h{head}', sorted from the most local to the most global
    distance_px: np.ndarray  # (len(heads),) mean attention distance, same order
    subsets: list[list[int]]  # indices into ``heads``; the last is all heads
    layers_b: list[str]
    cka: np.ndarray  # (S, Lb)
    size: int
    images: int
    image_side_px: float
    warnings: list[str] = field(default_factory=list)
    loo: np.ndarray | None = None  # (T, S, Lb) CKA with each batch left out (jackknife)
    uniform_px: float = float("nan")  # uniform attention's distance, the distances' convention
    lo: np.ndarray | None = None  # (S, Lb) each cell's 95 % interval over batches (Fieller's, as every CKA cell)
    hi: np.ndarray | None = None

    def subset_label(self, s: int) -> str:
        if s == len(self.subsets) - 1:
            return "all heads"
        return f"{s + 1}: " + "+".join(self.heads[i] for i in self.subsets[s])

    def to_frame(self):
        import pandas as pd

        from ..stats.evidence import FIELLER, interval_columns

        rows = []
        ci = {}
        if self.loo is not None and self.lo is not None:  # each cell's 95 % interval over batches (Fieller's)
            ci = {"lo": self.lo, "hi": self.hi, "cols": interval_columns("batches", len(self.loo), FIELLER)}
        for s, members in enumerate(self.subsets):
            d = float(np.mean(self.distance_px[members]))
            for j, layer in enumerate(self.layers_b):
                extra = {"cka_lo": float(ci["lo"][s, j]), "cka_hi": float(ci["hi"][s, j]), **ci["cols"]} if ci else {}
                rows.append({"subset": s, "subset_label": self.subset_label(s),
                             "heads": ",".join(self.heads[i] for i in members), "all_heads": s == len(self.subsets) - 1,
                             "mean_distance_px": d, "mean_distance_frac": d / self.image_side_px,
                             "layer_b": layer, "cka": float(self.cka[s, j]), "model_a": self.model_a,
                             "model_b": self.model_b, "size": self.size, "images": self.images, **extra})
        return pd.DataFrame(rows)

    def heads_frame(self):
        import pandas as pd

        return pd.DataFrame({"rank": np.arange(len(self.heads)), "head": self.heads, "distance_px": self.distance_px})

    @property
    def batches(self) -> int:
        """Batches behind the intervals (0: none kept)."""
        return 0 if self.loo is None else len(self.loo)

    def subset_estimate(self, s: int):
        """Subset ``s``'s CKA averaged over the other model's layers, with its jackknife-t interval over batches."""
        from ..stats.evidence import Estimate
        from .findings import jackknife

        value = float(np.nanmean(self.cka[s]))
        if self.loo is None:
            return Estimate(value, np.nan, np.nan, "batches", 0, "")
        return jackknife(value, np.nanmean(self.loo[:, s], axis=-1), "batches")


    def headline(self) -> list[str]:
        return [f"{len(self.subsets) - 1} subsets of {self.size} head(s) vs {len(self.layers_b)} layers of "
                f"{self.model_b} over {self.images} images"]


def default_lower_taps(loaded: LoadedModel) -> list[str]:
    """The first half of a model's default CKA taps (for ResNets: the first stages)."""
    names = taps_mod.default_taps(loaded.model)
    return names[: max(1, len(names) // 2)]


def subsets_by_distance(n_heads: int, size: int | None) -> tuple[int, list[list[int]]]:
    """Windows of ``size`` consecutive ranks (stride 1) over heads sorted by distance, then all heads."""
    size = max(1, n_heads // 4) if size is None else int(size)
    if not 1 <= size <= n_heads:
        raise VitlabError(f"subset size {size} must be between 1 and the number of heads ({n_heads})")
    return size, [list(range(s, s + size)) for s in range(n_heads - size + 1)] + [list(range(n_heads))]


@dataclass(frozen=True)
class HeadSubsetOptions(DataOptions):
    """Options of the head-subset comparison (``vitlab head-subsets``)."""

    blocks: tuple[int, ...] = option((0,), "comma-separated ViT blocks whose heads are pooled (default 0)",
                                     kind="ints")
    size: int | None = option(None, "heads per subset (default: a quarter of the heads)")
    other_taps: tuple[str, ...] | None = option(None, "comma-separated taps of --other (default: its lower half)",
                                                kind="strs")
    tokens: str = option("spatial", "head features: spatial tokens flattened, or their mean",
                         choices=("spatial", "gap"))


def head_subsets(vit: LoadedModel, other: LoadedModel, source: ImageSource,
                 opts: HeadSubsetOptions = HeadSubsetOptions(), run: Run | None = None) -> HeadSubsetResult:
    """Sort the heads of ``blocks`` of ``vit`` by mean attention distance; CKA of each subset vs ``other``'s layers.

    One streamed pass computes the distances, the per-head Grams and ``other``'s Grams (all cached per batch);
    the per-batch Grams (n x n each) are kept until the order is known. Under torchrun (``run.shard``,
    ``run.reduce``) the distances are summed across ranks first, so every rank sorts the heads alike.
    """
    require_vit(vit, "head subsets")
    run, tokens = run or Run(), opts.tokens
    blocks = tuple(int(b) for b in (opts.blocks or (0,)))
    probs_taps(vit, blocks)
    if tokens not in HEAD_TOKENS:
        raise VitlabError(f"head tokens must be one of {', '.join(HEAD_TOKENS)}, not '{tokens}'")
    layers_b = list(opts.other_taps) if opts.other_taps else default_lower_taps(other)
    taps_mod.check_taps(other.model, layers_b)
    dist_stat, head_stat = AttentionDistanceStatistic(blocks), HeadGramStatistic(blocks, tokens)
    other_stat = GramStatistic(tuple(layers_b))
    n_heads = vit.heads
    dist_acc = AttentionDistanceAccumulator(blocks, n_heads)
    kept = []
    words = f"{vit.label} heads of block{'s' if len(blocks) > 1 else ''} {', '.join(map(str, blocks))} and {other.label}"
    part = run.with_progress(None if run.progress is None else (
        lambda done, total, text: run.progress(done, total, f"{words}: {text}")))
    batches = stream([vit, other], source, select(source, opts.images, opts.shuffle), opts.batch_size,
                     [[dist_stat, head_stat], [other_stat]], part)
    for done, (batch, found) in enumerate(batches, 1):
        dist_acc.update(found[0][dist_stat.name])
        kept.append((found[0][head_stat.name]["grams"], found[1][other_stat.name]["grams"]))
        # the running estimate: heads sorted and subsets compared over the batches so far (the app draws it)
        run.estimate(lambda: _subsets(vit, other, blocks, layers_b, opts.size, dist_acc, kept,
                                      replace(run, progress=None)), done, batch.of)
    run.reduce_accumulators(dist_acc)
    return _subsets(vit, other, blocks, layers_b, opts.size, dist_acc, kept, run, reduce=True)


def _subsets(vit: LoadedModel, other: LoadedModel, blocks: tuple[int, ...], layers_b: list[str], size: int,
             dist_acc: AttentionDistanceAccumulator, kept: list, run: Run, reduce: bool = False) -> HeadSubsetResult:
    """:func:`head_subsets`' result from the distances and the kept per-batch Grams (``reduce``: sum the subsets'
    CKA terms across ranks, as the final result does; a running estimate is one process's)."""
    n_heads = vit.heads
    dist = dist_acc.compute(vit.label, image_side(vit)).distance_px.ravel()  # (len(blocks) * H,) block-major
    order = np.argsort(dist, kind="stable")
    names = [f"b{blocks[i // n_heads]}.h{i % n_heads}" for i in order]
    size, subsets = subsets_by_distance(len(order), size)
    labels = [f"subset{s}" for s in range(len(subsets))]
    acc = BootstrapCKA(labels, layers_b)  # keeps each batch's terms: the intervals of the page's lead
    select_ = np.zeros((len(subsets), len(order)))
    for s, members in enumerate(subsets):
        select_[s, order[members]] = 1.0
    for b, (head_grams, other_grams) in enumerate(kept):
        run.step(b, len(kept), f"CKA of {len(subsets)} head subsets with {other.label}: batch {b + 1} of {len(kept)}")
        subset_grams = np.einsum("sh,hij->sij", select_, head_grams.astype(np.float64))
        acc.update(cka_mod.centred(subset_grams), cka_mod.centred(other_grams))
    if reduce:
        run.reduce_accumulators(acc)
    res = acc.compute(vit.label, other.label)
    loo = acc.replicates(jackknife_indices(len(acc.terms_xy))) if acc.terms_xy else None
    lo, hi = cka_interval(*acc.terms()) if acc.terms_xy else (None, None)
    grid = distance_matrix(taps_mod.grid_size(vit.model), taps_mod.patch_size(vit.model))
    uniform = uniform_distance(grid, taps_mod.num_prefix_tokens(vit.model))
    return HeadSubsetResult(vit.label, other.label, names, dist[order], subsets, layers_b, res.cka, size,
                            res.images, image_side(vit), res.warnings, loo, float(uniform), lo, hi)
