"""The ``vitlab`` command (also ``python -m vitlab``): headless runs and exports.

One sub-command per row of :data:`vitlab.table.ANALYSES`, all run by :func:`run_analysis`; plus ``taps``,
``cache`` and ``zoo``. Every user error ends with one line on stderr and exit status 2; results go to
``--out DIR`` as CSV, JSON and PNG/SVG charts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from .errors import VitlabError
from .inputs.outdir import OutputNames, check_free, check_out, remember, write_file
from .options import parse_ints, parse_strs
from .resources import VersionAction
from .table import ANALYSES, Analysis

MODEL_HELP = ("model spec NAME[@WEIGHTS] or zoo:NAME[@random[:SEED]]; WEIGHTS: pretrained (default), "
              "random[:SEED] (the untrained twin), or a .safetensors/.pth/.bin file")
DEVICE_HELP = "auto (CUDA when present), cpu, cuda, cuda:N"
SCALARS = {"int": int, "float": float, "str": str}
HELP = {  # the commands beside the table's rows, in one line each (``zoo``'s is vitlab.zoo.cli's)
    "taps": "list a model's taps (representation points) and its family",
    "cache": "show or clear the disk cache",
    "zoo": "vitlab's own Fashion-MNIST reference models",
    "report": "the Paper tour as one self-contained HTML file (figures, verdicts, provenance) that opens offline "
              "with no server",
    "lecture": "lecture mode: --prepare runs the tour once ahead of class and keeps it in the disk cache for the "
               "app's Lecture page; without --prepare, reads the prepared lecture back",
    "app": "start the Streamlit app, on localhost only, from any folder",
}


# ---------------------------------------------------------------- flags from the table


def _flag(f: dataclasses.Field) -> list[str]:
    names = [f.metadata.get("flag") or "--" + f.name.replace("_", "-")]
    return names + ([f.metadata["short"]] if f.metadata.get("short") else [])


def _add_option(p: argparse.ArgumentParser, f: dataclasses.Field) -> None:
    meta, kind = f.metadata, f.metadata.get("kind")
    help_ = meta.get("help", "").replace("%", "%%")  # argparse formats help strings with %
    if f.default not in (None, False) and "default" not in help_:
        shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        help_ += f" (default: {shown})"
    kw: dict = {"dest": f.name, "help": help_, "default": None}
    base = str(f.type).split("|")[0].strip()
    if base == "bool":
        p.add_argument(*_flag(f), action="store_true", dest=f.name, help=help_)
        return
    if kind is None:
        kw["type"] = SCALARS.get(base, str)
    if meta.get("choices"):
        kw["choices"] = meta["choices"]
    if meta.get("metavar"):
        kw["metavar"] = meta["metavar"]
    if meta.get("required"):
        kw["required"] = True
    p.add_argument(*_flag(f), **kw)


def options_from_args(analysis: Analysis, args):
    """The analysis's options dataclass from parsed flags (flags not given keep the dataclass defaults)."""
    given = {}
    for f in dataclasses.fields(analysis.options):
        value = getattr(args, f.name, None)
        if value is None or (value is False and f.default is not True):
            continue
        kind = f.metadata.get("kind")
        if kind == "ints":
            value = parse_ints(value, _flag(f)[0])
        elif kind == "strs":
            value = parse_strs(value)
        given[f.name] = value
    return analysis.options(**given)


def add_evidence_options(p: argparse.ArgumentParser, options: type) -> None:
    """``--bootstrap B`` and ``--seed S``: the resampling behind every 95 % interval (docs/evidence.md). An
    analysis whose options already have a ``seed`` (probe: its split) shares that flag."""
    p.add_argument("--bootstrap", type=int, default=200, metavar="B",
                   help="bootstrap resamples for each 95 %% interval (over batches, images or few-shot draws); 0: "
                        "none (default: 200)")
    if "seed" not in {f.name for f in dataclasses.fields(options)}:
        p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of the permutation nulls")


def _help(analysis: Analysis) -> str:
    return analysis.help.replace("%", "%%")  # argparse formats help strings with %


def add_analysis(sub, analysis: Analysis) -> argparse.ArgumentParser:
    """Register one row of the table as a sub-command."""
    help_ = _help(analysis)
    p = sub.add_parser(analysis.name, help=help_, description=f"{analysis.title} ({analysis.figure}): {help_}")
    if analysis.arity == "pairs":
        p.add_argument("--pair", nargs=2, action="append", required=True, metavar=("A", "B"),
                       help="two model specs of the same architecture (repeat for several pairs)")
    elif analysis.arity == "many":
        p.add_argument("--model", "-m", action="append", required=True, help=MODEL_HELP + " (repeat for several)")
    else:
        p.add_argument("--model", "-m", required=True, help=MODEL_HELP)
    if analysis.arity == "pair":
        p.add_argument("--other", required=True, help=analysis.other_help)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data", "-d", default=analysis.data, help=analysis.data_help)
    for f in dataclasses.fields(analysis.options):
        _add_option(p, f)
    if analysis.amp:
        p.add_argument("--amp", action="store_true", help="bf16 autocast on GPU (Grams stay float32, sums float64)")
    add_evidence_options(p, analysis.options)
    if analysis.name == "tour":
        tour_defaults(p)
    if analysis.cache:
        p.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
        p.add_argument("--cache-dir", default=None, help="cache folder (default: VITLAB_CACHE_DIR or ~/.cache/vitlab)")
    p.add_argument("--workers", default=None, metavar="N",
                   help="threads decoding and transforming images ahead of the forward "
                        "(default: VITLAB_WORKERS, else the number of cores, at most 16; 0: on the main thread)")
    p.add_argument("--worker-kind", default=None, choices=("threads", "processes"),
                   help="input workers as threads (default, or VITLAB_WORKER_KIND) or as spawned processes: "
                        "for many cores feeding a GPU, where threads queue for Python's GIL (docs/throughput.md)")
    p.add_argument("--out", "-o", default=analysis.default_out, help="output folder for CSV, JSON and charts")
    p.set_defaults(func=lambda args: run_analysis(analysis, args))
    return p


# ---------------------------------------------------------------- the one runner


def open_store(args):
    from .inputs.cache import Store

    if getattr(args, "no_cache", False):
        return Store(None)
    return Store(getattr(args, "cache_dir", None) or "default")


def load_models(analysis: Analysis, args) -> tuple[object, list]:
    """(what the engine takes, every distinct model in order), each named as typed on the command line. All of them
    are sized together first (meta device): models that would not fit in memory together are refused before the
    first is built."""
    from .inputs.models import check_fits, load, resolve_device

    specs = [s.strip() for pair in args.pair for s in pair] if analysis.arity == "pairs" else (
        (args.model if isinstance(args.model, list) else [args.model])
        + ([args.other] if analysis.arity == "pair" else []))
    check_fits(list(dict.fromkeys(s.strip() for s in specs)), resolve_device(args.device))
    if analysis.arity == "pairs":
        loaded: dict[str, object] = {}
        for spec in (s.strip() for pair in args.pair for s in pair):
            if spec not in loaded:
                loaded[spec] = load(spec, args.device)
                loaded[spec].display = spec
        return [(loaded[a.strip()], loaded[b.strip()]) for a, b in args.pair], list(loaded.values())
    given = args.model if isinstance(args.model, list) else [args.model]
    given = given + ([args.other] if analysis.arity == "pair" else [])
    models = [load(s, args.device) for s in given]
    relabel(models, given)
    return (models if analysis.arity in ("many", "pair") else models[0]), models


def relabel(loaded: list, given: list[str]) -> None:
    """Name models in outputs as the user wrote them on the command line, less the spaces around them that the spec
    ignores (``"zoo:vit-cls "`` is ``zoo:vit-cls``), deduplicated (``zoo:vit-cls#2``)."""
    seen: dict[str, int] = {}
    for m, text in zip(loaded, given):
        text = text.strip()
        k = seen.get(text, 0)
        seen[text] = k + 1
        m.display = text if k == 0 else f"{text}#{k + 1}"


def run_analysis(analysis: Analysis, args) -> int:
    """dist context -> store, source, models -> engine (with progress) -> reduce -> rank 0 writes and prints."""
    from .engine import dist
    from .engine.context import Run
    from .inputs.data import open_source

    t0 = time.perf_counter()
    ctx = dist.context(args)  # torchrun: this rank's device, shard, reductions
    if ctx.distributed and not analysis.shards:
        if not ctx.is_main:
            return 0  # one image (or a check): rank 0 alone computes and writes --out; the others wait for it
        print(f"vitlab {analysis.name} does not split over processes (one image, or a check): under torchrun rank 0 "
              f"runs it alone and the other {ctx.world - 1} rank(s) wait", file=sys.stderr)
    out = check_out(args.out)  # before any model runs: a file named as the folder is a typo, not a late traceback
    check_free(out, [out / "run.json"])  # a run.json vitlab did not write stops the run before it computes
    opts = options_from_args(analysis, args)
    source = open_source(args.data)
    engine_models, models = load_models(analysis, args)
    sharded = analysis.shards and ctx.distributed
    progress = ctx.progress(analysis.name)
    run = Run(store=open_store(args), progress=progress, amp=bool(getattr(args, "amp", False)),
              shard=ctx.shard if sharded else (0, 1), reduce=ctx.reduce if sharded else None,
              gather=ctx.gather if sharded else None, bootstrap=args.bootstrap,
              seed=getattr(args, "seed", None) or 0)
    try:
        result = analysis.call(engine_models, source, opts, run)
    finally:
        progress.close()
    if sharded:
        ctx.reduce_info(run.info)
    if not ctx.is_main:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    names = OutputNames(out)
    written = write_outputs(analysis, result, opts, out, names=names)
    extra = {**{f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}, **analysis.record(result, opts),
             "bootstrap": args.bootstrap, "seed": run.seed,
             "cache_warnings": list(run.store.warnings)}  # e.g. planted or damaged entries dropped and recomputed
    write_run_json(out, analysis.name, models + list(getattr(result, "extra_models", [])), args, run.info, t0,
                   list(getattr(result, "warnings", []))[:20] + names.notes, model_taps=getattr(result, "taps", None),
                   written=written, **extra)
    for line in analysis.headline(result):
        print(line)
    print(f"{len(written)} files in {out}")
    return analysis.status(result) if analysis.status else 0


def write_outputs(analysis: Analysis, result, opts, out: Path, names: OutputNames | None = None) -> list:
    """CSV tables, PNG/SVG charts and any other files of one result; the paths written, each once. Names come from
    ``names`` (unique by construction: a collision is renamed and said in ``names.notes``)."""
    from .charts.common import to_bytes

    names = names or OutputNames(out)
    # every name is given out (and checked: a file vitlab did not write stops the run, OutputNames) before the
    # first file is written; every file through write_file (atomic, never through a symbolic link)
    tables = [(names.path(stem, "csv"), frame) for stem, frame in analysis.tables(result).items()]
    charts = [(names.paths(stem, "png", "svg"), chart) for stem, chart in analysis.charts(result, opts).items()]
    written = []
    try:
        if analysis.files:
            written += analysis.files(result, names)
        for path, frame in tables:
            written.append(write_file(path, frame.to_csv(index=False)))
        for paths, chart in charts:
            written += [write_file(p, to_bytes(chart, p.suffix[1:])) for p in paths]
    except BaseException:
        remember(out, names.given)  # what this run wrote before it stopped stays vitlab's for the next run
        raise
    if len({os.path.normcase(os.path.abspath(p)) for p in written}) != len(written):
        raise VitlabError(f"vitlab {analysis.name} wrote one file twice in {out}: a bug; please report it")
    return written


def write_json(path: Path, obj) -> None:
    """``obj`` as JSON at ``path``, written atomically (never through a symbolic link, vitlab.inputs.outdir)."""
    write_file(path, json.dumps(obj, indent=2, default=str))


def _input_workers() -> dict:
    """The input workers a run used, for run.json; a bad setting (which stopped the run if it used them) as text,
    so that a command that decodes no batch still writes its record."""
    from .engine import pipeline

    try:
        return {"count": pipeline.default_workers(), "kind": pipeline.default_kind()}
    except VitlabError as e:
        return {"error": str(e)}


def write_run_json(out: Path, command: str, models: list, args, info, t0: float, warnings=(),
                   model_taps: list[list[str]] | None = None, written: list | None = None, **extra) -> None:
    """``out/run.json``: what ran (models with fingerprints, images, batches computed / from cache, per-model
    forward passes, skipped images, seconds, input workers); then skipped images and warnings are reported on
    stderr. ``written``: the files the command's writers returned, recorded with run.json (vitlab.inputs.outdir)."""
    from .engine import dist
    from .resources import version

    write_json(out / "run.json", {
        "command": command, "vitlab": version(),
        "models": [{"spec": m.label, "label": m.spec.label, "fingerprint": m.fingerprint,
                    "memory_format": m.memory_format,
                    **({"taps": model_taps[i]} if model_taps and i < len(model_taps) else {})}
                   for i, m in enumerate(models)],
        "data": args.data, "images": getattr(args, "images", None), "batch_size": getattr(args, "batch_size", None),
        "shuffle": getattr(args, "shuffle", None), "device": models[0].device if models else None,
        "batches_computed": info.batches_computed if info else None,
        "batches_from_cache": info.batches_from_cache if info else None,
        "forward_passes": info.forward_passes if info else {},
        "skipped_images": [s[0] for s in info.skipped_images] if info else [],
        "skipped_reasons": [{"image": n, "reason": why} for n, why in info.skipped_images] if info else [],
        "notices": [{"image": n, "notice": what} for n, what in getattr(info, "notices", ())] if info else [],
        "dropped_batches": info.dropped_batches if info else [],
        "warnings": list(warnings), **extra, "seconds": round(time.perf_counter() - t0, 3),
        "processes": dist.context().world,
        "input_workers": _input_workers(),
    })
    from .inputs.outdir import finish

    stale, notices = finish(out, list(written or []))  # charts of an earlier run that this one did not write again
    for notice in notices:
        print(f"vitlab: note: {notice}", file=sys.stderr)
    if stale:
        print(f"removed {len(stale)} file(s) an earlier run wrote into {out} and this one did not", file=sys.stderr)
    if info:
        report_skips(info)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)


def report_skips(info, limit: int = 50) -> None:
    if info.skipped_images:
        print(f"skipped {len(info.skipped_images)} unreadable image(s):", file=sys.stderr)
        for name, why in info.skipped_images[:limit]:
            print(f"  {why}", file=sys.stderr)
        if len(info.skipped_images) > limit:
            print(f"  ... and {len(info.skipped_images) - limit} more (run.json lists them all)", file=sys.stderr)
    notices = getattr(info, "notices", [])
    for name, what in notices[:limit]:
        print(f"note: image '{name}': {what}", file=sys.stderr)
    for d in info.dropped_batches:
        print(f"dropped {d}", file=sys.stderr)


# ---------------------------------------------------------------- plain commands: taps, cache, zoo


def add_taps(sub) -> None:
    p = sub.add_parser("taps", help=HELP["taps"])
    p.add_argument("--model", "-m", required=True, help=MODEL_HELP)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.set_defaults(func=run_taps)


def run_taps(args) -> int:
    from .inputs import taps
    from .inputs.models import load

    m = load(args.model, args.device)
    print(f"{m.label}: family {m.family}, input {tuple(m.data_config['input_size'])}, layout {m.memory_format}, "
          f"fingerprint {m.fingerprint}")
    default = set(taps.default_taps(m.model))
    for name, point in taps.tap_table(m.model).items():
        print(f"  {name:32s} {point.shape:14s} {'(default CKA tap)' if name in default else ''}")
    return 0


def add_cache(sub) -> None:
    p = sub.add_parser("cache", help=HELP["cache"])
    p.add_argument("action", choices=("info", "clear"))
    p.add_argument("--cache-dir", default=None)
    p.set_defaults(func=run_cache)


def run_cache(args) -> int:
    from .inputs.cache import Store, clear, default_dir, holds_cache, size_budget_gb

    directory = Path(args.cache_dir or default_dir()).expanduser()
    if args.action == "clear":  # without opening a Store: clearing must work on a damaged database too
        n, what = clear(directory)
        print(f"removed {n} {what} from {directory}")
        return 0
    size_budget_gb()  # a bad VITLAB_CACHE_GB is named even when there is no cache yet
    if not (directory.is_dir() and holds_cache(directory)):  # info never makes a cache where there is none
        print(f"{directory}: no cache yet")
        return 0
    store = Store(directory)
    info = store.info()
    if not info["enabled"]:
        print(f"{directory}: the cache cannot be read ({info.get('error') or 'see the warning above'})")
        return 0
    print(f"{info['directory']}: {info['entries']} entries, {info['bytes'] / 2**20:.1f} MiB "
          f"of {info['size_limit'] / 2**30:.1f} GiB" + (" (read-only here)" if info["mode"] == "ro" else ""))
    store.close()
    return 0


# ---------------------------------------------------------------- app: Streamlit, local wherever it is started

# Streamlit reads .streamlit/config.toml from the folder it is started in, so from any other folder the address
# would be unset: every interface (FACTS.md). These flags do not depend on the folder; a flag the user gives wins.
APP_FLAGS = {"--server.address": "localhost", "--browser.gatherUsageStats": "false",
             "--client.toolbarMode": "minimal", "--theme.base": "light"}


def add_app(sub) -> None:
    p = sub.add_parser("app", help=HELP["app"],
                       description="Start the Streamlit app (app/serve.py: app/Home.py with a warm start) on "
                                   "http://localhost:8501. It listens on "
                                   "localhost only and takes uploads up to the engine's limit, wherever it is "
                                   "started; any other arguments go to `streamlit run` (e.g. --server.port 8502; "
                                   "--server.address 0.0.0.0 exposes it on purpose, docs/hardening.md).")
    p.set_defaults(func=run_app, streamlit_args=[])


def app_command(extra: list[str]) -> list[str]:
    """The ``streamlit run`` command line of ``vitlab app`` with ``extra`` arguments (which win over the defaults)."""
    from .inputs.images import MAX_UPLOAD_BYTES
    from .resources import app_dir

    # serve.py: Home.py as an ASGI app that imports torch/timm and loads the default models when the server starts,
    # so the first page after a (re)start does not wait for them (issue 34, bench/warm_bench.py); inside the wheel,
    # or the checkout's app/ (vitlab.resources)
    home = app_dir() / "serve.py"
    if not home.is_file():
        raise VitlabError(f"the app ({home}) is missing from this vitlab ({Path(__file__).parent}); reinstall it from "
                          "its wheel (docs/development.md, 'Installing'), or python -m pip install -e . in a checkout")
    given = {a.split("=", 1)[0] for a in extra if a.startswith("--")}
    defaults = {**APP_FLAGS, "--server.maxUploadSize": str(MAX_UPLOAD_BYTES // 2**20)}
    flags = [x for k, v in defaults.items() if k not in given for x in (k, v)]
    return [sys.executable, "-m", "streamlit", "run", str(home), *flags, *extra]


def run_app(args) -> int:
    return serve(app_command(list(args.streamlit_args)))


STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")  # what a service manager, Ctrl-C, `kill PID` or a closed terminal send
GRACE_S = 10.0  # how long the server may take to stop after a forwarded signal before it is killed


def _die_with_parent():
    """A ``preexec_fn`` (Linux) that makes the kernel send SIGTERM to the child when vitlab dies, even by SIGKILL
    (``prctl(PR_SET_PDEATHSIG)``); None elsewhere. libc is looked up here, in the parent: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # vitlab died between fork and prctl: nobody would end this server
            os._exit(1)

    return preexec


def serve(cmd: list[str]) -> int:
    """Run the server ``cmd`` as vitlab's child and stay its parent: SIGTERM, SIGINT and SIGHUP sent to vitlab go on
    to the server, which stops (Streamlit's own handler); vitlab returns its status once it has gone, killing it if
    it is still there :data:`GRACE_S` seconds after the signal (or at a second signal). On Linux the server also
    ends when vitlab is killed outright. So no orphan server ever keeps the port."""
    import signal
    import subprocess
    import threading

    child = subprocess.Popen(cmd, preexec_fn=_die_with_parent())  # noqa: S603 - our own command line
    deadline: list[float] = []

    def forward(signum, _frame) -> None:
        if child.poll() is not None:
            return
        if deadline:  # asked twice: stop now
            child.kill()
            return
        deadline.append(time.monotonic() + GRACE_S)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    stops = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]
    before = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        before = {sig: signal.signal(sig, forward) for sig in stops}
    try:
        while True:
            try:
                code = child.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if deadline and time.monotonic() > deadline[0]:
                    child.kill()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if child.poll() is None:  # vitlab itself is stopping (an exception here): never leave the server behind
            child.kill()
            child.wait()
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N


def add_zoo(sub) -> None:
    from . import zoo

    zoo.add_cli(sub)


def add_lecture(sub) -> None:
    """``vitlab lecture``: the tour's flags, ``--prepare`` and the cache the app reads (run by vitlab.cli_lecture)."""
    from .tour.classroom import DEFAULT_DATA, DEFAULT_MODELS

    tour = ANALYSES["tour"]
    p = sub.add_parser("lecture", help=HELP["lecture"], description=HELP["lecture"] + ". The page never computes: "
                       "prepare with the settings you will teach with, into the cache the app reads.")
    p.add_argument("--prepare", action="store_true", help="run the tour now and keep it for the Lecture page")
    p.add_argument("--model", "-m", action="append", default=None,
                   help=MODEL_HELP + f" (repeat; default: {' and '.join(DEFAULT_MODELS)})")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data", "-d", default=DEFAULT_DATA, help=tour.data_help)
    for f in dataclasses.fields(tour.options):
        _add_option(p, f)
    add_evidence_options(p, tour.options)
    tour_defaults(p)
    p.add_argument("--cache-dir", default=None, help="cache folder (default: VITLAB_CACHE_DIR or ~/.cache/vitlab): "
                   "the one the app reads")
    p.set_defaults(func=run_lecture)


def run_lecture(args) -> int:
    from . import cli_lecture
    from .tour import classroom

    settings = classroom.settings(args.model, args.data, options_from_args(ANALYSES["tour"], args), args.bootstrap,
                                  args.seed)
    if not args.prepare:  # reading back creates nothing (issue 46): not even a missing --cache-dir
        return cli_lecture.read_only(args, settings)
    return cli_lecture.prepare(args, settings, open_store(args))


# ---------------------------------------------------------------- report: the tour as one HTML file (an output of
# the tour row, not a row of its own)


def tour_defaults(p: argparse.ArgumentParser) -> None:
    """`vitlab tour` and `vitlab report` resample with the tour default (vitlab.tour.TOUR_BOOTSTRAP, TOUR_SEED), the
    one the Paper tour page and the slides use, so screen and handout print the same rows (issue 33)."""
    from .tour.checks import TOUR_BOOTSTRAP, TOUR_SEED

    p.set_defaults(bootstrap=TOUR_BOOTSTRAP, seed=TOUR_SEED)


def add_report(sub) -> None:
    tour = ANALYSES["tour"]
    p = sub.add_parser("report", help=HELP["report"])
    p.add_argument("--model", "-m", action="append", required=True, help=MODEL_HELP + " (repeat for several)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data", "-d", default=tour.data, help=tour.data_help)
    for f in dataclasses.fields(tour.options):
        _add_option(p, f)
    add_evidence_options(p, tour.options)
    tour_defaults(p)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: VITLAB_CACHE_DIR or ~/.cache/vitlab)")
    p.add_argument("--title", default=None, help="the report's title")
    p.add_argument("--out", "-o", default="report.html", help="the HTML file to write")
    p.set_defaults(func=run_report_command)


def run_report_command(args) -> int:
    from .engine import dist
    from .engine.context import Run
    from .errors import VitlabError
    from .inputs.data import open_source
    from .inputs.models import check_fits, load, resolve_device
    from .tour.report import ReportOptions, report

    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise VitlabError(f"--out '{out}': the report is one HTML file; give a path ending in .html")
    if out.is_dir():
        raise VitlabError(f"--out '{out}' is a folder; the report is one HTML file: give a path ending in .html")
    t0 = time.perf_counter()
    ctx = dist.context(args)  # torchrun: the tour's batches split across ranks, as `vitlab tour`
    tour_opts = options_from_args(ANALYSES["tour"], args)
    source = open_source(args.data)
    check_fits(list(dict.fromkeys(s.strip() for s in args.model)), resolve_device(args.device))  # all, before any
    models = [load(s, args.device) for s in args.model]
    relabel(models, args.model)
    opts = ReportOptions(tour_opts, args.title) if args.title else ReportOptions(tour_opts)
    progress = ctx.progress("report")
    try:
        result = report(models, source, opts, Run(store=open_store(args), progress=progress, seed=args.seed,
                                                  bootstrap=args.bootstrap, shard=ctx.shard, reduce=ctx.reduce,
                                                  gather=ctx.gather))
    finally:
        progress.close()
    if not ctx.is_main:
        return 0
    result.write(out)
    counts = result.tour.summary()
    print(f"report: {out} ({len(result.html.encode()) / 1024:.0f} KiB, {len(result.tour.rows)} figures: "
          + ", ".join(f"{v} {k}" for k, v in counts.items()) + f"; {time.perf_counter() - t0:.1f} s)")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``vitlab`` parser with the flags of ``command`` only (None: of every sub-command). The others get their
    one-line help, which needs no analysis module: ``vitlab --help`` imports neither torch nor timm, and
    ``vitlab COMMAND`` imports what COMMAND runs."""
    parser = argparse.ArgumentParser(prog="vitlab", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    for analysis in ANALYSES.values():
        if command in (None, analysis.name):
            add_analysis(sub, analysis)
        else:
            sub.add_parser(analysis.name, help=_help(analysis))
    for name, add in (("taps", add_taps), ("cache", add_cache), ("zoo", add_zoo), ("report", add_report),
                      ("lecture", add_lecture), ("app", add_app)):
        if command in (None, name):
            add(sub)
        else:
            sub.add_parser(name, help=HELP[name])
    return parser


ONE_PROCESS = ("taps", "cache", "zoo")  # bookkeeping: under torchrun rank 0 runs them alone, with no process group


def run_one_process(args) -> int:
    """A bookkeeping command: no process group and no pipeline, so ``zoo list`` and ``cache`` import no torch. Under
    torchrun rank 0 runs it alone and the other ranks exit."""
    if os.environ.get("WORLD_SIZE", "").strip() not in ("", "0", "1"):
        from .engine import dist

        if not dist.is_main():
            return 0
        print(f"vitlab {args.command} runs in one process: under torchrun rank 0 runs it and the other "
              f"{dist.world_size() - 1} rank(s) exit", file=sys.stderr)
    return int(args.func(args) or 0)


def command_of(argv: list[str]) -> str:
    """The sub-command ``argv`` names: its first word that is not an option ('' for ``vitlab --help``)."""
    return next((a for a in argv if not a.startswith("-")), "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(argv))
    args, extra = parser.parse_known_args(argv)
    if args.command == "app":  # everything after `vitlab app` goes to `streamlit run`
        args.streamlit_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command in ONE_PROCESS:
            return run_one_process(args)
        from .engine import dist, pipeline

        # --workers, --worker-kind: this run's defaults, given back afterwards (main() is also called in-process)
        with pipeline.defaults(getattr(args, "workers", None), getattr(args, "worker_kind", None)), dist.guard():
            # torchrun: a failing rank stops the others, with its rank in the message
            return int(args.func(args) or 0)
    except VitlabError as e:
        print(f"vitlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vitlab: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("vitlab: error: out of memory: lower --batch-size or --images", file=sys.stderr)
        return 2
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError and CPU allocation failures
        if "out of memory" not in str(e).lower() and "can't allocate" not in str(e).lower():
            raise
        print("vitlab: error: out of memory: lower --batch-size (or use --amp on a GPU)", file=sys.stderr)
        return 2
