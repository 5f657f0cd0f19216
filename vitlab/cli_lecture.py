"""``vitlab lecture``: prepare lecture mode ahead of class (``--prepare``), or read back what was prepared.

``vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet`` runs the whole tour at the lecture's settings, draws every
figure, and keeps the result in the disk cache (:mod:`vitlab.tour.classroom`); the app's Lecture page and a later
``vitlab lecture`` with the same settings only read it. A command of its own beside the table's rows, registered
by :func:`vitlab.cli.build_parser` as ``zoo`` is.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from .errors import VitlabError

def add_cli(sub) -> argparse.ArgumentParser:
    from .cli import DEVICE_HELP, HELP, MODEL_HELP, _add_option, add_evidence_options, tour_defaults
    from .table import ANALYSES
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
    return p


def run_lecture(args) -> int:
    from .cli import open_store, options_from_args
    from .table import ANALYSES
    from .tour import classroom

    settings = classroom.settings(args.model, args.data, options_from_args(ANALYSES["tour"], args), args.bootstrap,
                                  args.seed)
    store = open_store(args)
    if not args.prepare:
        t0 = time.perf_counter()
        lecture = classroom.read(store, settings)
        if lecture is None:
            raise VitlabError(classroom.missing(settings, store))
        for line in lecture.headline():
            print(line)
        print(f"read from the cache {store.directory} in {time.perf_counter() - t0:.1f} s: nothing computed "
              f"(open the app's Lecture page)")
        return 0
    return _prepare(args, settings, store)


def _prepare(args, settings, store) -> int:
    from .cli import relabel
    from .engine import dist
    from .engine.context import Run
    from .inputs.data import open_source
    from .inputs.models import load
    from .tour import classroom

    classroom.writable(store)  # before any model runs: a lecture that cannot be kept is not worth computing
    ctx = dist.context(args)  # torchrun: the tour's batches split across ranks, as `vitlab tour`
    source = open_source(args.data)
    models = [load(s, args.device) for s in settings.models]
    relabel(models, list(settings.models))
    progress = ctx.progress("lecture")
    try:
        lecture = classroom.prepare(models, source, settings, Run(store=store, progress=progress, shard=ctx.shard,
                                                                  reduce=ctx.reduce, gather=ctx.gather))
    finally:
        progress.close()
    if not ctx.is_main:
        return 0
    classroom.keep(store, lecture)
    for line in lecture.headline():
        print(line)
    info = lecture.tour.info
    print(f"lecture kept in the cache {store.directory} ({info.batches_computed} batches computed, "
          f"{info.batches_from_cache} from the cache): open the app's Lecture page")
    return 0
