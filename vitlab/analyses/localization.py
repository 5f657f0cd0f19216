"""Spatial localization of tokens (Raghu et al. 2021, Sec. 5, Figs 9-10 and App. D).

For one layer, the representation of token t across images (n, D) is compared by linear CKA with the raw input
patch at every grid position g (n, C·p·p): CKA(X_t, P_g) for all t, g. A token that keeps spatial information
has its highest CKA at its own position. The patches are non-overlapping squares of the model's patch size, taken
from the model's input tensor (after its eval transform: what the model sees). For a CNN, a token is one position
of a block's feature map (all channels) and its patch is the input region that the position covers on the h x w grid
(region edges at floor(i·H/h)). Prefix tokens (CLS) have no position: their rows show no localization by design.

Flagged tokens left out (``flagged_k``, ViT and Mixer): token positions whose norm exceeds median + k · 1.4826 · MAD
(:func:`vitlab.token_norms.flagged_positions`, per tap over all images) in at least one image are left out whole:
their CKA rows are NaN, their summary kind is 'left out', and the localized rate counts the remaining spatial tokens
only. A token's CKA runs over images, so a token cannot be left out of some images only.

Minibatch CKA (Nguyen et al. 2021, eq. 3) over images: per batch, one Gram per token and one per patch; all
token x patch HSICs of the batch are one matrix product (``cka.hsic_all_pairs``).

Shapes: B batch, T tokens (prefix + spatial, or h·w positions), G grid positions, n images in a Gram.

    input (B, C, H, W) ─patches─► (G, B, F) ┐
    acts[tap] ─tokens─► (T, B, D)            ├─ grams ─► MinibatchCKA(T x G) ─► LocalizationResult (T, G)
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.context import Run, RunInfo
from ..engine.run import Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import Batch, ImageSource, select, to_tensor
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..stats import cka as cka_mod
from .reports import PerModel

MAX_POSITIONS = 1024  # T x G CKAs per layer; beyond this a CNN stage is too fine-grained to be worth it


def token_grid(loaded: LoadedModel, tap: str, x=None) -> tuple[int, int]:
    """(rows, cols) of the positions of ``tap``: the patch grid for token models, the feature map for CNNs."""
    grid = taps_mod.grid_size(loaded.model)
    if grid is not None:
        return tuple(int(g) for g in grid)
    if x is None:
        raise VitlabError(f"the grid of CNN tap {tap} is known only from its activations")
    return int(x.shape[-2]), int(x.shape[-1])


def patches(x, grid: tuple[int, int]):
    """(B, C, H, W) input -> list of G (B, F) patches, row-major over the grid (regions edged at floor(i·H/h))."""
    H, W = x.shape[-2:]
    gh, gw = grid
    rows = [(i * H) // gh for i in range(gh + 1)]
    cols = [(j * W) // gw for j in range(gw + 1)]
    return [x[:, :, rows[i]:rows[i + 1], cols[j]:cols[j + 1]].reshape(x.shape[0], -1)
            for i in range(gh) for j in range(gw)]


def token_features(act):
    """(B, N, D) or (B, C, h, w) activations -> (T, B, F): every token's (or position's) features."""
    if act.dim() == 4:
        return act.flatten(2).permute(2, 0, 1)
    return act.permute(1, 0, 2)


def batched_gram(x):
    """(T, B, F) -> (T, B, B) linear Grams of batch-centred features, float32 (as ``cka.gram``)."""
    import torch

    x = x.to(torch.float32)
    total = torch.linalg.vector_norm(x, dim=(1, 2)) ** 2
    x = x - x.mean(dim=1, keepdim=True)
    return cka_mod.drop_roundoff(x @ x.transpose(1, 2), total)


@dataclass(frozen=True)
class LocalizationStatistic(Statistic):
    """Per-batch Grams of every token of each tap, and of the input patch at every grid position."""

    layers: tuple[str, ...]
    name: str = "localization"
    version: int = 2  # 2: flat features give a zero Gram (cka.drop_roundoff)
    needs_images = True  # compute() re-reads the decoded images (batch.images) for the input patches

    def params(self, loaded: LoadedModel) -> dict:
        return {"layers": list(self.layers)}

    def taps(self, loaded: LoadedModel) -> list[str]:
        return list(self.layers)

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        with torch.inference_mode():
            x = to_tensor(batch.images, loaded)
            out, patch_grams = {}, {}
            for i, tap in enumerate(self.layers):
                act = acts[tap]
                grid = token_grid(loaded, tap, act)
                if grid[0] * grid[1] > MAX_POSITIONS:
                    raise VitlabError(f"{tap} has a {grid[0]}x{grid[1]} grid: too many positions for a localization "
                                      f"map (at most {MAX_POSITIONS}); pick a later block or smaller images")
                if grid not in patch_grams:
                    patch_grams[grid] = batched_gram(torch.stack(patches(x, grid))).cpu().numpy()
                out[f"tokens_{i}"] = batched_gram(token_features(act)).cpu().numpy()
                out[f"patches_{i}"] = patch_grams[grid]
                out[f"grid_{i}"] = np.array(grid)
        return out


@dataclass
class LocalizationResult:
    """CKA (T, G) between every token of one layer and the input patch at every grid position."""

    model: str
    layer: str
    grid: tuple[int, int]
    prefix: int  # tokens without a position (CLS) come first
    cka: np.ndarray  # (T, G)
    images: int
    warnings: list[str] = field(default_factory=list)
    rate_samples: np.ndarray | None = None  # (T,) localized rate leaving out each batch in turn (jackknife)
    left_out: np.ndarray | None = None  # (T,) bool: flagged high-norm tokens left out (rows of cka are NaN)
    rate_units: int = 0  # batches behind rate_samples

    def kinds(self) -> np.ndarray:
        """(T,) 'cls' (prefix), 'spatial', 'left out' (flagged), 'extra' (after the grid: no position)."""
        t = np.arange(self.cka.shape[0]) - self.prefix
        g = self.grid[0] * self.grid[1]
        k = np.where(t < 0, "cls", np.where(t < g, "spatial", "extra")).astype(object)
        if self.left_out is not None:
            k[np.asarray(self.left_out, dtype=bool) & (t >= 0)] = "left out"
        return k

    def spatial_kept(self) -> np.ndarray:
        """(G,) bool: the grid positions whose token counts in the localized rate."""
        return self.kinds()[self.prefix:self.prefix + self.grid[0] * self.grid[1]] == "spatial"

    def rate_evidence(self) -> dict[str, float]:
        """Fraction of spatial tokens best matched at their own patch, its 95 % interval over batches, the chance
        level 1/positions and the chance-corrected rate (rate − chance) / (1 − chance) (vitlab.evidence)."""
        from ..stats import evidence as ev

        g = self.grid[0] * self.grid[1]
        keep = self.spatial_kept()
        rate = float(ev.localized_rate(self.cka[:self.prefix + g], self.prefix, keep))
        # jackknife-t over batches: in simulation it covered as well as a bias-corrected bootstrap and far better
        # than the percentile bootstrap, which inherits the rate's bias toward chance at few images (coverage.py)
        lo, hi = ev.jackknife_interval(rate, self.rate_samples) if self.rate_samples is not None else (np.nan, np.nan)
        lo, hi = float(np.clip(lo, 0, 1)), float(np.clip(hi, 0, 1))  # a rate's range (NaN stays NaN)
        unit = ev.interval_columns("batches", self.rate_units, ev.JACKKNIFE if self.rate_samples is not None
                                   else "no interval (--bootstrap 0)")
        corr = [float(ev.chance_corrected(v, g)) for v in (rate, lo, hi)]
        return {"model": self.model, "layer": self.layer, "positions": g, "rate": rate, "rate_lo": lo,
                "rate_hi": hi, "chance": ev.chance_level(g), "corrected": corr[0], "corrected_lo": corr[1],
                "corrected_hi": corr[2], "left_out": 0 if self.left_out is None else int(np.sum(self.left_out)), "images": self.images,
                **unit}

    def own_position(self, t: int) -> int | None:
        own = t - self.prefix
        return own if 0 <= own < self.grid[0] * self.grid[1] else None

    def summary(self):
        """Per token: argmax position, CKA at its own position, rank of its own position (1 = best), localized."""
        import pandas as pd

        rows, kinds = [], self.kinds()
        for t in range(self.cka.shape[0]):
            own, row = self.own_position(t), self.cka[t]
            best = int(np.nanargmax(row)) if np.isfinite(row).any() else -1
            rows.append({"model": self.model, "layer": self.layer, "token": t, "kind": kinds[t],
                         "token_row": -1 if own is None else own // self.grid[1],
                         "token_col": -1 if own is None else own % self.grid[1], "argmax_position": best,
                         "own_cka": np.nan if own is None else float(row[own]),
                         "max_cka": float(np.nanmax(row)) if best >= 0 else np.nan,
                         "own_rank": np.nan if own is None else int((row > row[own]).sum() + 1),
                         # no defined cell (constant features): no best position, so neither hit nor miss
                         "localized": (kinds[t] == "spatial" and best == own) if best >= 0 else np.nan})
        return pd.DataFrame(rows)

    def rate(self) -> float:
        """Fraction of spatial tokens whose best-matching input patch is their own (Figs 9-10's headline)."""
        summary = self.summary()
        return float(summary[summary["kind"] == "spatial"]["localized"].mean())

    def to_frame(self):
        """One row per (token, grid position): model, layer, token, kind, token_row/col, position, pos_row/col, cka."""
        import pandas as pd

        T, G = self.cka.shape
        t, g = np.meshgrid(np.arange(T), np.arange(G), indexing="ij")
        own = t - self.prefix
        return pd.DataFrame({
            "model": self.model, "layer": self.layer, "token": t.ravel(), "kind": self.kinds()[t.ravel()],
            "token_row": np.where(own >= 0, own // self.grid[1], -1).ravel(),
            "token_col": np.where(own >= 0, own % self.grid[1], -1).ravel(),
            "position": g.ravel(), "pos_row": (g // self.grid[1]).ravel(), "pos_col": (g % self.grid[1]).ravel(),
            "own": (own == g).ravel(), "cka": self.cka.ravel()})


@dataclass
class LocalizationReport(PerModel):
    results: list[LocalizationResult]
    info: RunInfo

    def summary(self):
        import pandas as pd

        return pd.concat([r.summary() for r in self.results], ignore_index=True)

    def rates(self):
        """Per model and layer: the fraction of spatial tokens localized (own patch best), their mean own CKA, the
        fraction's 95 % interval over batches, the chance level 1/positions and the chance-corrected rate."""
        import pandas as pd

        summary = self.summary()
        if not (summary["kind"].isin(["spatial", "left out"])).any():
            raise VitlabError("no spatial tokens to summarise")
        # layers whose every position is left out (flagged) keep their row, with NaN rates
        base = summary.assign(localized=summary["localized"].astype(float).where(summary["kind"] == "spatial"),
                              own_cka=summary["own_cka"].where(summary["kind"] == "spatial")).groupby(
            ["model", "layer"], sort=False, as_index=False).agg(localized=("localized", "mean"),
                                                                own_cka=("own_cka", "mean"))
        extra = pd.DataFrame([r.rate_evidence() for r in self.results]).drop(columns=["images"])
        return base.merge(extra, on=["model", "layer"], how="left")

    def interval_caption(self, batch_size: int | None = None) -> str:
        """What the rate chart's bars are, in the one convention of every page (``findings.interval_caption``):
        "bars: 95 % jackknife t over 4 batches of 16 images"."""
        from .findings import interval_caption

        if all(r.rate_samples is None for r in self.results):
            return "bars: none (no interval: --bootstrap 0)"
        return interval_caption("batches", min(r.rate_units for r in self.results), batch_size=batch_size)

    def headline(self) -> list[str]:
        def interval(r) -> str:
            return (f"95 % {r.rate_lo:.0%}-{r.rate_hi:.0%}" if np.isfinite(r.rate_lo) and np.isfinite(r.rate_hi)
                    else r.interval_method)

        lines = [(f"{r.model} {r.layer}: {r.localized:.0%} of spatial tokens best match their own input patch "
                  f"({interval(r)}; chance {r.chance:.0%}, chance-corrected {r.corrected:.2f})" if np.isfinite(r.rate)
                  else f"{r.model} {r.layer}: can't tell, no spatial token left with a defined CKA cell (features "
                       f"constant over the images, e.g. identical images, or every position left out)")
                 + (f"; {r.left_out} flagged token positions left out" if r.left_out else "")
                 for r in self.rates().itertuples()]
        return lines + [f"localization over {self.images} images"]

    @property
    def warnings(self) -> list[str]:
        """Each warning once: an input patch's (e.g. a constant corner patch on a 14x14 grid) comes with every layer."""
        return list(dict.fromkeys(w for r in self.results for w in r.warnings))


def rates_with_and_without(all_tokens: LocalizationReport, left_out: LocalizationReport):
    """Both reports' ``rates()`` in one frame with ``tokens`` = 'all' | 'flagged left out' and ``model`` labelled
    'model · tokens' (the rate chart colours by model), for the with/without comparison of flagged tokens."""
    import pandas as pd

    parts = []
    for tokens, rep in (("all", all_tokens), ("flagged left out", left_out)):
        r = rep.rates()
        r["tokens"], r["model"] = tokens, r["model"] + " · " + tokens
        parts.append(r)
    return pd.concat(parts, ignore_index=True)


def _input_size(model, input_size) -> tuple[int, int, int] | None:
    """(C, H, W) of the model's input: ``input_size`` (a LoadedModel's ``data_config['input_size']``) or the size timm
    built the model for (its ``pretrained_cfg``); None when neither says."""
    size = input_size if input_size is not None else (getattr(model, "pretrained_cfg", None) or {}).get("input_size")
    return None if size is None or len(size) != 3 else tuple(int(v) for v in size)


_GRIDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {input size: {tap: grid}}


def layer_grids(model, input_size=None) -> dict[str, tuple[int, int] | None]:
    """{block-output tap: (rows, cols) of its positions}, known before any image runs (the taps are
    :func:`candidate_layers`'s): a token model's patch grid at every block; a CNN's from one forward of an empty
    input through a copy of the model on the meta device (shapes only: no memory, no arithmetic, the model's own
    strides and paddings, whatever surgery it had; ResNet-50 at 224 px: 56, 28, 14, 7). ``input_size``: (C, H, W),
    default the size timm built the model for; a CNN's grids are None when that is unknown or the meta forward
    fails (then the first batch's activations say, as before)."""
    names = candidate_layers(model)
    grid = taps_mod.grid_size(model)
    if grid is not None:
        return {t: (int(grid[0]), int(grid[1])) for t in names}
    size = _input_size(model, input_size)
    if size is None:
        return dict.fromkeys(names)
    known = _GRIDS.setdefault(model, {})
    if size not in known:
        try:
            known[size] = _meta_grids(model, names, size)
        except Exception:  # noqa: BLE001 - an op without a meta kernel: the grids are read from the first batch
            known[size] = dict.fromkeys(names)
    return dict(known[size])


def _meta_grids(model, names: list[str], size: tuple[int, int, int]) -> dict[str, tuple[int, int]]:
    import copy

    import torch

    # the copy shares no tensor with the model: every parameter and buffer is replaced by a meta tensor of its shape
    # through deepcopy's memo. Under the model's lock, so that no other run's hooks are on it while it is copied.
    with taps_mod.holding(model):
        memo = {}
        for t in [*model.parameters(), *model.buffers()]:
            empty = torch.empty_like(t, device="meta")
            memo[id(t)] = torch.nn.Parameter(empty, t.requires_grad) if isinstance(t, torch.nn.Parameter) else empty
        shadow = copy.deepcopy(model, memo)
    with taps_mod.capture(shadow, names) as got, torch.no_grad():
        shadow(torch.empty(1, *size, device="meta"))
    return {t: (int(got[t].shape[-2]), int(got[t].shape[-1])) for t in names}


def candidate_layers(model) -> list[str]:
    """Every block output a localization map can be drawn for: ViT/Mixer ``resid_post``, CNN block outputs."""
    fam = taps_mod.family(model)
    return [t for t in taps_mod.default_taps(model) if fam not in ("vit", "mixer") or t.endswith(".resid_post")]


def drawable(grid: tuple[int, int] | None) -> bool:
    """A grid a localization map can hold (:data:`MAX_POSITIONS`); an unknown grid is tried (checked per batch)."""
    return grid is None or grid[0] * grid[1] <= MAX_POSITIONS


def default_layers(model, input_size=None) -> list[str]:
    """First, middle and last block outputs that a map can be drawn for (ViT/Mixer resid_post; CNN blocks): a CNN's
    first drawable block is the first of the first stage whose grid has at most :data:`MAX_POSITIONS` positions
    (ResNet-50 at 224 px: layer2.0, 28x28, since layer1's 56x56 has 3,136). ``input_size``: the model's input
    ((C, H, W), a LoadedModel's ``data_config['input_size']``; default: the size timm built it for). A VitlabError
    in words when no block is drawable."""
    grids = layer_grids(model, input_size)
    names = [t for t, g in grids.items() if drawable(g)]
    if not names:
        raise VitlabError(_none_drawable(model, grids))
    picks = sorted({0, len(names) // 2, len(names) - 1})
    return [names[i] for i in picks]


def _none_drawable(model, grids: dict) -> str:
    last = next(reversed(grids.values()))
    return (f"{type(model).__name__}: every block has more grid positions than a localization map can hold (at most "
            f"{MAX_POSITIONS}; its last block has a {last[0]}x{last[1]} grid, {last[0] * last[1]:,} positions): "
            "give the model smaller images")


def undrawable_note(loaded: LoadedModel) -> str | None:
    """Which blocks of ``loaded`` have no localization map and why, in words (None when every block has one):
    "resnet50: stage 1 blocks 0-2 (56x56 grid, 3,136 positions) are not drawn: a localization map holds at most
    1,024 positions (one CKA per token and position)"."""
    from ..charts.words import layer_in_words

    grids = layer_grids(loaded.model, loaded.data_config["input_size"])
    left = [(t, g) for t, g in grids.items() if not drawable(g)]
    if not left:
        return None
    by_grid: dict[tuple[int, int], list[str]] = {}
    for t, g in left:
        by_grid.setdefault(g, []).append(t)
    parts = [f"{_span([layer_in_words(t) for t in ts])} ({g[0]}x{g[1]} grid, {g[0] * g[1]:,} positions)"
             for g, ts in by_grid.items()]
    return (f"{loaded.label}: {'; '.join(parts)} {'is' if len(left) == 1 else 'are'} not drawn: a localization map "
            f"holds at most {MAX_POSITIONS:,} positions (one CKA per token and position)")


def _span(words: list[str]) -> str:
    """["stage 1 block 0", "stage 1 block 1", "stage 1 block 2"] -> "stage 1 blocks 0-2" (one stage's run)."""
    heads = {w.rsplit(" ", 1)[0] for w in words}
    if len(words) > 1 and len(heads) == 1 and all(w.rsplit(" ", 1)[1].isdigit() for w in words):
        head = heads.pop()
        return f"{head}s {words[0].rsplit(' ', 1)[1]}-{words[-1].rsplit(' ', 1)[1]}"
    return ", ".join(words)


@dataclass(frozen=True)
class LocalizationOptions(DataOptions):
    """Options of the localization maps (``vitlab localization``)."""

    layers: tuple[str, ...] | None = option(None, "comma-separated taps (default: first, middle and last block "
                                            "outputs)", kind="strs")
    tokens: tuple[int, ...] | None = option(None, "comma-separated token indices to draw (default: a spread)",
                                            kind="ints")
    flagged_k: float | None = option(None, "leave out token positions whose norm exceeds median + k · 1.4826 · MAD "
                                     "(vitlab.token_norms) in any image; ViT/Mixer (default: keep every token)",
                                     metavar="K")


def localization(models: Sequence[LoadedModel], source: ImageSource,
                 opts: LocalizationOptions = LocalizationOptions(), run: Run | None = None) -> LocalizationReport:
    """Token-to-input-patch CKA maps of ``opts.layers`` of every model (default: first, middle and last block).

    ``run.shard`` and ``run.reduce`` (``vitlab.dist``: sums the CKA states across ranks) run it under torchrun.
    ``run.bootstrap`` resamples of the batches (``run.seed``) give each layer's localized rate a 95 % interval
    (``report.rates()``); under torchrun from every rank's per-batch terms in batch order, as in one process.
    """
    if not models:
        raise VitlabError("give at least one model")
    run = run or Run()
    stats, indices = [], select(source, opts.images, opts.shuffle)
    for m in models:
        ls = tuple(opts.layers) if opts.layers else tuple(default_layers(m.model, m.data_config["input_size"]))
        taps_mod.check_taps(m.model, ls)
        stats.append(LocalizationStatistic(ls))
    left = [None] * len(models)
    if opts.flagged_k is not None:
        from .token_norms import flagged_positions

        left = [flagged_positions(m, source, indices, list(st.layers), float(opts.flagged_k), opts.batch_size, run)
                for m, st in zip(models, stats)]
    accs: list[list[cka_mod.MinibatchCKA] | None] = [None] * len(models)
    grids: list[list] = [[] for _ in models]
    for done, (batch, found) in enumerate(stream(models, source, indices, opts.batch_size, [[s] for s in stats], run),
                                          1):
        for k, (stat, per_model) in enumerate(zip(stats, found)):
            arrays = per_model[stat.name]
            if accs[k] is None:
                accs[k] = [_accumulator(arrays[f"tokens_{i}"].shape[0], arrays[f"patches_{i}"].shape[0])
                           for i in range(len(stat.layers))]
                grids[k] = [tuple(int(v) for v in arrays[f"grid_{i}"]) for i in range(len(stat.layers))]
            for i, acc in enumerate(accs[k]):
                acc.update(cka_mod.centred(arrays[f"tokens_{i}"]), cka_mod.centred(arrays[f"patches_{i}"]),
                           key=batch.index)
        if all(a is not None for a in accs):  # the maps and rates over the batches so far (the app draws them)
            run.estimate(lambda: _report(models, stats, accs, grids, left, opts, run), done, batch.of)
    if accs[0] is None:
        raise VitlabError("no batch of 4 or more readable images: localization needs at least 4 images"
                          + (" (on this rank: use fewer processes than batches)" if run.shard[1] > 1 else ""))
    run.reduce_accumulators([acc for acc_list in accs for acc in acc_list])
    return _report(models, stats, accs, grids, left, opts, run)


def _report(models, stats, accs, grids, left, opts: LocalizationOptions, run: Run) -> LocalizationReport:
    """:func:`localization`'s report from its accumulators (every layer's CKA sums and per-batch terms)."""
    results = []
    for m, stat, acc_list, grid_list, flags in zip(models, stats, accs, grids, left):
        prefix = taps_mod.num_prefix_tokens(m.model)
        for tap, acc, grid in zip(stat.layers, acc_list, grid_list):
            res = acc.compute(m.label, "input")
            out = LocalizationResult(m.label, tap, grid, prefix, res.cka, res.images, res.warnings, None,
                                     None if flags is None else flags[tap])
            if out.left_out is not None:
                out.cka = np.where(out.left_out[:, None], np.nan, out.cka)  # left out of the per-token statistic
                if not out.spatial_kept().any():
                    out.warnings.append(f"{m.label} {tap}: every grid position is flagged in some image (k = "
                                        f"{opts.flagged_k:g}): no localized rate without flagged tokens")
            if run.bootstrap:  # every rank's per-batch terms, in batch order (run.reduce_accumulators)
                out.rate_units = acc.batches
                if acc.batches > 1:
                    out.rate_samples = _jackknife_rates(acc, prefix + grid[0] * grid[1], prefix, out.spatial_kept())
            results.append(out)
    return LocalizationReport(results, run.info)


def _jackknife_rates(acc, rows: int, prefix: int, keep: np.ndarray) -> np.ndarray:
    """(T,) localized rate of each leave-one-batch-out replicate, one replicate at a time: ``acc.replicates`` of all
    T at once stacks (T, T − 1, tokens, positions) terms, T times the terms themselves (ResNet-50's 28x28 stage,
    784 x 784 cells, over 64 batches: 20 GB; the app's server was killed for it). Each replicate is the same sum as
    there (``cka_replicates`` on its row of the indices), so the rates are the same to the last bit."""
    from ..stats import evidence as ev

    xy, xx, yy = acc.terms()
    idx = ev.jackknife_indices(acc.batches)
    return np.array([ev.localized_rate(ev.cka_replicates(xy, xx, yy, idx[t:t + 1])[0, :rows], prefix, keep)
                     for t in range(len(idx))], dtype=np.float64)


def _accumulator(tokens: int, positions: int) -> cka_mod.MinibatchCKA:
    from ..stats.evidence import BootstrapCKA  # keeps per-batch terms for the rate's interval

    return BootstrapCKA([f"token {t}" for t in range(tokens)], [f"patch {g}" for g in range(positions)])
