"""Vision logit lens: the class read out of every block through the model's own final norm and head.

The logit lens (nostalgebraist 2020, for language models; ViT-Explainer reads a ViT this way) decodes an
intermediate representation with the network's own output layers, untrained for that depth. For a block output
h_l (shapes: B batch, N tokens, D width, C channels, h/w feature map, K classes, L blocks, T batches):

    r_l = forward_head(norm(h_l))                          ViT, MLP-Mixer, ResNetV2 / BiT  (B, N, D) -> (B, K)
    r_l = forward_head(h_l)        only where C = the head's width    ResNet                (B, C, h, w) -> (B, K)

``forward_head`` is the model's own: pooling (the CLS token, or the mean of the spatial tokens for a GAP model, or
an attention pool), then ``fc_norm``, then ``head``. For a timm GAP ViT built with the default ``fc_norm``, ``norm``
is Identity and the LayerNorm comes after pooling, inside forward_head (FACTS.md): the lens applies exactly what the
model applies after its last block, so the last block's readout *is* the model's logits (checked per batch).

A ResNet's head takes the last stage's width only: blocks of narrower stages have no readout (no projection the
model does not have is invented); the result says so per block.

Per block: top-1 accuracy against the labels (where the head's classes are the data's) and agreement with the
model's own final prediction, each a ratio of per-batch counts with its 95 % jackknife-t interval over batches on
the logit scale of [0, 1] (``vitlab.stats.evidence``; below 4 batches no interval).

    acts ─LensStatistic─► per block predictions (L, B) ─batch_counts─► counts ─LensAccumulator─► LensResult ─► frame
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..charts.words import block_words, layer_in_words  # noqa: F401 - block_words: callers' old home
from ..engine.context import Run, RunInfo
from ..engine.run import Statistic, stream
from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.data import Batch, ImageSource, select
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from .readout import ClassMatch, class_match
from .reports import PerModel

NO_READOUT = -1  # a block's prediction where the head cannot read it


def block_taps(model) -> list[str]:
    """Every block's output tap, in network order: ``blocks.{i}.resid_post`` (ViT, Mixer), the block outputs of a
    CNN."""
    fam = taps_mod.family(model)
    if fam in ("vit", "mixer"):
        return [f"blocks.{i}.resid_post" for i in range(len(model.blocks))]
    return taps_mod.default_taps(model)


def head_width(model) -> int:
    """The width the model's head takes (timm's ``num_features``)."""
    return int(model.num_features)


def readout(model, x):
    """The model's own final norm and head applied to one block's output ``x``: (B, N, D) or (B, C, h, w) -> (B, K).

    Exactly what the model applies after its last block (timm's ``forward_features`` ends in ``norm``, then
    ``forward_head``); a plain ResNet has no final norm. Raises for a width the head does not take."""
    width = x.shape[-1] if x.dim() == 3 else x.shape[1]
    if width != head_width(model):
        raise VitlabError(f"a block of width {width} has no readout: the head of {type(model).__name__} takes "
                          f"{head_width(model)}")
    if taps_mod.family(model) == "resnet":
        return model.forward_head(x)
    return model.forward_head(model.norm(x))


def no_readout_reason(family: str, width: int, head: int) -> str:
    """Why a block has no readout, in words ('' when it has one)."""
    if width == head:
        return ""
    kind = "channels" if family in ("resnet", "resnetv2") else "features"
    return (f"{width} {kind}: the head takes {head} (the last stage's width) and the model has no projection from "
            "this stage, so the lens does not invent one")


@dataclass(frozen=True)
class LensStatistic(Statistic):
    """Per batch: every block's readout prediction (L, B), the model's own prediction (B,), every block's width,
    the head's classes, and max |r_last - logits| (the lens's exactness, per batch)."""

    name: str = "logit-lens"
    version: int = 1

    def params(self, loaded: LoadedModel) -> dict:
        return {"taps": block_taps(loaded.model)}

    def taps(self, loaded: LoadedModel) -> list[str]:
        return block_taps(loaded.model)

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        model, logits = loaded.model, acts["logits"]
        head = head_width(model)
        preds, widths, last = [], [], None
        with torch.inference_mode():  # the captured tensors are inference tensors
            for tap in block_taps(model):
                x = acts[tap]
                width = x.shape[-1] if x.dim() == 3 else x.shape[1]
                widths.append(width)
                if width != head:
                    preds.append(np.full(logits.shape[0], NO_READOUT, dtype=np.int64))
                    continue
                last = readout(model, x).float()
                preds.append(last.argmax(-1).cpu().numpy().astype(np.int64))
        err = float((last - logits.float()).abs().max().cpu()) if last is not None else np.nan
        return {"pred": np.stack(preds), "final": logits.argmax(-1).cpu().numpy().astype(np.int64),
                "width": np.array(widths, dtype=np.int64), "classes": np.array([logits.shape[-1]]),
                "last_err": np.array([err])}


def batch_counts(pred: np.ndarray, final: np.ndarray, labels: Sequence[int] | None, classes: int) -> dict:
    """One batch's counts: per block (L,) correct readouts and readouts agreeing with the final prediction; the
    images; and per class (``classes``,) the labelled images (for the chance level). No labels: correct is NaN."""
    pred, final = np.asarray(pred), np.asarray(final)
    n = pred.shape[1]
    agree = (pred == final[None]).sum(1).astype(np.float64)
    if labels is None or any(y is None for y in labels):
        return {"correct": np.full(pred.shape[0], np.nan), "agree": agree, "n": n,
                "per_class": np.zeros(classes)}
    y = np.asarray(labels, dtype=np.int64)
    return {"correct": (pred == y[None]).sum(1).astype(np.float64), "agree": agree, "n": n,
            "per_class": np.bincount(y, minlength=classes)[:classes].astype(np.float64)}


class LensAccumulator:
    """Every batch's counts, keyed by the batch's global number (so order, shards and merges do not matter, and the
    jackknife over batches sees a single process's batches in one order)."""

    def __init__(self, layers: Sequence[str]):
        self.layers = list(layers)
        self.rows: dict[int, dict] = {}

    def update(self, counts: dict, key: int) -> LensAccumulator:
        if len(counts["agree"]) != len(self.layers):
            raise VitlabError(f"logit-lens counts of {len(counts['agree'])} blocks given to an accumulator of "
                              f"{len(self.layers)}")
        self.rows[int(key)] = {k: np.array(v, dtype=np.float64) for k, v in counts.items()}
        return self

    def merge(self, other: LensAccumulator) -> LensAccumulator:
        if other.layers != self.layers:
            raise VitlabError("cannot merge logit-lens accumulators of different blocks")
        for key, counts in other.rows.items():
            self.update(counts, key)
        return self

    def keyed_terms(self) -> list:
        return sorted(self.rows.items())

    def load_keyed_terms(self, keyed: list) -> LensAccumulator:
        self.rows = {}
        for key, counts in keyed:
            self.update(counts, key)
        return self

    def state(self) -> dict[str, np.ndarray | None]:
        """The totals over batches (fixed shapes, None before any batch): what ``vitlab.engine.dist`` compares across
        ranks. The per-batch terms, which the intervals need, travel as :meth:`keyed_terms` (as
        ``similarity.PairAccumulator``'s do)."""
        if not self.rows:
            return {k: None for k in ("correct", "agree", "n", "per_class")}
        return {k: np.sum([np.atleast_1d(r[k]) for r in self.rows.values()], axis=0)
                for k in ("correct", "agree", "n", "per_class")}

    def compute(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(T, L) correct, (T, L) agree, (T,) images, (K,) labelled images per class, in batch order."""
        if not self.rows:
            raise VitlabError("no batch was accumulated: the logit lens needs at least one readable image")
        keys = sorted(self.rows)
        c, a, n = (np.stack([self.rows[b][k] for b in keys]) for k in ("correct", "agree", "n"))
        return c, a, n, self.state()["per_class"]


def rate(counts: np.ndarray, n: np.ndarray):
    """Σ counts / Σ n over batches with its jackknife-t interval over batches (logit scale of [0, 1]): an
    :class:`~vitlab.stats.evidence.Estimate`; NaN counts give an undefined value."""
    from ..stats import evidence as ev

    counts, n = np.asarray(counts, dtype=np.float64), np.asarray(n, dtype=np.float64)
    value = counts.sum() / n.sum()
    if not np.isfinite(value):
        return ev.Estimate(float("nan"), np.nan, np.nan, "batches", len(n), ev.JACKKNIFE)
    loo = ev.ratio_replicates(counts, n, ev.jackknife_indices(len(n)))
    return ev.Estimate.jackknife(value, loo, "batches", bounds=(0.0, 1.0))


# what the CSV's interval_method says (issue 47): the scale of the interval and the fallback where a rate, or a rate
# with one batch left out, is 0 or 1 (its logit infinite: a block right on every image of every batch reads [1, 1])
LENS_INTERVAL = ("jackknife t on the logit scale of [0, 1]; where the rate or a leave-one-batch-out rate is 0 or 1, "
                 "the t interval of the rate itself, clipped to [0, 1]")


def interval_scale(e) -> str:
    """Which of :data:`LENS_INTERVAL`'s two intervals a rate's ``Estimate`` has: 'logit', 'rate' (0 or 1 in it or
    a leave-one-batch-out rate: the rate's own t interval, clipped to [0, 1]), or '' (no interval)."""
    if not (np.isfinite(e.lo) and np.isfinite(e.hi)):
        return ""
    return "logit" if e.note.startswith("on the logit scale") else "rate"


@dataclass
class LensResult:
    """One model's logit lens: per block (L) and batch (T) the counts behind accuracy and agreement."""

    model: str
    family: str
    layers: list[str]
    widths: list[int]  # (L,) each block's width
    head: int  # the width the head takes
    classes: int  # the head's classes K
    correct: np.ndarray  # (T, L) correct readouts (NaN without labels, or a block without readout)
    agree: np.ndarray  # (T, L) readouts equal to the model's own prediction
    counts: np.ndarray  # (T,) images per batch
    per_class: np.ndarray  # (K,) labelled images per class
    last_err: float  # max |r_last - logits| over every batch
    accuracy_note: str = ""  # why there is no accuracy ('' when there is)
    warnings: list[str] = field(default_factory=list)

    @property
    def images(self) -> int:
        return int(self.counts.sum())

    @property
    def batches(self) -> int:
        return len(self.counts)

    def reasons(self) -> list[str]:
        """Per block: why it has no readout ('' when it has one)."""
        return [no_readout_reason(self.family, w, self.head) for w in self.widths]

    def chance(self) -> float:
        """The most common class's share of the labelled images: what a guess that ignores the image scores at best
        (NaN without labels)."""
        total = self.per_class.sum()
        return float(self.per_class.max() / total) if total > 0 and not self.accuracy_note else float("nan")

    def accuracy(self, i: int):
        """Block ``i``'s top-1 accuracy against the labels, with its interval over batches."""
        if self.accuracy_note or self.reasons()[i]:
            return rate(np.full(self.batches, np.nan), self.counts)
        return rate(self.correct[:, i], self.counts)

    def agreement(self, i: int):
        """Block ``i``'s agreement with the model's own final prediction, with its interval over batches."""
        if self.reasons()[i]:
            return rate(np.full(self.batches, np.nan), self.counts)
        return rate(self.agree[:, i], self.counts)

    def to_frame(self):
        """One row per block: model, layer, block_index, depth in (0, 1], width, readout (bool), accuracy and
        agreement with ``_lo``/``_hi`` (95 % intervals) and ``_scale`` (which interval: :func:`interval_scale`),
        chance, the interval's basis (:data:`LENS_INTERVAL`), and ``reason``/``note``."""
        import pandas as pd

        from ..stats.evidence import interval_columns

        rows, reasons = [], self.reasons()
        for i, layer in enumerate(self.layers):
            acc, agr = self.accuracy(i), self.agreement(i)
            rows.append({"model": self.model, "layer": layer, "block_index": i, "depth": (i + 1) / len(self.layers),
                         "width": self.widths[i], "readout": not reasons[i],
                         "accuracy": acc.value, "accuracy_lo": acc.lo, "accuracy_hi": acc.hi,
                         "accuracy_scale": interval_scale(acc),
                         "agreement": agr.value, "agreement_lo": agr.lo, "agreement_hi": agr.hi,
                         "agreement_scale": interval_scale(agr),
                         "chance": self.chance(), "images": self.images,
                         **interval_columns("batches", self.batches, LENS_INTERVAL),
                         "reason": reasons[i] or (self.accuracy_note and f"no accuracy: {self.accuracy_note}")})
        return pd.DataFrame(rows)

    def first_above_chance(self) -> tuple[int | None, str]:
        """(index, words): the first readable block whose accuracy interval lies wholly above chance, or None with
        why (no labels, too few batches: no direction is stated)."""
        from ..stats.evidence import MIN_UNITS

        if self.accuracy_note:
            return None, f"no accuracy ({self.accuracy_note})"
        if self.batches < MIN_UNITS:
            return None, f"no interval ({self.batches} < {MIN_UNITS} batches): no block is said to be above chance"
        chance = self.chance()
        for i in range(len(self.layers)):
            e = self.accuracy(i)
            if np.isfinite(e.lo) and e.lo > chance:
                return i, f"first above chance ({chance:.2f}) at {block_words(self.layers, i)}"
        return None, f"no block's interval is above chance ({chance:.2f})"


def short_reason(family: str, width: int, head: int) -> str:
    """:func:`no_readout_reason` in a table cell's words: "16 channels; head takes 128" ('' with a readout)."""
    if width == head:
        return ""
    return f"{width} {'channels' if family in ('resnet', 'resnetv2') else 'features'}; head takes {head}"


@dataclass
class LensReport(PerModel):
    results: list[LensResult]
    info: RunInfo

    def words_frame(self):
        """One row per model and block, in words, for a page's table: the block counted as the chart's depth
        (:func:`block_words`) and the depth itself, accuracy and agreement as "0.844 [0.668, 0.935]" (or "—"), and
        why there is none in a few words (:func:`short_reason`; a model's missing accuracy is said in its finding). No tap name: the CSV (:meth:`LensResult.to_frame`)
        keeps the layers' own names and the full reasons."""
        import pandas as pd

        rows = []
        for r in self.results:
            reasons = r.reasons()
            for i, width in enumerate(r.widths):
                acc = r.accuracy(i).text() if not (reasons[i] or r.accuracy_note) else "—"
                agr = r.agreement(i).text() if not reasons[i] else "—"
                # the accuracy's note is the same for every block: said once, in the finding, not in every row
                why = short_reason(r.family, width, r.head) or ("no accuracy (said above)" if r.accuracy_note else "")
                rows.append({"model": r.model, "block": block_words(r.layers, i),
                             "depth": round((i + 1) / len(r.layers), 3), "accuracy [95 %]": acc,
                             "agreement [95 %]": agr, "no readout because": why})
        return pd.DataFrame(rows)

    def exactness(self) -> dict[str, float]:
        """Per model: max |last block's readout - the model's logits| over the images."""
        return {r.model: r.last_err for r in self.results}

    def headline(self) -> list[str]:
        t = self.results[0].batches
        lines = [f"logit lens over {self.images} images in {t} batch{'' if t == 1 else 'es'}"]
        for r in self.results:
            last = r.accuracy(len(r.layers) - 1)
            lines.append(f"{r.model}: last block readout = logits to {r.last_err:.1e}; accuracy at the last block "
                         f"{last.text()}; {r.first_above_chance()[1]}")
        return lines

    def finding(self, batch_size: int | None = None):
        """Per model, in short sentences: readout accuracy at the first and the last block that have a readout, with
        95 % intervals over batches, and the first block whose interval clears chance (none stated below 4 batches);
        blocks counted as the chart's depth (:func:`block_words`)."""
        from .findings import Finding, interval_basis, say

        parts = ["Top-1 accuracy when each block is read by the model's own final layers."]
        for r in self.results:
            readable = [i for i, why in enumerate(r.reasons()) if not why]
            if r.accuracy_note or not readable:
                parts.append(f"{r.model} has no accuracy ({r.accuracy_note or 'no block has a readout'}).")
                continue
            first, last = readable[0], readable[-1]
            skipped = len(r.layers) - len(readable)
            # the model's name, then no colon: "zoo:vit-cls:" would read as a Markdown icon code on a page
            parts.append(f"{r.model} scores {say(r.accuracy(first))} at {block_words(r.layers, first)} and "
                         f"{say(r.accuracy(last))} at {block_words(r.layers, last)}; {r.first_above_chance()[1]}.")
            if skipped:
                parts.append(f"It has {skipped} blocks narrower than its head, so they have no readout.")
        units = self.results[0].batches
        parts.append(f"Intervals: {interval_basis('batches', units, batch_size=batch_size)}.")
        return Finding(ours=" ".join(parts))


def untrained_note(loaded: LoadedModel) -> str | None:
    """Why the readout of a model with random weights (``NAME@random``, a zoo model's untrained twin) answers
    nothing about where a class appears, in words; None for trained weights."""
    weights = loaded.spec.weights
    if not weights.startswith(("random", "zoo@random")):
        return None
    return (f"{loaded.label} has random weights: its final norm and head are untrained, so each block's readout is "
            "what a random head picks. Its accuracy is at chance by construction and says nothing about where a "
            "class appears; its agreement with its own final prediction says only how early the random head's "
            "choice is fixed.")


@dataclass(frozen=True)
class LensOptions(DataOptions):
    """Options of the logit lens (``vitlab logit-lens``)."""

    images: int | None = option(256, "number of images (first N, or shuffled)", short="-n")
    batch_size: int = option(32, "images per batch", short="-b")


EXACT_TOL = 1e-5  # the last block's readout against the logits: float32 round-off of the same operations is ~1e-7


def logit_lens(models: Sequence[LoadedModel], source: ImageSource, opts: LensOptions = LensOptions(),
               run: Run | None = None) -> LensReport:
    """Every block's readout through each model's own final norm and head over the images (one cached pass):
    accuracy against the labels and agreement with the model's prediction per block, intervals over batches."""
    if not models:
        raise VitlabError("give at least one model")
    run = run or Run()
    # before any forward pass: a headless model has nothing to read out; labels become head indices (by name)
    matches = [class_match(m, source, "the logit lens") for m in models]
    stat = LensStatistic()
    accs = [LensAccumulator(block_taps(m.model)) for m in models]
    meta: list[dict] = [{} for _ in models]
    errs = [[] for _ in models]
    batches = stream(models, source, select(source, opts.images, opts.shuffle), opts.batch_size,
                     [[stat]] * len(models), run, min_batch=1)
    for done, (batch, found) in enumerate(batches, 1):
        for k, (acc, per_model) in enumerate(zip(accs, found)):
            s = per_model[stat.name]
            classes = int(np.asarray(s["classes"]).ravel()[0])
            meta[k] = {"widths": np.asarray(s["width"]).tolist(), "classes": classes}
            errs[k].append(float(np.asarray(s["last_err"]).ravel()[0]))
            acc.update(batch_counts(s["pred"], s["final"], _head_labels(matches[k], batch.labels), classes),
                       batch.index)
        # the readouts over the batches so far (the app draws them while the next batch runs)
        run.estimate(lambda: LensReport([_result(m, acc, meta[k], max(errs[k]), matches[k])
                                         for k, (m, acc) in enumerate(zip(models, accs))], run.info), done, batch.of)
    run.reduce_accumulators(accs)
    # every rank gathers (a rank without batches too): the widths and the largest error of all batches
    parts = run.gather_objects((meta, errs))
    meta = [next((p[0][k] for p in parts if p[0][k]), {}) for k in range(len(models))]
    errs = [max((x for p in parts for x in p[1][k]), default=np.nan) for k in range(len(models))]
    return LensReport([_result(m, acc, meta[k], errs[k], matches[k]) for k, (m, acc) in enumerate(zip(models, accs))],
                      run.info)


def _head_labels(match: ClassMatch, labels) -> np.ndarray | None:
    """A batch's labels as head indices; None (no accuracy) where they cannot be read as the head's classes."""
    if not match.usable or labels is None or any(y is None for y in labels):
        return None
    return match.to_head(labels)


def _result(m: LoadedModel, acc: LensAccumulator, meta: dict, err: float, match: ClassMatch) -> LensResult:
    correct, agree, counts, per_class = acc.compute()
    classes, family = meta["classes"], taps_mod.family(m.model)
    note = match.reason
    warnings = []
    if not err <= EXACT_TOL:
        warnings.append(f"{m.label}: the last block's readout differs from the model's logits by {err:.2e} "
                        f"(more than {EXACT_TOL:g}): its forward does more after the last block than norm and head")
    return LensResult(m.label, family, acc.layers, meta["widths"], head_width(m.model), classes, correct, agree,
                      counts, per_class[:classes] if len(per_class) else np.zeros(classes), err, note, warnings)
