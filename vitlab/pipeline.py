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

``workers=0`` prepares inputs on the calling thread when asked (no threads): the serial reference.
Axis letters: B images in a batch, C channels, H x W pixels.
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from .data import Batch, ImageSource, decode, transform_image
from .errors import VitlabError
from .evaltransform import per_object

MAX_DEFAULT_WORKERS = 16
TASK_IMAGES = 4  # images per worker task, fewer when a batch would otherwise not reach every worker
_KEY_TEXT: "weakref.WeakKeyDictionary[object, str]" = weakref.WeakKeyDictionary()  # transform -> its input key text
_default_workers: int | None = None  # set by the CLI's --workers (and the app); None: a function of the cores


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
        return check_workers(env)
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, min(MAX_DEFAULT_WORKERS, cores() // local))


def check_workers(value) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = -1
    if n < 0:
        raise VitlabError(f"--workers must be a non-negative integer (0: prepare inputs on the main thread), "
                          f"not '{value}'")
    return n


def set_default_workers(n: int | None) -> None:
    """The process-wide default of :func:`default_workers` (None: back to a function of the cores)."""
    global _default_workers
    _default_workers = None if n is None else check_workers(n)


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


def _tasks(indices: Sequence[int], workers: int) -> list[Sequence[int]]:
    """``indices`` cut into runs of :data:`TASK_IMAGES`, shorter when that would leave a worker without one."""
    size = max(1, min(TASK_IMAGES, len(indices) // max(1, workers)))
    return [indices[k:k + size] for k in range(0, len(indices), size)]


def _assemble(batch: Batch, parts: list, keys: Sequence[str], pin: bool, has_labels: bool, keep: bool) -> Prepared:
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
        xs = [x[k] for _, x in parts if x]
        if not xs:
            continue
        x = torch.stack(xs)  # (B, C, H, W)
        inputs[k] = x.pin_memory() if pin else x
    return Prepared(batch, inputs)


class Prefetcher:
    """Prepares batches in ``workers`` threads: :meth:`submit` returns a future of the :class:`Prepared` batch at once.

    ``pin=True`` (CUDA) puts each batch's input in page-locked memory, so the copy to the device can be
    ``non_blocking`` and overlap with the forward of the batch before it. ``keep_images=False`` drops each decoded
    image once it is transformed (``batch.images`` is None): a 500x375 RGB image is as big as its 224 px input.
    """

    def __init__(self, source: ImageSource, workers: int | None = None, pin: bool = False, keep_images: bool = True,
                 min_side: int | None = None):
        self.source, self.pin, self.keep, self.min_side = source, pin, keep_images, min_side
        self.workers = default_workers() if workers is None else check_workers(workers)
        self._pool = ThreadPoolExecutor(self.workers, "vitlab-input", initializer=_one_thread) if self.workers else None
        self._assembler = ThreadPoolExecutor(1, "vitlab-assemble", initializer=_one_thread) if self.workers else None

    def submit(self, batch: Batch, groups: dict[str, _Input]) -> Future:
        """Start decoding ``batch`` and transforming it for every group (``{}``: decode only, e.g. for its ids)."""
        has_labels = self.source.has_labels
        if self._pool is None:
            done: Future = Future()
            parts = [_prepare_image(self.source, batch, i, groups, self.keep, self.min_side) for i in batch.indices]
            done.set_result(_assemble(batch, parts, list(groups), self.pin, has_labels, self.keep))
            return done
        futures = [self._pool.submit(_prepare_images, self.source, batch, items, groups, self.keep, self.min_side)
                   for items in _tasks(batch.indices, self.workers)]
        return self._assembler.submit(lambda: _assemble(batch, [p for f in futures for p in f.result()], list(groups),
                                                        self.pin, has_labels, self.keep))

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
