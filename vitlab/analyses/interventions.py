"""Reversible model surgery: removing a block's skip connection (Raghu et al. 2021, Sec. 6, Fig 8).

The paper *retrained* ViTs without the skip of one block and found that representations before and after that
block stop being similar. :func:`remove_skip` is a **post-hoc ablation** of a trained model instead: block i computes
``x = f(x)`` where it computed ``x = x + f(x)``, for its attention (or token-mixing) sublayer, its MLP
(channel-mixing) sublayer, or both. Retrained models (``zoo:vit-cls-noskip``) are compared side by side in
:func:`retrained_comparison`.

The surgery is an instance attribute ``block.forward`` removed in ``finally`` (the class's forward is untouched), so
the model is bit-identical afterwards; hooks still fire while it is on. The model's lock is held throughout.
An intervened model must never share cache entries with the original: :func:`intervened` yields a
:class:`LoadedModel` view whose fingerprint includes the intervention.

    removal, loaded ─intervened─► LoadedModel (same module, patched; new fingerprint) ─run.stream─► statistics
"""

from __future__ import annotations

import dataclasses
import hashlib
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..engine.context import Run, RunInfo
from ..engine.run import CKAOptions, CKAReport, GramStatistic, LogProbStatistic, cka, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import Batch, ImageSource, select
from ..inputs.models import LoadedModel, load
from ..options import DataOptions, option
from ..progress import Progress
from ..stats import cka as cka_mod
from .readout import class_match

WHICH = ("attn", "mlp", "both")


@dataclass(frozen=True)
class SkipRemoval:
    """Which skip connection(s) of which block to remove ('attn' = token mixing for a Mixer, 'mlp' = channel)."""

    block: int
    which: str = "both"

    @property
    def label(self) -> str:
        """The short name a model and the CSV carry ("no-skip[1.attn]")."""
        return f"no-skip[{self.block}.{self.which}]"

    @property
    def words(self) -> str:
        """The removal for people, its block numbered as the model names it: "block 1's attention skip"."""
        what = {"attn": "attention skip", "mlp": "MLP skip", "both": "attention and MLP skips"}.get(
            self.which, f"{self.which} skip")
        return f"block {self.block}'s {what}"


def _vit_forward(drop_attn: bool, drop_mlp: bool):
    # mirrors timm.models.vision_transformer.Block.forward (timm 1.0.x) with the chosen additions removed
    def forward(self, x, *args, **kwargs):
        a = self.drop_path1(self.ls1(self.attn(self.norm1(x), *args, **kwargs)))
        x = a if drop_attn else x + a
        m = self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return m if drop_mlp else x + m
    return forward


def _mixer_forward(drop_attn: bool, drop_mlp: bool):
    # mirrors timm.models.mlp_mixer.MixerBlock.forward
    def forward(self, x):
        a = self.drop_path(self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2))
        x = a if drop_attn else x + a
        m = self.drop_path(self.mlp_channels(self.norm2(x)))
        return m if drop_mlp else x + m
    return forward


def _patched_forward(model, removal: SkipRemoval):
    if removal.which not in WHICH:
        raise VitlabError(f"skip to remove must be one of {', '.join(WHICH)}, not '{removal.which}'")
    fam = taps_mod.family(model)
    if fam not in ("vit", "mixer"):
        raise VitlabError(f"removing a skip connection is supported for ViT and Mixer blocks, not {fam} models")
    n = len(model.blocks)
    if not 0 <= removal.block < n:
        raise VitlabError(f"block {removal.block} does not exist: {type(model).__name__} has blocks 0..{n - 1}")
    blk = model.blocks[removal.block]
    from timm.models.mlp_mixer import MixerBlock
    from timm.models.vision_transformer import Block

    expected = Block if fam == "vit" else MixerBlock
    if type(blk).forward is not expected.forward:
        raise VitlabError(f"block {removal.block} is a {type(blk).__name__} with its own forward; skip removal "
                          f"supports timm's {expected.__name__} only")
    drop_attn, drop_mlp = removal.which in ("attn", "both"), removal.which in ("mlp", "both")
    make = _vit_forward if fam == "vit" else _mixer_forward
    return blk, types.MethodType(make(drop_attn, drop_mlp), blk)


@contextmanager
def remove_skip(model, removal: SkipRemoval, progress: Progress | None = None) -> Iterator[None]:
    """Inside the ``with``, block ``removal.block`` of ``model`` runs without the chosen skip connection(s).

    The model's lock is held throughout; while another run holds it, ``progress`` hears that this one waits."""
    blk, forward = _patched_forward(model, removal)
    with taps_mod.holding(model, progress, f"model {type(model).__name__}"):
        if "forward" in vars(blk):
            raise VitlabError(f"block {removal.block} is already being intervened on")
        blk.forward = forward
        try:
            yield
        finally:
            del blk.forward


def intervened_fingerprint(loaded: LoadedModel, removal: SkipRemoval) -> str:
    return hashlib.sha256(f"{loaded.fingerprint}|{removal}".encode()).hexdigest()[:20]


@contextmanager
def intervened(loaded: LoadedModel, removal: SkipRemoval, progress: Progress | None = None
               ) -> Iterator[LoadedModel]:
    """A view of ``loaded`` with the skip removed: same module, its own fingerprint and label (cache-safe)."""
    with remove_skip(loaded.model, removal, progress):
        yield dataclasses.replace(loaded, fingerprint=intervened_fingerprint(loaded, removal),
                                  display=f"{loaded.label} {removal.label}")


def _pass(loaded: LoadedModel, source: ImageSource, indices, batch_size, gram: GramStatistic, run: Run
          ) -> tuple[list[np.ndarray], np.ndarray, list]:
    """Grams (per batch), predictions and labels of one model over ``indices`` (this rank's batches)."""
    grams, preds, labels = [], [], []
    lp = LogProbStatistic()
    for batch, found in stream([loaded], source, indices, batch_size, [[gram, lp]], run):
        grams.append(found[0][gram.name]["grams"])
        preds.append(found[0][lp.name]["logp"].argmax(-1))
        labels += batch.labels if batch.labels is not None else [None] * len(batch.ids)
    if not grams:
        raise VitlabError("no batch of 4 or more readable images: the CKA maps need at least 4 images"
                          + (" (on this rank: use fewer processes than batches)" if run.shard[1] > 1 else ""))
    return grams, np.concatenate(preds), labels


def _cka_acc(ga: list, gb: list | None, layers_a, layers_b) -> cka_mod.MinibatchCKA:
    acc = cka_mod.MinibatchCKA(layers_a, layers_b)
    for i, a in enumerate(ga):
        acc.update(cka_mod.centred(a), None if gb is None else cka_mod.centred(gb[i]))
    return acc


def _cka_from_grams(ga: list, gb: list | None, layers_a, layers_b, name_a, name_b) -> cka_mod.CKAResult:
    return _cka_acc(ga, gb, layers_a, layers_b).compute(name_a, name_b)


class PredictionCounts:
    """Integer sums over images: images, top-1 right before, right after, before == after (Fig 8's accuracies).

    Every state entry is a sum, so ranks combine by adding (``vitlab.dist.all_reduce_accumulators``).
    """

    state_is_sum = True
    FIELDS = ("images", "right_before", "right_after", "agree")

    def __init__(self):
        self.counts = np.zeros(len(self.FIELDS), dtype=np.int64)

    def update(self, before: np.ndarray, after: np.ndarray | None = None, labels=None) -> PredictionCounts:
        """Add one set of predictions (``after`` defaults to ``before``; ``labels`` None: no accuracy counts)."""
        after = before if after is None else after
        y = None if labels is None else np.asarray(labels)
        self.counts += np.array([len(before), 0 if y is None else int((before == y).sum()),
                                 0 if y is None else int((after == y).sum()), int((before == after).sum())])
        return self

    def merge(self, other: PredictionCounts) -> PredictionCounts:
        self.counts = self.counts + other.counts
        return self

    def state(self) -> dict[str, np.ndarray]:
        return {"counts": self.counts.copy()}

    def load_state(self, state: dict[str, np.ndarray]) -> PredictionCounts:
        self.counts = np.asarray(state["counts"], dtype=np.int64).copy()
        return self

    def _get(self, name: str) -> int:
        return int(self.counts[self.FIELDS.index(name)])

    images = property(lambda self: self._get("images"))
    right_before = property(lambda self: self._get("right_before"))
    right_after = property(lambda self: self._get("right_after"))
    agree = property(lambda self: self._get("agree"))




@dataclass
class SkipRemovalResult:
    """A post-hoc skip ablation: self-CKA maps before and after, their cross map, accuracy/agreement before/after."""

    model: str
    removal: SkipRemoval
    before: cka_mod.CKAResult  # original with itself
    after: cka_mod.CKAResult  # ablated with itself
    cross: cka_mod.CKAResult  # original (a) vs ablated (b)
    accuracy_before: float | None
    accuracy_after: float | None
    agreement: float  # fraction of images whose top-1 class is unchanged
    images: int
    info: RunInfo
    kind: str = "post-hoc ablation (the trained model with the skip removed, not a model retrained without it)"
    accuracy_note: str = ""  # why there is no accuracy ('' when there is)

    def to_frame(self):
        """CKA rows (model_a, layer_a, model_b, layer_b, cka) with ``map`` = before | after | before_vs_after."""
        import pandas as pd

        parts = []
        for name, res in (("before", self.before), ("after", self.after), ("before_vs_after", self.cross)):
            f = res.to_frame()
            f.insert(0, "map", name)
            parts.append(f)
        return pd.concat(parts, ignore_index=True)

    def metrics_frame(self):
        """metric, before, after: top-1 accuracy (when the labels fit the model) and top-1 agreement."""
        import pandas as pd

        from ..stats.evidence import JACKKNIFE, interval_columns
        from .findings import rate_over_images

        rows = [{"metric": "top-1 agreement with the unmodified model", "before": 1.0, "after": self.agreement}]
        if self.accuracy_before is not None:
            rows.insert(0, {"metric": "top-1 accuracy", "before": self.accuracy_before, "after": self.accuracy_after})
        for row in rows:  # each a share of the images: the t interval of a mean of 0/1 outcomes, cut to [0, 1]
            for when in ("before", "after"):
                e = rate_over_images(row[when], self.images)
                exact = row["metric"].startswith("top-1 agreement") and when == "before"  # 1 by definition
                row[f"{when}_lo"], row[f"{when}_hi"] = (row[when], row[when]) if exact else (e.lo, e.hi)
            row.update(interval_columns("images", self.images, JACKKNIFE))
        frame = pd.DataFrame(rows)
        frame.insert(0, "intervention", f"{self.removal.label}: {self.kind}")
        return frame

    def finding(self):
        """Fig 8 (post hoc) on this model: top-1 accuracy before and after the removal and the top-1 agreement
        with the unmodified model, each with its 95 % interval over images."""
        from .findings import Finding, interval_basis, rate_over_images, say

        agree = say(rate_over_images(self.agreement, self.images))
        text = f"{self.model} with {self.removal.words} removed (post hoc, not retrained): "
        if self.accuracy_before is not None:
            text += (f"top-1 accuracy {say(rate_over_images(self.accuracy_before, self.images))} before, "
                     f"{say(rate_over_images(self.accuracy_after, self.images))} after; ")
        elif self.accuracy_note:
            text += f"no accuracy ({self.accuracy_note}); "
        text += (f"top-1 agreement with the unmodified model {agree}; "
                 f"{interval_basis('images', self.images)} (each image right or wrong).")
        return Finding(ours=text)


@dataclass(frozen=True)
class RemoveSkipOptions(DataOptions):
    """Options of the skip ablation (``vitlab remove-skip``)."""

    block: int = option(0, "block index (0-based)", required=True)
    which: str = option("both", "attention (token-mixing) skip, MLP (channel-mixing) skip, or both", choices=WHICH)
    retrained: str | None = option(None, "also compare with a model retrained without the skip, e.g. "
                                   "zoo:vit-cls-noskip", metavar="SPEC")

    @property
    def removal(self) -> SkipRemoval:
        return SkipRemoval(self.block, self.which)


def skip_removal(loaded: LoadedModel, source: ImageSource, opts: RemoveSkipOptions = RemoveSkipOptions(),
                 run: Run | None = None, *, gram: GramStatistic | None = None) -> SkipRemovalResult:
    """Remove a skip of block ``opts.block`` post hoc; CKA maps and accuracy before and after (cf. Fig 8).

    Accuracy needs labels whose classes match the model's outputs; otherwise only top-1 agreement is reported.
    ``run.shard`` and ``run.reduce`` (``vitlab.dist``: CKA states and counts summed) run it under torchrun.
    """
    removal, run = opts.removal, run or Run()
    _patched_forward(loaded.model, removal)  # validate before any forward pass
    # agreement and accuracy are read from the head: a headless model is refused here; labels become head indices
    match = class_match(loaded, source, "the skip removal (its accuracy and top-1 agreement)")
    gram = gram or GramStatistic()
    indices = select(source, opts.images, opts.shuffle)
    g0, p0, labels = _pass(loaded, source, indices, opts.batch_size, gram, run)
    with intervened(loaded, removal, run.progress) as ablated:
        g1, p1, _ = _pass(ablated, source, indices, opts.batch_size, gram, run)
    layers = gram.taps(loaded)
    name0, name1 = loaded.label, ablated.label
    usable = match.usable and None not in labels
    maps = [_cka_acc(g0, None, layers, layers), _cka_acc(g1, None, layers, layers), _cka_acc(g0, g1, layers, layers)]
    counts = PredictionCounts().update(p0, p1, match.to_head(labels) if usable else None)
    run.reduce_accumulators([*maps, counts])
    acc0 = acc1 = None
    if usable:
        acc0, acc1 = counts.right_before / counts.images, counts.right_after / counts.images
    return SkipRemovalResult(
        loaded.label, removal, maps[0].compute(name0, name0), maps[1].compute(name1, name1),
        maps[2].compute(name0, name1), acc0, acc1, counts.agree / counts.images, counts.images, run.info,
        accuracy_note="" if usable else match.reason or "some images have no label")


@dataclass
class RetrainedComparison:
    """A normal and a retrained-without-skip model side by side: self-CKA maps and accuracies (Fig 8 proper)."""

    report: CKAReport
    accuracy: dict[str, float | None]

    def to_frame(self):
        """Self-CKA rows of each model (model_a == model_b)."""
        frame = self.report.to_frame()
        return frame[frame["model_a"] == frame["model_b"]].reset_index(drop=True)

    def metrics_frame(self):
        """model, top-1 accuracy and its 95 % interval over the images (lo, hi; None without usable labels)."""
        import pandas as pd

        from .findings import rate_over_images

        rows = []
        for m, a in self.accuracy.items():
            e = rate_over_images(a, self.report.images) if a is not None else None
            rows.append({"model": m, "top-1 accuracy": a, "lo": None if e is None else e.lo,
                         "hi": None if e is None else e.hi, "images": self.report.images})
        return pd.DataFrame(rows)


def accuracy(loaded: LoadedModel, source: ImageSource, indices: Sequence[int], batch_size: int = 64,
             run: Run | None = None) -> float | None:
    """Top-1 accuracy over ``indices`` (None when the source's labels cannot be read as the model's classes:
    :func:`vitlab.analyses.readout.class_match`; VitlabError for a model with no head)."""
    match = class_match(loaded, source, "top-1 accuracy")
    if not match.usable:
        return None
    run = run or Run()
    lp = LogProbStatistic()
    counts = PredictionCounts()
    for batch, found in stream([loaded], source, indices, batch_size, [[lp]], run):
        counts.update(found[0][lp.name]["logp"].argmax(-1), labels=match.to_head(batch.labels))
    run.reduce_accumulators(counts)
    return counts.right_before / counts.images if counts.images else None


def retrained_comparison(normal: LoadedModel, retrained: LoadedModel, source: ImageSource,
                         opts: DataOptions = DataOptions(), run: Run | None = None) -> RetrainedComparison:
    """Self-CKA of a normal model and of one retrained without a skip (e.g. zoo:vit-cls vs zoo:vit-cls-noskip)."""
    run = run or Run()
    report = cka([normal, retrained], source, CKAOptions(opts.images, opts.batch_size, opts.shuffle), run)
    indices = select(source, opts.images, opts.shuffle)
    return RetrainedComparison(report, {m.label: accuracy(m, source, indices, opts.batch_size, run)
                                        for m in (normal, retrained)})


@dataclass
class SkipAblation:
    """What ``vitlab remove-skip`` reports: the post-hoc ablation and, when asked, the retrained comparison."""

    removal: SkipRemovalResult
    retrained: RetrainedComparison | None = None
    retrained_model: LoadedModel | None = None

    @property
    def info(self) -> RunInfo:
        return self.removal.info

    @property
    def extra_models(self) -> list[LoadedModel]:
        return [self.retrained_model] if self.retrained_model is not None else []

    def headline(self) -> list[str]:
        metrics = self.removal.metrics_frame()
        return [metrics[["metric", "before", "after"]].to_string(index=False), self.removal.kind]


def skip_ablation(loaded: LoadedModel, source: ImageSource, opts: RemoveSkipOptions = RemoveSkipOptions(),
                  run: Run | None = None) -> SkipAblation:
    """The post-hoc ablation of ``opts.removal`` and, with ``opts.retrained``, the model retrained without it."""
    run = run or Run()
    removal = skip_removal(loaded, source, opts, run)
    if not opts.retrained:
        return SkipAblation(removal)
    other = load(opts.retrained, loaded.device)
    other.display = opts.retrained
    return SkipAblation(removal, retrained_comparison(loaded, other, source, opts, run), other)
