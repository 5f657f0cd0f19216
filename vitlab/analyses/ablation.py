"""Head ablation by attention distance: what local and global heads *do* (cause, beside Raghu et al. 2021, Fig 5).

Raghu et al. find that a ViT's lower blocks mix local and global heads and that local heads resemble a ResNet's
lower layers (correlation). Here the heads are removed: the heads of the chosen blocks are ranked by mean
attention distance (:mod:`vitlab.analyses.attention`, measured on the same images), and the k most local, the k most
global and k random heads (several seeded draws) are ablated, one set at a time.

The attention branch of a block is a sum of per-head terms. With o_h (B, N, Dh) the output of head h
(``softmax(q kᵀ · scale) @ v``), W_h the columns of the output projection that read it and b its bias::

    attn_out = Σ_h (o_h W_hᵀ + b / H)          (the shared bias split evenly, so the terms sum to the branch)

- ``zero``: head h's term is removed (o_h := 0 and b/H taken off). Ablating every head of a block makes that
  block's attention branch exactly zero: the attention sublayer is gone and only the skip remains;
- ``mean``: o_h is replaced by its mean over images, per token position (N, Dh), stored once per model and image
  set (Nanda-style mean ablation): the head's term becomes its average, so only its image dependence is removed.

The surgery is a forward pre-hook (and for ``zero`` a forward hook) on the block's ``attn.proj``, installed under
the model's lock inside :func:`ablate_heads` and removed in ``finally``: outputs are bit-equal afterwards, and it
works whether attention runs fused or not. An ablated model gets its own fingerprint (:func:`ablated`), so its
cached statistics never mix with the intact model's.

Reported per ablated set: top-1 accuracy change on a labelled set, mean KL(intact ‖ ablated) of the output
distributions, and the linear CKA of every block output with the same block of the intact model and (mean over
layers) with the other model's lower layers. Intervals: 95 % bootstrap over images for the local and global sets
(paired with the intact model), the 2.5-97.5 % range over draws for random sets.

Under torchrun each rank runs every ablated set over its share of the batches: head distances and means, and the
CKA sums, are added across ranks; the per-image log-probabilities are gathered in batch order, so accuracy, KL and
their bootstrap over images are a single process's.

Running estimate (issue 51): after each ablated set but the last, ``run.estimate`` hands up the result over the sets
done so far (each set's values are final once its pass is done; the plan runs zero before mean ablation, k by k, and
the head means are made only when the first mean-ablated set needs them).

Shapes: B batch, N tokens, H heads, Dh head width, L blocks chosen, n images in a Gram.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..engine.context import Run
from ..engine.run import GramStatistic, LogProbStatistic, Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import Batch, ImageSource, select
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..progress import passes
from ..stats import cka as cka_mod
from .attention import AttentionDistanceAccumulator, AttentionDistanceStatistic, image_side, probs_taps, require_vit
from .heads import default_lower_taps, head_outputs
from .readout import class_match

MODES = ("zero", "mean")
SELECTIONS = ("local", "global", "random")
SCOPES = ("pooled", "per-block")


@dataclass(frozen=True)
class HeadAblation:
    """Which heads to ablate, as (block, head) pairs, and how ('zero' or 'mean')."""

    heads: tuple[tuple[int, int], ...]
    mode: str = "zero"

    @property
    def label(self) -> str:
        return f"ablate[{self.mode}:{','.join(f'b{b}.h{h}' for b, h in self.heads)}]"


def _check(model, ablation: HeadAblation, means: dict | None) -> dict[int, list[int]]:
    """Validate ``ablation`` against ``model``; heads grouped by block."""
    if ablation.mode not in MODES:
        raise VitlabError(f"ablation mode must be one of {', '.join(MODES)}, not '{ablation.mode}'")
    if taps_mod.family(model) != "vit":
        raise VitlabError(f"head ablation needs a ViT-family model with attention heads, not a "
                          f"{taps_mod.family(model)} model")
    groups: dict[int, list[int]] = {}
    for b, h in ablation.heads:
        if not 0 <= b < len(model.blocks):
            raise VitlabError(f"block {b} does not exist: the model has blocks 0..{len(model.blocks) - 1}")
        attn = model.blocks[b].attn
        if not 0 <= h < attn.num_heads:
            raise VitlabError(f"head {h} does not exist: block {b} has heads 0..{attn.num_heads - 1}")
        if type(attn.norm).__name__ != "Identity" or getattr(attn, "gate", None) is not None:
            raise VitlabError(f"block {b}'s attention normalises or gates the heads before its projection; head "
                              "ablation supports timm's plain Attention (no scale_norm, no gate)")
        if ablation.mode == "mean" and (means is None or b not in means):
            raise VitlabError(f"mean ablation of block {b} needs its stored head means (ablation.head_means)")
        groups.setdefault(b, []).append(h)
    if not groups:
        raise VitlabError("no head to ablate: choose at least one (block, head)")
    return {b: sorted(set(hs)) for b, hs in groups.items()}


@contextmanager
def ablate_heads(model, ablation: HeadAblation, means: dict[int, np.ndarray] | None = None) -> Iterator[None]:
    """Inside the ``with``, the heads of ``ablation`` are zero- or mean-ablated (module docstring).

    ``means[block]``: (H, N, Dh) per-position mean head outputs of the intact model (:func:`head_means`).
    """
    import torch

    groups = _check(model, ablation, means)
    handles = []
    with taps_mod.model_lock(model):
        try:
            for b, heads in groups.items():
                attn = model.blocks[b].attn
                nh, dh = attn.num_heads, attn.head_dim
                mean = None if ablation.mode == "zero" else torch.as_tensor(means[b][heads]).transpose(0, 1)

                def pre(mod, args, heads=heads, mean=mean, nh=nh, dh=dh):
                    x = args[0]  # (B, N, H·Dh): heads concatenated, head h in columns h·Dh:(h+1)·Dh
                    y = x.reshape(*x.shape[:-1], nh, dh).clone()
                    if mean is None:
                        y[..., heads, :] = 0
                    else:
                        if mean.shape[0] != y.shape[1]:
                            raise VitlabError(f"stored head means are for {mean.shape[0]} tokens, the input has "
                                              f"{y.shape[1]}: compute the means at this input size")
                        y[..., heads, :] = mean.to(y.device, y.dtype)
                    return (y.reshape(x.shape),)

                handles.append(attn.proj.register_forward_pre_hook(pre))
                if ablation.mode == "zero" and attn.proj.bias is not None:
                    share = len(heads) / nh  # each head's share of the bias (b / H per head)

                    def post(mod, args, out, share=share):
                        return out - mod.bias * share

                    handles.append(attn.proj.register_forward_hook(post))
            yield
        finally:
            for h in handles:
                h.remove()


def _means_digest(means: dict | None) -> str:
    if not means:
        return ""
    h = hashlib.sha256()
    for b in sorted(means):
        h.update(f"{b}:{means[b].shape}".encode())
        h.update(np.ascontiguousarray(means[b], dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


@contextmanager
def ablated(loaded: LoadedModel, ablation: HeadAblation, means: dict | None = None) -> Iterator[LoadedModel]:
    """A view of ``loaded`` with the heads ablated: same module, its own fingerprint and label (cache-safe)."""
    fp = hashlib.sha256(f"{loaded.fingerprint}|{ablation}|{_means_digest(means)}".encode()).hexdigest()[:20]
    with ablate_heads(loaded.model, ablation, means):
        yield dataclasses.replace(loaded, fingerprint=fp, display=f"{loaded.label} {ablation.label}")


# ---------------------------------------------------------------- per-batch statistics


@dataclass(frozen=True)
class HeadMeanStatistic(Statistic):
    """Sum over the batch of every head's output o_h per token position: {'sum': (L, H, N, Dh), 'count': (1,)}."""

    blocks: tuple[int, ...] = (0,)
    name: str = "head_mean_sums"
    version: int = 1

    def taps(self, loaded: LoadedModel) -> list[str]:
        return probs_taps(loaded, self.blocks) + [f"blocks.{b}.resid_pre" for b in self.blocks]

    def params(self, loaded: LoadedModel) -> dict:
        return {"blocks": list(self.blocks)}

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        with torch.no_grad():
            sums = [head_outputs(loaded.model.blocks[b], acts[f"blocks.{b}.resid_pre"],
                                 acts[f"blocks.{b}.attn_probs"]).double().sum(0) for b in self.blocks]
        return {"sum": torch.stack(sums).cpu().numpy(), "count": np.array([acts[f"blocks.{self.blocks[0]}.resid_pre"]
                                                                          .shape[0]])}


def head_means(loaded: LoadedModel, source: ImageSource, indices: Sequence[int], blocks: Sequence[int],
               batch_size: int, run: Run) -> dict[int, np.ndarray]:
    """Per-position mean over images of every head's output in ``blocks``: {block: (H, N, Dh) float32}."""
    stat = HeadMeanStatistic(tuple(int(b) for b in blocks))
    kept = [(batch.index, found[0][stat.name])
            for batch, found in stream([loaded], source, indices, batch_size, [[stat]], run,
                                       min_batch=1)]
    total, count = None, 0
    for s in run.gather_ordered(kept, "head means"):  # every rank's batch sums, added in batch order
        total = s["sum"] if total is None else total + s["sum"]
        count += int(s["count"].sum())
    if not count:
        raise VitlabError("no readable image: head means need at least one image")
    return {b: (total[i] / count).astype(np.float32) for i, b in enumerate(stat.blocks)}


# ---------------------------------------------------------------- the experiment


@dataclass(frozen=True)
class AblationOptions(DataOptions):
    """Options of :func:`head_ablation` (every field has its help text in ``metadata``)."""

    blocks: tuple[int, ...] | None = option(None, "blocks whose heads are ranked and ablated (default: the lower "
                                                  "half)", kind="ints")
    ks: tuple[int, ...] | None = option(None, "numbers of heads ablated at once (default: 1 .. half the candidates)",
                                        kind="ints", flag="--k")
    scope: str = option("pooled", "pooled: rank all heads of the chosen blocks together; per-block: k heads per "
                                  "block", choices=SCOPES)
    modes: tuple[str, ...] = option(MODES, "zero and/or mean ablation", kind="strs")
    draws: int = option(10, "random head sets per k (seeded by the run's seed)")
    other_taps: tuple[str, ...] | None = option(None, "the other model's layers (default: first half of its CKA "
                                                      "taps)", kind="strs")


def choose_heads(distance: np.ndarray, blocks: Sequence[int], k: int, selection: str, scope: str,
                 rng: np.random.Generator | None = None) -> tuple[tuple[int, int], ...]:
    """The k most local / most global / k random heads of ``blocks`` by mean distance ``distance`` (L, H).

    ``scope='pooled'`` ranks all L·H heads together; ``'per-block'`` takes k heads in each block. Ties keep the
    lower head index first (stable sort).
    """
    _, n_h = distance.shape
    if scope == "pooled":
        groups = [[(int(blocks[i // n_h]), int(i % n_h)) for i in np.argsort(distance.ravel(), kind="stable")]]
    elif scope == "per-block":
        groups = [[(int(b), int(h)) for h in np.argsort(distance[li], kind="stable")] for li, b in enumerate(blocks)]
    else:
        raise VitlabError(f"scope must be one of {', '.join(SCOPES)}, not '{scope}'")
    out: list[tuple[int, int]] = []
    for g in groups:
        if not 1 <= k <= len(g):
            raise VitlabError(f"cannot ablate {k} heads out of {len(g)} ({scope}): choose k in 1..{len(g)}")
        if selection == "local":
            out += g[:k]
        elif selection == "global":
            out += g[-k:]
        elif selection == "random":
            out += [g[i] for i in (rng or np.random.default_rng(0)).choice(len(g), k, replace=False)]
        else:
            raise VitlabError(f"selection must be one of {', '.join(SELECTIONS)}, not '{selection}'")
    return tuple(sorted(out))


@dataclass
class _Pass:
    """One model's outputs over the images: per-batch centred Grams of this rank's batches (under torchrun; all
    batches in one process), log-probabilities (n, C) of every image in batch order."""

    centred: list[np.ndarray]
    logp: np.ndarray


def _pass(loaded: LoadedModel, source: ImageSource, indices, opts: AblationOptions, gram: GramStatistic,
          run: Run) -> tuple[_Pass, list]:
    lp, grams, kept = LogProbStatistic(), [], []
    for batch, found in stream([loaded], source, indices, opts.batch_size, [[gram, lp]], run):
        grams.append(cka_mod.centred(found[0][gram.name]["grams"]))
        kept.append((batch.index, (found[0][lp.name]["logp"],
                                   batch.labels if batch.labels is not None else [None] * len(batch.ids))))
    kept = run.gather_ordered(kept, "head-ablation outputs")  # per-image values of every rank, in batch order
    if not kept:
        raise VitlabError("no batch of 4 or more readable images: the ablation's CKA needs at least 4 images")
    return _Pass(grams, np.concatenate([k[0] for k in kept])), [label for k in kept for label in k[1]]


def _cka_rows(ablated_: _Pass, ref: list[np.ndarray], layers, layers_ref, run: Run) -> np.ndarray:
    """CKA of the two passes' Grams over the same batches; under torchrun each rank's sums are added."""
    acc = cka_mod.MinibatchCKA(layers, layers_ref)
    for a, r in zip(ablated_.centred, ref):
        acc.update(a, r)
    run.reduce_accumulators(acc)
    return acc.compute().cka


@dataclass
class AblationResult:
    """Every ablated head set's effect; ``to_frame()`` one row per set, ``summary()`` the curves with intervals."""

    model: str
    other: str
    blocks: list[int]
    scope: str
    heads_by_distance: list[tuple[str, float]]  # 'b{block}.h{head}', mean distance px; most local first
    layers: list[str]
    other_layers: list[str]
    conditions: list[dict]  # mode, selection, k, draw, heads, correct (n,), kl (n,), cka_intact (L,), cka_other (L,)
    intact_correct: np.ndarray  # (n,) bool
    intact_cka_other: np.ndarray  # (L,)
    accuracy_kind: str  # 'top-1 accuracy' or "agreement with the intact model's top-1" (labels unusable)
    images: int
    bootstrap: np.ndarray  # (R, n) resampled image indices, shared by every condition (paired intervals)
    info: object = None
    warnings: list[str] = field(default_factory=list)
    accuracy_note: str = ""  # why the labels are not used ('' when they are)

    def to_frame(self):
        """One row per ablated set: mode, selection, k, draw, heads, accuracy, delta_accuracy, kl, agreement."""
        import pandas as pd

        base = float(self.intact_correct.mean())
        rows = [{"model": self.model, "mode": c["mode"], "selection": c["selection"], "k": c["k"],
                 "draw": c["draw"], "heads": ",".join(f"b{b}.h{h}" for b, h in c["heads"]),
                 "accuracy": float(c["correct"].mean()), "delta_accuracy": float(c["correct"].mean()) - base,
                 "kl": float(c["kl"].mean()), "accuracy_kind": self.accuracy_kind, "images": self.images}
                for c in self.conditions]
        return pd.DataFrame(rows)

    def cka_frame(self):
        """Per ablated set and block output: CKA with the intact model's same layer and mean CKA with the
        other model's lower layers (``cka_other_intact``: the intact model's value, for reference)."""
        import pandas as pd

        rows = []
        for c in self.conditions:
            for li, layer in enumerate(self.layers):
                rows.append({"mode": c["mode"], "selection": c["selection"], "k": c["k"], "draw": c["draw"],
                             "layer": layer, "depth": li, "cka_intact": float(c["cka_intact"][li]),
                             "cka_other": float(c["cka_other"][li]),
                             "cka_other_intact": float(self.intact_cka_other[li])})
        return pd.DataFrame(rows)

    def headline(self) -> list[str]:
        return [self.verdicts().to_string(index=False),
                f"{self.accuracy_kind} of the intact model {self.intact_correct.mean():.4f} over {self.images} images"
                + (f" (no accuracy: {self.accuracy_note})" if self.accuracy_note else "")]

    def _interval(self, conds: list[dict], key: str, paired_with: np.ndarray | None) -> tuple[float, float, float]:
        """(mean, lo, hi): over draws (random) or a bootstrap over images (one set), minus ``paired_with``."""
        if len(conds) > 1:
            vals = np.array([c[key].mean() - (0 if paired_with is None else paired_with.mean()) for c in conds])
            return float(vals.mean()), float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))
        d = conds[0][key].astype(np.float64) - (0 if paired_with is None else paired_with)
        boot = d[self.bootstrap].mean(1)
        return float(d.mean()), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))

    @property
    def intact_accuracy(self) -> str:
        """The intact model's accuracy over the images with its 95 % t interval (each image right or wrong)."""
        from .findings import rate_over_images, say

        return say(rate_over_images(float(self.intact_correct.mean()), len(self.intact_correct)), ".3f")

    def summary(self):
        """Per mode, selection and k: Δaccuracy and KL with their interval (``interval``: what it is over)."""
        import pandas as pd

        rows = []
        keys = dict.fromkeys((c["mode"], c["selection"], c["k"]) for c in self.conditions)
        base = self.intact_correct.astype(np.float64)
        for mode, sel, k in keys:
            conds = [c for c in self.conditions if (c["mode"], c["selection"], c["k"]) == (mode, sel, k)]
            for metric, key, paired in (("delta_accuracy", "correct", base), ("kl", "kl", None)):
                mean, lo, hi = self._interval(conds, key, paired)
                rows.append({"model": self.model, "mode": mode, "selection": sel, "k": k, "metric": metric,
                             "mean": mean, "lo": lo, "hi": hi, "draws": len(conds),
                             "interval": "2.5-97.5 % over random draws" if len(conds) > 1
                             else "95 % bootstrap over images"})
        return pd.DataFrame(rows)

    def verdicts(self):
        """Per mode and k: does ablating the most local heads hurt accuracy more than the global / random ones?

        local vs global: 95 % paired bootstrap interval over images of Δacc(local) - Δacc(global);
        local vs random: Δacc(local) against the 2.5-97.5 % range of Δacc over random draws.
        """
        import pandas as pd

        rows = []
        for mode, k in dict.fromkeys((c["mode"], c["k"]) for c in self.conditions):
            pick = {s: [c for c in self.conditions if (c["mode"], c["k"], c["selection"]) == (mode, k, s)]
                    for s in SELECTIONS}
            if not pick["local"] or not pick["global"]:
                continue
            loc, glo = pick["local"][0]["correct"], pick["global"][0]["correct"]
            diff, lo, hi = self._interval([{"d": loc.astype(np.float64)}], "d", glo.astype(np.float64))
            vs_global = "local hurts more" if hi < 0 else "global hurts more" if lo > 0 else "can't tell"
            row = {"mode": mode, "k": k, "local_minus_global": diff, "lo": lo, "hi": hi, "vs_global": vs_global}
            if pick["random"]:
                d_loc = float(loc.mean() - self.intact_correct.mean())
                _, rlo, rhi = self._interval(pick["random"], "correct", self.intact_correct.astype(np.float64))
                row.update(random_lo=rlo, random_hi=rhi, vs_random="local hurts more" if d_loc < rlo
                           else "local hurts less" if d_loc > rhi else "within the random range")
            rows.append(row)
        return pd.DataFrame(rows)


def _distances(vit: LoadedModel, source, indices, blocks, opts: AblationOptions, run: Run) -> np.ndarray:
    stat = AttentionDistanceStatistic(tuple(blocks))
    acc = AttentionDistanceAccumulator(list(blocks), vit.model.blocks[blocks[0]].attn.num_heads)
    for _, found in stream([vit], source, indices, opts.batch_size, [[stat]], run, min_batch=1):
        acc.update(found[0][stat.name])
    run.reduce_accumulators(acc)  # torchrun: every rank ranks the heads by the same distances
    return acc.compute(vit.label, image_side(vit)).distance_px  # (L, H)


def _plan(distance, blocks, opts: AblationOptions, run: Run) -> list[dict]:
    per_group = distance.size if opts.scope == "pooled" else distance.shape[1]
    ks = opts.ks or tuple(range(1, max(1, per_group // 2) + 1))
    plan = []
    for mode in opts.modes:
        if mode not in MODES:
            raise VitlabError(f"ablation mode must be one of {', '.join(MODES)}, not '{mode}'")
        for k in ks:
            # seeded per k: the random sets do not depend on which other ks are asked for, and both modes see
            # the same sets (a paired comparison of zero and mean ablation)
            rng = np.random.default_rng([run.seed, int(k)])
            for sel in SELECTIONS:
                for draw in range(opts.draws if sel == "random" else 1):
                    plan.append({"mode": mode, "selection": sel, "k": int(k), "draw": draw,
                                 "heads": choose_heads(distance, blocks, int(k), sel, opts.scope, rng)})
    return plan


def head_ablation(vit: LoadedModel, other: LoadedModel, source: ImageSource, opts: AblationOptions = AblationOptions(),
                  run: Run | None = None) -> AblationResult:
    """Ablate the k most local / most global / random heads of ``vit``'s chosen blocks (module docstring)."""
    run = run or Run()
    require_vit(vit, "head ablation")
    # before any forward pass: accuracy and KL are read from the head; labels become head indices (by name)
    match = class_match(vit, source, "head ablation (its accuracy and KL of the output)")
    depth = len(vit.model.blocks)
    blocks = list(opts.blocks) if opts.blocks else list(range(max(1, depth // 2)))
    probs_taps(vit, blocks)
    if opts.draws < 1:
        raise VitlabError(f"draws must be at least 1, not {opts.draws}")
    indices = select(source, opts.images, opts.shuffle)
    # every image pass says which of all passes it is, what it runs and its batch count (issue 51)
    heads_per_block = vit.model.blocks[blocks[0]].attn.num_heads
    n_passes = 3 + ("mean" in opts.modes) + len(_plan(np.zeros((len(blocks), heads_per_block)), blocks, opts, run))
    counter = iter(range(n_passes))

    def part(words: str) -> Run:
        return run.with_progress(passes(run.progress, next(counter), n_passes, words))

    distance = _distances(vit, source, indices, blocks, opts, part(f"{vit.label}: attention distances of its heads"))
    plan = _plan(distance, blocks, opts, run)
    layers = [f"blocks.{i}.resid_post" for i in range(depth)]
    other_layers = list(opts.other_taps) if opts.other_taps else default_lower_taps(other)
    taps_mod.check_taps(other.model, other_layers)
    gram = GramStatistic(tuple(layers))
    intact, labels = _pass(vit, source, indices, opts, gram, part(f"{vit.label}: intact"))
    other_pass, _ = _pass(other, source, indices, opts, GramStatistic(tuple(other_layers)), part(other.label))
    top1 = intact.logp.argmax(1)
    usable = match.usable and None not in labels
    truth = match.to_head(labels) if usable else top1
    means = None  # made at the first mean-ablated set: the zero-ablated sets (first in the plan) come sooner
    heads_total = len(blocks) * distance.shape[1]
    p0 = np.exp(intact.logp)
    n = len(top1)
    order = np.argsort(distance.ravel(), kind="stable")
    names = [(f"b{blocks[i // distance.shape[1]]}.h{i % distance.shape[1]}", float(distance.ravel()[i]))
             for i in order]
    boot = np.random.default_rng(run.seed).integers(0, n, size=(max(1, run.bootstrap), n))
    intact_other = _cka_rows(intact, other_pass.centred, layers, other_layers, run).mean(1)

    def result(done: int) -> AblationResult:
        """The result over the first ``done`` ablated sets of the plan (every set's values are its own pass's)."""
        return AblationResult(vit.label, other.label, blocks, opts.scope, names, layers, other_layers, plan[:done],
                              top1 == truth, intact_other,
                              "top-1 accuracy" if usable else "agreement with the intact model's top-1", n, boot,
                              run.info, accuracy_note="" if usable else match.reason or "some images have no label")

    for i, cond in enumerate(plan):
        if cond["mode"] == "mean" and means is None:
            means = head_means(vit, source, indices, blocks, opts.batch_size,
                               part(f"{vit.label}: mean output of each head"))
        draw = f" (draw {cond['draw'] + 1} of {opts.draws})" if cond["selection"] == "random" and opts.draws > 1 else ""
        words = (f"{cond['mode']} {cond['selection']} k={cond['k']}{draw}: {heads_total - len(cond['heads'])} of "
                 f"{heads_total} heads remain (ablation {i + 1} of {len(plan)})")
        with ablated(vit, HeadAblation(cond["heads"], cond["mode"]), means) as view:
            after, _ = _pass(view, source, indices, opts, gram, part(words))
        cond.update(correct=after.logp.argmax(1) == truth, kl=(p0 * (intact.logp - after.logp)).sum(1),
                    cka_intact=np.diag(_cka_rows(after, intact.centred, layers, layers, run)),
                    cka_other=_cka_rows(after, other_pass.centred, layers, other_layers, run).mean(1))
        run.estimate(lambda i=i: result(i + 1), i + 1, len(plan))  # the sets so far (the app draws them)
    if run.progress:
        run.progress(len(plan), len(plan), "done")
    return result(len(plan))
