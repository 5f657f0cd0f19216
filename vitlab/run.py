"""The single-pass runner: models x images x requested statistics -> per-batch statistics, cached.

For each batch, every statistic of every model is looked up in the disk cache; only a model with a missing
statistic runs its forward pass, once, with the union of the taps its missing statistics need. Activations are
dropped after the batch (memory O(batch)); the per-batch statistics are what the caller folds into accumulators.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Iterator, Sequence

import numpy as np

from . import cka as cka_mod
from . import device_cka, inflight, pipeline
from . import taps as taps_mod
from .cache import Store, make_key
from .data import Batch, ImageSource, plan_batches, select
from .errors import VitlabError
from .models import LoadedModel

Progress = Callable[[int, int, str], None]


class Statistic(ABC):
    """A per-batch statistic of one model's activations: the unit the cache stores."""

    name: str = "statistic"
    version: int = 1  # bump when the meaning changes, so stale cache entries cannot look valid
    # True: computable one tap at a time (reduce_tap + finish), formed inside the forward (vitlab.inflight)
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

    def cache_key(self, loaded: LoadedModel, batch: Batch) -> str:
        return make_key(self.name, self.version, loaded.fingerprint, batch.key, self.params(loaded))


@dataclass(frozen=True)
class GramStatistic(Statistic):
    """Per-batch Gram matrices (L, n, n) of every tap: the unit from which CKA between any models is computed."""

    taps_: tuple[str, ...] | None = None  # None: the family's default CKA taps
    tokens: str = "all"
    kernel: str = "linear"
    threshold: float = 1.0
    precision: str = "float32"  # 'float64': verify mode
    name: str = "gram"
    version: int = 1
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
        return cka_mod.gram(taps_mod.features(act, loaded.model, self.tokens), self.kernel, self.threshold, dtype=dtype)

    def finish(self, parts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        import torch

        return {"grams": torch.stack([parts[t] for t in self.taps(loaded)]).cpu().numpy()}

    def compute(self, acts: dict, loaded: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
        return self.finish({t: self.reduce_tap(t, acts[t], loaded) for t in self.taps(loaded)}, loaded, batch)


@dataclass
class RunInfo:
    """What a run did: the counts reported in run.json and in the app."""

    batches_computed: int = 0
    batches_from_cache: int = 0
    skipped_images: list[tuple[str, str]] = field(default_factory=list)
    dropped_batches: list[str] = field(default_factory=list)
    seconds: float = 0.0
    forward_passes: dict[str, int] = field(default_factory=dict)  # per model label: batches it had to run

    def merge(self, other: "RunInfo") -> None:
        self.batches_computed += other.batches_computed
        self.batches_from_cache += other.batches_from_cache
        self.skipped_images += [s for s in other.skipped_images if s not in self.skipped_images]
        self.dropped_batches += other.dropped_batches
        self.seconds += other.seconds
        for label, n in other.forward_passes.items():
            self.forward_passes[label] = self.forward_passes.get(label, 0) + n


def stream(models: Sequence[LoadedModel], source: ImageSource, indices: Sequence[int], batch_size: int,
           statistics: Sequence[Sequence[Statistic]], *, store: Store | None = None, progress: Progress | None = None,
           amp: bool = False, shard: tuple[int, int] = (0, 1), info: RunInfo | None = None,
           min_batch: int = cka_mod.MIN_UNBIASED_BATCH, workers: int | None = None
           ) -> Iterator[tuple[Batch, list[dict[str, dict[str, np.ndarray]]]]]:
    """Yield ``(batch, [per model: {statistic name: arrays}])`` for each batch of ``indices``.

    ``statistics[m]`` lists the statistics of ``models[m]``. ``shard=(rank, world)`` takes every world-th batch
    (torch.distributed). Batches left with fewer than ``min_batch`` readable images (4, for the unbiased HSIC)
    are dropped and reported in ``info``; per-image statistics (attention distance) pass ``min_batch=1``.
    Inputs are decoded and transformed by ``workers`` threads ahead of the forward (vitlab.pipeline; None: the
    default, 0: on this thread); each model's statistics are formed inside its forward (vitlab.inflight).
    """
    store = store or Store(None)
    info = info if info is not None else RunInfo()
    batches = plan_batches(source, indices, batch_size)[shard[0]::shard[1]]
    t0 = time.perf_counter()

    def plan(batch: Batch):
        """Cache lookups, ahead of the consumer; decoding is needed for any missing statistic or batch record."""
        meta = store.get_json(make_key("batch-meta", batch.key))
        found = [{s.name: store.get(s.cache_key(m, batch)) for s in stats} for m, stats in zip(models, statistics)]
        need = [m for m, per_model in zip(models, found) if any(v is None for v in per_model.values())]
        return (meta, found, bool(need)), (need if need or meta is None else None)

    cuda = any(str(m.device).startswith("cuda") for m in models)
    prefetcher = pipeline.Prefetcher(source, workers, pin=cuda,
                                     keep_images=any(s.needs_images for stats in statistics for s in stats))
    # one batch ahead hides preparation behind a CPU forward at the least memory (each batch ahead holds its
    # inputs); a GPU forward is short, so two keep the workers busy while a batch is stacked and copied
    ahead = pipeline.prefetched(batches, plan, prefetcher, depth=2 if cuda else 1)
    with prefetcher:
        yield from _consume(models, statistics, ahead, len(batches), store, progress, amp, info, min_batch)
    info.seconds += time.perf_counter() - t0
    if progress:
        progress(len(batches), len(batches), "done")


def _consume(models, statistics, planned, total, store, progress, amp, info, min_batch):
    for done, (batch, (meta, found, missing), prepared) in enumerate(planned):
        if progress:
            progress(done, total, f"batch {done + 1}/{total}")
        if prepared is not None:
            meta = {"ids": batch.ids, "labels": batch.labels, "skipped": batch.skipped}
            store.put_json(make_key("batch-meta", batch.key), meta)
        batch.ids, batch.labels = meta["ids"], meta["labels"]
        batch.skipped = [tuple(s) for s in meta["skipped"]]
        info.skipped_images += [s for s in batch.skipped if s not in info.skipped_images]
        if len(batch.ids) < max(1, min_batch):
            info.dropped_batches.append(f"batch {batch.index}: {len(batch.ids)} readable image(s), "
                                        f"fewer than {max(1, min_batch)}")
            continue
        if missing:
            info.batches_computed += 1
            for m, stats, per_model in zip(models, statistics, found):
                todo = [s for s in stats if per_model[s.name] is None]
                if not todo:
                    continue
                values = inflight.forward_statistics(m, prepared.inputs[pipeline.input_key(m)], todo, batch, amp)
                info.forward_passes[m.label] = info.forward_passes.get(m.label, 0) + 1
                for s in todo:
                    per_model[s.name] = values[s.name]
                    store.put(s.cache_key(m, batch), per_model[s.name])
                del values
        else:
            info.batches_from_cache += 1
        batch.images = None
        yield batch, found


@dataclass
class CKAReport:
    """CKA of every ordered pair of models (including each with itself), with run information."""

    labels: list[str]
    results: dict[tuple[int, int], cka_mod.CKAResult]
    info: RunInfo
    images: int
    repeats: int

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
                             None if r.std is None else r.std.T, r.images, r.batches, r.warnings)


def cka_accumulators(models: Sequence[LoadedModel], statistics: Sequence[GramStatistic], estimator: str
                     ) -> dict[tuple[int, int], cka_mod.MinibatchCKA]:
    layers = [s.taps(m) for m, s in zip(models, statistics)]
    k = len(models)
    return {(i, j): cka_mod.MinibatchCKA(layers[i], layers[j], estimator) for i in range(k) for j in range(i, k)}


def fold_cka(accs: dict, found: list[dict], estimator: str, device: str = "cpu") -> None:
    """Add one batch's Grams of every model to every pair's accumulator: each Gram centred once and every
    pair's HSIC formed on ``device`` (vitlab.device_cka); only the (La, Lb) estimates come back to the host."""
    import torch

    mode = device_cka.mode_for(device)
    centred = [device_cka.centred(torch.from_numpy(f["gram"]["grams"]).to(device), estimator, mode) for f in found]
    selfs = [device_cka.hsic_self(c, estimator, mode) for c in centred]
    for (i, j), acc in accs.items():
        xy = device_cka.hsic_all_pairs(centred[i], centred[j], estimator, mode)
        acc.add(xy, selfs[i], selfs[j], centred[i].shape[-1])


def cka(models: Sequence[LoadedModel], source: ImageSource, *, images: int | None = None, batch_size: int = 64,
        shuffle: int | None = None, repeats: int = 1,
        statistic: GramStatistic | Sequence[GramStatistic] = GramStatistic(),
        estimator: str = "unbiased", store: Store | None = None, progress: Progress | None = None,
        amp: bool = False, shard: tuple[int, int] = (0, 1), reduce: Callable | None = None,
        workers: int | None = None) -> CKAReport:
    """Minibatch CKA between all taps of every model and every other (and itself), over ``repeats`` subsets.

    Repeat r > 0 (or every repeat when ``shuffle`` is set) uses the seeded permutation ``shuffle + r``.
    ``reduce`` (torch.distributed) sums accumulator states across ranks before computing.
    """
    if not models:
        raise VitlabError("give at least one model")
    stats = list(statistic) if isinstance(statistic, (list, tuple)) else [statistic] * len(models)
    info = RunInfo()
    per_repeat = []
    for r in range(max(1, repeats)):
        seed = None if (repeats <= 1 and shuffle is None) else (shuffle or 0) + r
        indices = select(source, images, seed)
        accs = cka_accumulators(models, stats, estimator)
        for _, found in stream(models, source, indices, batch_size, [[s] for s in stats], store=store,
                               progress=_repeat_progress(progress, r, repeats), amp=amp, shard=shard, info=info,
                               workers=workers):
            fold_cka(accs, found, estimator, models[0].device)
        if reduce is not None:
            reduce(accs)
        per_repeat.append({p: a.compute(models[p[0]].label, models[p[1]].label) for p, a in accs.items()})
    results = {}
    for p in per_repeat[0]:
        stack = np.stack([rep[p].cka for rep in per_repeat])
        res = per_repeat[0][p]
        res.cka = stack.mean(axis=0)
        res.std = stack.std(axis=0, ddof=1) if len(per_repeat) > 1 else None
        res.batches = sum(rep[p].batches for rep in per_repeat)
        results[p] = res
        if p[0] != p[1]:
            results[(p[1], p[0])] = _transpose(res)
    n_images = per_repeat[0][(0, 0)].images
    return CKAReport([m.label for m in models], results, info, n_images, max(1, repeats))


def _repeat_progress(progress: Progress | None, r: int, repeats: int) -> Progress | None:
    if progress is None or repeats <= 1:
        return progress
    return lambda done, total, text: progress(r * total + done, repeats * total, f"repeat {r + 1}/{repeats}: {text}")
