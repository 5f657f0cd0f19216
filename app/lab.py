"""UI glue shared by the pages: the sidebar pickers, cached models and sources, progress with Cancel, errors
in place, export buttons. No numerics here (a page is widgets, one engine call, charts): every number on screen
comes from `vitlab`.

Widget values are copied into plain session-state keys (``lab.*``) on every run, because Streamlit deletes a
keyed widget's state after a run in which it is not drawn (Streamlit 1.67); pages read only :func:`settings`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import functools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

import vitlab
from vitlab import charts
from vitlab.charts.common import image_png, slug
from vitlab.tour import saved

OTHER = "timm model name…"
CHECKPOINT = "checkpoint file…"
FOLDER = "folder"
UPLOADS = "uploads"
# short enough for the sidebar's select box at 1280 px (issue 34: "Fashion-MNIST test set (bundled" was cut)
SOURCES = {
    "fashion-mnist:test": "Fashion-MNIST test",
    "samples": "Sample photographs",
    "cifar10:test": "CIFAR-10 test",
    "cifar100:test": "CIFAR-100 test",
    FOLDER: "A folder of images…",
    UPLOADS: "Uploaded images…",
}
DEVICES = ("auto", "cpu", "cuda")
# Small defaults: the zoo models on 64 bundled Fashion-MNIST images give the first heatmap in seconds on a CPU;
# batches of 16 give the intervals 4 batches to rest on (2 batches of 32 give none: docs/evidence.md, issue 28).
# VITLAB_MODEL_A / _B / VITLAB_DATA / _IMAGES / _BATCH_SIZE / _DEVICE start the app on other choices (tests, demos).
# A bad one never stops the server (the warm start imports this module): the sidebar names it and uses the default.
ENV_INTS = {"images": ("VITLAB_IMAGES", 64, 4, 100_000), "batch_size": ("VITLAB_BATCH_SIZE", 16, 4, 4096)}


def env_settings() -> tuple[dict[str, Any], list[str]]:
    """The sidebar's starting values from the environment, and what is wrong with any of them (in words)."""
    values: dict[str, Any] = {
        "model_a": os.environ.get("VITLAB_MODEL_A", "zoo:vit-cls"),
        "model_b": os.environ.get("VITLAB_MODEL_B", "zoo:resnet"),
        "source": os.environ.get("VITLAB_DATA", "fashion-mnist:test"),
        "folder": "",
    }
    errors = []
    for name, (var, default, lo, hi) in ENV_INTS.items():
        text = os.environ.get(var, "")
        values[name] = default
        if not text.strip():
            continue
        try:
            value = int(text.strip())
        except ValueError:
            errors.append(f"{var}={text!r} is not a whole number; the sidebar starts at {default} instead (set "
                          f"{var} to a whole number from {lo} to {hi}, e.g. {var}={default})")
            continue
        if lo <= value <= hi:
            values[name] = value
        else:
            errors.append(f"{var}={text!r} is outside {lo} to {hi}; the sidebar starts at {default} instead")
    device = os.environ.get("VITLAB_DEVICE", "auto").strip() or "auto"
    values["device"] = device if device in DEVICES else "auto"
    if device not in DEVICES:
        errors.append(f"VITLAB_DEVICE={device!r} is not one of {', '.join(DEVICES)}; the sidebar starts at auto")
    return values, errors


DEFAULTS: dict[str, Any] = env_settings()[0]
MEMO_SIZE = 24  # results kept per browser session, so that a click re-draws without re-reading the cache
# not "pages/": Streamlit would also discover that folder as a v1 multipage app and could run a page
# without the entrypoint (and without the sidebar)
VIEWS = Path(__file__).resolve().parent / "views"


@dataclass(frozen=True)
class Settings:
    """The sidebar's choices, as plain values."""

    model_a: str
    model_b: str
    source: str  # a data-source string for vitlab.open_source, or 'uploads'
    images: int
    batch_size: int
    device: str
    uploads: tuple[tuple[str, bytes], ...] = ()

    @property
    def key(self) -> tuple:
        """Identifies the inputs of a computation: uploads by content hash, a folder by its listing (names, sizes,
        mtimes: a new or changed file is a new key), so the page never shows results of other images."""
        uploads = tuple((n, hashlib.sha256(b).hexdigest()[:16]) for n, b in self.uploads) if self.source == UPLOADS \
            else ()
        fixed = self.source in SOURCES or self.source == UPLOADS
        source = self.source if fixed else vitlab.data.listing_key(self.source)
        return (self.model_a, self.model_b, source, self.images, self.batch_size, self.device, uploads)


# ------------------------------------------------------------------------------------------- sidebar


def page(file: str, title: str, icon: str, url: str | None = None, default: bool = False) -> st.Page:
    """A navigation page: ``views/<file>.py`` at ``url`` (the generic analysis page serves several urls)."""
    return st.Page(VIEWS / f"{file}.py", title=title, icon=icon, url_path=url or file, default=default)


def _plain(name: str) -> Any:
    key = f"lab.{name}"
    if key not in st.session_state:
        st.session_state[key] = env_settings()[0].get(name)  # read now: the variables may differ from the import's
    return st.session_state[key]


def _seed(widget_key: str, value: Any) -> str:
    """Give a widget its value from plain state when Streamlit has dropped the widget's own state."""
    if widget_key not in st.session_state:
        st.session_state[widget_key] = value
    return widget_key


def zoo_specs() -> list[str]:
    from vitlab import zoo

    return [f"zoo:{n}" for n in zoo.names()]


def model_choices() -> list[str]:
    return zoo_specs() + list(vitlab.PAPER_MODELS) + [OTHER, CHECKPOINT]


def _describe_choice(choice: str) -> str:
    if choice in vitlab.PAPER_MODELS:
        return f"{choice}  ({vitlab.PAPER_MODELS[choice]})"
    return choice


def _is_checkpoint(spec: str) -> bool:
    _, _, weights = spec.partition("@")
    return weights.lower().endswith(vitlab.models.CHECKPOINT_SUFFIXES)


def model_picker(slot: str, label: str) -> str:
    """Zoo model, paper model by friendly name, any timm name (``NAME[@random]``), or a checkpoint file."""
    spec = _plain(slot)
    choices = model_choices()
    kind_default = spec if spec in choices else (CHECKPOINT if _is_checkpoint(spec) else OTHER)
    kind = st.selectbox(label, choices, key=_seed(f"w.{slot}.kind", kind_default), format_func=_describe_choice)
    if kind == OTHER:
        text = st.text_input(f"{label}: timm name", key=_seed(f"w.{slot}.text", "" if spec in choices else spec),
                             placeholder="vit_small_patch16_224.augreg_in21k, test_vit@random",
                             help="Any timm model name, optionally @random[:SEED] for random weights")
        spec = text.strip()
    elif kind == CHECKPOINT:
        arch0, _, path0 = spec.partition("@") if _is_checkpoint(spec) else ("", "", "")
        arch = st.text_input(f"{label}: architecture", key=_seed(f"w.{slot}.arch", arch0),
                             placeholder="vit_base_patch16_224")
        path = st.text_input(f"{label}: checkpoint file", key=_seed(f"w.{slot}.path", path0),
                             placeholder="/path/to/weights.safetensors")
        spec = f"{arch.strip()}@{path.strip()}" if arch.strip() and path.strip() else ""
    else:
        spec = kind
    st.session_state[f"lab.{slot}"] = spec
    return spec


def source_picker() -> str:
    source = _plain("source")
    choice_default = source if source in SOURCES else FOLDER
    choice = st.selectbox("Images", list(SOURCES), key=_seed("w.source", choice_default), format_func=SOURCES.get)
    if choice == FOLDER:
        seed = _plain("folder") or ("" if source in SOURCES else source)
        folder = st.text_input("Folder", key=_seed("w.folder", seed),
                               placeholder="/path/to/images (sub-folders = classes)")
        st.session_state["lab.folder"] = folder.strip()
        source = folder.strip()
    elif choice == UPLOADS:
        files = st.file_uploader("Upload images", type=[s.lstrip(".") for s in vitlab.data.IMAGE_SUFFIXES],
                                 accept_multiple_files=True, key="w.uploads")
        # an emptied uploader empties the source: removed files must not linger in later results
        st.session_state["lab.uploads"] = tuple((f.name, f.getvalue()) for f in files or ())
        upload_problems_ui(st.session_state["lab.uploads"])
        source = UPLOADS
    else:
        source = choice
    st.session_state["lab.source"] = source
    return source


def upload_problems_ui(uploads: tuple) -> None:
    """Name every upload that cannot be used, with its reason, as soon as it is uploaded (checked once per content)."""
    if not uploads:
        return
    digest = hashlib.sha256(b"".join(hashlib.sha256(b).digest() for _, b in uploads)).hexdigest()
    memo = st.session_state.setdefault("lab.upload_checks", {})
    if digest not in memo:
        memo.clear()
        with st.spinner(f"Checking {len(uploads)} uploads…"):  # a full decode each, one at a time (memory-bounded)
            memo[digest] = vitlab.data.check_uploads(uploads)
    skipped, notices = memo[digest]
    if skipped:
        st.warning(f"{len(skipped)} of {len(uploads)} uploads cannot be used and are skipped:\n\n"
                   + "\n".join(f"- {why}" for _, why in skipped))
    for name, what in notices:
        st.caption(f"`{name}`: {what}")


def sidebar() -> None:
    """The shared pickers (drawn by the entrypoint on every page) and the cache status."""
    import share  # a link's settings, before the pickers draw (app/share.py)

    share.read_link()
    with st.sidebar:
        st.subheader("Models")
        model_picker("model_a", "Model A")
        model_picker("model_b", "Model B")
        st.subheader("Data")
        source_picker()
        c1, c2 = st.columns(2)
        images = c1.number_input("Images", 4, 100_000, step=16, key=_seed("w.images", _plain("images")))
        batch = c2.number_input("Batch size", 4, 4096, step=8, key=_seed("w.batch_size", _plain("batch_size")))
        device = st.selectbox("Device", DEVICES, key=_seed("w.device", _plain("device")))
        st.session_state.update({"lab.images": int(images), "lab.batch_size": int(batch), "lab.device": device})
        for problem in env_settings()[1]:
            st.error(problem)
        status_ui()


def settings() -> Settings:
    """The current sidebar choices (plain values that survive page switches)."""
    return Settings(_plain("model_a"), _plain("model_b"), _plain("source"), int(_plain("images")),
                    int(_plain("batch_size")), _plain("device"), tuple(st.session_state.get("lab.uploads", ())))


# ------------------------------------------------------------------------------------- status, weights


def weights_status(spec: str) -> str:
    """Where a spec's weights come from, in words (``vitlab.models.weights_status``)."""
    return vitlab.models.weights_status(spec)


def download_weights(spec: str, bar) -> None:
    """Fetch a pretrained spec's weights into the hub cache, drawing the bytes on a Streamlit progress bar."""
    def progress(done: int, total: int, text: str) -> None:
        bar.progress(min(1.0, done / total) if total else 0.0, text=text)

    vitlab.models.download_weights(spec, progress)


def status_ui() -> None:
    s = settings()
    with st.expander("Status", expanded=False):
        for slot, spec in (("A", s.model_a), ("B", s.model_b)):
            st.caption(f"Model {slot} `{spec or '—'}`: {weights_status(spec) if spec else 'not chosen'}")
        loaded = _loaded_registry()
        st.caption("Loaded models: " + (", ".join(f"`{k[0]}` ({k[1]})" for k in loaded) if loaded else "none yet"))
        info = store().info()
        for w in store().warnings:
            st.warning(w)
        if info.get("enabled"):
            st.caption(f"Disk cache: {info['entries']} entries, {info['bytes'] / 2**20:.1f} MiB of "
                       f"{info['size_limit'] / 2**30:.0f} GiB in `{info['directory']}`")
        try:
            st.caption(f"Input workers: {vitlab.pipeline.default_workers()} {vitlab.pipeline.default_kind()} decoding "
                       f"and transforming images ahead of the forward ({vitlab.pipeline.cores()} cores; set "
                       f"VITLAB_WORKERS and VITLAB_WORKER_KIND to change)")
        except vitlab.VitlabError as e:  # a bad VITLAB_WORKERS / VITLAB_WORKER_KIND: named here and on each run
            st.error(str(e))


# ------------------------------------------------------------------------------- models, data, store


@st.cache_resource(show_spinner=False)
def store() -> vitlab.Store:
    try:
        return vitlab.Store("default")
    except vitlab.VitlabError as e:  # e.g. a bad VITLAB_CACHE_GB: the lab still works, uncached, and says so
        off = vitlab.Store(None)
        off.warnings.append(f"disk cache off: {e}")
        return off


@st.cache_resource(show_spinner=False)
def _loaded_registry() -> dict:
    return {}


@st.cache_resource(show_spinner=False, max_entries=8)
def _load(spec: str, device: str) -> vitlab.LoadedModel:
    loaded = vitlab.load(spec, None if device == "auto" else device)
    _loaded_registry()[(spec, loaded.device)] = loaded.fingerprint
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
    return vitlab.open_source(s.source)  # a folder: listed afresh, so new files are seen


def named_source(text: str) -> vitlab.ImageSource:
    """A dataset or folder by name (the bundled datasets cached), e.g. a page's reference set."""
    if not text:
        raise vitlab.VitlabError("no folder given: type the path of a folder of images")
    return _dataset(text) if text in SOURCES else vitlab.open_source(text)


# ------------------------------------------------------------------------------------------- warm-up

WARMUP_ENV = "VITLAB_WARMUP"  # 0: nothing is warmed in the background (the bench's baseline)
# what a first page needs besides Streamlit, slowest first (a fresh process on a loaded 2-core machine, issue 34):
# timm (torchvision, torch._dynamo: ~3-7 s), torch (~1-4 s), scipy.stats (the first interval: ~1-4 s), the engine
WARM_MODULES = ("torch", "timm", "timm.data", "scipy.stats", "pandas", "altair", "pyarrow", "vitlab.inputs.models",
                "vitlab.inputs.taps", "vitlab.engine.run", "vitlab.stats.evidence", "vitlab.analyses.similarity",
                "vitlab.analyses.sensitivity", "vitlab.tour.measure", "vitlab.charts.cka", "vitlab.charts.tour",
                "vitlab.charts.evidence", "vitlab.tour.report")
_warm_lock = threading.Lock()
_warm_thread: list[threading.Thread] = []


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
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - warming is an optimisation: the page reports any real problem
            log.warning("warm-up: import %s failed (%s)", name, e)
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


# ------------------------------------------------------------------------------ running, errors, export


@contextlib.contextmanager
def guard():
    """Show an error in place, in words, and let the rest of the page run on."""
    try:
        yield
    except vitlab.VitlabError as e:
        st.error(str(e))
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
    st.error(f"Unexpected error ({type(e).__name__}): {e}")
    with st.expander("Details"):
        st.code(traceback.format_exc())


def _memo() -> dict:
    return st.session_state.setdefault("lab.memo", {})


def _cancel(flag: str) -> None:
    st.session_state[flag] = True


# ------------------------------------------------------------------------- a script run, saved results

PERSIST_ENV = "VITLAB_PERSIST"  # 0: whole results are not kept on disk (only per session); the bench's baseline


def persisting() -> bool:
    """Whether whole results are saved to and read from the disk cache (``VITLAB_PERSIST``, default on)."""
    return os.environ.get(PERSIST_ENV, "1").strip() != "0"


def begin_run() -> None:
    """Start of a script run (the entrypoint calls it first): the clock of the caption's page time, and the models
    this run loads (their fingerprints go into the keys of saved results)."""
    st.session_state["lab.run"] = {"t0": time.perf_counter(), "models": {}, "origins": {}}


def _run_state() -> dict:
    if "lab.run" not in st.session_state:  # a page run without the entrypoint (never in the app)
        begin_run()
    return st.session_state["lab.run"]


def _disk_key(key: tuple) -> str:
    """The disk-cache key of a page's result: its memo key (settings, options) with the fingerprints of the models
    loaded in this run, the weights files the key names, the zoo's checkpoints, vitlab's source and versions."""
    models = sorted([spec, device, fp] for (spec, device), fp in _run_state()["models"].items())
    return saved.result_key(saved.plain(key), models, saved.files_key(key))


def _note(result: Any, origin: str) -> None:
    """Remember where a result came from and when the page had it, for :func:`run_caption`."""
    info = getattr(result, "info", None)
    if info is not None:
        run = _run_state()
        run["origins"][id(info)] = (origin, time.perf_counter() - run["t0"])


def _remember(memo: dict, key: tuple, result: Any) -> None:
    memo[key] = result
    while len(memo) > MEMO_SIZE:
        memo.pop(next(iter(memo)))


def compute(key: tuple, fn: Callable[[vitlab.Run], Any], label: str, persist: bool = True,
            expect: type | tuple | None = None) -> Any:
    """``fn(run)`` (a ``vitlab.Run`` with the disk cache and a progress bar) with a Cancel button; remembered per
    session under ``key`` and, when the result can be saved as data (``vitlab.tour.saved``; ``persist`` and
    ``VITLAB_PERSIST`` allowing), kept in the disk cache, so that a new session or a restarted server reads it
    back instead of running ``fn`` again.

    A saved result is read as untrusted input (``saved.load``: its checksum, its fields' types, ``expect``: the class
    of the result, or a tuple of classes); one that fails is recomputed and the run's caption says so.
    Cancel reruns the script, which stops ``fn`` at its next progress report; the page then offers to start again.
    Returns None when cancelled.
    """
    box = st.empty()  # drawn on every run, so the page's element tree keeps its shape (no stale duplicates)
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

    try:
        result = fn(vitlab.Run(store=store(), progress=progress))
    finally:
        box.empty()
    _remember(memo, key, result)
    _note(result, "recomputed" if disk is not None and disk[1] else "computed")
    if disk is not None and result is not None:
        try:
            saved.save(store(), disk[0], result)
        except Exception as e:  # noqa: BLE001 - keeping a result is an optimisation: the page has it anyway
            store()._warn(f"a result could not be kept in the cache ({type(e).__name__}: {str(e)[:120]})")
    return result


PAPER_LEAD, OURS_LEAD = "The paper reports", "On these models:"


def finding(paper: str, ours: str | None = None, why: str | None = None) -> None:
    """The lead of an analysis page (issue 33): what the paper reports, then what *these* models show, computed by
    this page's own run (statistic in words, value, 95 % interval with its unit and count). When the page's chart
    cannot speak to the claim (e.g. no local heads to compare), ``why`` says so in place of ``ours``.
    Pages never state the paper's finding as fact: its words always sit next to the answer for these models."""
    st.markdown(f"**{PAPER_LEAD}** {paper.strip()}")
    if ours:
        st.markdown(f"**{OURS_LEAD}** {ours.strip()}")
    else:
        st.info(f"**{OURS_LEAD}** {(why or 'this page cannot answer the claim with these settings.').strip()}")



def answer(paper: str, found, missing: str) -> None:
    """:func:`finding` from a result's ``Finding`` (``vitlab.analyses.findings``: ``ours`` or ``why``), or, when
    the page computed nothing (``found`` is None), ``missing`` in place of the answer."""
    if found is None:
        finding(paper, why=missing)
    else:
        finding(paper, found.ours, found.why)

MIME = {"png": "image/png", "svg": "image/svg+xml", "csv": "text/csv"}


def export(chart, frame, stem: str, key: str) -> None:
    """PNG / SVG / CSV download buttons; the files are made only when a button is pressed."""
    row = st.container(horizontal=True, gap="small")
    for fmt in ("png", "svg", "csv"):
        row.download_button(fmt.upper(), data=functools.partial(charts.to_bytes, chart, fmt, frame),
                            file_name=f"{slug(stem)}.{fmt}", mime=MIME[fmt], key=f"dl.{key}.{fmt}",
                            on_click="ignore", help=f"Download this chart as {fmt.upper()}")


def export_image(image, frame, stem: str, key: str) -> None:
    """PNG download of an image the page shows (an attention overlay, what the model sees) and, when ``frame`` is
    given, CSV of the numbers it was drawn from (e.g. ``AttentionMap.to_frame()``)."""
    files = {"png": functools.partial(image_png, image)}
    if frame is not None:
        files["csv"] = functools.partial(charts.to_bytes, None, "csv", frame)
    row = st.container(horizontal=True, gap="small")
    for fmt, data in files.items():
        row.download_button(fmt.upper(), data=data, file_name=f"{slug(stem)}.{fmt}", mime=MIME[fmt],
                            key=f"dl.{key}.{fmt}", on_click="ignore",
                            help="Download this image as PNG" if fmt == "png" else "Download its values as CSV")


def image(img, frame, stem: str, key: str, caption: str | None = None) -> None:
    """Show an image (uint8 array from the engine) with its downloads (:func:`export_image`)."""
    st.image(img, caption=caption, width="stretch")
    export_image(img, frame, stem, key)


ORIGINS = {"disk": "result from the disk cache", "memory": "result kept in this session"}


def run_caption(info, images: int) -> str:
    """One line on what a run did (computed vs cached batches, skipped images) and how long the page took: the wall
    time from the start of this script run to the result, and where the result came from (``compute``)."""
    origin = _run_state()["origins"].get(id(info)) if "lab.run" in st.session_state else None
    counts = f"{info.batches_computed} batches computed, {info.batches_from_cache} from the cache"
    if origin is None:
        text = f"{images} images; {counts}, {info.seconds:.1f} s"
    elif origin[0] in ("computed", "recomputed"):
        text = f"{images} images; {counts}, {info.seconds:.1f} s in the engine; page ready in {origin[1]:.1f} s"
        if origin[0] == "recomputed":
            text += "; its saved result was unreadable (Status says why) and was recomputed"
    else:  # read back whole: nothing ran now
        text = (f"{images} images; 0 batches computed: {ORIGINS[origin[0]]}, page ready in {origin[1]:.1f} s "
                f"(first computed with {counts}, {info.seconds:.1f} s in the engine)")
    if info.skipped_images:
        named = "; ".join(why for _, why in info.skipped_images[:5])
        more = f"; and {len(info.skipped_images) - 5} more" if len(info.skipped_images) > 5 else ""
        text += f"; {len(info.skipped_images)} unreadable image(s) skipped: {named}{more}"
    notices = getattr(info, "notices", [])
    if notices:
        text += "; " + "; ".join(f"{name.split('/')[-1]}: {what}" for name, what in notices[:5])
    return text


def clickable(chart, name: str, fields: list[str], nearest: bool = False):
    """The chart with a click selection on ``fields`` (read back with :func:`clicked`); ``nearest`` picks the
    mark closest to the pointer (small dots are hard to hit)."""
    import altair as alt

    return chart.add_params(alt.selection_point(name=name, fields=fields, on="click", nearest=nearest))


def clicked(event, name: str, fields: list[str]) -> dict | None:
    """The fields of the point clicked in ``st.altair_chart(..., on_select='rerun')``'s event, or None."""
    points = (event or {}).get("selection", {}).get(name) or []
    return {f: points[0][f] for f in fields} if points and all(f in points[0] for f in fields) else None


def follow_click(prefix: str, click: dict | None, keys: dict[str, str]) -> None:
    """Move pickers (session keys ``keys[field]``) to a newly clicked point; later picker changes stay."""
    last = f"{prefix}.last_click"
    if click and click != st.session_state.get(last):
        for field, key in keys.items():
            st.session_state[key] = click[field]
    st.session_state[last] = click


def image_name(src) -> Callable[[int], str]:
    """A select box's name for image i of ``src``: its file name, or "image 12 (Ankle boot)" for a data set's
    item (never an internal id such as 'fashion-mnist:test#12')."""
    def name(i: int) -> str:
        text = src.item_id(i)
        if text.startswith(f"{src.name}#"):
            text = f"image {i}"
        label = src.label(i)
        return f"{text} ({src.classes[label]})" if label is not None and src.classes else text

    return name


def model_slot(key: str, s: Settings, prefer: str | None = None) -> str:
    """A/B radio; returns the chosen spec."""
    specs = {"A": s.model_a, "B": s.model_b}
    slot = st.radio("Model", list(specs), horizontal=True, key=key, format_func=lambda k: f"{k}: {specs[k] or '—'}")
    return specs[slot]


def set_models(model_a: str, model_b: str) -> None:
    """A button callback: choose both models (the sidebar pickers re-seed from the plain keys)."""
    st.session_state["lab.model_a"], st.session_state["lab.model_b"] = model_a, model_b
    for slot in ("model_a", "model_b"):
        for part in ("kind", "text", "arch", "path"):
            st.session_state.pop(f"w.{slot}.{part}", None)


def chart(altair_chart, key: str, on_select: str = "ignore"):
    """Draw a vitlab chart as built (its own size and colours, as in the PNG/SVG exports).

    Streamlit would otherwise 'fit' a single view into its declared width, axes and legend included, which
    squeezes the plot of a chart with a wide legend to nothing; 'pad' keeps the declared plot size.
    """
    import altair as alt

    sized = altair_chart.properties(autosize=alt.AutoSizeParams(type="pad", contains="padding"))
    return st.altair_chart(sized, key=key, width="content", theme=None, on_select=on_select)
