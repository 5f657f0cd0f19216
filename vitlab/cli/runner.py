"""The one runner: a row of the table of analyses run from its parsed flags, its outputs written to ``--out``.

    args ─dist.context─► shard ─open_source, load_models─► source, models ─row.call─► result (rank 0:)
    result ─write_outputs─► CSV tables, PNG/SVG charts, the row's files ─write_run_json─► run.json; headline on stdout

Every row of :data:`vitlab.table.ANALYSES` runs through :func:`run_analysis`; ``report`` and ``lecture`` reuse its
store, model naming and run.json writers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from ..errors import VitlabError
from ..inputs.outdir import OutputNames, check_free, check_out, remember, write_file
from ..table import Analysis
from .flags import options_from_args


def open_store(args):
    """The disk cache a command reads and writes: none with ``--no-cache``, else ``--cache-dir`` or the default."""
    from ..inputs.cache import Store

    if getattr(args, "no_cache", False):
        return Store(None)
    return Store(getattr(args, "cache_dir", None) or "default")


def load_models(analysis: Analysis, args) -> tuple[object, list]:
    """(what the engine takes, every distinct model in order), each named as typed on the command line. All of them
    are sized together first (meta device): models that would not fit in memory together are refused before the
    first is built."""
    from ..inputs.models import check_fits, load, resolve_device

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
    from ..engine import dist
    from ..engine.context import Run
    from ..inputs.data import open_source

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
    from ..charts.common import to_bytes

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
    from ..engine import pipeline

    try:
        return {"count": pipeline.default_workers(), "kind": pipeline.default_kind()}
    except VitlabError as e:
        return {"error": str(e)}


def write_run_json(out: Path, command: str, models: list, args, info, t0: float, warnings=(),
                   model_taps: list[list[str]] | None = None, written: list | None = None, **extra) -> None:
    """``out/run.json``: what ran (models with fingerprints, images, batches computed / from cache, per-model
    forward passes, skipped images, seconds, input workers); then skipped images and warnings are reported on
    stderr. ``written``: the files the command's writers returned, recorded with run.json (vitlab.inputs.outdir)."""
    from ..engine import dist
    from ..resources import version

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
    from ..inputs.outdir import finish

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
