"""Attention analyses (Raghu et al. 2021, Sec. 4, Figs 3-4): capture parity, mean attention distance, maps, rollout.

Shapes: B batch, H heads, N tokens = P prefix tokens (CLS, distillation, registers) + Ns spatial tokens on a
gh x gw patch grid, L layers (blocks).

Mean attention distance (Dosovitskiy et al. 2021, Fig. 7 and App. D.7, as computed by Kornblith for Raghu et al.
2021, Figs 3-4). For one image, block and head, with attention probabilities A (N, N) and the pixel distances
D[q, k] between the centres of spatial patches q and k::

    d = 1/Ns * sum_q sum_k A[P+q, P+k] * D[q, k]                     (prefix tokens dropped; default)
    d_renorm = 1/Ns * sum_q (sum_k A[P+q, P+k] D[q, k]) / (sum_k A[P+q, P+k])   (rows renormalised)

then averaged over images. The default leaves the rows as they are after dropping the prefix columns, so
attention paid to the CLS token counts towards no distance (this is the published notebooks' convention);
``renormalise=True`` asks where the spatial attention goes, whatever the CLS token takes.
Distances are in input pixels; ``distance_frac`` divides by the image side (sqrt(H W) for non-square inputs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.activations import ActivationSet, activations
from ..engine.context import Run, RunInfo
from ..engine.run import Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.cache import Store
from ..inputs.data import ImageSource, select, to_tensor
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..progress import scaled
from .reports import PerModel

# ---------------------------------------------------------------- capture, and its parity with the uncaptured forward


def require_vit(loaded: LoadedModel, what: str) -> None:
    if taps_mod.family(loaded.model) != "vit":
        raise VitlabError(f"{what} needs a ViT-family model with attention; '{loaded.label}' is a "
                          f"{taps_mod.family(loaded.model)} model")


def probs_taps(loaded: LoadedModel, blocks: Sequence[int] | None = None) -> list[str]:
    """The ``blocks.{i}.attn_probs`` taps (B, H, N, N) of ``blocks`` (default: all), checked."""
    require_vit(loaded, "attention capture")
    n = len(loaded.model.blocks)
    blocks = list(range(n)) if blocks is None else [int(b) for b in blocks]
    bad = [b for b in blocks if not 0 <= b < n]
    if bad:
        raise VitlabError(f"block(s) {bad} out of range: '{loaded.label}' has blocks 0..{n - 1}")
    return [f"blocks.{b}.attn_probs" for b in blocks]


def recompute_probs(block, x):
    """softmax(q kᵀ · scale) of a timm ``Attention`` block from the block input x (B, N, D) -> (B, H, N, N).

    A second route to the probabilities, used to check what the capture gave: the capture forms them from the
    forward's own q and k (``taps.softmax_qk``) or reads them inside an unfused forward; this starts again from the
    block input (norm1, qkv, q_norm/k_norm), so a hook on the wrong block or tensor shows. Attention classes with
    positional biases (relpos ViTs) are not plain softmax(q kᵀ) and raise VitlabError.
    """
    import timm.layers

    attn = block.attn
    if type(attn) is not timm.layers.Attention:
        raise VitlabError(f"cannot recompute attention of {type(attn).__name__}: only timm's plain Attention")
    b, n, _ = x.shape
    qkv = attn.qkv(block.norm1(x)).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(dim=-1)


@dataclass
class ParityResult:
    """Per block: block output with attention captured vs without, and captured vs recomputed probabilities.

    ``routes[i]`` is how block i's probabilities were taken (:func:`vitlab.inputs.taps.probs_route`): 'recompute'
    (timm's plain attention, fused: recomputed beside the forward) and 'drop-input' (already unfused: read where the
    forward passes them on) leave the forward alone, so their block outputs must be identical, bit for bit;
    'unfuse' (other attention classes) switches fused attention off for the capture, which changes the outputs by
    float32 round-off, allowed up to ``tolerance`` of their scale.
    """

    model: str
    fused: list[bool]  # whether each block's attention runs fused by default
    output_diff: np.ndarray  # (L,) max |resid_post(capture) - resid_post(no capture)|
    output_scale: np.ndarray  # (L,) max |resid_post(no capture)|
    probs_diff: np.ndarray  # (L,) max |captured - recomputed softmax|; NaN where it cannot be recomputed
    row_sum_error: np.ndarray  # (L,) max |sum_k A[q, k] - 1|
    logits_diff: float
    images: int
    tolerance: float = 1e-4  # what ok() allows by default
    routes: list[str] = field(default_factory=list)  # per block: taps.PROBS_ROUTES

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"layer": np.arange(len(self.fused)), "fused_by_default": self.fused,
                             "route": self.routes, "max_abs_diff_output": self.output_diff,
                             "max_abs_output": self.output_scale, "max_abs_diff_probs": self.probs_diff,
                             "max_row_sum_error": self.row_sum_error, "model": self.model, "images": self.images})

    def untouched(self) -> np.ndarray:
        """(L,) bool: blocks whose route promises an unchanged forward (not 'unfuse')."""
        return np.array([r != "unfuse" for r in self.routes], dtype=bool)

    def headline(self) -> list[str]:
        probs = f"{np.nanmax(self.probs_diff):.3g}" if np.isfinite(self.probs_diff).any() else "n/a"
        kept = int(self.untouched().sum())
        return [(f"{'OK' if self.ok() else 'MISMATCH'}: max |block output difference| "
                 f"{np.max(self.output_diff):.3g}, logits {self.logits_diff:.3g}, max |hook - recomputed probs| "
                 f"{probs}; {kept} of {len(self.routes)} blocks captured without changing the forward")]

    def ok(self, tol: float | None = None) -> bool:
        """Blocks whose capture leaves the forward alone give identical outputs; unfused blocks agree to ``tol``
        relative to their scale; the captured rows are distributions."""
        tol = self.tolerance if tol is None else tol
        rel = self.output_diff / np.maximum(self.output_scale, 1e-12)
        # every block after the first unfused one sees changed inputs: only blocks before it must be exact
        unfused = np.flatnonzero(~self.untouched())
        exact = np.arange(len(self.routes)) < (unfused[0] if len(unfused) else len(self.routes))
        logits_exact = len(unfused) > 0 or self.logits_diff == 0
        return bool(np.all(self.output_diff[exact] == 0) and logits_exact and np.all(rel <= tol) and np.all(self.row_sum_error <= tol)
                    and np.all(np.nan_to_num(self.probs_diff) <= tol))


def capture_parity(loaded: LoadedModel, images: list) -> ParityResult:
    """Run ``images`` (PIL) without and with attention captured; compare every block output and the probabilities
    with an independent recomputation from the block input (:func:`recompute_probs`)."""
    import torch

    require_vit(loaded, "the attention parity check")
    model, n = loaded.model, len(loaded.model.blocks)
    posts = [f"blocks.{i}.resid_post" for i in range(n)]
    pres = [f"blocks.{i}.resid_pre" for i in range(n)]
    probs = probs_taps(loaded)
    x = to_tensor(images, loaded)
    routes = [taps_mod.probs_route(model, t) for t in probs]
    with torch.inference_mode():
        with taps_mod.capture(model, posts) as plain_acts:
            plain_logits = model(x)
        with taps_mod.capture(model, posts + pres + probs) as acts:
            logits = model(x)
        probs_diff = np.full(n, np.nan)
        for i in range(n):
            try:
                ref = recompute_probs(model.blocks[i], acts[pres[i]])
                probs_diff[i] = float((acts[f"blocks.{i}.attn_probs"] - ref).abs().max())
            except VitlabError:  # e.g. relative-position attention: no independent recomputation, stays NaN
                continue
    fused = [bool(getattr(b.attn, "fused_attn", False)) for b in model.blocks]
    out_diff = np.array([float((acts[p] - plain_acts[p]).abs().max()) for p in posts])
    scale = np.array([float(plain_acts[p].abs().max()) for p in posts])
    row_err = np.array([float((acts[f"blocks.{i}.attn_probs"].sum(-1) - 1).abs().max()) for i in range(n)])
    return ParityResult(loaded.label, fused, out_diff, scale, probs_diff, row_err,
                        float((logits - plain_logits).abs().max()), len(images), routes=routes)


# ---------------------------------------------------------------- mean attention distance


def patch_centres(grid: tuple[int, int], patch: tuple[int, int]) -> np.ndarray:
    """(Ns, 2) pixel (y, x) centres of the patches of a gh x gw grid, row-major like the tokens."""
    rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    return np.stack([(rows.ravel() + 0.5) * patch[0], (cols.ravel() + 0.5) * patch[1]], axis=1).astype(np.float64)


def distance_matrix(grid: tuple[int, int], patch: tuple[int, int]) -> np.ndarray:
    """(Ns, Ns) Euclidean pixel distances between patch centres."""
    c = patch_centres(grid, patch)
    return np.sqrt(((c[:, None, :] - c[None, :, :]) ** 2).sum(-1))


def mean_distance_per_image(probs, prefix: int, dist):
    """(B, H, N, N) probabilities -> ((B, H) distance with rows as they are, (B, H) rows renormalised).

    Pure; float64. ``dist`` (Ns, Ns) pixel distances; the first ``prefix`` tokens are dropped from queries and keys.
    """
    import torch

    a = probs[:, :, prefix:, prefix:].to(torch.float64)
    if a.shape[-1] != dist.shape[0]:
        raise VitlabError(f"attention over {a.shape[-1]} spatial tokens does not fit a grid of {dist.shape[0]} "
                          "patches: check the model's prefix tokens and input size")
    d = torch.as_tensor(dist, dtype=torch.float64, device=a.device)
    weighted = torch.einsum("bhqk,qk->bhq", a, d)  # (B, H, Ns)
    mass = a.sum(-1)
    return weighted.mean(-1), (weighted / mass).mean(-1)


@dataclass(frozen=True)
class AttentionDistanceStatistic(Statistic):
    """Per-image mean attention distance of every head of ``blocks`` (default all): {'raw', 'renorm'}: (L, H, B).

    Raghu et al. 2021, Figs 3-4 (definition in the module docstring). Per-image values, so the spread over
    images is available; the accumulator keeps float64 sums.
    """

    blocks: tuple[int, ...] | None = None
    name: str = "attn_distance"
    version: int = 1

    def taps(self, loaded: LoadedModel) -> list[str]:
        return probs_taps(loaded, self.blocks)

    def params(self, loaded: LoadedModel) -> dict:
        return {"taps": self.taps(loaded)}

    # (B, H, N, N) probabilities are reduced to (B, H) distances inside the forward (vitlab.inflight), so one
    # block's map at a time exists (~680 MiB per 32 images for all of ViT-B/16's, FACTS.md)
    streams = True

    def reduce_tap(self, tap: str, act, loaded: LoadedModel):
        model = loaded.model
        dist = distance_matrix(taps_mod.grid_size(model), taps_mod.patch_size(model))
        return mean_distance_per_image(act, taps_mod.num_prefix_tokens(model), dist)

    def finish(self, parts: dict, loaded: LoadedModel, batch) -> dict[str, np.ndarray]:
        raw, ren = zip(*(parts[t] for t in self.taps(loaded)))
        return {"raw": np.stack([r.T.cpu().numpy() for r in raw]), "renorm": np.stack([r.T.cpu().numpy() for r in ren])}

    def compute(self, acts: dict, loaded: LoadedModel, batch) -> dict[str, np.ndarray]:
        return self.finish({t: self.reduce_tap(t, acts[t], loaded) for t in self.taps(loaded)}, loaded, batch)


LOCAL_MARGIN = 0.25  # a local head attends at least this fraction closer than uniform (the tour's default margin)


@dataclass
class AttentionDistanceResult:
    """Mean attention distance per block and head, with its standard deviation over images."""

    model: str
    layers: list[int]
    distance_px: np.ndarray  # (L, H)
    std_px: np.ndarray  # (L, H)
    image_side_px: float
    images: int
    renormalised: bool
    uniform_px: float = float("nan")  # uniform attention over all keys, in this result's prefix convention

    def to_frame(self):
        import pandas as pd

        from ..stats.evidence import JACKKNIFE, interval_columns, mean_half_width

        unit = interval_columns("images", self.images, JACKKNIFE)
        rows = []
        for li, layer in enumerate(self.layers):
            for h in range(self.distance_px.shape[1]):
                d, s = float(self.distance_px[li, h]), float(self.std_px[li, h])
                half = mean_half_width(s, self.images)
                rows.append({"layer": layer, "head": h, "distance_px": d, "std_px": s,
                             "distance_lo": d - half, "distance_hi": d + half, **unit,
                             "distance_frac": d / self.image_side_px, "std_frac": s / self.image_side_px,
                             "images": self.images, "model": self.model, "renormalised": self.renormalised,
                             "uniform_px": self.uniform_px, "uniform_frac": self.uniform_px / self.image_side_px})
        return pd.DataFrame(rows)

    def head_order(self, layer: int) -> list[int]:
        """Heads of ``layer`` from the most local (smallest distance) to the most global."""
        return [int(h) for h in np.argsort(self.distance_px[self.layers.index(layer)], kind="stable")]

    def head_estimate(self, li: int, h: int):
        """Head ``h`` of the ``li``-th layer's mean distance (px) with its jackknife-t interval over images."""
        from .findings import mean_from_moments

        return mean_from_moments(self.distance_px[li, h], self.std_px[li, h], self.images)

    def lower_layers(self) -> list[int]:
        """Indices (into ``layers``) of the lower half of the measured blocks (at least one)."""
        return list(range(max(1, len(self.layers) // 2)))


class AttentionDistanceAccumulator:
    """Float64 sums of per-image distances (count, sum, sum of squares), both row conventions."""

    KINDS = ("raw", "renorm")
    state_is_sum = True  # torch.distributed: ranks' states add (vitlab.dist.all_reduce_accumulators)

    def __init__(self, layers: Sequence[int], heads: int):
        self.layers, self.heads = list(layers), int(heads)
        self.sum = np.zeros((2, len(self.layers), self.heads))
        self.sumsq = np.zeros_like(self.sum)
        self.images = 0

    def update(self, values: dict[str, np.ndarray]) -> None:
        """Add one batch's ``AttentionDistanceStatistic`` value ((L, H, B) per kind)."""
        v = np.stack([np.asarray(values[k], dtype=np.float64) for k in self.KINDS])
        if v.shape[1:3] != self.sum.shape[1:]:
            raise VitlabError(f"distances of shape {v.shape[1:3]} given to an accumulator of "
                              f"{len(self.layers)} layers x {self.heads} heads")
        self.sum += v.sum(-1)
        self.sumsq += (v**2).sum(-1)
        self.images += v.shape[-1]

    def merge(self, other: AttentionDistanceAccumulator) -> AttentionDistanceAccumulator:
        if (other.layers, other.heads) != (self.layers, self.heads):
            raise VitlabError("cannot merge attention-distance accumulators over different layers or heads")
        self.sum += other.sum
        self.sumsq += other.sumsq
        self.images += other.images
        return self

    def state(self) -> dict[str, np.ndarray]:
        return {"sum": self.sum, "sumsq": self.sumsq, "images": np.array(self.images)}

    def load_state(self, state: dict[str, np.ndarray]) -> AttentionDistanceAccumulator:
        self.sum = np.array(state["sum"], dtype=np.float64)
        self.sumsq = np.array(state["sumsq"], dtype=np.float64)
        self.images = int(state["images"])
        return self

    def compute(self, model: str, image_side_px: float, renormalise: bool = False,
                uniform_px: float = float("nan")) -> AttentionDistanceResult:
        if self.images == 0:
            raise VitlabError("no image was accumulated: attention distance needs at least one batch")
        k = int(renormalise)
        mean = self.sum[k] / self.images
        # population variance over images from float64 sums; tiny negative rounding means zero spread
        var = np.maximum(self.sumsq[k] / self.images - mean**2, 0.0)
        return AttentionDistanceResult(model, self.layers, mean, np.sqrt(var), image_side_px, self.images, renormalise,
                                       uniform_px)


def image_side(loaded: LoadedModel) -> float:
    _, h, w = loaded.data_config["input_size"]
    return float(np.sqrt(h * w))


@dataclass(frozen=True)
class AttentionDistanceOptions(DataOptions):
    """Options of the mean attention distance (``vitlab attention-distance``)."""

    batch_size: int = option(32, "images per batch", short="-b")
    blocks: tuple[int, ...] | None = option(None, "comma-separated block indices (default: all)", kind="ints")
    renormalise: bool = option(False, "renormalise each query's attention over spatial keys after dropping prefix "
                               "tokens")
    units: str = option("px", "chart in pixels or fraction of image side", choices=("px", "frac"))


def attention_distance(loaded: LoadedModel, source: ImageSource,
                       opts: AttentionDistanceOptions = AttentionDistanceOptions(), run: Run | None = None
                       ) -> AttentionDistanceResult:
    """Mean attention distance of every head of every block over ``opts.images`` of ``source`` (one streamed pass).

    ``run.shard`` and ``run.reduce`` (e.g. ``vitlab.dist.all_reduce_accumulators``) run it under torchrun.
    """
    require_vit(loaded, "attention distance")
    run = run or Run()
    stat = AttentionDistanceStatistic(None if opts.blocks is None else tuple(int(b) for b in opts.blocks))
    layers = [int(t.split(".")[1]) for t in stat.taps(loaded)]
    acc = AttentionDistanceAccumulator(layers, loaded.heads)
    for _, found in stream([loaded], source, select(source, opts.images, opts.shuffle), opts.batch_size, [[stat]],
                           run, min_batch=1):
        acc.update(found[0][stat.name])
    run.reduce_accumulators(acc)
    from ..stats.evidence import uniform_distance

    # the reference in the statistic's own convention: without renormalising, prefix keys count as distance 0
    dist = distance_matrix(taps_mod.grid_size(loaded.model), taps_mod.patch_size(loaded.model))
    uniform = uniform_distance(dist, taps_mod.num_prefix_tokens(loaded.model), opts.renormalise)
    return acc.compute(loaded.label, image_side(loaded), opts.renormalise, float(uniform))


@dataclass
class AttentionDistanceReport(PerModel):
    """Mean attention distances of several models (``vitlab attention-distance``)."""

    results: list[AttentionDistanceResult]
    info: RunInfo = field(default_factory=RunInfo)

    def headline(self) -> list[str]:
        blocks = sorted({layer for r in self.results for layer in r.layers})
        return [f"{r.model}: mean attention distance {r.distance_px.mean():.1f} px (uniform attention "
                f"{r.uniform_px:.1f} px)" for r in self.results] + [
            f"mean attention distance over {self.results[0].images} images, {len(blocks)} blocks"]


def attention_distances(models: Sequence[LoadedModel], source: ImageSource,
                        opts: AttentionDistanceOptions = AttentionDistanceOptions(), run: Run | None = None
                        ) -> AttentionDistanceReport:
    """:func:`attention_distance` of every model, one after the other, under one progress bar."""
    run = run or Run()
    results = [attention_distance(m, source, opts, run.with_progress(scaled(run.progress, i, len(models), m.label)))
               for i, m in enumerate(models)]
    return AttentionDistanceReport(results, run.info)


# ---------------------------------------------------------------- per-head, per-token maps of one image


def query_token(loaded: LoadedModel, query) -> int:
    """Token index of ``query``: 'cls', a spatial patch index, or a (row, col) patch position."""
    model = loaded.model
    prefix, (gh, gw) = taps_mod.num_prefix_tokens(model), taps_mod.grid_size(model)
    if query in ("cls", "CLS", None):
        if not taps_mod.has_cls_token(model):
            raise VitlabError(f"'{loaded.label}' has no CLS token: choose a patch as the query, e.g. (row, col)")
        return 0
    if isinstance(query, (tuple, list)):
        r, c = (int(v) for v in query)
        if not (0 <= r < gh and 0 <= c < gw):
            raise VitlabError(f"query patch {(r, c)} is outside the {gh}x{gw} patch grid")
        return prefix + r * gw + c
    q = int(query)
    if not 0 <= q < gh * gw:
        raise VitlabError(f"query patch index {q} is outside 0..{gh * gw - 1} (a {gh}x{gw} grid)")
    return prefix + q


def rollout_matrix(probs_layers: Sequence[np.ndarray], residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020, eq. 1): prod_l (residual I + (1 - residual) mean_h A_l), rows
    renormalised; ``probs_layers`` are (H, N, N) from the first block up. Returns (N, N)."""
    n = probs_layers[0].shape[-1]
    out = np.eye(n)
    for a in probs_layers:
        m = residual * np.eye(n) + (1 - residual) * np.asarray(a, dtype=np.float64).mean(0)
        out = (m / m.sum(-1, keepdims=True)) @ out
    return out


@dataclass
class AttentionMap:
    """Where one query token of one image attends, over the patch grid: ``grid`` (gh, gw)."""

    model: str
    image: str
    layer: int
    head: str  # a head index, 'mean' (over heads) or 'rollout' (blocks 0..layer)
    query: str  # 'cls' or 'r,c'
    grid: np.ndarray  # (gh, gw), weights on spatial keys (prefix keys dropped, not renormalised)
    patch: tuple[int, int]
    query_rc: tuple[int, int] | None = None
    flagged: np.ndarray | None = None  # (gh, gw) bool: keys left out (their weight 0, the row renormalised)

    def upsampled(self, size: tuple[int, int] | None = None, smooth: bool = False) -> np.ndarray:
        """The map over the image pixels (H, W): each patch's weight on its pixels, or bilinear if ``smooth``."""
        import torch
        import torch.nn.functional as F

        gh, gw = self.grid.shape
        size = size or (gh * self.patch[0], gw * self.patch[1])
        t = torch.as_tensor(self.grid, dtype=torch.float32)[None, None]
        mode = {"mode": "bilinear", "align_corners": False} if smooth else {"mode": "nearest"}
        return F.interpolate(t, size=size, **mode)[0, 0].numpy()

    def to_frame(self):
        import pandas as pd

        gh, gw = self.grid.shape
        r, c = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        return pd.DataFrame({"row": r.ravel(), "col": c.ravel(), "weight": self.grid.ravel().astype(np.float64),
                             "model": self.model, "image": self.image, "layer": self.layer, "head": self.head,
                             "query": self.query, "tokens": "all" if self.flagged is None else "flagged left out",
                             "flagged": False if self.flagged is None else self.flagged.ravel(),
                             "query_row": np.nan if self.query_rc is None else self.query_rc[0],
                             "query_col": np.nan if self.query_rc is None else self.query_rc[1]})


def image_attention(loaded: LoadedModel, images, index: int = 0, store: Store | None = None) -> ActivationSet:
    """Every block's attention probabilities of one image, cached float16 (one forward the first time only)."""
    return activations(loaded, images, probs_taps(loaded), store, indices=[index])


def attention_map(loaded: LoadedModel, images, index: int = 0, layer: int = 0, head: int | str = "mean",
                  query="cls", store: Store | None = None, acts: ActivationSet | None = None,
                  leave_out: np.ndarray | None = None) -> AttentionMap:
    """The attention map of image ``index``: one head (int), the head mean ('mean'), or the rollout up to
    ``layer`` ('rollout'), for ``query`` ('cls', a patch index or (row, col)). Uses cached activations.

    ``leave_out``: (N,) bool, keys to leave out (flagged high-norm tokens: ``token_norms.block_input_flags``).
    Their weight is set to 0 and the query's row renormalised over the remaining keys, prefix keys included
    (a_k · keep_k / Σ_j a_j · keep_j), so the map says where the attention that does not go to flagged tokens goes;
    the map marks them (``flagged``). For rollout the final row is masked, not each block's attention."""
    probs_taps(loaded, [layer])
    acts = acts or image_attention(loaded, images, index, store)
    model = loaded.model
    prefix, grid, patch = taps_mod.num_prefix_tokens(model), taps_mod.grid_size(model), taps_mod.patch_size(model)
    q = query_token(loaded, query)
    if head == "rollout":
        row = rollout_matrix([acts.arrays[f"blocks.{i}.attn_probs"][0] for i in range(layer + 1)])[q]
    else:
        a = acts.arrays[f"blocks.{layer}.attn_probs"][0]  # (H, N, N)
        if head == "mean":
            row = a[:, q].mean(0)
        else:
            if not str(head).lstrip("-").isdigit():
                raise VitlabError(f"head must be a head index, 'mean' or 'rollout', not '{head}'")
            if not 0 <= int(head) < a.shape[0]:
                raise VitlabError(f"head {head} out of range: block {layer} has heads 0..{a.shape[0] - 1}")
            row = a[int(head), q]
    row, flagged = np.asarray(row, dtype=np.float64), None
    ns = grid[0] * grid[1]
    if leave_out is not None:
        keep = ~np.asarray(leave_out, dtype=bool)
        if keep.shape != row.shape:
            raise VitlabError(f"leave_out has {keep.size} tokens; block {layer} has {row.size}")
        if not (row * keep).sum() > 0:
            raise VitlabError(f"every key the query attends to in block {layer} is flagged: nothing left to map")
        row, flagged = row * keep / (row * keep).sum(), ~keep[prefix:prefix + ns].reshape(grid)
    rc = None if q < prefix else divmod(q - prefix, grid[1])
    qname = "cls" if rc is None else f"{rc[0]},{rc[1]}"
    # tokens after the patch grid (none in timm's models) have no place on the map
    return AttentionMap(loaded.label, acts.ids[0], int(layer), str(head), qname,
                        row[prefix:prefix + ns].reshape(grid), tuple(patch), rc, flagged)


def head_maps(loaded: LoadedModel, images, index: int = 0, layer: int = 0, query="cls",
              store: Store | None = None, leave_out: np.ndarray | None = None):
    """One frame with the map of every head of ``layer`` plus their mean (the app's per-head grid); ``leave_out``
    as in :func:`attention_map`."""
    import pandas as pd

    acts = image_attention(loaded, images, index, store)
    heads = list(range(loaded.heads)) + ["mean"]
    return pd.concat([attention_map(loaded, images, index, layer, h, query, acts=acts, leave_out=leave_out)
                      .to_frame() for h in heads], ignore_index=True)
