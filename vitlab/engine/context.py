"""The ``Run`` context: where and how an analysis runs, passed to every engine function.

Instead of threading store, progress, precision, shard and reduce through every signature, an engine function
takes ``run: Run`` and reads what it needs. ``Run()`` is a plain single-process run with no cache; the CLI builds
one from its flags (and torchrun's environment), the app from its sidebar.

    run = Run(store=Store(), progress=tqdm_progress("cka"))
    report = vitlab.engine.run.cka([a, b], source, CKAOptions(images=512), run)
    run.info            # what happened: batches computed / from cache, skipped images, forward passes

A run stops where it checks: ``run.check()`` (between batches and inside long steps: a block's gradient, a probe
fit, an ablation's pass, an attribution's order) raises :class:`RunStopped` once ``run.should_stop()`` says so.
The app wires ``should_stop`` to Streamlit's stop and rerun requests (Cancel, a closed tab, another page, another
run); what was computed before the stop is already in the store, so starting again reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar

from ..errors import VitlabError
from ..inputs.cache import Store
from ..progress import Progress


@dataclass
class RunInfo:
    """What a run did: the counts reported in run.json and in the app."""

    batches_computed: int = 0
    batches_from_cache: int = 0
    skipped_images: list[tuple[str, str]] = field(default_factory=list)
    dropped_batches: list[str] = field(default_factory=list)
    seconds: float = 0.0
    forward_passes: dict[str, int] = field(default_factory=dict)  # per model label: batches it had to run
    notices: list[tuple[str, str]] = field(default_factory=list)  # (image, what was done to it: first frame, ...)

    def merge(self, other: "RunInfo") -> None:
        self.batches_computed += other.batches_computed
        self.batches_from_cache += other.batches_from_cache
        self.skipped_images += [s for s in other.skipped_images if s not in self.skipped_images]
        self.notices += [s for s in other.notices if s not in self.notices]
        self.dropped_batches += other.dropped_batches
        self.seconds += other.seconds
        for label, n in other.forward_passes.items():
            self.forward_passes[label] = self.forward_passes.get(label, 0) + n


class RunStopped(Exception):
    """A run was asked to stop (``Run.should_stop``) and stopped at its next check; not an error: the batches done
    before it are in the store. ``where`` says what it was doing."""

    def __init__(self, where: str = ""):
        super().__init__(f"stopped{': ' + where if where else ''}")
        self.where = where


def _no_store() -> Store:
    return Store(None)


@dataclass
class Run:
    """How an analysis runs. Engine functions read these; they never take them as separate keywords.

    - ``store``: the disk cache (``Store(None)``: none);
    - ``progress``: ``cb(done, total, text)`` or None;
    - ``amp``: bf16 autocast on CUDA (goes into every cache key through ``precision``);
    - ``shard``: ``(rank, world)``: this process takes batches rank, rank + world, ... (torch.distributed);
    - ``reduce``: sums accumulator states across ranks in place (None: one process);
    - ``gather``: every rank's object in rank order, for statistics that are not sums (None: ``[obj]``);
      ``gather_ordered`` builds on it: per-batch terms and per-image values of every rank in global batch order;
    - ``info``: filled in as the run goes (shared by every engine call made with this run);
    - ``seed``, ``bootstrap``: resampling for intervals (evidence), where an analysis reports them;
    - ``workers``: threads decoding and transforming images ahead of the forward (vitlab.engine.pipeline);
      ``worker_kind``: "threads" or "processes" (None: ``pipeline.default_kind()``);
    - ``should_stop``: called at every :meth:`check`; True makes the run raise :class:`RunStopped` there (None:
      the run never stops early);
    - ``partial``: ``cb(estimate, done, total)``, called by an analysis that streams batches with its running
      estimate after each batch but the last (:meth:`estimate`): the result it would return had the run stopped
      there, made only when ``partial`` is set. The app draws it in place while the run goes on (issue 51).
    """

    Stopped: ClassVar[type[RunStopped]] = RunStopped  # ``except vitlab.Run.Stopped`` where the app catches it

    store: Store = field(default_factory=_no_store)
    progress: Progress | None = None
    amp: bool = False
    shard: tuple[int, int] = (0, 1)
    reduce: Callable[[Any], Any] | None = None
    gather: Callable[[Any], list] | None = None
    info: RunInfo = field(default_factory=RunInfo)
    seed: int = 0
    bootstrap: int = 200
    workers: int | None = None  # input threads of vitlab.engine.pipeline (None: pipeline.default_workers(); 0: none)
    worker_kind: str | None = None
    should_stop: Callable[[], bool] | None = None
    partial: Callable[[Any, int, int], None] | None = None

    @property
    def precision(self) -> str:
        """The activations' precision, part of every cache key: 'bf16' under autocast, else 'float32'
        (``run.forward_precision`` adds the device kind, and bf16 only where autocast applies: CUDA)."""
        return "bf16" if self.amp else "float32"

    def check(self, where: str = "") -> None:
        """Raise :class:`RunStopped` when :attr:`should_stop` asks for it (cheap: call it between batches and
        inside every step that takes more than a second or so)."""
        if self.should_stop is not None and self.should_stop():
            raise RunStopped(where)

    def step(self, done: int, total: int, text: str) -> None:
        """Say how far the run is (``progress(done, total, text)``), after a :meth:`check`."""
        self.check(text)
        if self.progress is not None:
            self.progress(done, total, text)

    def estimate(self, make: Callable[[], Any], done: int, total: int) -> None:
        """Hand ``make()`` (the result over the first ``done`` of ``total`` batches) to :attr:`partial`; nothing
        when none is set, when ``done`` is 0 or the last batch (the result itself follows), or under torchrun (a
        rank holds only its share of the batches)."""
        if self.partial is not None and 0 < done < total and self.shard[1] == 1:
            self.partial(make(), done, total)

    def with_progress(self, progress: Progress | None) -> "Run":
        """The same run (same store, shard, info) reporting to another progress callback."""
        return replace(self, progress=progress)

    def reduce_accumulators(self, accumulators):
        return accumulators if self.reduce is None else self.reduce(accumulators)

    def gather_objects(self, obj) -> list:
        return [obj] if self.gather is None else self.gather(obj)

    @property
    def is_main(self) -> bool:
        """Rank 0 (or a single process): where single-image parts of an analysis run and outputs are written."""
        return self.shard[0] == 0

    def gather_ordered(self, keyed: list, what: str = "values") -> list:
        """Every rank's ``[(key, value), ...]`` merged into one list of values in key order (keys: global batch
        numbers, or (batch, image) tuples), identical on every rank; in one process the values sorted by key.

        This is how per-batch terms (the bootstrap's unit) and per-image values come together so that every rank
        holds exactly what one process would have, in the same order. ``what`` names them in an error."""
        parts = self.gather_objects(("ordered", what, list(keyed)))
        merged = []
        for rank, part in enumerate(parts):
            if not (isinstance(part, tuple) and len(part) == 3 and part[:2] == ("ordered", what)):
                raise VitlabError(f"rank {rank} did not send its {what}: it left this step of the analysis (look for "
                                  "its message above)")
            merged += part[2]
        keys = [k for k, _ in merged]
        if len(set(keys)) != len(keys):
            raise VitlabError(f"{what}: the same batch came from two ranks; every rank must run the same command")
        return [v for _, v in sorted(merged, key=lambda kv: kv[0])]
