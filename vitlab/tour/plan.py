"""One pass per model and image set for the whole tour (issue 48).

Each check streams its own statistics (``vitlab.tour.measure``); run one after the other, they sent the same models
over the same images again and again (on the zoo at 64 images in batches of 16: 52 batches through zoo:vit-cls where
one pass is 4). Before the checks run, the tour now asks each of them what it will stream (``measure.NEEDS``),
gathers every statistic of one model on one image set, and streams them together: each model goes over each image
set once (the tour's images, the probe pool), every statistic formed in that one forward. The per-batch statistics
land under their own cache keys (and in the run's :class:`~vitlab.engine.memo.MemoStore`, for ``--no-cache``), so
each check's own stream then finds them without a forward, and so does a later check or an app page.

Fig 6's receptive fields are not planned: each is the gradient of one point with respect to the input, a backward
pass per image and point (``analyses.receptive.field_maps``), which an inference pass cannot share.

A check whose needs cannot be gathered (no ViT among the models, a model that cannot be loaded) is left out of the
plan and meets the same error itself, as before, in its own "can't tell" row; a pass that fails is said in its record
and its checks compute what is missing themselves: planning never changes what a check answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.run import Statistic, stream
from ..errors import VitlabError
from ..inputs.cache import make_key
from ..inputs.data import plan_batches
from .measure import IMAGE_SETS, NEEDS, Models, Need, image_set


@dataclass
class Pass:
    """One stream: ``models`` over one image set, each with every statistic any check needs on it."""

    images: str  # a key of measure.IMAGE_SETS
    indices: list[int]
    batch_size: int
    min_batch: int
    models: list = field(default_factory=list)  # LoadedModel, each once
    statistics: list[list[Statistic]] = field(default_factory=list)  # per model
    checks: list[str] = field(default_factory=list)  # claim keys served


class _Alias(Statistic):
    """``inner`` under another name in one stream (two statistics of one name on one model, e.g. the default Grams
    for CKA and the lower layers' Grams for Fig 5, would share the stream's per-model dict); its cache key stays
    ``inner``'s, so the check that streams ``inner`` itself finds the entry."""

    def __init__(self, inner: Statistic, name: str):
        self.inner, self.name, self.version = inner, name, inner.version

    @property
    def streams(self) -> bool:
        return self.inner.streams

    @property
    def needs_images(self) -> bool:
        return self.inner.needs_images

    def params(self, loaded):
        return self.inner.params(loaded)

    def taps(self, loaded):
        return self.inner.taps(loaded)

    def compute(self, acts, loaded, batch):
        return self.inner.compute(acts, loaded, batch)

    def reduce_tap(self, tap, act, loaded):
        return self.inner.reduce_tap(tap, act, loaded)

    def finish(self, parts, loaded, batch):
        return self.inner.finish(parts, loaded, batch)

    def layout(self, loaded, batch):
        return self.inner.layout(loaded, batch)

    def cache_key(self, loaded, batch, precision: str = "float32") -> str:
        return self.inner.cache_key(loaded, batch, precision)


def plan(keys: list[str], ms: Models, source, opts) -> tuple[list[Pass], dict[str, str]]:
    """The passes that serve checks ``keys``, and {check: why it is not planned} for checks whose needs failed."""
    groups: dict[tuple, list[tuple[str, Need]]] = {}
    left: dict[str, str] = {}
    for key in keys:
        if key not in NEEDS:
            continue
        try:
            needs = NEEDS[key](ms, source, opts)
        except VitlabError as e:
            left[key] = str(e)
            continue
        for need in needs:
            indices, batch_size = image_set(need.images, source, opts)
            # statistics with another least batch share the pass only where they get the same batches (a short
            # last chunk joins the one before it for min_batch 4, not for 1); otherwise each keeps its own pass
            layout = tuple(tuple(b.indices) for b in plan_batches(source, indices, batch_size, max(1, need.min_batch)))
            groups.setdefault((need.images, batch_size, layout), []).append((key, need))
    ms.used.clear()  # asking for the needs reached for models; Check.models names only what a check's measure used
    passes = []
    for (images, batch_size, layout), items in groups.items():
        p = Pass(images, [i for chunk in layout for i in chunk], batch_size, max(n.min_batch for _, n in items))
        seen: dict[str, set] = {}
        for key, need in items:
            if key not in p.checks:
                p.checks.append(key)
            m = need.model
            if m.label not in seen:
                seen[m.label] = set()
                p.models.append(m)
                p.statistics.append([])
            k = [x.label for x in p.models].index(m.label)
            s = need.statistic
            ident = make_key(s.name, s.version, s.params(m))
            if ident in seen[m.label]:
                continue
            seen[m.label].add(ident)
            names = {x.name for x in p.statistics[k]}
            p.statistics[k].append(s if s.name not in names else _Alias(s, f"{s.name}#{len(p.statistics[k])}"))
        passes.append(p)
    return passes, left


def _said(progress, what: str):
    """``progress`` with its text prefixed by ``what`` ("pass 1 of 3 over the tour's images (zoo:vit-cls): batch 2 of
    4"): the bar follows the batches, the words say which pass they belong to. None without a progress."""
    if progress is None:
        return None
    return lambda done, total, text: progress(done, total, f"{what}: {text}")


def run_passes(passes: list[Pass], source, run) -> list[dict]:
    """Stream each pass (its statistics land in ``run.store``); one record per pass for run.json: the image set,
    its images and batch size, the checks it serves, per model the statistics and the batches it ran forward."""
    records = []
    for i, p in enumerate(passes):
        before = dict(run.info.forward_passes)
        error = None
        said = _said(run.progress, f"pass {i + 1} of {len(passes)} over {IMAGE_SETS[p.images]} "
                                   f"({', '.join(m.label for m in p.models)})")
        try:
            for _ in stream(p.models, source, p.indices, p.batch_size, p.statistics, run.with_progress(said),
                            min_batch=p.min_batch):
                pass
        except VitlabError as e:  # its checks meet it again themselves, each in its own "can't tell" row
            error = str(e)
        records.append({
            "images": IMAGE_SETS[p.images], "count": len(p.indices), "batch_size": p.batch_size,
            "checks": list(p.checks),
            "models": {m.label: {"statistics": sorted({getattr(s, "inner", s).name for s in stats}),
                                 "forward_batches": run.info.forward_passes.get(m.label, 0) - before.get(m.label, 0)}
                       for m, stats in zip(p.models, p.statistics)},
            **({"error": error} if error else {})})
    return records
