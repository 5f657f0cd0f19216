"""Scale-out with torch.distributed: the same runs over several processes, GPUs and machines.

Every statistic in vitlab is a sum over batches (accumulators merge), so the work splits cleanly. Under
``torchrun --nproc_per_node=K [--nnodes=M ...] -m vitlab <command> ...`` each rank

- processes every WORLD_SIZE-th batch (``run.stream(..., shard=(rank, world))``) on its own device
  (``cuda:LOCAL_RANK``, NCCL; CPU, gloo);
- reads and writes its own batches' entries of the disk cache (diskcache is safe across processes);
- combines its accumulators with the others' (:func:`all_reduce_accumulators`): float64 states that are sums
  are added with one ``all_reduce``; any other accumulator is gathered and folded with its own ``merge``,
  which the accumulator contract makes equal to updating over all batches;
- leaves progress bars and outputs to rank 0.

A command adopts this in a few lines (see ``vitlab.cli.runner.run_analysis``)::

    ctx = dist.context(args)                    # no-op unless WORLD_SIZE > 1; sets args.device per rank
    progress = ctx.progress("name")             # a tqdm bar on rank 0, silent elsewhere
    ... run.stream(..., shard=ctx.shard) / run.cka(..., shard=ctx.shard, reduce=ctx.reduce) ...
    ctx.reduce(accumulators); ctx.reduce_info(info)
    if not ctx.is_main: return 0                # rank 0 alone writes --out

A failure on one rank stops all of them with a message naming the rank: :func:`guard` (around every command in
``cli.main``) announces the failure through the rendezvous store, and a watcher thread on every other rank exits
within about a second of seeing it, instead of waiting in a collective. Collectives also time out after
``VITLAB_DIST_TIMEOUT`` seconds (default 1800) when a rank dies without a word (killed, machine lost).
"""

from __future__ import annotations

import copy
import datetime
import os
import re
import sys
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import numpy as np

from ..errors import VitlabError
from ..inputs.models import default_device  # noqa: F401 - re-exported: vitlab.engine.dist.default_device stays valid
from ..progress import silent_progress, tqdm_progress

DEFAULT_TIMEOUT_S = 1800.0  # the gloo default; raise it when ranks' caches are very uneven (waiting ranks idle)
WATCH_INTERVAL_S = 1.0
STORE_TIMEOUT_S = 30  # the watcher's store calls: longer, and a rank whose peer has gone waits that long to exit


class PeerLost(VitlabError):
    """A collective broke or timed out: another rank stopped, died or is stuck."""


@dataclass(frozen=True)
class Context:
    """This process's place in the run: rank, world size, local device index and backend (None: one process)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def shard(self) -> tuple[int, int]:
        """``(rank, world)`` for ``run.stream``/``run.cka``: this rank takes batches rank, rank + world, ..."""
        return (self.rank, self.world)

    def reduce(self, accumulators):
        """Combine accumulators across ranks in place (a no-op in one process); returns them."""
        return all_reduce_accumulators(accumulators) if self.distributed else accumulators

    def reduce_info(self, info):
        """Combine the ranks' ``RunInfo`` counts in place (a no-op in one process); returns it."""
        return reduce_run_info(info) if self.distributed else info

    def gather(self, obj: Any) -> list:
        """Every rank's ``obj`` in rank order (``[obj]`` in one process), for statistics that are not sums."""
        return gather_objects(obj) if self.distributed else [obj]

    def progress(self, desc: str):
        """A progress callback: a tqdm bar on rank 0, silent on the other ranks; both have ``.close()``."""
        if self.is_main:
            return tqdm_progress(desc if not self.distributed else f"{desc} (rank 0 of {self.world})")
        return silent_progress()


# ---------------------------------------------------------------- environment and set-up


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    if not text:
        return default
    if not text.strip().isdigit():
        raise VitlabError(f"environment variable {name}={text!r} must be a non-negative integer (torchrun sets it)")
    return int(text)


def world_size() -> int:
    """WORLD_SIZE as set by torchrun (1 when unset)."""
    return max(1, _env_int("WORLD_SIZE", 1))


def local_rank() -> int:
    return _env_int("LOCAL_RANK", 0)


def _device_for(requested: str | None) -> str:
    """Map ``--device`` to this rank's device: auto, and cuda when CUDA is present, mean this rank's GPU."""
    import torch

    if requested in (None, "", "auto") or (requested == "cuda" and torch.cuda.is_available()):
        return default_device()
    if requested.startswith("cuda:") and _env_int("LOCAL_WORLD_SIZE", 1) > 1:
        raise VitlabError(f"--device {requested} would put every rank of this machine on one GPU: under torchrun "
                          "use --device auto (each rank takes cuda:LOCAL_RANK), or limit CUDA_VISIBLE_DEVICES")
    return requested


def _backend_for(device: str) -> str:
    chosen = os.environ.get("VITLAB_DIST_BACKEND") or ("nccl" if device.startswith("cuda") else "gloo")
    if chosen not in ("nccl", "gloo"):
        raise VitlabError(f"VITLAB_DIST_BACKEND={chosen!r}: use nccl (GPUs) or gloo (CPU)")
    return chosen


def _timeout() -> datetime.timedelta:
    text = os.environ.get("VITLAB_DIST_TIMEOUT", "")
    try:
        seconds = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise VitlabError(f"VITLAB_DIST_TIMEOUT={text!r} must be a positive number of seconds")
    return datetime.timedelta(seconds=seconds)


_CONTEXT: Context | None = None
_WATCH: "_Watcher | None" = None


def context(args=None) -> Context:
    """This process's :class:`Context`; under torchrun (WORLD_SIZE > 1) the process group is set up on first call.

    With ``args`` (argparse namespace), ``args.device`` is mapped to this rank's device (``auto``/``cuda`` ->
    ``cuda:LOCAL_RANK``) before models are loaded.
    """
    global _CONTEXT
    requested = getattr(args, "device", "auto") if args is not None else "auto"
    device = _device_for(requested) if world_size() > 1 else requested
    if args is not None and hasattr(args, "device"):
        args.device = device
    if _CONTEXT is None:
        _CONTEXT = _init(device) if world_size() > 1 else Context()
    return _CONTEXT


def _init(device: str) -> Context:
    import torch
    import torch.distributed as tdist

    rank, world, local = _env_int("RANK", 0), world_size(), local_rank()
    backend = _backend_for(device)
    if backend == "nccl" and not torch.cuda.is_available():
        raise VitlabError(f"rank {rank}: the NCCL backend needs CUDA, which this process does not see; run on CPU "
                          "with --device cpu (gloo), or set VITLAB_DIST_BACKEND=gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(device.split(":")[1]) if device.startswith("cuda:") else local)
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "RANK") if not os.environ.get(k)]
    if missing:
        raise VitlabError(f"WORLD_SIZE={world} is set but {', '.join(missing)} is not: launch several processes "
                          "with torchrun (README: 'Running on several GPUs or machines'), "
                          "or unset WORLD_SIZE for one process")
    if not tdist.is_available():
        raise VitlabError("this torch build has no torch.distributed: install a standard torch wheel")
    try:
        tdist.init_process_group(backend, timeout=_timeout())
    except (RuntimeError, ValueError) as e:
        raise VitlabError(f"rank {rank} of {world}: cannot join the process group at "
                          f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} ({backend}): {e}") from e
    _start_watcher(rank, world)
    return Context(rank, world, local, backend)


def is_main() -> bool:
    """True on rank 0 (and in a single process)."""
    return (_CONTEXT or Context(_env_int("RANK", 0), world_size())).is_main


def shard() -> tuple[int, int]:
    """``(rank, world)`` of this process: pass it as ``shard=`` to ``run.stream``/``run.cka``."""
    ctx = _CONTEXT or Context(_env_int("RANK", 0), world_size())
    return ctx.shard


# ---------------------------------------------------------------- combining results across ranks


def _as_list(accumulators) -> list:
    if isinstance(accumulators, dict):
        return list(accumulators.values())
    if isinstance(accumulators, (list, tuple)):
        return list(accumulators)
    return [accumulators]


def _state_is_sum(acc) -> bool:
    """Whether every array in ``acc.state()`` is a sum over batches (then the ranks' states simply add)."""
    from ..stats.cka import MinibatchCKA

    flag = getattr(acc, "state_is_sum", None)
    return bool(flag) if flag is not None else isinstance(acc, MinibatchCKA)


def all_reduce_accumulators(accumulators):
    """Combine accumulators (a dict, a list, or one) across ranks in place, identically on every rank.

    Accumulators whose ``state()`` arrays are all sums (``MinibatchCKA``, or any class with ``state_is_sum =
    True``) are added with one float64 ``all_reduce``; the rest are gathered and folded in rank order with their
    own ``merge``. Every rank must pass accumulators of the same kinds and shapes in the same order.
    Accumulators that keep their per-batch terms (``keyed_terms()`` / ``load_keyed_terms()``, e.g.
    ``evidence.BootstrapCKA``, ``similarity.PairAccumulator``) instead get every rank's terms in global batch order
    and add them up again in that order: their sums, intervals and permutation nulls are a single process's to the
    last bit (so values that tie in one process still tie, and whatever ranks them ranks them alike).
    """
    items = _as_list(accumulators)
    layouts = _check_same_layout(items)
    keyed = [hasattr(a, "keyed_terms") for a in items]
    _gather_keyed_terms([a for a, k in zip(items, keyed) if k])
    layouts = [[lay[i] for i, k in enumerate(keyed) if not k] for lay in layouts]
    items = [a for a, k in zip(items, keyed) if not k]
    # an accumulator still empty on some rank (it got no batch: more ranks than batches, or all its images were
    # unreadable) cannot join the elementwise sum; it is merged instead and contributes nothing
    empty_somewhere = [any(_EMPTY in dict(lay[i][1]).values() for lay in layouts) for i in range(len(items))]
    summed = [a for a, e in zip(items, empty_somewhere) if _state_is_sum(a) and not e]
    if summed:
        _sum_states(summed)
    merged = [a for a, e in zip(items, empty_somewhere) if not _state_is_sum(a) or e]
    if merged:
        _merge_states(merged)
    return accumulators


_EMPTY = "empty"  # the layout of a state entry that is None: nothing accumulated yet


def _gather_keyed_terms(items: list) -> None:
    """One gather of every accumulator's ``(batch key, terms)``; each gets all ranks' terms in key order."""
    if not items:
        return
    per_rank = gather_objects([a.keyed_terms() for a in items])
    for i, acc in enumerate(items):
        merged = sorted((kv for part in per_rank for kv in part[i]), key=lambda kv: kv[0])
        keys = [k for k, _ in merged]
        if len(set(keys)) != len(keys):
            raise VitlabError(f"{type(acc).__name__}: two ranks sent terms of the same batch; every batch term "
                              "needs its global batch number as its key")
        acc.load_keyed_terms(merged)


def _layout(items: list) -> list:
    return [(type(a).__name__, sorted((k, _EMPTY if v is None else np.shape(v)) for k, v in a.state().items()))
            for a in items]


def _check_same_layout(items: list) -> list:
    """Every rank's layouts (gathered); they must agree wherever both ranks accumulated something."""
    layouts = gather_objects(_layout(items))
    for r, other in enumerate(layouts):
        if not all(_compatible(a, b) for a, b in zip(other, layouts[0])) or len(other) != len(layouts[0]):
            raise VitlabError(f"rank {r} built accumulators unlike rank 0's ({other} vs {layouts[0]}): every rank "
                              "must run the same command with the same models, taps and options")
    return layouts


def _compatible(a, b) -> bool:
    # an empty side contributes nothing and takes the other's shape
    empty = any(v == _EMPTY for _, v in a[1] + b[1])
    return a[0] == b[0] and [k for k, _ in a[1]] == [k for k, _ in b[1]] and (empty or a[1] == b[1])


def _sum_states(items: list) -> None:
    states = [a.state() for a in items]
    parts = [(i, k, np.asarray(v)) for i, s in enumerate(states) for k, v in sorted(s.items())]
    flat = np.concatenate([v.astype(np.float64).ravel() for _, _, v in parts]) if parts else np.zeros(0)
    total = all_reduce_sum(flat)
    offset = 0
    new = [dict(s) for s in states]
    for i, k, v in parts:
        chunk = total[offset:offset + v.size].reshape(v.shape)
        offset += v.size
        # integer counts travel as float64, exact below 2**53
        new[i][k] = np.rint(chunk).astype(v.dtype) if np.issubdtype(v.dtype, np.integer) else chunk
    for a, s in zip(items, new):
        a.load_state(s)


def _merge_states(items: list) -> None:
    per_rank = gather_objects([a.state() for a in items])
    for i, acc in enumerate(items):
        total = None
        for states in per_rank:
            if any(v is None for v in states[i].values()):
                continue  # this rank accumulated nothing
            if total is None:
                total = _loaded(acc, states[i])
            else:
                total.merge(_loaded(acc, states[i]))
        if total is not None:  # every rank empty: nothing to combine, the accumulator stays empty everywhere
            acc.load_state(total.state())


def _loaded(template, state):
    fresh = copy.deepcopy(template)
    fresh.load_state(state)
    return fresh


def all_reduce_sum(values: np.ndarray) -> np.ndarray:
    """Elementwise float64 sum of ``values`` over all ranks (on this rank's GPU under NCCL)."""
    import torch
    import torch.distributed as tdist

    device = f"cuda:{torch.cuda.current_device()}" if _CONTEXT and _CONTEXT.backend == "nccl" else "cpu"
    t = torch.as_tensor(np.ascontiguousarray(values, dtype=np.float64), device=device)
    with _collective("all_reduce"):
        tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
    return t.cpu().numpy()


def gather_objects(obj: Any) -> list:
    """Every rank's picklable ``obj``, in rank order, on every rank."""
    import torch.distributed as tdist

    if not (tdist.is_available() and tdist.is_initialized()):
        return [obj]
    out: list = [None] * tdist.get_world_size()
    with _collective("all_gather"):
        tdist.all_gather_object(out, obj)
    return out


@contextmanager
def _collective(what: str) -> Iterator[None]:
    """Turn a broken or timed-out collective into a message that says what probably happened."""
    try:
        yield
    except VitlabError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PeerLost(f"{what} across ranks failed ({first[:300]}): another rank stopped or is stuck; look for "
                          "its message above, or for a process killed for memory. A rank that is only slow "
                          "(uneven cache) needs a larger VITLAB_DIST_TIMEOUT (seconds)") from e


def reduce_run_info(info):
    """Combine the ranks' ``run.RunInfo`` in place: counts summed, skipped images and dropped batches gathered
    (dropped batches in batch order), seconds the slowest rank's."""
    per_rank = gather_objects(asdict(info))
    info.batches_computed = sum(p["batches_computed"] for p in per_rank)
    info.batches_from_cache = sum(p["batches_from_cache"] for p in per_rank)
    skipped: list = []
    for p in per_rank:
        skipped += [tuple(s) for s in p["skipped_images"] if tuple(s) not in skipped]
    info.skipped_images = skipped
    info.notices = list(dict.fromkeys(tuple(s) for p in per_rank for s in p.get("notices", ())))
    info.dropped_batches = sorted((d for p in per_rank for d in p["dropped_batches"]), key=_batch_number)
    info.seconds = max(p["seconds"] for p in per_rank)
    info.forward_passes = {}
    for p in per_rank:
        for label, n in p.get("forward_passes", {}).items():
            info.forward_passes[label] = info.forward_passes.get(label, 0) + n
    return info


def _batch_number(text: str) -> tuple[int, str]:
    m = re.match(r"batch (\d+)", text)
    return (int(m.group(1)) if m else -1, text)


# ---------------------------------------------------------------- failure and clean-up


class _Watcher:
    """Announces this rank's failure through the rendezvous store and exits when another rank announces one."""

    def __init__(self, rank: int, world: int):
        import torch.distributed as tdist

        self.rank, self.world = rank, world
        run = os.environ.get("TORCHELASTIC_RUN_ID", "none")
        self.prefix = f"vitlab/{run}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"  # fresh per restart
        self.store = tdist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                    timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S), wait_for_workers=False)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="vitlab-dist-watcher", daemon=True)
        self.thread.start()

    def announce(self, message: str) -> None:
        with self.lock:
            self.store.set(f"{self.prefix}/failed/{self.rank}", message)
            self.store.add(f"{self.prefix}/failures", 1)

    def _failure(self) -> str | None:
        with self.lock:
            if self.store.add(f"{self.prefix}/failures", 0) == 0:
                return None
            for r in range(self.world):
                key = f"{self.prefix}/failed/{r}"
                if r != self.rank and self.store.check([key]):
                    return self.store.get(key).decode(errors="replace")
        return None

    def _watch(self) -> None:
        while not self.stop.wait(WATCH_INTERVAL_S):
            try:
                message = self._failure()
            except Exception:  # the store is gone (its host exited): the collectives themselves fail or time out
                return
            if message is not None and not self.stop.is_set():
                print(f"vitlab: error: {message}; stopping rank {self.rank} of {self.world}",
                      file=sys.stderr, flush=True)
                os._exit(1)  # the main thread may be blocked inside a collective that never completes


def _start_watcher(rank: int, world: int) -> None:
    global _WATCH
    try:
        _WATCH = _Watcher(rank, world)
    except (RuntimeError, ValueError):  # no reachable store: failures are then caught by torchrun or the timeout
        _WATCH = None


_AT_BATCH: int | None = None  # the batch this rank is working on (run.stream, and engines that plan their own)


def at_batch(index: int | None) -> None:
    """Record the global number of the batch this rank is computing, so that a failure names it."""
    global _AT_BATCH
    _AT_BATCH = index


def _describe(e: BaseException) -> str:
    ctx = _CONTEXT or Context()
    what = str(e) if isinstance(e, VitlabError) else f"{type(e).__name__}: {e}"
    if isinstance(e, PeerLost):
        return f"rank {ctx.rank} of {ctx.world} stopped: {what}"
    where = f" at batch {_AT_BATCH}" if _AT_BATCH is not None else ""
    return f"rank {ctx.rank} of {ctx.world} failed{where}: {what}"


@contextmanager
def guard() -> Iterator[None]:
    """Run a command: on success, tear the process group down; on failure, tell the other ranks and name the rank.

    A no-op for a single process. A ``VitlabError`` comes out re-worded with the rank; anything else is re-raised
    after a line naming the rank (its traceback follows).
    """
    try:
        yield
    except BaseException as e:
        if _CONTEXT is None or not _CONTEXT.distributed:
            raise
        _announce(_describe(e))
        # no destroy_process_group here: a peer may sit in a collective, and tearing NCCL down could block
        if isinstance(e, VitlabError):
            raise VitlabError(_describe(e)) from e
        print(f"vitlab: {_describe(e)}", file=sys.stderr, flush=True)
        raise
    else:
        finish()


def _announce(message: str) -> None:
    if _WATCH is None:
        return
    _WATCH.stop.set()
    try:
        _WATCH.announce(message)
    except Exception as e:  # noqa: BLE001 - the store may be gone; torchrun or the timeout stops the others
        print(f"vitlab: could not tell the other ranks ({e})", file=sys.stderr, flush=True)


def finish() -> None:
    """Wait for every rank, stop the watcher and destroy the process group (a no-op in one process)."""
    global _CONTEXT, _WATCH, _AT_BATCH
    import torch.distributed as tdist

    _AT_BATCH = None
    if _CONTEXT is None or not _CONTEXT.distributed:
        _CONTEXT = None
        return
    if tdist.is_initialized():
        with _collective("the final barrier"):
            tdist.barrier()  # rank 0 may host the store: nobody leaves while another rank still needs it
    if _WATCH is not None:
        _WATCH.stop.set()
        # wait for the watcher to leave the store for good: a thread still inside the store's C++ call when the
        # interpreter exits ends the rank with "terminate called without an active exception" (seen on a busy
        # machine, where a store call outlasted a 2-s join); the store's own timeout bounds the wait
        _WATCH.thread.join(timeout=STORE_TIMEOUT_S + 5)
        _WATCH = None
    if tdist.is_initialized():
        tdist.destroy_process_group()
    _CONTEXT = None

