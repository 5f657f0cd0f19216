"""The single-pass runner: models x images x requested statistics -> per-batch statistics, cached.

For each batch, every statistic of every model is looked up in the disk cache; only a model with a missing
statistic runs its forward pass, once, with the union of the taps its missing statistics need. Activations are
dropped after the batch (memory O(batch)); the per-batch statistics are what the caller folds into accumulators.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Iterator, Sequence

import numpy as np

from ..errors import VitlabError
from ..inputs import taps as taps_mod
from ..inputs.cache import as_stored, make_key
from ..inputs.data import Batch, ImageSource, plan_batches, select, to_tensor
from ..inputs.images import needed_side
from ..inputs.models import LoadedModel
from ..options import DataOptions, option
from ..progress import Progress, scaled
from ..stats import cka as cka_mod
from ..stats import device_cka
from ..stats.evidence import jackknife_indices
from . import dist, hostmem, inflight, pipeline
from .context import Run, RunInfo

__all__ = ["CKAOptions", "CKAReport", "GramStatistic", "LogProbStatistic", "Progress", "Run", "RunInfo", "Statistic",
           "cka", "stream"]


class Statistic(ABC):
    """A per-batch statistic of one model's activations: the unit the cache stores."""

    name: str = "statistic"
    version: int = 1  # bump when the meaning changes, so stale cache entries cannot look valid
    # True: computable one tap at a time (reduce_tap + finish), formed inside the forward (vitlab.engine.inflight)
    streams: ClassVar[bool] = False
    # True: compute() reads the decoded PIL images (batch.images); otherwise the pipeline drops them once transformed
    needs_images: ClassVar[bool] = False

    @abstractmethod
    def params(self, loaded: LoadedModel) -> dict:
        """Everything besides model and images that the value depends on (goes into the cache key)."""

    @abstractmethod
    def taps(self, loaded: LoadedModel) -> list[str]:
        """Taps to capture for this statistic."""

    @abstractmethod
    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        """Pure function of one batch's activations (``acts['logits']`` holds the model output)."""

    def reduce_tap(self, tap: str, act, loaded: LoadedModel):
        """Streaming statistics: the part that depends on one tap's activation (called from its forward hook)."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def finish(self, parts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        """Streaming statistics: the per-batch value from ``{tap: reduce_tap(...)}`` of every tap."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def layout(self, loaded: LoadedModel, batch: Batch) -> dict[str, tuple] | None:
        """The names and shapes (``None``: a free axis) of the per-batch value, so that a cached entry of another
        layout is a miss (vitlab.inputs.entries); ``None``: any arrays of plain dtypes."""
        return None

    def cache_key(self, loaded: LoadedModel, batch: Batch, precision: str = "float32") -> str:
        """Name, version, weights, images, parameters and the forward pass's numerics (``precision``:
        :func:`forward_precision`); make_key adds the library versions."""
        return make_key(self.name, self.version, loaded.fingerprint, batch.key, self.params(loaded), precision)


def forward_precision(loaded: LoadedModel, amp: bool) -> str:
    """What changes a forward pass's numbers besides weights and images: bf16 autocast (only on CUDA), the
    device kind (CUDA convolutions use TF32 by default; CPU and GPU kernels round differently) and a
    channels-last layout (CNNs: its convolutions sum in another order)."""
    kind = str(loaded.device).split(":")[0]
    return "/".join([f"{'bf16' if amp and kind == 'cuda' else 'float32'}", kind, *loaded.layout_key])


@dataclass(frozen=True)
class GramStatistic(Statistic):
    """Per-batch Gram matrices (L, n, n) of every tap: the unit from which CKA between any models is computed."""

    taps_: tuple[str, ...] | None = None  # None: the family's default CKA taps
    tokens: str = "all"
    kernel: str = "linear"
    threshold: float = 1.0
    precision: str = "float32"  # 'float64': verify mode
    name: str = "gram"
    version: int = 2  # 2: a Gram of features flat to round-off is zero (issue 39)
    streams: ClassVar[bool] = True

    def taps(self, loaded: LoadedModel) -> list[str]:
        return list(self.taps_) if self.taps_ else taps_mod.default_taps(loaded.model)

    def params(self, loaded: LoadedModel) -> dict:
        return {"taps": self.taps(loaded), "tokens": self.tokens, "kernel": self.kernel,
                "threshold": self.threshold, "precision": self.precision}

    def reduce_tap(self, tap: str, act, loaded: LoadedModel):
        import torch

        # bf16/fp16 activations are cast up before centring (cka.gram)
        dtype = torch.float64 if self.precision == "float64" else torch.float32
        # a channels-last model's numbers already differ from the default layout's by round-off (its own cache
        # keys): its maps are flattened in memory order and centred in chunks; other models' Grams stay as they were
        relaid = loaded.memory_format == "channels_last"
        feats = taps_mod.features(act, loaded.model, self.tokens, any_order=relaid)
        return cka_mod.gram(feats, self.kernel, self.threshold, dtype=dtype,
                            chunk=cka_mod.GRAM_CHUNK if relaid else None)

    def finish(self, parts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        return {"grams": torch.stack([parts[t] for t in self.taps(loaded)]).cpu().numpy()}

    def layout(self, loaded: LoadedModel, batch: Batch) -> dict[str, tuple]:
        return {"grams": (len(self.taps(loaded)), None, None)}  # (L, n, n)

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        return self.finish({t: self.reduce_tap(t, acts[t], loaded) for t in self.taps(loaded)}, loaded, batch)


@dataclass(frozen=True)
class LogProbStatistic(Statistic):
    """log softmax of the model's output for every image: {'logp': (B, C) float64}. The top-1 prediction is its
    argmax (the logits' argmax: log softmax keeps the order), so one cached entry serves both a head ablation's
    log-probabilities and an intervention's accuracy."""

    name: str = "logp"
    version: int = 1

    def params(self, loaded: LoadedModel) -> dict:
        return {}

    def taps(self, loaded: LoadedModel) -> list[str]:
        return []

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        return {"logp": acts["logits"].double().log_softmax(-1).cpu().numpy()}


def _forward(loaded: LoadedModel, images: list, tap_names: list[str], amp: bool) -> dict:
    """Every tap of one batch held at once (PIL images in): the path before in-capture statistics, kept for
    references that need the activations themselves; the runner uses vitlab.engine.inflight."""
    import torch

    x = to_tensor(images, loaded)
    use_amp = amp and loaded.device.startswith("cuda")
    with taps_mod.capture(loaded.model, tap_names) as acts, torch.inference_mode():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            acts["logits"] = loaded.model(x)
        acts = {k: (v.float() if v.dtype in (torch.bfloat16, torch.float16) else v) for k, v in acts.items()}
    return acts


def stream(models: Sequence[LoadedModel], source: ImageSource, indices: Sequence[int], batch_size: int,
           statistics: Sequence[Sequence[Statistic]], run: Run | None = None, *,
           min_batch: int = cka_mod.MIN_UNBIASED_BATCH
           ) -> Iterator[tuple[Batch, list[dict[str, dict[str, np.ndarray]]]]]:
    """Yield ``(batch, [per model: {statistic name: arrays}])`` for each batch of ``indices``.

    ``statistics[m]`` lists the statistics of ``models[m]``. ``run.shard=(rank, world)`` takes every world-th batch
    (torch.distributed). Batches left with fewer than ``min_batch`` readable images (4, for the unbiased HSIC)
    are dropped and reported in ``run.info``; per-image statistics (attention distance) pass ``min_batch=1``.
    Inputs are decoded and transformed by ``run.workers`` threads (or processes, ``run.worker_kind``) ahead of the
    forward (vitlab.engine.pipeline); each model's statistics are formed inside its forward (vitlab.engine.inflight).
    """
    run = run or Run()
    store, info, progress, amp, shard = run.store, run.info, run.progress, run.amp, run.shard
    precision = [forward_precision(m, amp) for m in models]
    min_side = max((needed_side(m.data_config) for m in models), default=None)
    t0 = time.perf_counter()

    def plan(batch: Batch):
        """Cache lookups, ahead of the consumer; decoding is needed for any missing statistic or batch record."""
        # the label mapping is part of the key: a new class folder renumbers every label
        meta = store.get_json(make_key("batch-meta", batch.key, source.classes))
        found = [{s.name: store.get(s.cache_key(m, batch, p), s.layout(m, batch)) for s in stats}
                 for m, stats, p in zip(models, statistics, precision)]
        need = [m for m, per_model in zip(models, found) if any(v is None for v in per_model.values())]
        return (meta, found, bool(need)), (need if need or not _meta_ok(meta) else None)

    cuda = any(str(m.device).startswith("cuda") for m in models)
    prefetcher = pipeline.Prefetcher(source, run.workers, pin=cuda, min_side=min_side, kind=run.worker_kind,
                                     keep_images=any(s.needs_images for stats in statistics for s in stats))
    # VITLAB_KEEP_FREED=1: a CPU forward reuses freed activation memory instead of faulting fresh pages in
    # (vitlab.engine.hostmem; faster, but the heap grows to ~2x the forward's live peak)
    with prefetcher, hostmem.keep_freed(any(_device_type(m.device) == "cpu" for m in models)):
        # batches are made of the images that can be read, so a bad file never takes good ones down with its batch
        usable = readable(source, indices, run, prefetcher)
        batches = plan_batches(source, usable, batch_size, max(1, min_batch))[shard[0]::shard[1]]
        # one batch ahead hides preparation behind a CPU forward at the least memory (each batch ahead holds its
        # inputs); a GPU forward is short, so two keep the workers busy while a batch is stacked and copied
        ahead = pipeline.prefetched(batches, plan, prefetcher, depth=2 if cuda else 1)
        yield from _consume(models, statistics, precision, ahead, len(batches), source, run, min_batch)
    info.seconds += time.perf_counter() - t0
    if progress:
        progress(len(batches), len(batches), "done")


CHECK_IMAGES = 64  # images per readability check task


def readable(source: ImageSource, indices: Sequence[int], run: Run, prefetcher: pipeline.Prefetcher) -> list[int]:
    """``indices`` less the images that cannot be read, in order; those are added to ``run.info.skipped_images``
    with their reason.

    Each image's verdict is cached by its item key (size and mtime, or an upload's content), so a rerun plans the
    same batches without decoding anything and finds them in the cache. A verdict not in the cache costs one
    decode in the prefetcher's workers (so a file that crashes the decoder ends a worker process, not vitlab),
    a window of tasks at a time (memory O(window)). Under torchrun each rank checks every world-th image and the
    verdicts are gathered, so every rank plans the same batches. Sources whose items always load (data sets in
    memory) are returned as they are.
    """
    indices = list(indices)
    if not getattr(source, "may_fail", False) or not indices:
        return indices
    store, (rank, world) = run.store, run.shard
    split = world > 1 and run.gather is not None
    keys = {i: make_key("readable", source.item_key(i)) for i in indices}
    verdicts: dict[int, str | None] = {}  # index -> None (readable) or why not
    todo = []
    for pos, i in enumerate(indices):
        if split and pos % world != rank:
            continue  # another rank's share
        cached = store.get_json(keys[i])
        if isinstance(cached, dict) and "skip" in cached and isinstance(cached["skip"], (str, type(None))):
            verdicts[i] = cached["skip"]
        else:
            todo.append(i)
    if todo and run.progress:
        run.progress(0, len(todo), f"checking {len(todo)} image(s) can be read")
    window: list = []
    depth = 2 * max(1, prefetcher.workers)
    tasks = _check_tasks(source, todo)
    for n, task in enumerate(tasks):
        window.append(prefetcher.submit(Batch(-1, task, "readability"), {}))
        while len(window) >= depth or (window and n == len(tasks) - 1):
            checked = _verdicts(source, window.pop(0).result().batch)
            verdicts.update(checked)
            for i, why in checked.items():
                store.put_json(keys[i], {"skip": why})
    if split:
        for part in run.gather_objects(verdicts):
            verdicts.update(part)
    skipped = [(source.item_id(i), verdicts[i]) for i in indices if verdicts[i] is not None]
    run.info.skipped_images += [s for s in skipped if s not in run.info.skipped_images]
    return [i for i in indices if verdicts[i] is None]


def _check_tasks(source: ImageSource, todo: list[int]) -> list[list[int]]:
    """``todo`` in runs of at most :data:`CHECK_IMAGES` in which no two items share an id (two uploads may share a
    name), so that a decoded run's ids and skips say which item is which."""
    tasks: list[list[int]] = []
    names: set[str] = set()
    for i in todo:
        name = source.item_id(i)
        if not tasks or len(tasks[-1]) >= CHECK_IMAGES or name in names:
            tasks.append([])
            names = set()
        tasks[-1].append(i)
        names.add(name)
    return tasks


def _verdicts(source: ImageSource, batch: Batch) -> dict[int, str | None]:
    """{index: None or the reason it was skipped} of a decoded run of items with distinct ids."""
    readable_ids, reasons = set(batch.ids), dict(batch.skipped)
    batch.images = None
    # an id in neither list cannot happen with vitlab's decode: such an item is left out rather than guessed
    return {i: None if source.item_id(i) in readable_ids else reasons.get(source.item_id(i), "could not be checked")
            for i in batch.indices}


def _consume(models, statistics, precision, planned, total, source, run, min_batch):
    store, info, progress = run.store, run.info, run.progress
    for done, (batch, (meta, found, missing), prepared) in enumerate(planned):
        dist.at_batch(batch.index)  # a failure under torchrun names the rank and this batch
        if progress:
            progress(done, total, f"batch {done + 1} of {total}")
        run.check(f"batch {done + 1} of {total}")  # a stop asked for while the bar drew is seen here
        if prepared is not None:
            meta = {"ids": batch.ids, "labels": batch.labels, "skipped": batch.skipped, "notices": batch.notices}
            store.put_json(make_key("batch-meta", batch.key, source.classes), meta)
        batch.ids, batch.labels = meta["ids"], meta["labels"]
        batch.skipped = [tuple(s) for s in meta["skipped"]]
        info.skipped_images += [s for s in batch.skipped if s not in info.skipped_images]
        info.notices += [tuple(s) for s in meta["notices"] if tuple(s) not in info.notices]
        if len(batch.ids) < max(1, min_batch):
            info.dropped_batches.append(f"batch {batch.index}: {len(batch.ids)} readable image(s), "
                                        f"fewer than {max(1, min_batch)}")
            continue
        if missing:
            info.batches_computed += 1
            for m, stats, per_model, p in zip(models, statistics, found, precision):
                todo = [s for s in stats if per_model[s.name] is None]
                if not todo:
                    continue
                run.check(f"{m.label}, batch {done + 1} of {total}")  # each model's forward is a long step
                with taps_mod.holding(m.model, progress, m.label):  # says so while another run holds it
                    values = inflight.forward_statistics(m, prepared.inputs[pipeline.input_key(m)], todo, batch,
                                                         run.amp)
                info.forward_passes[m.label] = info.forward_passes.get(m.label, 0) + 1
                for s in todo:  # laid out as a cached entry reads back (a cold and a warm run agree to the bit),
                    # in memory of its own (a view would keep the whole activation alive)
                    per_model[s.name] = _own(as_stored(values[s.name]))
                    store.put(s.cache_key(m, batch, p), per_model[s.name])
                del values
            hostmem.release()  # the forward's freed activations back to the kernel (a script thread's arena)
        else:
            info.batches_from_cache += 1
        batch.images, batch.of = None, total
        yield batch, found


def _own(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A statistic's arrays with their own memory. ``tensor[:, 0].numpy()`` (a probe's CLS feature) is a view that
    keeps the whole (B, N, D) activation alive; a caller that keeps per-batch values over the images (the probes)
    then held every block's token maps of every image: 1.1 GiB for ViT-B/16 at 150 images (issue 51)."""
    return {k: v if not isinstance(v, np.ndarray) or v.flags.owndata else v.copy() for k, v in arrays.items()}


def _device_type(device) -> str:
    """'cpu', 'cuda', 'mps', ... of a device string."""
    return str(device).split(":")[0]


def _meta_ok(meta) -> bool:
    """A batch's cached ids/labels/skips are usable (an entry from another version, damaged or planted, is a miss:
    the batch is decoded again and its record rewritten)."""
    if not (isinstance(meta, dict) and all(isinstance(meta.get(k), list) for k in ("ids", "skipped", "notices"))):
        return False
    labels = meta.get("labels")
    return (all(isinstance(i, str) for i in meta["ids"])
            and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                    for k in ("skipped", "notices") for p in meta[k])
            and (labels is None or isinstance(labels, list) and len(labels) == len(meta["ids"])
                 and all(x is None or type(x) is int for x in labels)))


@dataclass
class CKAReport:
    """CKA of every ordered pair of models (including each with itself), with run information."""

    labels: list[str]
    results: dict[tuple[int, int], cka_mod.CKAResult]
    info: RunInfo
    images: int
    repeats: int
    taps: list[list[str]] | None = None  # per model: the taps compared

    def headline(self) -> list[str]:
        return [f"CKA over {self.images} images ({self.info.batches_computed} batches computed, "
                f"{self.info.batches_from_cache} from cache)"]

    def interval_info(self) -> dict | None:
        """The CKA intervals' unit, how many and method (run.json); None when no interval was computed."""
        ev = next((r.evidence for r in self.results.values() if r.evidence is not None), None)
        return None if ev is None else ev.interval_info()

    def pair(self, i: int, j: int) -> cka_mod.CKAResult:
        return self.results[(i, j)]

    def to_frame(self):
        import pandas as pd

        return pd.concat([r.to_frame() for r in self.results.values()], ignore_index=True)

    @property
    def warnings(self) -> list[str]:
        seen: list[str] = []
        for r in self.results.values():
            seen += [w for w in r.warnings if w not in seen]
        return seen


def _transpose(r: cka_mod.CKAResult) -> cka_mod.CKAResult:
    return cka_mod.CKAResult(r.model_b, r.model_a, r.layers_b, r.layers_a, r.cka.T,
                             None if r.std is None else r.std.T, r.images, r.batches, r.warnings,
                             None if r.evidence is None else r.evidence.transposed(),
                             None if r.loo is None else r.loo.transpose(0, 2, 1))


def cka_accumulators(models: Sequence[LoadedModel], statistics: Sequence[GramStatistic], estimator: str,
                     permutations: int = 0, seed: int = 0) -> dict[tuple[int, int], cka_mod.MinibatchCKA]:
    """One accumulator per unordered pair (with itself); they keep per-batch terms for the intervals (evidence)."""
    from ..stats.evidence import BootstrapCKA

    layers = [s.taps(m) for m, s in zip(models, statistics)]
    k = len(models)
    return {(i, j): BootstrapCKA(layers[i], layers[j], estimator, permutations, seed)
            for i in range(k) for j in range(i, k)}


def fold_cka(accs: dict, found: list[dict], estimator: str, device: str = "cpu", key: int | None = None) -> None:
    """Add one batch's Grams of every model to every pair's accumulator: each Gram centred once and every
    pair's HSIC formed on ``device`` (vitlab.stats.device_cka); only the (La, Lb) estimates come back to the host.
    ``key``: the batch's global number (``batch.index``), which orders the per-batch terms across ranks."""
    import torch

    mode = device_cka.mode_for(device)
    centred = [device_cka.centred(torch.from_numpy(f["gram"]["grams"]).to(device), estimator, mode) for f in found]
    selfs = [device_cka.hsic_self(c, estimator, mode) for c in centred]
    host = None
    for (i, j), acc in accs.items():
        if getattr(acc, "permutations", 0):  # the permutation null (evidence) permutes the centred Grams on the host
            host = host or [cka_mod.centred(f["gram"]["grams"], estimator) for f in found]
            acc.update(host[i], None if i == j else host[j], key=key)
            continue
        xy = device_cka.hsic_all_pairs(centred[i], centred[j], estimator, mode)
        if key is None:
            acc.add(xy, selfs[i], selfs[j], centred[i].shape[-1])
        else:
            acc.add(xy, selfs[i], selfs[j], centred[i].shape[-1], key=key)


@dataclass(frozen=True)
class CKAOptions(DataOptions):
    """Options of minibatch CKA (``vitlab cka``)."""

    tokens: str = option("all", "representation: all tokens flattened, CLS token, or mean of spatial tokens",
                         choices=("all", "cls", "gap"))
    kernel: str = option("linear", "Gram kernel", choices=("linear", "rbf"))
    rbf_threshold: float = option(1.0, "RBF width as a fraction of the median distance")
    estimator: str = option("unbiased", "unbiased minibatch HSIC_1 (Nguyen et al. 2021) or biased HSIC_0 "
                            "(full-batch CKA when --batch-size >= --images)", choices=("unbiased", "biased"))
    taps: tuple[str, ...] | None = option(None, "comma-separated tap names (default: the family's CKA taps)",
                                          kind="strs")
    repeats: int = option(1, "average over R reshuffled image subsets")
    verify: bool = option(False, "float64 Grams (slower; for checking precision)")
    permutations: int = option(0, "random pairings of the permutation null (p_null, null_lo, null_hi), e.g. 100; "
                               "costs P small products per batch and model pair (docs/evidence.md); 0: none")


def gram_statistics(models: Sequence[LoadedModel], opts: CKAOptions) -> list[GramStatistic]:
    """One Gram statistic per model, as ``opts`` asks (explicit taps only for a single model)."""
    if opts.taps is not None and len(models) > 1:
        raise VitlabError("--taps applies to a single model; with several models use their default taps")
    return [GramStatistic(opts.taps, opts.tokens, opts.kernel, opts.rbf_threshold,
                          "float64" if opts.verify else "float32") for _ in models]


def cka(models: Sequence[LoadedModel], source: ImageSource, opts: CKAOptions = CKAOptions(), run: Run | None = None,
        *, statistic: GramStatistic | Sequence[GramStatistic] | None = None) -> CKAReport:
    """Minibatch CKA between all taps of every model and every other (and itself), over ``opts.repeats`` subsets.

    Repeat r > 0 (or every repeat when ``opts.shuffle`` is set) uses the seeded permutation ``shuffle + r``.
    ``run.reduce`` (torch.distributed) sums accumulator states across ranks before computing. ``statistic``
    overrides the Gram statistics built from ``opts`` (one for all models, or one per model). ``run.bootstrap``
    > 0 adds a 95 % interval over batches to every cell and ``opts.permutations`` > 0 a permutation null
    (``vitlab.stats.evidence``), pooled over the repeats' batches. Under torchrun ``run.reduce`` puts every rank's
    per-batch terms back in batch order first, so the intervals and nulls equal a single process's.
    """
    if not models:
        raise VitlabError("give at least one model")
    run = run or Run()
    if statistic is None:
        stats = gram_statistics(models, opts)
    else:
        stats = list(statistic) if isinstance(statistic, (list, tuple)) else [statistic] * len(models)
    repeats, shuffle = max(1, opts.repeats), opts.shuffle
    per_repeat = []
    pooled = None  # every repeat's per-batch terms, for the intervals
    evidence = run.bootstrap > 0
    for r in range(repeats):
        seed = None if (repeats <= 1 and shuffle is None) else (shuffle or 0) + r
        indices = select(source, opts.images, seed)
        accs = cka_accumulators(models, stats, opts.estimator, opts.permutations if evidence else 0, run.seed + r)
        part = run.with_progress(scaled(run.progress, r, repeats, "repeat"))
        for done, (batch, found) in enumerate(stream(models, source, indices, opts.batch_size, [[s] for s in stats],
                                                     part), 1):
            fold_cka(accs, found, opts.estimator, models[0].device, batch.index)
            if repeats == 1:  # the running estimate: this report over the batches so far (the app draws it)
                run.estimate(lambda accs=accs: _cka_report(models, stats, [_computed(models, accs)], accs, run, 1),
                             done, batch.of)
        run.reduce_accumulators(accs)
        per_repeat.append(_computed(models, accs))
        pooled = accs if pooled is None else {p: pooled[p].merge(a) for p, a in accs.items()}
    return _cka_report(models, stats, per_repeat, pooled, run, repeats)


def _computed(models: Sequence[LoadedModel], accs: dict) -> dict:
    return {p: a.compute(models[p[0]].label, models[p[1]].label) for p, a in accs.items()}


def _cka_report(models, stats, per_repeat: list[dict], pooled: dict, run: Run, repeats: int) -> CKAReport:
    """The report of :func:`cka` from each repeat's results and the pooled per-batch terms (intervals)."""
    results = {}
    for p in per_repeat[0]:
        stack = np.stack([rep[p].cka for rep in per_repeat])
        res = per_repeat[0][p]
        if run.bootstrap > 0:
            res.evidence = pooled[p].evidence(run.bootstrap, run.seed)
            # leave-one-batch-out CKA of every cell: a summary of cells (a mean off the diagonal) gets its own
            # jackknife interval from these (vitlab.analyses.findings)
            res.loo = pooled[p].replicates(jackknife_indices(len(pooled[p].terms_xy)))
        res.cka = stack.mean(axis=0)
        res.std = stack.std(axis=0, ddof=1) if len(per_repeat) > 1 else None
        res.batches = sum(rep[p].batches for rep in per_repeat)
        results[p] = res
        if p[0] != p[1]:
            results[(p[1], p[0])] = _transpose(res)
    n_images = per_repeat[0][(0, 0)].images
    return CKAReport([m.label for m in models], results, run.info, n_images, repeats,
                     [s.taps(m) for m, s in zip(models, stats)])
