"""Token-norm artefacts: tokens whose norm stands far above the rest (Darcet et al. 2024, "Vision Transformers Need
Registers": high-norm tokens in low-information patches that hold global information and distort maps).

Per tap (ViT and Mixer: every block's ``resid_mid`` and ``resid_post``, the default CKA taps), the Euclidean norm of
every token of every image. The threshold of a tap is robust and stated:

    threshold = median + k · 1.4826 · MAD        (median and MAD over the spatial tokens of all images; k = 5)

1.4826 · MAD estimates the standard deviation of a normal distribution, so k = 5 is "five sigmas" for well-behaved
norms while a few huge tokens move neither the median nor the MAD. Prefix tokens (CLS, distillation, registers)
are named, shown and never flagged: they are not patches. Tokens after the patch grid (none in timm's models)
are checked like spatial tokens but cannot be drawn on the image.

Reported per tap: the flagged tokens (per image and position), their share of the Gram's energy, and the
token-level analyses with and without them:

- energy: the trace of the batch's centred linear Gram, Σ_i Σ_n ‖x_in − mean_i x_in‖² (what CKA's Grams hold,
  ``tokens='all'``); the flagged tokens' share is their part of that sum;
- CKA with all tokens: flagged tokens are set to zero before the Gram (per image), so they add nothing to any inner
  product; a position flagged in every image is thereby dropped from the features;
- attention distance (ViT): flagged tokens of a block's input (the previous block's ``resid_post``) are left out as
  queries and as keys (keys dropped like the prefix columns: the default convention of
  :mod:`vitlab.analyses.attention`).

Under torchrun each rank computes its share of the batches: the norms of every image are gathered in batch order
(so every rank sets the same thresholds), the CKA sums are added, and the energy and distance sums are gathered
per batch and added in batch order.

Shapes: L taps, n images, B batch, N tokens (P prefix first), D width, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.context import Run
from ..engine.run import GramStatistic, Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import Batch, ImageSource, select
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..stats import cka as cka_mod
from .attention import distance_matrix, image_side, probs_taps

MAD_SCALE = 1.4826  # MAD -> standard deviation of a normal distribution


def prefix_names(model) -> list[str]:
    """Names of the prefix tokens in timm's order: cls, dist, reg0, reg1, ..."""
    n = taps_mod.num_prefix_tokens(model)
    names = (["cls"] if taps_mod.has_cls_token(model) else []) + (["dist"] if getattr(model, "dist_token", None)
                                                                  is not None else [])
    names += [f"reg{i}" for i in range(int(getattr(model, "num_reg_tokens", 0) or 0))]
    return (names + [f"prefix{i}" for i in range(len(names), n)])[:n]


def robust_threshold(norms: np.ndarray, k: float) -> tuple[float, float, float]:
    """(threshold, median, MAD) of a set of norms: median + k · 1.4826 · MAD."""
    v = np.asarray(norms, dtype=np.float64).ravel()
    med = float(np.median(v))
    mad = float(np.median(np.abs(v - med)))
    return med + k * MAD_SCALE * mad, med, mad


def flag_mask(x, threshold: float, prefix: int):
    """(B, N, D) tokens -> (B, N) bool: norm above ``threshold``, prefix tokens never flagged."""
    import torch

    m = torch.linalg.vector_norm(x.double(), dim=-1) > threshold
    m[:, :prefix] = False
    return m


@dataclass(frozen=True)
class TokenNormStatistic(Statistic):
    """‖x_bn‖ of every token of every tap: {'norms': (L, B, N) float32}."""

    taps_: tuple[str, ...] = ()
    name: str = "token_norms"
    version: int = 1

    def taps(self, loaded: LoadedModel) -> list[str]:
        return list(self.taps_)

    def params(self, loaded: LoadedModel) -> dict:
        return {"taps": list(self.taps_)}

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        return {"norms": torch.stack([torch.linalg.vector_norm(acts[t].float(), dim=-1) for t in self.taps_])
                .cpu().numpy()}


@dataclass(frozen=True)
class MaskedGramStatistic(Statistic):
    """Grams with flagged tokens zeroed, and the flagged share of each Gram's energy (module docstring).

    {'grams': (L, B, B), 'energy': (L, 2) = (flagged, total) sums of ‖x̃_in‖² over the batch}.
    """

    taps_: tuple[str, ...] = ()
    thresholds: tuple[float, ...] = ()
    name: str = "gram_flagged_out"
    version: int = 2  # 2: flat features give a zero Gram (cka.drop_roundoff)

    def taps(self, loaded: LoadedModel) -> list[str]:
        return list(self.taps_)

    def params(self, loaded: LoadedModel) -> dict:
        return {"taps": list(self.taps_), "thresholds": [float(t) for t in self.thresholds]}

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        prefix = taps_mod.num_prefix_tokens(loaded.model)
        grams, energy = [], []
        for tap, thr in zip(self.taps_, self.thresholds):
            x = acts[tap].float()
            m = flag_mask(x, thr, prefix)
            e = ((x.double() - x.double().mean(0, keepdim=True)) ** 2).sum(-1)  # (B, N) centred energy
            energy.append([float(e[m].sum()), float(e.sum())])
            kept = x * (~m)[..., None].to(x.dtype)
            grams.append(cka_mod.gram(kept.reshape(x.shape[0], -1)))
        return {"grams": torch.stack(grams).cpu().numpy(), "energy": np.array(energy)}


@dataclass(frozen=True)
class MaskedDistanceStatistic(Statistic):
    """Per-image mean attention distance of every head with and without flagged tokens: {'all', 'kept'}: (L, H, B).

    Flags of block i's input come from ``blocks.{i-1}.resid_post`` (its threshold: ``input_thresholds[i]``; block 0
    has none: its input is the embedding).
    """

    input_thresholds: tuple[float | None, ...] = ()
    name: str = "attn_distance_flagged_out"
    version: int = 1

    def taps(self, loaded: LoadedModel) -> list[str]:
        n = len(loaded.model.blocks)
        return probs_taps(loaded) + [f"blocks.{i}.resid_pre" for i in range(n)]

    def params(self, loaded: LoadedModel) -> dict:
        return {"thresholds": [None if t is None else float(t) for t in self.input_thresholds]}

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        model = loaded.model
        prefix, grid = taps_mod.num_prefix_tokens(model), taps_mod.grid_size(model)
        ns = grid[0] * grid[1]
        d = torch.as_tensor(distance_matrix(grid, taps_mod.patch_size(model)))
        out_all, out_kept = [], []
        for i, thr in enumerate(self.input_thresholds):
            a = acts[f"blocks.{i}.attn_probs"][:, :, prefix:prefix + ns, prefix:prefix + ns].double()
            x = acts[f"blocks.{i}.resid_pre"]
            keep = torch.ones(a.shape[0], ns, dtype=torch.float64) if thr is None else \
                (~flag_mask(x, thr, prefix)[:, prefix:prefix + ns]).double()
            w = torch.einsum("bhqk,qk,bk->bhq", a, d, keep)  # flagged keys dropped
            out_kept.append((w * keep[:, None]).sum(-1) / keep.sum(-1)[:, None])  # flagged queries dropped
            out_all.append(torch.einsum("bhqk,qk->bhq", a, d).mean(-1))
        return {"all": torch.stack(out_all).permute(0, 2, 1).numpy(), "kept": torch.stack(out_kept)
                .permute(0, 2, 1).numpy()}


@dataclass(frozen=True)
class TokenNormOptions(DataOptions):
    """Options of :func:`token_norms`."""

    k: float = option(5.0, "threshold = median + k · 1.4826 · MAD of the spatial tokens' norms, per tap")
    skip_attention: bool = option(False, "skip the attention distance with and without flagged tokens (ViT)")


@dataclass
class TokenNormResult:
    """Norms, thresholds and flags per tap; CKA and attention distance with all tokens and with flagged left out."""

    model: str
    layers: list[str]  # the taps
    prefix: list[str]  # prefix token names, positions 0..P-1
    grid: tuple[int, int]
    k: float
    thresholds: np.ndarray  # (L,)
    medians: np.ndarray  # (L,)
    mads: np.ndarray  # (L,)
    norms: np.ndarray  # (L, n, N) float32
    ids: list[str]
    energy_share: np.ndarray  # (L,) flagged share of the centred Gram's trace
    cka_all: cka_mod.CKAResult
    cka_kept: cka_mod.CKAResult
    distance_all: np.ndarray | None = None  # (blocks, H) px
    distance_kept: np.ndarray | None = None
    image_side_px: float = float("nan")

    @property
    def flags(self) -> np.ndarray:
        """(L, n, N) bool: norm above the tap's threshold; prefix tokens never."""
        f = self.norms > self.thresholds[:, None, None]
        f[:, :, : len(self.prefix)] = False
        return f

    def token_name(self, position: int) -> str:
        p, (gh, gw) = len(self.prefix), self.grid
        if position < p:
            return self.prefix[position]
        r, c = divmod(position - p, gw)
        return f"patch {r},{c}" if r < gh else f"token {position}"

    def to_frame(self):
        """Per tap: threshold, median, MAD, flagged tokens (count, share of spatial tokens), energy share."""
        import pandas as pd

        f, p = self.flags, len(self.prefix)
        spatial = f.shape[1] * (f.shape[2] - p)
        return pd.DataFrame({"model": self.model, "tap": self.layers, "threshold": self.thresholds,
                             "median": self.medians, "mad": self.mads, "k": self.k,
                             "flagged_tokens": f.sum((1, 2)), "flagged_share": f.sum((1, 2)) / spatial,
                             "images_with_flags": f.any(2).sum(1), "energy_share": self.energy_share,
                             "images": len(self.ids)})

    def flagged_frame(self):
        """One row per flagged token: tap, image, position, its name (patch r,c), norm, threshold."""
        import pandas as pd

        li, ii, nn = np.nonzero(self.flags)
        return pd.DataFrame({"tap": [self.layers[i] for i in li], "image": [self.ids[i] for i in ii],
                             "position": nn, "token": [self.token_name(int(n)) for n in nn],
                             "norm": self.norms[li, ii, nn].astype(np.float64), "threshold": self.thresholds[li]})

    def histogram_frame(self, bins: int = 40):
        """Per tap: norm histogram of spatial tokens and of each named prefix token (log-spaced bins)."""
        import pandas as pd

        rows, p = [], len(self.prefix)
        for li, tap in enumerate(self.layers):
            v = self.norms[li].astype(np.float64)
            lo, hi = max(v.min(), 1e-6), max(v.max(), 1e-6) * 1.0001
            edges = np.geomspace(lo, hi, bins + 1)
            groups = [("spatial", v[:, p:].ravel())] + [(name, v[:, j]) for j, name in enumerate(self.prefix)]
            for kind, vals in groups:
                counts, _ = np.histogram(vals, edges)
                rows += [{"tap": tap, "depth": li, "token": kind, "lo": edges[b], "hi": edges[b + 1],
                          "count": int(counts[b]), "threshold": float(self.thresholds[li])}
                         for b in range(bins) if counts[b]]
        return pd.DataFrame(rows)

    def headline(self) -> list[str]:
        f = self.to_frame()
        return [f[["tap", "threshold", "flagged_tokens", "flagged_share", "energy_share"]].to_string(index=False),
                f"{len(self.ids)} images; threshold median + {self.k:g} · 1.4826 · MAD per tap"]

    @property
    def any_flagged(self) -> bool:
        """Whether any token of any image at any tap is flagged."""
        return bool(self.flags.any())

    def finding(self):
        """Darcet et al. 2024 on this model: the share of spatial tokens flagged at the tap with the most flags, the
        mean over images of each image's flagged share, with its 95 % jackknife-t interval over the images."""
        from .findings import Finding, interval_basis, mean_over_images, say

        f, p = self.flags, len(self.prefix)
        spatial = f[:, :, p:]
        n = spatial.shape[1]
        if not spatial.any():
            return Finding(ours=f"{self.model}: no token is flagged at any of its {len(self.layers)} taps over "
                                f"{n} images (threshold median + {self.k:g} · 1.4826 · MAD of each tap's spatial "
                                "token norms): no high-norm artefacts at this threshold.")
        li = int(np.argmax(spatial.sum((1, 2))))
        share = mean_over_images(spatial[li].mean(-1))
        return Finding(ours=f"{self.model}: most flags at {self.layers[li]}: {int(spatial[li].sum())} tokens in "
                            f"{int(spatial[li].any(-1).sum())} of {n} images; share of an image's spatial tokens "
                            f"flagged there {say(share, '.3f')}; {interval_basis('images', n)}.")

    def flag_grid(self, image: int, tap: str) -> np.ndarray:
        """(gh, gw) 0/1 flags of one image's patch tokens at ``tap`` (for drawing on the image)."""
        p, (gh, gw) = len(self.prefix), self.grid
        return self.flags[self.layers.index(tap), image, p:p + gh * gw].reshape(gh, gw).astype(np.float64)

    def cka_frame(self):
        """Self-CKA rows (layer_a, layer_b, cka) with ``tokens`` = 'all' | 'flagged left out'."""
        import pandas as pd

        a, b = self.cka_all.to_frame(), self.cka_kept.to_frame()
        a["tokens"], b["tokens"] = "all", "flagged left out"
        return pd.concat([a, b], ignore_index=True)

    def distance_frame(self):
        import pandas as pd

        if self.distance_all is None:
            return pd.DataFrame()
        rows = []
        for tokens, d in (("all", self.distance_all), ("flagged left out", self.distance_kept)):
            for layer in range(d.shape[0]):
                rows += [{"model": self.model, "layer": layer, "head": h, "distance_px": float(d[layer, h]),
                          "distance_frac": float(d[layer, h]) / self.image_side_px, "tokens": tokens}
                         for h in range(d.shape[1])]
        return pd.DataFrame(rows)


def flagged_positions(loaded: LoadedModel, source: ImageSource, indices: list[int], taps: list[str], k: float,
                      batch_size: int, run: Run) -> dict[str, np.ndarray]:
    """Per tap, (N,) bool: token positions flagged (norm above median + k · 1.4826 · MAD of that tap's spatial
    tokens over the images ``indices``) in at least one image. Prefix tokens never. For analyses whose per-token
    statistic runs over images (localization), where a token is left out as a whole or not at all."""
    if taps_mod.family(loaded.model) not in ("vit", "mixer"):
        raise VitlabError(f"leaving flagged tokens out needs a token model (ViT or Mixer); '{loaded.label}' is a "
                          f"{taps_mod.family(loaded.model)} model")
    if k <= 0:
        raise VitlabError(f"k must be positive (threshold = median + k · 1.4826 · MAD), not {k}")
    prefix, stat = taps_mod.num_prefix_tokens(loaded.model), TokenNormStatistic(tuple(taps))
    # torchrun: each rank its shard, then every rank's norms in batch order, so all ranks set the same flags
    kept = [(batch.index, found[0][stat.name]["norms"])
            for batch, found in stream([loaded], source, indices, batch_size, [[stat]], run.with_progress(None))]
    norms = run.gather_ordered(kept, "token norms")
    if not norms:
        return {t: np.zeros(0, dtype=bool) for t in taps}
    norms = np.concatenate(norms, axis=1)  # (L, n, N)
    out = {}
    for i, tap in enumerate(taps):
        flags = norms[i] > robust_threshold(norms[i, :, prefix:], k)[0]
        flags[:, :prefix] = False
        out[tap] = flags.any(0)
    return out


def block_input_flags(result: TokenNormResult, layer: int, image: int) -> np.ndarray | None:
    """(N,) bool: the tokens of image ``image`` flagged at block ``layer``'s input (``blocks.{layer-1}.resid_post``,
    the keys and queries of its attention), for ``attention.attention_map(leave_out=...)``; None for block 0 (its
    input is the embedding, which has no flags), as in the attention distance without flagged tokens."""
    tap = f"blocks.{layer - 1}.resid_post"
    if layer == 0 or tap not in result.layers:
        return None
    return result.flags[result.layers.index(tap), image]


def token_taps(loaded: LoadedModel) -> list[str]:
    if taps_mod.family(loaded.model) not in ("vit", "mixer"):
        raise VitlabError(f"token norms need a token model (ViT or Mixer); '{loaded.label}' is a "
                          f"{taps_mod.family(loaded.model)} model")
    return taps_mod.default_taps(loaded.model)


def token_norms(loaded: LoadedModel, source: ImageSource, opts: TokenNormOptions = TokenNormOptions(),
                run: Run | None = None) -> TokenNormResult:
    """Norms and flags per tap; energy shares; CKA (and attention distance) with and without flagged tokens."""
    run = run or Run()
    taps = token_taps(loaded)
    if opts.k <= 0:
        raise VitlabError(f"k must be positive (threshold = median + k · 1.4826 · MAD), not {opts.k}")
    indices = select(source, opts.images, opts.shuffle)
    prefix = taps_mod.num_prefix_tokens(loaded.model)
    norm_stat = TokenNormStatistic(tuple(taps))
    kept = [(batch.index, (found[0][norm_stat.name]["norms"], list(batch.ids)))
            for batch, found in stream([loaded], source, indices, opts.batch_size, [[norm_stat]], run)]
    kept = run.gather_ordered(kept, "token norms")  # torchrun: every rank's images, in batch order
    norms, ids = [k[0] for k in kept], [i for k in kept for i in k[1]]
    if not norms:
        raise VitlabError("no batch of 4 or more readable images: token norms and their CKA need at least 4 images")
    norms = np.concatenate(norms, axis=1)
    stats = np.array([robust_threshold(norms[i, :, prefix:], opts.k) for i in range(len(taps))])
    thr = tuple(float(t) for t in stats[:, 0])
    gram_all, gram_kept = GramStatistic(tuple(taps)), MaskedGramStatistic(tuple(taps), thr)
    acc_all, acc_kept = cka_mod.MinibatchCKA(taps, taps), cka_mod.MinibatchCKA(taps, taps)
    energy = np.zeros((len(taps), 2))
    vit = taps_mod.family(loaded.model) == "vit" and not opts.skip_attention
    dist_stat = None
    if vit:
        by_tap = dict(zip(taps, thr))
        dist_stat = MaskedDistanceStatistic(tuple(None if i == 0 else by_tap.get(f"blocks.{i - 1}.resid_post")
                                                  for i in range(len(loaded.model.blocks))))
    sums = {"all": 0.0, "kept": 0.0}
    counts = 0
    per_batch = []  # (batch number, (energy (L, 2), distances {'all', 'kept'} (blocks, H, B) or None))
    for batch, found in stream([loaded], source, indices, opts.batch_size,
                               [[gram_all, gram_kept] + ([dist_stat] if vit else [])], run.with_progress(None)):
        f = found[0]
        acc_all.update(cka_mod.centred(f[gram_all.name]["grams"]))
        acc_kept.update(cka_mod.centred(f[gram_kept.name]["grams"]))
        per_batch.append((batch.index, (f[gram_kept.name]["energy"], f[dist_stat.name] if vit else None)))
    run.reduce_accumulators([acc_all, acc_kept])
    for e, d in run.gather_ordered(per_batch, "token-norm batch sums"):  # added in batch order, as in one process
        energy += e
        if vit:
            for key in sums:  # NaN: every query of an image flagged; that image is left out of the mean
                sums[key] = sums[key] + np.nan_to_num(d[key]).sum(-1)
            counts = counts + np.isfinite(d["kept"]).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = energy[:, 0] / energy[:, 1]
    d_all = d_kept = None
    if vit:
        d_all, d_kept = sums["all"] / len(ids), sums["kept"] / np.maximum(counts, 1)
    return TokenNormResult(loaded.label, taps, prefix_names(loaded.model), tuple(taps_mod.grid_size(loaded.model)),
                           float(opts.k), stats[:, 0], stats[:, 1], stats[:, 2], norms, ids, share,
                           acc_all.compute(loaded.label, loaded.label), acc_kept.compute(loaded.label, loaded.label),
                           d_all, d_kept, image_side(loaded))
