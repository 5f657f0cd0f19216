"""Effective receptive fields (Raghu et al. 2021, Sec. 4.2, Fig. 6 and App. C.1-C.4; Luo et al. 2016).

For a layer, the effective receptive field is the absolute value of the gradient of the feature map's centre
location with respect to the input image, averaged over images (32 by default) and input channels. The centre is
the middle position of the spatial grid (token grid for ViT/Mixer, feature map for CNNs); on an even side it is
the two middle positions (so 2x2 on an even grid), which keeps the map symmetric. "Averaged over channels" is the
gradient of the sum over the layer's channels (one backward pass per batch, as Luo et al. do), and the absolute
value is taken per input pixel, then averaged over the input's colour channels.

Layers are blocks (``blocks.3``, ``layer2.1``, ``stages.1.blocks.0``) with ``residual``:

- ``post`` (default): the block output, after the residual sum;
- ``pre``: the branch alone, before the sum, as in the paper's App. C: for ViT the attention sublayer (``ls1``
  output), for Mixer the token-mixing MLP, for ResNet the last conv/BN of the residual branch (``bn3``/``bn2``; a
  squeeze-excite after it is left out), for ResNetV2/BiT the last conv of the pre-activation branch;
- ``pre-mlp``: ViT and Mixer only: the block's second branch, the MLP (``ls2``) or channel-mixing MLP. The
  attention branch is the one whose field the paper shows (global from block 1 on); the MLP branch sees what the
  attention already mixed and looks more local.

Any tap name (``vitlab taps``) is accepted too, e.g. ``blocks.3.attn_out`` for the attention branch.
Shapes: B batch, C input channels, H x W input pixels, L layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..engine import dist, hostmem
from ..engine.context import Run, RunInfo
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.cache import make_key
from ..inputs.data import ImageSource, decode, plan_batches, select, to_tensor
from ..inputs.images import needed_side
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..progress import scaled
from .reports import PerModel

RESIDUALS = ("post", "pre", "pre-mlp")
RESIDUAL_LABELS = {"post": "after the residual", "pre": "before the residual (attention / branch)",
                   "pre-mlp": "before the residual (MLP branch)"}
VERSION = 1


class _Stop(Exception):
    """Raised by the hook once the layer is computed: the rest of the network is not needed."""


def centre_slices(size: int) -> slice:
    """The middle index of an odd side, the two middle indices of an even one."""
    return slice(size // 2, size // 2 + 1) if size % 2 else slice(size // 2 - 1, size // 2 + 1)


def centre_value(y, prefix: int = 0, grid: tuple[int, int] | None = None):
    """Sum over the batch and channels of the layer's centre position(s): (B, C, h, w) or (B, N, D) tokens."""
    if y.dim() == 4:
        return y[:, :, centre_slices(y.shape[2]), centre_slices(y.shape[3])].sum()
    if y.dim() == 3 and grid is not None:
        sp = y[:, prefix:].reshape(y.shape[0], grid[0], grid[1], y.shape[2])
        return sp[:, centre_slices(grid[0]), centre_slices(grid[1])].sum()
    raise VitlabError(f"cannot find the centre of a layer output of shape {tuple(y.shape)}")


def input_gradient(model, module: str, x, where: str, value):
    """|d value(module output) / d x| averaged over input channels: (B, C, H, W) input -> (B, H, W), float64.

    ``value(y)`` reduces the module's input (``where='in'``) or output to a scalar; the forward stops at the module.
    Also returns what ``value`` returned besides the scalar, when it returns a tuple ``(scalar, extra)``.
    """
    import torch

    modules = dict(model.named_modules())
    if module not in modules:
        raise VitlabError(f"module '{module}' not found in {type(model).__name__}")
    kept = {}

    def hook(m, args, out=None):
        kept["y"] = args[0] if where == "in" else out
        raise _Stop  # the rest of the network is not needed

    mod = modules[module]
    x = x.detach().clone().requires_grad_(True)
    with taps_mod.model_lock(model):
        handle = mod.register_forward_pre_hook(hook) if where == "in" else mod.register_forward_hook(hook)
        try:
            with torch.enable_grad():
                try:
                    model(x)
                except _Stop:
                    pass
                if "y" not in kept:
                    raise VitlabError(f"module '{module}' was not called in the forward pass")
                v = value(kept["y"])
                scalar, extra = v if isinstance(v, tuple) else (v, None)
                (g,) = torch.autograd.grad(scalar, x)
        finally:
            handle.remove()
    return g.abs().to(torch.float64).mean(1), extra


def centre_gradient(model, module: str, x, where: str = "out", prefix: int = 0,
                    grid: tuple[int, int] | None = None):
    """|d centre(module output) / d x| averaged over input channels: (B, C, H, W) input -> (B, H, W), float64.

    Images are independent in eval mode, so the gradient of the batch sum gives every image's own gradient.
    """
    return input_gradient(model, module, x, where, lambda y: centre_value(y, prefix, grid))[0]


def _last_branch_module(model, block: str) -> str:
    children = [n for n, _ in dict(model.named_modules())[block].named_children()]
    branch = [n for n in children if n.startswith(("conv", "bn", "norm"))]
    if not branch:
        raise VitlabError(f"block '{block}' has no conv/norm layers to take the pre-residual branch from")
    return f"{block}.{branch[-1]}"


def layer_point(loaded: LoadedModel, layer: str, residual: str = "post") -> tuple[str, str]:
    """(module path, 'in'|'out') of ``layer`` (a block name or a tap name) for ``residual`` 'post' or 'pre'."""
    if residual not in RESIDUALS:
        raise VitlabError(f"residual must be one of {', '.join(RESIDUALS)}, not '{residual}'")
    model = loaded.model
    blocks = block_names(loaded)
    if layer not in blocks:
        table = taps_mod.tap_table(model)
        if layer not in table:
            raise VitlabError(f"unknown layer '{layer}' for '{loaded.label}': layers look like "
                              f"{', '.join(blocks[:4])}, ... (or any tap name from `vitlab taps`)")
        if table[layer].transpose:
            raise VitlabError(f"tap '{layer}' is stored transposed; use the block '{layer.rsplit('.', 1)[0]}'")
        return table[layer].module, table[layer].where
    fam = taps_mod.family(model)
    if residual == "post":
        return layer, "out"
    mlp = residual == "pre-mlp"
    if fam == "vit":
        return f"{layer}.{'ls2' if mlp else 'ls1'}", "out"
    if fam == "mixer":
        return f"{layer}.{'mlp_channels' if mlp else 'mlp_tokens'}", "out"
    if mlp:
        raise VitlabError(f"'{loaded.label}' is a CNN: its blocks have one branch; use residual 'pre', not 'pre-mlp'")
    return _last_branch_module(model, layer), "out"


def block_names(loaded: LoadedModel) -> list[str]:
    """The blocks of a model, in order (the layer names for receptive fields)."""
    fam, model = taps_mod.family(loaded.model), loaded.model
    if fam in ("vit", "mixer"):
        return [f"blocks.{i}" for i in range(len(model.blocks))]
    return taps_mod.default_taps(model)


def field_maps(loaded: LoadedModel, points: list[tuple[str, str]], source: ImageSource, batch, store,
               check: Callable[[str], None] | None = None) -> list[np.ndarray] | None:
    """Per-image |gradient| maps (n, H, W) of the centre of each (module, 'in'|'out') point over one batch, as
    :func:`centre_gradient` gives them, kept in ``store`` per (model fingerprint, batch, point), so that a tour run
    again (other intervals, other options) reads them instead of another forward and backward (issue 34). None when
    the batch has no readable image. ``check(where)`` (e.g. ``run.check``) is called before each point's gradient."""
    keys = [make_key("receptive-field-maps", VERSION, loaded.fingerprint, batch.key, module, where,
                     *loaded.layout_key) for module, where in points]
    hits = [store.get(k) for k in keys]
    if all(h is not None and "maps" in h for h in hits):
        maps = [h["maps"] for h in hits]
        return maps if all(m.ndim == 3 and len(m) for m in maps) else None
    decode(source, batch)
    if not batch.images:
        for k in keys:
            store.put(k, {"maps": np.zeros((0, 0, 0))})
        return None
    prefix, grid = taps_mod.num_prefix_tokens(loaded.model), taps_mod.grid_size(loaded.model)
    x = to_tensor(batch.images, loaded)
    maps = []
    for i, (module, where) in enumerate(points):
        if check is not None:
            check(f"{loaded.label}: {module} ({where}), point {i + 1} of {len(points)}")
        maps.append(centre_gradient(loaded.model, module, x, where, prefix, grid).cpu().numpy())
    for k, m in zip(keys, maps):
        store.put(k, {"maps": m})
    hostmem.release()
    return maps


@dataclass
class ReceptiveFieldResult:
    """Mean |gradient| maps (L, H, W) over the input for each layer."""

    model: str
    layers: list[str]
    residual: str
    maps: np.ndarray  # (L, H, W) mean over images of |d centre / d input|, averaged over input channels
    images: int
    radius_samples: np.ndarray | None = None  # (B, 2, L) 50 % and 90 % radii (px) of each bootstrap resample
    radius_units: int = 0  # batches (images at batch size 1) behind radius_samples

    @property
    def warnings(self) -> list[str]:
        return [f"{self.model} {layer}: the gradient is zero everywhere (a constant output, e.g. a zero-initialised "
                "last norm in a randomly initialised ResNet branch)" for layer, m in zip(self.layers, self.maps)
                if not np.any(m)]

    def normalised(self) -> np.ndarray:
        """Each layer's map divided by its maximum (as drawn in Fig. 6)."""
        peak = self.maps.reshape(len(self.layers), -1).max(1)
        return self.maps / np.where(peak > 0, peak, 1.0)[:, None, None]

    def radius_px(self, mass: float = 0.5) -> np.ndarray:
        """(L,) radius of the disc around the image centre holding ``mass`` of each map's total gradient."""
        _, h, w = self.maps.shape
        yy, xx = np.mgrid[0:h, 0:w]
        r = np.hypot(yy + 0.5 - h / 2, xx + 0.5 - w / 2).ravel()
        order = np.argsort(r, kind="stable")
        out = []
        for m in self.maps.reshape(len(self.layers), -1):
            cum = np.cumsum(m[order])
            out.append(float(r[order][np.searchsorted(cum, mass * cum[-1])]) if cum[-1] > 0 else np.nan)
        return np.array(out)

    def to_frame(self, max_side: int = 64):
        """Tidy (layer, row, col, value): maps block-averaged to at most ``max_side`` per side, then normalised."""
        import pandas as pd
        import torch
        import torch.nn.functional as F

        _, h, w = self.maps.shape
        size = (min(h, max_side), min(w, max_side))
        pooled = F.adaptive_avg_pool2d(torch.as_tensor(self.maps)[:, None], size)[:, 0].numpy()
        peak = pooled.reshape(len(self.layers), -1).max(1)
        pooled = pooled / np.where(peak > 0, peak, 1.0)[:, None, None]
        r, c = np.meshgrid(np.arange(size[0]), np.arange(size[1]), indexing="ij")
        frames = [pd.DataFrame({"layer": layer, "order": i, "row": r.ravel(), "col": c.ravel(),
                                "value": pooled[i].ravel(), "model": self.model, "residual": self.residual})
                  for i, layer in enumerate(self.layers)]
        return pd.concat(frames, ignore_index=True)

    def summary_frame(self):
        import pandas as pd

        _, h, w = self.maps.shape
        side = float(np.sqrt(h * w))
        frame = pd.DataFrame({"layer": self.layers, "radius50_px": self.radius_px(0.5),
                              "radius90_px": self.radius_px(0.9), "model": self.model, "residual": self.residual,
                              "images": self.images})
        if self.radius_samples is not None:  # 95 % intervals over batches of images
            from ..stats.evidence import MIN_UNITS, PERCENTILE, interval_columns, percentile_interval

            # a radius is a quantile on the pixel grid (not smooth): percentile bootstrap, not the jackknife
            lo, hi = percentile_interval(self.radius_samples)
            if self.radius_units < MIN_UNITS:
                lo, hi = np.full_like(lo, np.nan), np.full_like(hi, np.nan)
            frame["radius50_lo"], frame["radius50_hi"] = lo[0], hi[0]
            frame["radius90_lo"], frame["radius90_hi"] = lo[1], hi[1]
            for col, v in interval_columns("batches", self.radius_units, PERCENTILE).items():
                frame[col] = v
        for col in [c for c in frame.columns if c.startswith("radius")]:  # fractions of the input side
            frame[col.replace("_px", "") + "_frac" if col.endswith("_px") else col + "_frac"] = frame[col] / side
        return frame


    def radius_estimates(self, layer: int, mass: float = 0.5):
        """The ``mass`` radius of layer ``layer`` as a fraction of the input side, with its 95 % percentile-bootstrap
        interval over batches (a quantile on the pixel grid is not smooth: no jackknife)."""
        from ..stats.evidence import MIN_UNITS, PERCENTILE, Estimate, percentile_interval

        _, h, w = self.maps.shape
        side = float(np.sqrt(h * w))
        value = float(self.radius_px(mass)[layer]) / side
        k = {0.5: 0, 0.9: 1}[mass]
        if self.radius_samples is None or self.radius_units < MIN_UNITS:
            return Estimate(value, np.nan, np.nan, "batches", self.radius_units, PERCENTILE)
        lo, hi = percentile_interval(self.radius_samples[:, k, layer])
        return Estimate(value, float(lo) / side, float(hi) / side, "batches", self.radius_units, PERCENTILE)


class GradientSums:
    """Float64 sums of per-image |gradient| maps (L, H, W) and the image count (torch.distributed: states add)."""

    state_is_sum = True

    def __init__(self, layers: int, size: tuple[int, int]):
        self.sum, self.images = np.zeros((layers, *size)), 0

    def update(self, sums: np.ndarray, n: int) -> GradientSums:
        self.sum += sums
        self.images += int(n)
        return self

    def merge(self, other: GradientSums) -> GradientSums:
        return self.update(other.sum, other.images)

    def state(self) -> dict[str, np.ndarray]:
        return {"sum": self.sum, "images": np.array(self.images)}

    def load_state(self, state: dict[str, np.ndarray]) -> GradientSums:
        self.sum, self.images = np.array(state["sum"], dtype=np.float64), int(state["images"])
        return self


@dataclass(frozen=True)
class ReceptiveOptions(DataOptions):
    """Options of the effective receptive fields (``vitlab receptive-field``)."""

    images: int | None = option(32, "number of images (first N, or shuffled)", short="-n")
    batch_size: int = option(8, "images per batch", short="-b")
    layers: tuple[str, ...] | None = option(None, "comma-separated blocks or taps (default: every block)", kind="strs")
    residual: str = option("post", "block output after the residual sum; the branch alone before it (pre: the ViT "
                           "attention sublayer, as in the paper's App. C; pre-mlp: the ViT/Mixer MLP branch); both: "
                           "post and pre", choices=("post", "pre", "pre-mlp", "both"))


def receptive_fields(loaded: LoadedModel, source: ImageSource, opts: ReceptiveOptions = ReceptiveOptions(),
                     run: Run | None = None) -> ReceptiveFieldResult:
    """Effective receptive fields of ``opts.layers`` (default: every block) over ``opts.images`` of ``source``.

    Per batch and layer: one forward (stopped at the layer) and one backward; the per-batch gradient sums are
    cached, so adding layers or images reruns only what is new. ``run.shard``/``run.reduce``: torch.distributed.
    """
    run = run or Run()
    store, info, progress, residual = run.store, run.info, run.progress, opts.residual
    if residual not in RESIDUALS:
        raise VitlabError(f"residual must be one of {', '.join(RESIDUALS)} for one result, not '{residual}'")
    layers = list(opts.layers) if opts.layers else block_names(loaded)
    points = [layer_point(loaded, layer, residual) for layer in layers]
    prefix, grid = taps_mod.num_prefix_tokens(loaded.model), taps_mod.grid_size(loaded.model)
    batches = plan_batches(source, select(source, opts.images, opts.shuffle), opts.batch_size)
    batches = batches[run.shard[0]::run.shard[1]]
    acc = GradientSums(len(layers), tuple(loaded.data_config["input_size"][1:]))
    kept: list = []  # per batch: (batch number, (gradient sums (L, H, W), images)), for the intervals
    steps = len(batches) * len(layers)
    for b, batch in enumerate(batches):
        dist.at_batch(batch.index)
        sums, x, ran = [], None, False
        for li, (module, where) in enumerate(points):
            # a block's gradient is a forward and a backward: the run stops between blocks when asked
            run.step(b * len(layers) + li, steps, f"{loaded.label}: batch {b + 1} of {len(batches)}, "
                     f"{layers[li]} (block {li + 1} of {len(layers)})")
            key = make_key("receptive-field", VERSION, loaded.fingerprint, batch.key, module, where,
                           *loaded.layout_key)
            hit = store.get(key, {"sum": None, "n": ()})  # a planted entry of other arrays is a miss
            if hit is None:
                if not ran:
                    ran = True
                    decode(source, batch, needed_side(loaded.data_config))
                    info.skipped_images += [s for s in batch.skipped if s not in info.skipped_images]
                    info.notices += [s for s in batch.notices if s not in info.notices]
                    x = to_tensor(batch.images, loaded) if batch.images else None
                if x is None:
                    hit = {"sum": np.zeros(0), "n": np.array(0)}
                else:
                    g = centre_gradient(loaded.model, module, x, where, prefix, grid)
                    hit = {"sum": g.sum(0).cpu().numpy(), "n": np.array(g.shape[0])}
                store.put(key, hit)
            sums.append(hit)
        info.batches_computed += ran
        info.batches_from_cache += not ran
        if ran:
            x = None
            hostmem.release()  # the backward graphs' freed memory back to the kernel (issue 51)
        if int(sums[0]["n"]) > 0:
            acc.update(np.stack([s["sum"] for s in sums]), int(sums[0]["n"]))
            kept.append((batch.index, (np.stack([s["sum"] for s in sums]), int(sums[0]["n"]))))
        if kept:  # the fields over the batches so far, drawn while the next batch runs (its radii's interval: at the
            # end, a resample of every layer's maps costs a second or more each time)
            run.estimate(lambda: _fields(loaded.label, layers, residual, acc, [], run), b + 1, len(batches))
    if progress:
        progress(steps, steps, "done")
    run.reduce_accumulators(acc)
    if acc.images == 0:
        raise VitlabError(f"no readable image in the first {opts.images} of '{source.name}'")
    kept = run.gather_ordered(kept, "receptive-field batch sums") if run.bootstrap else []  # every rank's
    return _fields(loaded.label, layers, residual, acc, kept, run)


RESAMPLE_CHUNK = 2**21  # numbers of resampled maps formed at once (float64: 16 MiB)


def _fields(model: str, layers: list[str], residual: str, acc: GradientSums, kept: list,
            run: Run) -> ReceptiveFieldResult:
    """:func:`receptive_fields`' result from the summed gradients and the batches' own sums (``kept``: the
    radii's interval; empty without a bootstrap)."""
    result = ReceptiveFieldResult(model, layers, residual, acc.sum / acc.images, acc.images)
    if run.bootstrap and len(kept) > 1:  # the radii's interval: resample the batches' sums
        from ..stats.evidence import radius_fraction, resample_indices

        sums = np.stack([k[0] for k in kept]).astype(np.float64)  # (T, L, H, W)
        counts = np.array([k[1] for k in kept], dtype=np.float64)
        idx = resample_indices(len(kept), run.bootstrap, run.seed)  # (B, T)
        side = np.sqrt(sums.shape[-2] * sums.shape[-1])
        # a resample's maps are its batches' sums weighted by how often each was drawn, formed a few resamples at a
        # time: indexing all at once held (B, T, L, H, W) float64, 3.9 GB for ViT-B/16's 12 fields of 224 x 224 over
        # 4 batches and the default 200 resamples; a chunk's maps stay at 2**21 numbers (16 MiB)
        weights = np.zeros((len(idx), len(kept)))
        np.add.at(weights, (np.arange(len(idx))[:, None], idx), 1.0)
        flat = sums.reshape(len(kept), -1)
        chunk = max(1, RESAMPLE_CHUNK // flat.shape[1])
        parts = []
        for start in range(0, len(idx), chunk):
            w = weights[start:start + chunk]
            maps = ((w @ flat) / (w @ counts)[:, None]).reshape((len(w),) + sums.shape[1:])  # (b, L, H, W)
            parts.append(np.stack([radius_fraction(maps, q) * side for q in (0.5, 0.9)], axis=1))
        result.radius_samples = np.concatenate(parts)
        result.radius_units = len(kept)
    return result


@dataclass
class ReceptiveFieldReport(PerModel):
    """Receptive fields after the residual sum, before it, or both (``vitlab receptive-field``)."""

    results: list[ReceptiveFieldResult]
    info: RunInfo = field(default_factory=RunInfo)

    def summary_frame(self):
        import pandas as pd

        return pd.concat([r.summary_frame() for r in self.results], ignore_index=True)

    def headline(self) -> list[str]:
        r = self.results[-1]
        return [f"{r.model} ({r.residual}): 50 % of the gradient within {rad:.1f} px at {layer}"
                for layer, rad in zip(r.layers[-1:], r.radius_px(0.5)[-1:])] + [
            f"receptive fields of {len(r.layers)} layers over {r.images} images"]


def receptive_report(loaded: LoadedModel, source: ImageSource, opts: ReceptiveOptions = ReceptiveOptions(),
                     run: Run | None = None) -> ReceptiveFieldReport:
    """:func:`receptive_fields` for ``opts.residual`` ('post', 'pre', or 'both': one result each)."""
    from dataclasses import replace

    run = run or Run()
    kinds = ("post", "pre") if opts.residual == "both" else (opts.residual,)
    results = [receptive_fields(loaded, source, replace(opts, residual=k),
                                run.with_progress(scaled(run.progress, i, len(kinds), k)))
               for i, k in enumerate(kinds)]
    return ReceptiveFieldReport(results, run.info)
