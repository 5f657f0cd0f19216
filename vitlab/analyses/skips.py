"""Skip-connection norm ratios (Raghu et al. 2021, Sec. 6, Fig 7 and App. E).

A residual sublayer maps z to z + f(z): z is the skip (identity) branch, f(z) the long branch. The paper plots,
per block and per token, the ratio of norms  r_i = ‖z_i‖ / ‖f(z_i)‖  (Fig 7), averaged over images; a large ratio
means the sublayer mostly passes its input through. App. E (Fig E.2) also gives the cosine similarity of the
two branches,  cos_i = <z_i, f(z_i)> / (‖z_i‖ ‖f(z_i)‖).

Where the branches are (shapes: B batch, N tokens, D width, C channels, h/w feature map, S sublayers):

- ViT: attention sublayer z = ``resid_pre``, f(z) = ``attn_out``; MLP sublayer z = ``resid_mid``, f(z) = ``mlp_out``.
  The sums are checked: ``resid_mid = resid_pre + attn_out`` and ``resid_post = resid_mid + mlp_out``.
- MLP-Mixer: the token-mixing and channel-mixing sublayers, likewise.
- ResNet / BiT: z = ``{block}.shortcut`` (the input, or its downsample projection), f(z) = ``{block}.sum`` - z.
  A "token" is one spatial position (all channels); a CNN's ratio is the mean over positions, reported as the
  spatial aggregate (token -1), since stages have different grids.

    acts ─branch_stats─► ratio, cos (B, N) ─SkipStatistic─► sums (S, N) ─SkipAccumulator─► SkipResult ─► frame
                                     └─► norm sums Σ‖z‖, Σ‖f(z)‖ (S, N) per batch ─► the tour's Fig 7 statistic
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.context import Run, RunInfo
from ..engine.run import Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import Batch, ImageSource, select
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from .reports import PerModel

TOKEN_SUBLAYERS = {
    "vit": (("attn", "resid_pre", "attn_out", "resid_mid"), ("mlp", "resid_mid", "mlp_out", "resid_post")),
    "mixer": (("token_mix", "resid_pre", "token_mix_out", "resid_mid"),
              ("channel_mix", "resid_mid", "channel_mix_out", "resid_post")),
}


def sublayers(model) -> list[tuple[str, str, str, str]]:
    """(name, skip tap, branch tap, sum tap) of every residual sublayer in network order.

    For CNNs the branch tap is empty: f(z) = sum - shortcut.
    """
    fam = taps_mod.family(model)
    if fam in TOKEN_SUBLAYERS:
        return [(f"blocks.{i}.{kind}", f"blocks.{i}.{z}", f"blocks.{i}.{fz}", f"blocks.{i}.{s}")
                for i in range(len(model.blocks)) for kind, z, fz, s in TOKEN_SUBLAYERS[fam]]
    return [(b, f"{b}.shortcut", "", f"{b}.sum") for b in taps_mod.default_taps(model)]


def _as_tokens(x):
    """(B, C, h, w) -> (B, h*w, C); token tensors unchanged."""
    return x.flatten(2).transpose(1, 2) if x.dim() == 4 else x


def branch_norms(z, fz):
    """Per image and token: ‖z‖, ‖f(z)‖ and cos(z, f(z)), float64 (B, N) each."""
    import torch

    z, fz = _as_tokens(z).double(), _as_tokens(fz).double()
    nz, nf = torch.linalg.vector_norm(z, dim=-1), torch.linalg.vector_norm(fz, dim=-1)
    return nz, nf, (z * fz).sum(-1) / (nz * nf)


def branch_stats(z, fz):
    """Per image and token: ‖z‖/‖f(z)‖ and cos(z, f(z)), float64 (B, N) each. No clamping: a zero branch gives inf."""
    nz, nf, cos = branch_norms(z, fz)
    return nz / nf, cos


def _identity_error(z, fz, total) -> float:
    """max |sum - (z + f(z))| / max |sum|: how exactly the captured sum is the sum of its branches."""
    return float(((total - (z + fz)).abs().max() / total.abs().max()).cpu())


@dataclass(frozen=True)
class SkipStatistic(Statistic):
    """Per-batch sums over images of ‖z‖/‖f(z)‖ and cos(z, f(z)) for every sublayer and token (Raghu et al. Fig 7),
    and of the norms ‖z‖ and ‖f(z)‖ themselves (``z_norm_sum``, ``fz_norm_sum``; a CNN's summed over positions too),
    from which a ratio of sums Σ‖z‖ / Σ‖f(z)‖ follows: the tour's Fig 7 statistic, consistent at few images where a
    summary of per-image ratios is not (issue 50)."""

    name: str = "skips"
    version: int = 2  # 2: the norm sums

    def params(self, loaded: LoadedModel) -> dict:
        return {"sublayers": [s[0] for s in sublayers(loaded.model)]}

    def taps(self, loaded: LoadedModel) -> list[str]:
        return sorted({t for s in sublayers(loaded.model) for t in s[1:] if t})

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        ratios, coss, errs, nzs, nfs = [], [], [], [], []
        cnn = taps_mod.family(loaded.model) in ("resnet", "resnetv2")
        for _, z_tap, fz_tap, sum_tap in sublayers(loaded.model):
            z, total = acts[z_tap], acts[sum_tap]
            fz = total - z if cnn else acts[fz_tap]
            nz, nf, c = branch_norms(z, fz)
            r = nz / nf
            if cnn:  # grids differ between stages: keep the mean ratio over positions, the norms' sum
                r, c = r.mean(dim=1, keepdim=True), c.mean(dim=1, keepdim=True)
                nz, nf = nz.sum(dim=1, keepdim=True), nf.sum(dim=1, keepdim=True)
            ratios.append(r.sum(0).cpu().numpy())
            coss.append(c.sum(0).cpu().numpy())
            nzs.append(nz.sum(0).cpu().numpy())
            nfs.append(nf.sum(0).cpu().numpy())
            errs.append(np.nan if cnn else _identity_error(z, fz, total))
        return {"ratio_sum": np.stack(ratios), "cos_sum": np.stack(coss), "identity_err": np.array(errs),
                "count": np.array([z.shape[0]]), "z_norm_sum": np.stack(nzs), "fz_norm_sum": np.stack(nfs)}


class SkipAccumulator:
    """Float64 sums of per-image ratios and cosines (S, N); identity errors are kept as a running max."""

    def __init__(self, layers: Sequence[str]):
        self.layers = list(layers)
        self.ratio_sum = self.cos_sum = None
        self.identity_err = np.full(len(self.layers), np.nan)
        self.images = 0

    def update(self, stat: dict[str, np.ndarray]) -> SkipAccumulator:
        if stat["ratio_sum"].shape[0] != len(self.layers):
            raise VitlabError(f"skip statistics for {stat['ratio_sum'].shape[0]} sublayers given to an accumulator "
                              f"of {len(self.layers)}")
        r, c = (np.asarray(stat[k], dtype=np.float64) for k in ("ratio_sum", "cos_sum"))
        self.ratio_sum = r.copy() if self.ratio_sum is None else self.ratio_sum + r
        self.cos_sum = c.copy() if self.cos_sum is None else self.cos_sum + c
        self.identity_err = np.fmax(self.identity_err, stat["identity_err"])
        self.images += int(np.asarray(stat["count"]).sum())
        return self

    def merge(self, other: SkipAccumulator) -> SkipAccumulator:
        if other.layers != self.layers:
            raise VitlabError("cannot merge skip accumulators of different sublayers")
        if other.images:
            self.update({"ratio_sum": other.ratio_sum, "cos_sum": other.cos_sum,
                         "identity_err": other.identity_err, "count": np.array([other.images])})
        return self

    def state(self) -> dict[str, np.ndarray]:
        return {"ratio_sum": self.ratio_sum, "cos_sum": self.cos_sum, "identity_err": self.identity_err,
                "count": np.array([self.images])}

    def load_state(self, state: dict[str, np.ndarray]) -> SkipAccumulator:
        self.ratio_sum, self.cos_sum = (np.array(state[k], dtype=np.float64) for k in ("ratio_sum", "cos_sum"))
        self.identity_err = np.array(state["identity_err"], dtype=np.float64)
        self.images = int(np.asarray(state["count"]).sum())
        return self

    def compute(self, model: str, prefix: int, family: str) -> SkipResult:
        if not self.images:
            raise VitlabError("no batch was accumulated: the skip ratios need at least one batch of 4 or more images")
        ratio, cos = self.ratio_sum / self.images, self.cos_sum / self.images
        warnings = [f"{model} {layer}: the long branch f(z) is zero for some token or image, so ‖z‖/‖f(z)‖ is "
                    "infinite (e.g. a zero-initialised last norm in an untrained block)"
                    for layer, row in zip(self.layers, ratio) if not np.all(np.isfinite(row))]
        return SkipResult(model, family, self.layers, ratio, cos, prefix, self.images, self.identity_err, warnings)


SUBLAYER_WORDS = {"attn": "attention", "mlp": "MLP", "mlp_tokens": "token-mixing", "mlp_channels": "channel-mixing"}


@dataclass
class SkipResult:
    """Mean over images of ‖z‖/‖f(z)‖ and cos(z, f(z)) per sublayer (S) and token (N; one column for CNNs)."""

    model: str
    family: str
    layers: list[str]
    ratio: np.ndarray  # (S, N)
    cosine: np.ndarray  # (S, N)
    prefix: int  # prefix (CLS) tokens before the spatial ones
    images: int
    # (S,) max relative error of sum = z + f(z); NaN for CNNs (there f(z) is defined as the difference)
    identity_err: np.ndarray
    warnings: list[str] = field(default_factory=list)
    ratio_lo: np.ndarray | None = None  # (S, N) 95 % interval of the mean ratio, bootstrap over batches
    ratio_hi: np.ndarray | None = None
    # kind ('cls' | 'spatial') -> (lo, hi), each (S,): 95 % interval of the mean ratio over that kind's tokens
    kind_intervals: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    interval_units: int = 0  # batches behind the intervals (evidence.MIN_UNITS or more for an interval)
    ratio_loo: np.ndarray | None = None  # (T, S, N) mean ratios with each batch left out (jackknife)

    def sublayer_groups(self) -> dict[str, list[int]]:
        """The sublayers of each kind, in words: 'attention sublayers' / 'MLP sublayers' of a ViT (token- and
        channel-mixing of a Mixer), 'blocks' of a CNN."""
        if self.family in ("resnet", "resnetv2"):
            return {"blocks": list(range(len(self.layers)))}
        groups: dict[str, list[int]] = {}
        for i, layer in enumerate(self.layers):
            kind = layer.rsplit(".", 1)[1]
            groups.setdefault(f"{SUBLAYER_WORDS.get(kind, kind)} sublayers", []).append(i)
        return groups

    def group_estimate(self, rows: list[int], kind: str = "spatial"):
        """Mean ‖z‖/‖f(z)‖ over the ``kind`` tokens ('spatial' or 'cls') and the sublayers ``rows`` (infinite ratios
        left out), with its jackknife-t interval over batches."""
        import warnings

        from ..stats.evidence import Estimate
        from .findings import jackknife

        cols = self.kinds()[kind]

        def mean(r: np.ndarray) -> np.ndarray:
            x = np.asarray(r, dtype=np.float64)[..., rows, cols]
            with warnings.catch_warnings(), np.errstate(invalid="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                return np.nanmean(np.where(np.isfinite(x), x, np.nan).reshape(x.shape[:-2] + (-1,)), -1)

        if self.ratio_loo is None:
            return Estimate(float(mean(self.ratio)), np.nan, np.nan, "batches", self.interval_units, "")
        return jackknife(mean(self.ratio), mean(self.ratio_loo), "batches")

    def kinds(self) -> dict[str, slice]:
        """The token columns of each kind ('cls': prefix tokens; a CNN's one column is 'spatial')."""
        if self.family in ("resnet", "resnetv2") or not self.prefix:
            return {"spatial": slice(None)}
        return {"cls": slice(0, self.prefix), "spatial": slice(self.prefix, None)}

    def to_frame(self):
        """One row per (sublayer, token): model, layer, block, sublayer, depth in (0, 1], token, kind, ratio, cosine.

        ``kind`` is 'cls' (prefix tokens) or 'spatial'; a CNN has one row per block, token -1, the mean over positions.
        """
        import pandas as pd

        cnn = self.family in ("resnet", "resnetv2")
        blocks = list(dict.fromkeys(layer if cnn else layer.rsplit(".", 1)[0] for layer in self.layers))
        rows = []
        for s, layer in enumerate(self.layers):
            block = layer if cnn else layer.rsplit(".", 1)[0]
            for t in range(self.ratio.shape[1]):
                rows.append({"model": self.model, "layer": layer, "block": block, "block_index": blocks.index(block),
                             "sublayer": "block" if cnn else layer.rsplit(".", 1)[1],
                             "depth": (blocks.index(block) + 1) / len(blocks), "token": -1 if cnn else t,
                             "kind": "cls" if t < self.prefix and not cnn else "spatial",
                             "ratio": float(self.ratio[s, t]), "cosine": float(self.cosine[s, t]),
                             **({"ratio_lo": float(self.ratio_lo[s, t]), "ratio_hi": float(self.ratio_hi[s, t]),
                                 **self.interval_info()} if self.ratio_lo is not None else {})})
        return pd.DataFrame(rows)

    def interval_info(self) -> dict:
        from ..stats.evidence import JACKKNIFE, interval_columns

        return interval_columns("batches", self.interval_units, JACKKNIFE)

    def summary(self):
        """Per sublayer: mean ratio and cosine over CLS tokens and over spatial tokens (the lines of Fig 7), with
        ``ratio_lo``/``ratio_hi``, the 95 % interval of that mean, when the run had intervals."""
        frame = self.to_frame()
        out = frame.groupby(["model", "layer", "block", "sublayer", "depth", "kind"], sort=False,
                            as_index=False)[["ratio", "cosine"]].mean()
        if self.kind_intervals:
            s = out["layer"].map({layer: i for i, layer in enumerate(self.layers)}).to_numpy()
            for j, col in enumerate(("ratio_lo", "ratio_hi")):
                out[col] = [float(self.kind_intervals[k][j][i]) for k, i in zip(out["kind"], s)]
            for col, v in self.interval_info().items():
                out[col] = v
        return out


@dataclass
class SkipReport(PerModel):
    results: list[SkipResult]
    info: RunInfo

    def summary(self):
        """Per model and sublayer: mean ratio and cosine over CLS and over spatial tokens (the lines of Fig 7)."""
        import pandas as pd

        return pd.concat([r.summary() for r in self.results], ignore_index=True)

    def headline(self) -> list[str]:
        return [f"skip ratios over {self.images} images"]


    def identity_errors(self) -> dict[str, float]:
        """Per token model (ViT, Mixer): the largest relative error of sum = z + f(z) over its sublayers."""
        return {r.model: float(max(r.identity_err.tolist(), default=0.0)) for r in self.results
                if r.family not in ("resnet", "resnetv2")}


@dataclass(frozen=True)
class SkipOptions(DataOptions):
    """Options of the skip ratios (``vitlab skip-ratio``)."""

    images: int | None = option(128, "number of images (first N, or shuffled)", short="-n")
    batch_size: int = option(32, "images per batch", short="-b")


def skip_ratios(models: Sequence[LoadedModel], source: ImageSource, opts: SkipOptions = SkipOptions(),
                run: Run | None = None) -> SkipReport:
    """Skip/long-branch norm ratios and cosines of every model over the images (one cached pass).

    ``run.bootstrap`` resamples of the batches (``run.seed``) give every ratio a 95 % interval (single process)."""
    if not models:
        raise VitlabError("give at least one model")
    run = run or Run()
    stat = SkipStatistic()
    accs = [SkipAccumulator(stat.params(m)["sublayers"]) for m in models]
    kept: list[list] = [[] for _ in models]  # per model, per batch: (index, ratio sums, images), for intervals

    def report() -> SkipReport:
        results = [acc.compute(m.label, taps_mod.num_prefix_tokens(m.model), taps_mod.family(m.model))
                   for acc, m in zip(accs, models)]
        if run.bootstrap:
            _intervals(results, run.gather_objects(kept) if run.shard[1] > 1 else [kept], run)
        return SkipReport(results, run.info)

    for done, (batch, found) in enumerate(stream(models, source, select(source, opts.images, opts.shuffle),
                                                 opts.batch_size, [[stat]] * len(models), run), 1):
        for k, (acc, per_model) in enumerate(zip(accs, found)):
            acc.update(per_model[stat.name])
            kept[k].append((batch.index, per_model[stat.name]["ratio_sum"],
                            float(np.sum(per_model[stat.name]["count"]))))
        run.estimate(report, done, batch.of)  # the ratios over the batches so far (the app draws them)
    run.reduce_accumulators(accs)
    return report()


def _intervals(results: list[SkipResult], ranks: list[list[list]], run: Run) -> None:
    """Every ratio's 95 % jackknife-t interval over the batches of all ranks, in batch order (so torchrun equals
    one process); a ratio of sums is smooth in the batch sums, where the jackknife covers (vitlab.evidence)."""
    import warnings

    from ..stats import evidence as ev

    for k, res in enumerate(results):
        batches = sorted((b for kept in ranks for b in kept[k]), key=lambda b: b[0])
        res.interval_units = len(batches)
        if len(batches) < 2:
            continue
        sums, counts = np.stack([b[1] for b in batches]), np.array([b[2] for b in batches])
        idx = ev.jackknife_indices(len(batches))
        with np.errstate(invalid="ignore", divide="ignore"):
            point = sums.sum(0) / counts.sum()
            reps = ev.ratio_replicates(sums, counts, idx)
        res.ratio_lo, res.ratio_hi = ev.jackknife_interval(point, reps)
        res.ratio_loo = reps
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a sublayer whose ratios are all NaN (zero branch)
            # the mean over a kind's tokens, as summary() averages them (NaN left out)
            res.kind_intervals = {k: ev.jackknife_interval(np.nanmean(point[..., cols], axis=-1),
                                                           np.nanmean(reps[..., cols], axis=-1))
                                  for k, cols in res.kinds().items()}
