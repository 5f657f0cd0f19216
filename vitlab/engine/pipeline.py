"""The prefetching input pipeline: decode + each model's transform in worker threads, ahead of the forward pass.

    planned Batch ─Prefetcher.submit─► worker threads: data.decode + transform, a few images per task
                 ─► assembler thread: stack (B, C, H, W) per transform, pinned on CUDA ─► Prepared

Why it looks like this (figures in bench/README.md, "Throughput"):

- **Threads, not DataLoader processes.** Pillow's JPEG decoder and resampler and torch's tensor kernels release
  the GIL, so threads scale with cores (test_vit, decode-bound: see the bench), start instantly, need no
  pickling of sources or transforms, share the decoded images with statistics that need them (localization
  re-reads ``batch.images``) and work inside Streamlit, where forking a process that holds models is unsafe.
- **One intra-op thread per worker.** A timm eval transform on a 500x375 JPEG costs ~4.5 ms with one torch thread
  and ~10x more with two on a loaded 2-core machine (FACTS.md). OpenMP's thread count is per calling thread, so
  ``torch.set_num_threads(1)`` in a worker leaves the main thread's forward with all of its intra-op threads.
- **A few images per task** (not one batch per worker), so even a single batch is spread over every worker, and
  the task hand-off (a future, a lock, a wake-up: Python that holds the GIL) is paid once per :data:`TASK_IMAGES`
  images rather than per image; a separate assembler thread stacks the batch and pins it, so neither the workers
  nor the forward wait on that.
- **timm's eval transform without torchvision's dispatch** (:mod:`vitlab.evaltransform`): the same tensor, bit
  for bit, in a few calls instead of ~40. Decoding and resizing release the GIL, so what limits the workers on
  a small, decode-bound model is the Python around them; this took test_vit's pipeline from 810 to 1027 images/s
  with two workers on the 2-core machine (one run, 1024 JPEGs).
- **Transformed once per transform, not once per model**: models whose eval transforms are equal (same timm data
  config; e.g. the two ViTs of a CKA pair) share one input tensor (:func:`input_key`).
- **Bad images are skipped and named exactly as the serial path does**: each image goes through
  :func:`vitlab.data.decode` on a one-image batch, so ``Batch.skipped`` has the same entries in the same order.

- **Worker processes, when threads are not enough** (``--worker-kind processes``): threads still hold the GIL
  for ~0.36 ms an image (Pillow's header parsing, the PIL-to-tensor step), which caps them at ~2200-2800 small
  JPEGs/s however many cores there are, below what a current GPU runs ViT-B/16 at. Spawned processes (safe with
  loaded models and under Streamlit) each decode and transform a task's images and send them back stacked, one
  shared-memory tensor per task, in as few tasks as keep the workers busy (each costs the main process a socket
  handshake); the main process holds the GIL ~0.18 ms an image. They cost a start (each imports torch) and are
  slower than threads on 2 cores, so threads stay the default; the bench measures both.

``workers=0`` prepares inputs on the calling thread when asked (no threads): the serial reference.
Axis letters: B images in a batch, C channels, H x W pixels.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
import types
import weakref
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from ..inputs.data import Batch, ImageSource, decode, transform_image
from ..errors import VitlabError
from ..inputs.evaltransform import per_object

MAX_DEFAULT_WORKERS = 16
TASK_IMAGES = 4  # images per worker task, fewer when a batch would otherwise not reach every worker
_KEY_TEXT: "weakref.WeakKeyDictionary[object, str]" = weakref.WeakKeyDictionary()  # transform -> its input key text
_default_workers: int | None = None  # set by the CLI's --workers (and the app); None: a function of the cores
KINDS = ("threads", "processes")
_default_kind: str | None = None  # set by the CLI's --worker-kind; None: VITLAB_WORKER_KIND, else threads


def cores() -> int:
    """CPU cores this process may use (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    """Input workers when none are asked for: ``--workers``/``set_default_workers``, ``VITLAB_WORKERS``, else the
    cores shared by the processes torchrun started on this machine (at most 16). Workers sleep whenever they are
    a batch or two ahead, so on a CPU-only run they take cores from the forward pass only for the work the serial
    path would have done on it anyway."""
    if _default_workers is not None:
        return _default_workers
    env = os.environ.get("VITLAB_WORKERS")
    if env:
        return check_workers(env, "VITLAB_WORKERS")
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, min(MAX_DEFAULT_WORKERS, cores() // local))


def check_workers(value, name: str = "--workers") -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = -1
    if n < 0:
        raise VitlabError(f"{name} must be a non-negative integer (0: prepare inputs on the main thread), "
                          f"not '{value}'")
    return n


def set_default_workers(n: int | None) -> None:
    """The process-wide default of :func:`default_workers` (None: back to a function of the cores)."""
    global _default_workers
    _default_workers = None if n is None else check_workers(n)


def check_kind(value, name: str = "--worker-kind") -> str:
    kind = str(value).strip().lower()
    kind = {"thread": "threads", "process": "processes"}.get(kind, kind)
    if kind not in KINDS:
        raise VitlabError(f"{name} must be 'threads' or 'processes', not '{value}'")
    return kind


def default_kind() -> str:
    """``--worker-kind``/``set_default_kind``, else ``VITLAB_WORKER_KIND``, else threads."""
    if _default_kind is not None:
        return _default_kind
    env = os.environ.get("VITLAB_WORKER_KIND")
    return check_kind(env, "VITLAB_WORKER_KIND") if env else "threads"


def set_default_kind(kind: str | None) -> None:
    """The process-wide default of :func:`default_kind` (None: back to VITLAB_WORKER_KIND or threads)."""
    global _default_kind
    _default_kind = None if kind is None else check_kind(kind)


@contextlib.contextmanager
def defaults(workers=None, kind=None):
    """Within the block, ``workers`` and ``kind`` (each when not None) are the process-wide defaults; the previous
    ones come back afterwards."""
    global _default_workers, _default_kind
    saved = _default_workers, _default_kind
    try:
        if workers is not None:
            set_default_workers(workers)
        if kind is not None:
            set_default_kind(kind)
        yield
    finally:
        _default_workers, _default_kind = saved


def input_key(loaded) -> str:
    """Equal for models whose inputs are the same tensor: the same channels and an equal eval transform.

    timm's transforms print every parameter (size, interpolation, crop, mean, std); a transform whose text names
    an object address (a lambda) is never assumed equal to another. The text is kept per transform object, which
    vitlab never changes after loading.
    """
    # repr takes ~1 ms (Normalize prints its tensors) and the key is asked for every batch: kept per transform
    return f"{loaded.in_chans}|{per_object(_KEY_TEXT, loaded.transform, _key_text)}"


def _key_text(transform) -> str:
    text = repr(transform)
    return f"{text}#{id(transform)}" if " at 0x" in text else text


@dataclass
class _Input:
    """What the transform of one group needs (``data.to_tensor`` reads in_chans, transform and device)."""

    in_chans: int
    transform: object
    device: str = "cpu"


@dataclass
class Prepared:
    """A decoded batch (``batch.images``, ``ids``, ``labels``, ``skipped`` filled) and its inputs per input key."""

    batch: Batch
    inputs: dict  # input key -> (B, C, H, W) tensor on the host (pinned when the pipeline pins)


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _prepare_image(source: ImageSource, batch: Batch, i: int, groups: dict[str, _Input], keep: bool,
                   min_side: int | None = None):
    """Decode item ``i`` exactly as the serial path does, and apply each group's transform: (one-image batch,
    {key: (C, H, W)} or {} when the image was skipped). The decoded image is dropped unless ``keep``."""
    one = decode(source, Batch(batch.index, [i], batch.key), min_side)
    if not one.images:
        return one, {}
    xs = {k: transform_image(one.images[0], g) for k, g in groups.items()}
    if not keep:
        one.images = [None]
    return one, xs


def _prepare_images(source: ImageSource, batch: Batch, items: Sequence[int], groups: dict[str, _Input], keep: bool,
                    min_side: int | None = None) -> list:
    """One worker task: :func:`_prepare_image` of each of ``items``, in order."""
    return [_prepare_image(source, batch, i, groups, keep, min_side) for i in items]


# ---------------------------------------------------------------- worker processes

_WORKER: dict = {}  # inside a worker process: its image source, and the input groups it has unpickled


def _process_init(source_blob: bytes, started) -> None:
    """A worker process's start: one intra-op thread, the source (sent once), and torch's shared-memory pickling
    of tensors (registered by importing torch.multiprocessing), so results cross as handles, not bytes. Then it
    waits at ``started`` until every worker of the pool has started (:func:`_start_processes`)."""
    import torch
    import torch.multiprocessing  # noqa: F401

    torch.set_num_threads(1)
    _WORKER["source"] = pickle.loads(source_blob)
    _WORKER["groups"] = {}
    started.wait()


def _process_task(index: int, key: str, items: Sequence[int], groups_blob: bytes, keep: bool,
                  min_side: int | None) -> tuple[list[Batch], dict]:
    """One task in a worker process: :func:`_prepare_images`, the images of each group stacked into one tensor
    ((k, C, H, W), k the images that decoded, in order) so that one shared-memory handle crosses per task."""
    import torch

    groups = _WORKER["groups"].get(groups_blob)
    if groups is None:  # each worker unpickles a set of transforms once (a fast transform keeps its first check)
        groups = _WORKER["groups"][groups_blob] = pickle.loads(groups_blob)
    parts = _prepare_images(_WORKER["source"], Batch(index, [], key), items, groups, keep, min_side)
    xs = [x for _, x in parts if x]
    return [one for one, _ in parts], ({k: torch.stack([x[k] for x in xs]) for k in groups} if xs else {})


def _pickled(obj, what: str) -> bytes:
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - any pickling failure means the same thing here
        raise VitlabError(f"--worker-kind processes: {what} cannot be sent to a worker process ({e}); "
                          f"use --worker-kind threads") from None


_SPAWN_LOCK = threading.Lock()
START_TIMEOUT = 600.0  # seconds for all worker processes to start (each imports torch; many at once on a slow disk)


def _start_processes(n: int, source_blob: bytes) -> ProcessPoolExecutor:
    """A pool of ``n`` spawned worker processes, all started now.

    A spawned process re-runs the parent's ``__main__`` file unless it is a module run by name; under Streamlit
    that file is the app's script, which a worker must not run. So while the workers start, ``__main__`` is a bare
    module (put back at once, and only if nothing else replaced it meanwhile), and all ``n`` start here: the pool
    starts a process for each task submitted while none is idle, and no worker is idle before all ``n`` have
    reached the barrier in :func:`_process_init`, so ``n`` no-op tasks start exactly ``n`` processes.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    started = ctx.Barrier(n, timeout=START_TIMEOUT)
    pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_process_init, initargs=(source_blob, started))
    with _SPAWN_LOCK:
        saved = sys.modules.get("__main__")
        bare = types.ModuleType("__main__")
        sys.modules["__main__"] = bare
        try:
            ready = [pool.submit(int) for _ in range(n)]
        finally:
            if sys.modules.get("__main__") is bare:
                sys.modules["__main__"] = saved
    try:
        for f in ready:
            f.result()
    except BrokenProcessPool:
        pool.shutdown(wait=False, cancel_futures=True)
        raise VitlabError(f"the {n} input worker process(es) did not start (within {START_TIMEOUT:.0f} s, or one "
                          f"stopped while starting); use --worker-kind threads") from None
    return pool


def _failed(exc: BaseException) -> Future:
    done: Future = Future()
    done.set_exception(exc)
    return done


def _worker_died(batch: Batch, source: ImageSource) -> VitlabError:
    ids = [source.item_id(i) for i in batch.indices]
    shown = ", ".join(ids[:6]) + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")
    return VitlabError(f"an input worker process stopped abruptly while preparing batch {batch.index} (one of: "
                       f"{shown}) or a batch after it; a file that crashes the image decoder, or the machine "
                       f"running out of memory, does this. Batches computed before it stay in the disk cache (when "
                       f"one is used); move the file out, or use fewer --workers")


def _tasks(indices: Sequence[int], workers: int) -> list[Sequence[int]]:
    """``indices`` cut into runs of :data:`TASK_IMAGES`, shorter when that would leave a worker without one."""
    size = max(1, min(TASK_IMAGES, len(indices) // max(1, workers)))
    return [indices[k:k + size] for k in range(0, len(indices), size)]


def _process_tasks(indices: Sequence[int], workers: int, ahead: int) -> list[Sequence[int]]:
    """Worker processes: ``indices`` in as few tasks as keep every worker busy with ``ahead`` batches in flight.

    A task's result crosses as one shared-memory tensor, and each costs the main process a socket handshake to
    fetch its file descriptor (torch's default sharing): with tasks of 4 images that was ~30 % of the main
    process's time (bench/README.md). So tasks are ~B * ahead / workers images, not :data:`TASK_IMAGES`."""
    chunks = max(1, -(-workers // max(1, ahead)))
    size = max(TASK_IMAGES, -(-len(indices) // chunks))
    return [indices[k:k + size] for k in range(0, len(indices), size)]


def _assemble(batch: Batch, parts: list, keys: Sequence[str], pin: bool, has_labels: bool, keep: bool,
              chunks: list | None = None) -> Prepared:
    """The batch from its one-image parts: ids, labels, skips and notices in order, and per input key the images
    stacked into one (B, C, H, W) tensor, made in pinned memory when ``pin`` (one copy, not a stack and a pin).
    ``chunks``: worker processes' results, already stacked per task ({key: (k, C, H, W)} each), joined instead."""
    import torch

    batch.images, batch.ids, batch.labels, batch.skipped, batch.notices = [], [], [], [], []
    for one, _ in parts:
        batch.images += one.images
        batch.ids += one.ids
        batch.labels += one.labels or [None] * len(one.ids)
        batch.skipped += one.skipped
        batch.notices += one.notices
    if not has_labels:
        batch.labels = None
    if not keep:
        batch.images = None
    inputs = {}
    for k in keys:
        xs = [c[k] for c in chunks if c] if chunks is not None else [x[k] for _, x in parts if x]
        if not xs:
            continue
        shape = (sum(len(x) for x in xs), *xs[0].shape[1:]) if chunks is not None else (len(xs), *xs[0].shape)
        out = torch.empty(shape, dtype=xs[0].dtype, pin_memory=pin)
        inputs[k] = torch.cat(xs, out=out) if chunks is not None else torch.stack(xs, out=out)
    return Prepared(batch, inputs)


class Prefetcher:
    """Prepares batches in ``workers`` threads (or processes, ``kind="processes"``): :meth:`submit` returns a future
    of the :class:`Prepared` batch at once.

    ``pin=True`` (CUDA) puts each batch's input in page-locked memory, so the copy to the device can be
    ``non_blocking`` and overlap with the forward of the batch before it. ``keep_images=False`` drops each decoded
    image once it is transformed (``batch.images`` is None): a 500x375 RGB image is as big as its 224 px input.
    """

    def __init__(self, source: ImageSource, workers: int | None = None, pin: bool = False, keep_images: bool = True,
                 min_side: int | None = None, kind: str | None = None):
        self.source, self.pin, self.keep, self.min_side = source, pin, keep_images, min_side
        self.workers = default_workers() if workers is None else check_workers(workers)
        self.kind = default_kind() if kind is None else check_kind(kind)
        self._blobs: dict[tuple, bytes] = {}
        self.ahead = 1  # batches in preparation ahead of the consumer (set by :func:`prefetched`)
        self._pool: ThreadPoolExecutor | ProcessPoolExecutor | None = None  # processes: started on first use
        if self.workers and self.kind == "threads":
            self._pool = ThreadPoolExecutor(self.workers, "vitlab-input", initializer=_one_thread)
        self._assembler = ThreadPoolExecutor(1, "vitlab-assemble", initializer=_one_thread) if self.workers else None

    def submit(self, batch: Batch, groups: dict[str, _Input]) -> Future:
        """Start decoding ``batch`` and transforming it for every group (``{}``: decode only, e.g. for its ids)."""
        has_labels = self.source.has_labels
        if self.workers and self.kind == "processes":
            return self._submit_processes(batch, groups, has_labels)
        if self._pool is None:
            done: Future = Future()
            parts = [_prepare_image(self.source, batch, i, groups, self.keep, self.min_side) for i in batch.indices]
            done.set_result(_assemble(batch, parts, list(groups), self.pin, has_labels, self.keep))
            return done
        futures = [self._pool.submit(_prepare_images, self.source, batch, items, groups, self.keep, self.min_side)
                   for items in _tasks(batch.indices, self.workers)]
        return self._assembler.submit(lambda: _assemble(batch, [p for f in futures for p in f.result()], list(groups),
                                                        self.pin, has_labels, self.keep))

    def _submit_processes(self, batch: Batch, groups: dict[str, _Input], has_labels: bool) -> Future:
        if self._pool is None:  # a run whose batches are all cached never starts them
            self._pool = _start_processes(self.workers, _pickled(self.source, f"the images ({self.source.name})"))
        blob = self._blobs.get(tuple(groups))
        if blob is None:  # input keys name the transforms exactly (input_key), so one pickle per set of keys
            blob = self._blobs[tuple(groups)] = _pickled(groups, "this model's transform")
        try:
            futures = [self._pool.submit(_process_task, batch.index, batch.key, list(items), blob, self.keep,
                                         self.min_side) for items in _process_tasks(batch.indices, self.workers,
                                                                                    self.ahead)]
        except BrokenProcessPool:  # a worker died on an earlier batch: that batch's result says which
            return _failed(_worker_died(batch, self.source))

        def assemble() -> Prepared:
            try:
                results = [f.result() for f in futures]
            except BrokenProcessPool:
                raise _worker_died(batch, self.source) from None
            return _assemble(batch, [(one, None) for ones, _ in results for one in ones], list(groups), self.pin,
                             has_labels, self.keep, chunks=[stacked for _, stacked in results])

        return self._assembler.submit(assemble)

    def close(self) -> None:
        for pool in (self._pool, self._assembler):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def groups_of(models: Sequence) -> dict[str, _Input]:
    """One input group per distinct :func:`input_key` among ``models`` (first model's transform)."""
    out: dict[str, _Input] = {}
    for m in models:
        out.setdefault(input_key(m), _Input(m.in_chans, m.transform))
    return out


def prefetched(batches: Iterable[Batch], plan: Callable[[Batch], tuple[object, Sequence | None]],
               prefetcher: Prefetcher, depth: int = 2) -> Iterator[tuple[Batch, object, Prepared | None]]:
    """Yield ``(batch, planned, prepared)`` in order, with up to ``depth`` batches prepared ahead of the consumer.

    ``plan(batch)`` runs on the calling thread when the batch enters the window and returns ``(anything,
    models)``: ``models`` is None when the batch needs no decoding (everything cached), else the models whose
    inputs to make (possibly none: decode only). ``prepared`` is None exactly when ``models`` was None.
    """
    window: deque = deque()
    it = iter(batches)
    prefetcher.ahead = max(1, depth)

    def fill() -> None:
        while len(window) < max(1, depth):
            batch = next(it, None)
            if batch is None:
                return
            planned, models = plan(batch)
            fut = None if models is None else prefetcher.submit(batch, groups_of(models))
            window.append((batch, planned, fut))

    fill()
    while window:
        batch, planned, fut = window.popleft()
        fill()  # the next batches start before this one is consumed
        yield batch, planned, None if fut is None else fut.result()


def to_device(x, device: str):
    """Host input -> the model's device; asynchronous from pinned memory on CUDA (the forward queues behind it)."""
    if str(device).startswith("cuda"):
        return x.to(device, non_blocking=x.is_pinned())
    return x if str(device) == "cpu" else x.to(device)
