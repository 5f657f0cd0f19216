"""Compute and saved results: cached models, sources and the store, the warm start, errors in place, and
:func:`compute` (progress with Cancel, results remembered per session and saved whole to the disk cache)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import streamlit as st

import vitlab
from vitlab.engine import hostmem
from vitlab.tour import saved

from .state import DEFAULTS, MEMO_SIZE, SOURCES, UPLOADS, Settings
from .text import md_plain


def weights_status(spec: str) -> str:
    """Where a spec's weights come from, in words (``vitlab.models.weights_status``)."""
    return vitlab.models.weights_status(spec)


def download_weights(spec: str, bar) -> None:
    """Fetch a pretrained spec's weights into the hub cache, drawing the bytes on a Streamlit progress bar."""
    def progress(done: int, total: int, text: str) -> None:
        bar.progress(min(1.0, done / total) if total else 0.0, text=text)

    vitlab.models.download_weights(spec, progress)


def loaded_bytes() -> int:
    """The memory the models loaded on this server hold (all sessions share them), for the models budget."""
    return sum(vitlab.models.size(spec).bytes for spec, _ in list(_loaded_registry().keys()))


def model_cost(spec: str) -> tuple[str, bool]:
    """What loading ``spec`` would cost, in words, and whether it fits this server (sized on the meta device, nothing
    built): '86.6 M parameters (330 MiB in float32); random weights'. VitlabError when it is no model."""
    size = vitlab.models.size(spec)
    words = f"{size.words}; {weights_status(spec)}"
    try:
        vitlab.models.check_fits(spec, loaded_bytes=loaded_bytes())
    except vitlab.VitlabError as e:  # its words say the size too
        return str(e), False
    return words, True


DATASET_MB = {"cifar10": 163, "cifar100": 161}  # torchvision's archives (python versions), downloaded once


def source_cost(text: str) -> tuple[str, bool]:
    """What opening the image source ``text`` of a link would do, in words, and whether it may (a folder only under
    the server's image folders, VITLAB_FOLDERS)."""
    head = text.split(":")[0]
    if head in DATASET_MB:
        return (f"the {head.upper().replace('CIFAR', 'CIFAR-')} data set: read from this machine when it is there, "
                f"else a download of about {DATASET_MB[head]} MB"), True
    if head in ("fashion-mnist", "fmnist"):
        return "Debian's Fashion-MNIST files on this machine", True
    return f"the images of the folder {vitlab.folders.check_folder(text)} on this server", True


@st.cache_resource(show_spinner=False)
def store() -> vitlab.Store:
    try:
        return vitlab.Store("default")
    except vitlab.VitlabError as e:  # e.g. a bad VITLAB_CACHE_GB: the lab still works, uncached, and says so
        off = vitlab.Store(None)
        off.warnings.append(f"disk cache off: {e}")
        return off


@st.cache_resource(show_spinner=False)
def _loaded_registry() -> weakref.WeakValueDictionary:
    """(spec, device) -> the loaded model, while the model cache holds it (an evicted model leaves by itself)."""
    return weakref.WeakValueDictionary()


@st.cache_resource(show_spinner=False, max_entries=8)
def _load(spec: str, device: str) -> vitlab.LoadedModel:
    # sized against the free memory and the models budget before anything is built (vitlab.models.check_fits)
    loaded = vitlab.load(spec, None if device == "auto" else device, loaded_bytes=loaded_bytes())
    _loaded_registry()[(spec, loaded.device)] = loaded
    return loaded


def model(spec: str, device: str, display: str | None = None) -> vitlab.LoadedModel:
    """A loaded model, shared between sessions (keyed by spec and device); weights to fetch show a progress bar."""
    if not spec:
        raise vitlab.VitlabError("no model chosen: pick one in the sidebar, or type a timm model name")
    if weights_status(spec) == "download needed":
        bar = st.progress(0.0, text=f"{spec}: its weights need a download")
        download_weights(spec, bar)
        bar.empty()
    with st.spinner(f"Loading {spec}…"):
        loaded = _load(spec, device)
    _run_state()["models"][(spec, loaded.device)] = loaded.fingerprint  # part of the keys of saved results
    # a copy that shares the module: the label is per use, the cached object stays untouched
    return dataclasses.replace(loaded, display=display) if display else loaded


def models(s: Settings) -> tuple[vitlab.LoadedModel, vitlab.LoadedModel]:
    """Model A and model B; the same spec twice is labelled 'A' and 'B' so their tables stay apart."""
    same = s.model_a == s.model_b
    a = model(s.model_a, s.device, f"{s.model_a} (A)" if same else None)
    b = model(s.model_b, s.device, f"{s.model_b} (B)" if same else None)
    return a, b


@st.cache_resource(show_spinner=False, max_entries=4)
def _dataset(text: str) -> vitlab.ImageSource:
    return vitlab.open_source(text)


def source(s: Settings) -> vitlab.ImageSource:
    if s.source == UPLOADS:
        return vitlab.uploads_source(s.uploads)
    if s.source in SOURCES:
        return _dataset(s.source)
    if not s.source:
        raise vitlab.VitlabError("no folder given: type the path of a folder of images in the sidebar")
    # a folder only under the server's image folders (VITLAB_FOLDERS), never '/' or '..'; its listing is bounded and
    # remembered until a folder in it changes (new files are seen; vitlab.inputs.folders), so a rerun walks nothing
    return vitlab.open_source(s.source, checked=True)


def named_source(text: str) -> vitlab.ImageSource:
    """A dataset or folder by name (the bundled datasets cached), e.g. a page's reference set."""
    if not text:
        raise vitlab.VitlabError("no folder given: type the path of a folder of images")
    return _dataset(text) if text in SOURCES else vitlab.open_source(text, checked=True)  # a folder: as source()


WARMUP_ENV = "VITLAB_WARMUP"  # 0: nothing is warmed in the background (the bench's baseline)


# what a first page needs besides Streamlit, slowest first (a fresh process on a loaded 2-core machine, issue 34):
# timm (torchvision, torch._dynamo: ~3-7 s), torch (~1-4 s), scipy.stats (the first interval: ~1-4 s), the engine
WARM_MODULES = ("torch", "timm", "timm.data", "scipy.stats", "pandas", "altair", "pyarrow", "vitlab.inputs.models",
                "vitlab.inputs.taps", "vitlab.engine.run", "vitlab.stats.evidence", "vitlab.analyses.similarity",
                "vitlab.analyses.sensitivity", "vitlab.tour.measure", "vitlab.charts.cka", "vitlab.charts.tour",
                "vitlab.charts.evidence", "vitlab.tour.report")


_warm_lock = threading.Lock()


_warm_thread: list[threading.Thread] = []


# set when the warm-up thread's imports are done: until then a page's run waits for them rather than importing the
# same modules beside it (two threads importing timm at once can each see the other's half-made module:
# "partially initialized module 'timm.data'", issue 51)
_imports_done = threading.Event()
IMPORT_WAIT = 300.0  # seconds: a hung import never hangs a page for longer; the page then imports on its own


def wait_for_warm_imports() -> None:
    """Before a page runs: wait until the warm-up thread (when one runs) has imported its modules."""
    if _warm_thread and not _imports_done.is_set() and threading.current_thread() is not _warm_thread[0]:
        _imports_done.wait(IMPORT_WAIT)


def warm_up() -> threading.Thread | None:
    """Import the heavy libraries and load the default models and images in a background thread, once per process
    (``VITLAB_WARMUP=0``: never; under pytest only with ``VITLAB_WARMUP=1``), so that the first page of a new server
    does not wait for them. Started after the entrypoint's first run and, with ``streamlit run app/serve.py``,
    when the server starts; a page that needs a
    module or model meanwhile waits for the same import or load (Python's import lock, ``st.cache_resource``)
    instead of doing it twice. Returns the thread (None when off or already started)."""
    setting = os.environ.get(WARMUP_ENV, "").strip()
    if setting == "0" or (not setting and "PYTEST_CURRENT_TEST" in os.environ):  # tests ask for it by name
        return None
    with _warm_lock:
        if _warm_thread:
            return None
        _warm_thread.append(threading.Thread(target=_warm, name="vitlab-warm-up", daemon=True))
    _warm_thread[0].start()
    return _warm_thread[0]


def _warm() -> None:
    import importlib
    import logging

    log = logging.getLogger("vitlab.warm_up")
    t0 = time.perf_counter()
    try:
        for name in WARM_MODULES:
            try:
                importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - warming is an optimisation: the page reports any real problem
                log.warning("warm-up: import %s failed (%s)", name, e)
    finally:
        _imports_done.set()
    try:
        store()
        saved.code_fingerprint()
        if DEFAULTS["source"] in SOURCES:
            _dataset(DEFAULTS["source"])
        for spec in dict.fromkeys((DEFAULTS["model_a"], DEFAULTS["model_b"])):
            if spec and weights_status(spec) != "download needed":  # never a download nobody asked for
                _load(spec, DEFAULTS["device"])
    except Exception as e:  # noqa: BLE001 - e.g. a bad VITLAB_MODEL_A: the page says so in place
        log.warning("warm-up: %s: %s", type(e).__name__, e)
    print(f"vitlab: warm-up done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def guard():
    """Show an error in place, in words, and let the rest of the page run on."""
    try:
        yield
    except vitlab.VitlabError as e:  # its words may name what came from outside: shown as written
        st.error(md_plain(str(e), lines=True))
    except MemoryError:
        st.error("Out of memory: lower the batch size or the number of images in the sidebar.")
    except RuntimeError as e:
        if "out of memory" in str(e).lower():
            st.error("Out of memory: lower the batch size or the number of images in the sidebar.")
        else:
            _unexpected(e)
    except Exception as e:  # noqa: BLE001 - anything else is still shown in place, never a dead page
        _unexpected(e)


def _unexpected(e: Exception) -> None:
    if os.environ.get("VITLAB_STRICT") == "1":  # tests: a crash must fail them, not read as an error in words
        raise e
    st.error(f"Unexpected error ({type(e).__name__}): {md_plain(str(e), lines=True)}")
    with st.expander("Details"):
        st.code(traceback.format_exc())


def _memo() -> dict:
    return st.session_state.setdefault("lab.memo", {})


def _cancel(flag: str) -> None:
    st.session_state[flag] = True


def stop_requested() -> Callable[[], bool]:
    """``Run.should_stop`` of this script run: True once Streamlit was asked to stop it (the tab closed: the session
    disconnects and stops its script) or to run the script again (Cancel, another page, a changed widget: a rerun
    that replaces this one). Streamlit itself only acts on such a request at the script's next call into Streamlit; the
    engine checks this between batches and inside its long steps, so the work stops there (issue 51).

    Reads the request without taking it (``ScriptRequests._state``, Streamlit 1.67: a private field, read only; a
    fragment's rerun that does not replace the whole script does not stop it, as in Streamlit's own
    ``on_scriptrunner_yield``). Outside a script run (tests, bare mode): never."""
    from streamlit.runtime.scriptrunner_utils import script_requests as sr
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    requests = getattr(get_script_run_ctx(suppress_warning=True), "script_requests", None)
    if requests is None or not hasattr(requests, "_state"):
        return lambda: False

    def should_stop() -> bool:
        state = requests._state
        if state == sr.ScriptRequestType.STOP:
            return True
        if state != sr.ScriptRequestType.RERUN:
            return False
        data = requests._rerun_data
        return not sr._fragment_run_should_not_preempt_script(data.fragment_id_queue, data.is_fragment_scoped_rerun)

    return should_stop


PERSIST_ENV = "VITLAB_PERSIST"  # 0: whole results are not kept on disk (only per session); the bench's baseline


def persisting() -> bool:
    """Whether whole results are saved to and read from the disk cache (``VITLAB_PERSIST``, default on)."""
    return os.environ.get(PERSIST_ENV, "1").strip() != "0"


def begin_run() -> None:
    """Start of a script run (the entrypoint calls it first): the clock of the caption's page time, and the models
    this run loads (their fingerprints go into the keys of saved results)."""
    st.session_state["lab.run"] = {"t0": time.perf_counter(), "models": {}, "origins": {}, "worked": False,
                                  "cpu0": time.thread_time()}


# Streamlit collects garbage over the whole heap after every script run (runner.postScriptGC). With torch, timm and
# the models in the heap that is ~0.22 s of CPU a run on this 2-core machine: nine tenths of a Lecture-page click
# (bench/class_bench.py, issue 47), paid by every student's every click. The app turns it off (where no config file,
# flag or variable chose it) and collects the whole heap itself after a run that did work: a computation, or a run
# that took more than GC_AFTER_S of its thread's CPU (an upload decoded, a model loaded; CPU, not wall time, so that a
# busy server's slow runs do not each add a collection). A run that only reads and draws leaves its little garbage to
# Python's own young-generation collections.
GC_AFTER_S = 1.0


def own_collection() -> None:
    """Take over Streamlit's collection after each run (:func:`end_run` does it where a run did work)."""
    from streamlit import config

    if not config.is_manually_set("runner.postScriptGC"):
        config.set_option("runner.postScriptGC", False, "vitlab: a full collection only after a run that did work")


def end_run() -> bool:
    """End of a script run (the entrypoint's ``finally``): the full collection Streamlit would have made, where this
    run did work (:data:`GC_AFTER_S`) and Streamlit does not make it itself. True when it collected."""
    from streamlit import config

    run = _run_state()
    if config.get_option("runner.postScriptGC"):
        return False
    if run["worked"] or time.thread_time() - run.get("cpu0", 0.0) > GC_AFTER_S:
        gc.collect(2)
        return True
    return False


def _run_state() -> dict:
    if "lab.run" not in st.session_state:  # a page run without the entrypoint (never in the app)
        begin_run()
    return st.session_state["lab.run"]


def _disk_key(key: tuple) -> str:
    """The disk-cache key of a page's result: its memo key (settings, options) with the fingerprints of the models
    loaded in this run, the weights files the key names, the zoo's checkpoints, vitlab's source and versions."""
    models = sorted([spec, device, fp] for (spec, device), fp in _run_state()["models"].items())
    return saved.result_key(saved.plain(key), models, saved.files_key(key))


def _carried(result: Any) -> Any:
    """The object :func:`run_caption` is given for ``result``: its ``RunInfo`` (``result.info``, or the RunInfo of a
    tuple such as Many models' ``(result, run.info)``), else the result itself (e.g. one model's attention distances)."""
    info = getattr(result, "info", None)
    if info is None and isinstance(result, tuple):
        info = next((x for x in result if isinstance(x, vitlab.RunInfo)), None)
    return result if info is None else info


def _note(result: Any, origin: str, ran: Any = None) -> None:
    """Remember where a result came from, when the page had it and, when it ran now, what the run did (``ran``: the
    run's RunInfo), for :func:`run_caption`."""
    if result is not None:
        run = _run_state()
        run["origins"][id(_carried(result))] = (origin, time.perf_counter() - run["t0"], ran)


def _remember(memo: dict, key: tuple, result: Any) -> None:
    memo[key] = result
    while len(memo) > MEMO_SIZE:
        memo.pop(next(iter(memo)))


def compute(key: tuple, fn: Callable[[vitlab.Run], Any], label: str, persist: bool = True,
            expect: type | tuple | None = None, early: Callable[[Any, int, int], None] | None = None) -> Any:
    """``fn(run)`` (a ``vitlab.Run`` with the disk cache and a progress bar) with a Cancel button; remembered per
    session under ``key`` and, when the result can be saved as data (``vitlab.tour.saved``; ``persist`` and
    ``VITLAB_PERSIST`` allowing), kept in the disk cache, so that a new session or a restarted server reads it
    back instead of running ``fn`` again.

    A saved result is read as untrusted input (``saved.load``: its checksum, its fields' types, ``expect``: the class
    of the result, or a tuple of classes); one that fails is recomputed and the run's caption says so.
    Cancel reruns the script; ``fn``'s run stops at its next check (between batches and inside long steps:
    :func:`stop_requested`), as it does when the tab is closed, another page is opened or another run started; the
    batches done so far stay in the disk cache. The page then offers to start again. Returns None when cancelled or
    stopped. After every run, stopped or not, the memory its steps freed goes back to the system
    (``vitlab.engine.hostmem.release``: each script run has a thread, and glibc keeps a thread's freed memory).

    ``early``: ``draw(estimate, done, total)``, called while ``fn`` runs with its running estimate after batch
    ``done`` of ``total`` (``vitlab.Run.partial``; only an estimate of the class ``expect``, which it then needs:
    an analysis inside another hands up estimates of its own kind), so that the page draws a first answer in place
    (:func:`lab.show.running`) instead of waiting for the whole run (issue 51).
    """
    from . import links  # (links imports this module)

    links.follow_drawn()  # a link's view of this page first, not a run (or a read) of the defaults it replaces
    box = st.empty()  # drawn on every run, so the page's element tree keeps its shape (no stale duplicates)
    asked = links.waiting()
    if asked:  # a link's proposal is open: nothing runs on a choice the person may be about to replace
        if not _run_state().get("said_waiting"):
            _run_state()["said_waiting"] = True
            box.info(f"Waiting for your choice above: the link asks for {' and '.join(asked)}. Nothing is computed "
                     "until you choose \"Use it\" or \"Dismiss\".", icon=":material/hourglass_empty:")
        return None
    memo = _memo()
    if key in memo:
        _note(memo[key], "memory")
        return memo[key]
    flag = f"lab.cancelled.{label}"
    if st.session_state.get(flag):
        with box.container():
            st.info(f"{label}: cancelled.")
            if st.button(f"Run {label} again", key=f"lab.again.{label}"):
                st.session_state[flag] = False
                st.rerun()
        return None
    disk = _disk_key(key) if persist and persisting() and store().enabled else None
    if disk is not None:
        # a saved result runs nothing, but a setting every run checks is still named in place (as a run would)
        vitlab.pipeline.default_workers(), vitlab.pipeline.default_kind()
        bad = store().bad_reads
        result = saved.load(store(), disk, expect)
        disk = (disk, store().bad_reads > bad)  # a planted or damaged entry: dropped, recomputed, said in the caption
        if result is not None:
            _remember(memo, key, result)
            _note(result, "disk")
            return result
    with box.container():
        bar = st.progress(0.0, text=f"{label}: starting")
        st.button("Cancel", key=f"lab.cancel.{label}", on_click=_cancel, args=(flag,))

    def progress(done: int, total: int, text: str) -> None:
        bar.progress(min(1.0, done / total) if total else 0.0, text=f"{label}: {text}")

    def partial(estimate: Any, done: int, total: int) -> None:
        if isinstance(estimate, expect):
            early(estimate, done, total)

    if early is not None and expect is None:
        raise TypeError("compute(early=...) needs expect=: the class of the estimates the page draws")
    _run_state()["worked"] = True  # end_run collects the garbage of the steps, stopped or not
    engine_run = vitlab.Run(store=store(), progress=progress, should_stop=stop_requested(),
                            partial=None if early is None else partial)
    try:
        result = fn(engine_run)
    except vitlab.Run.Stopped:
        # emptying the box is a call into Streamlit: there it acts on the request that stopped the run (a rerun
        # or a stop), and this script run ends; in the rare case that it does not, the page gets no result
        box.empty()
        return None
    finally:
        box.empty()
        if hasattr(early, "clear"):  # lab.running's estimate: gone once the run ends, whichever way
            early.clear()
        hostmem.release()
    _remember(memo, key, result)
    _note(result, "recomputed" if disk is not None and disk[1] else "computed", engine_run.info)
    if disk is not None and result is not None:
        try:
            saved.save(store(), disk[0], result)
        except Exception as e:  # noqa: BLE001 - keeping a result is an optimisation: the page has it anyway
            store()._warn(f"a result could not be kept in the cache ({type(e).__name__}: {str(e)[:120]})")
    return result

