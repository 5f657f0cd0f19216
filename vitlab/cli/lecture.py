"""``vitlab lecture``: prepare lecture mode ahead of class (``--prepare``), or read back what was prepared.

``vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet`` runs the whole tour at the lecture's settings, draws every
figure, and keeps the result in the disk cache (:mod:`vitlab.tour.classroom`); the app's Lecture page and a later
``vitlab lecture`` with the same settings only read it. Its flags are the tour's (:mod:`vitlab.cli.flags`).
"""

from __future__ import annotations

import dataclasses
import time

from ..errors import VitlabError
from ..table import ANALYSES
from .flags import DEVICE_HELP, HELP, MODEL_HELP, add_evidence_options, add_option, options_from_args, tour_defaults
from .runner import open_store


def add_lecture(sub) -> None:
    """``vitlab lecture``: the tour's flags, ``--prepare`` and the cache the app reads."""
    from ..tour.classroom import DEFAULT_DATA, DEFAULT_MODELS

    tour = ANALYSES["tour"]
    p = sub.add_parser("lecture", help=HELP["lecture"], description=HELP["lecture"] + ". The page never computes: "
                       "prepare with the settings you will teach with, into the cache the app reads.")
    p.add_argument("--prepare", action="store_true", help="run the tour now and keep it for the Lecture page")
    p.add_argument("--model", "-m", action="append", default=None,
                   help=MODEL_HELP + f" (repeat; default: {' and '.join(DEFAULT_MODELS)})")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data", "-d", default=DEFAULT_DATA, help=tour.data_help)
    for f in dataclasses.fields(tour.options):
        add_option(p, f)
    add_evidence_options(p, tour.options)
    tour_defaults(p)
    p.add_argument("--cache-dir", default=None, help="cache folder (default: VITLAB_CACHE_DIR or ~/.cache/vitlab): "
                   "the one the app reads")
    p.set_defaults(func=run_lecture)


def run_lecture(args) -> int:
    from ..tour import classroom

    settings = classroom.settings(args.model, args.data, options_from_args(ANALYSES["tour"], args), args.bootstrap,
                                  args.seed)
    if not args.prepare:  # reading back creates nothing (issue 46): not even a missing --cache-dir
        return read_only(args, settings)
    return prepare(args, settings, open_store(args))


def read_only(args, settings) -> int:
    """``vitlab lecture`` without ``--prepare``: read the lecture back from the cache ``--cache-dir`` names, creating
    nothing (issue 46): a folder that holds no cache is said, in words, with the command that prepares one."""
    from pathlib import Path

    from ..inputs.cache import Store, default_dir

    where = Path(args.cache_dir or default_dir()).expanduser()
    if not (where / "cache.db").is_file():
        what = "no such folder" if not where.exists() else "no vitlab cache in it"
        raise VitlabError(f"no cache at {where} ({what}): nothing is prepared there; prepare the lecture with "
                          f"`{settings.command(str(where))}`, or name the cache it went to with --cache-dir")
    return read_back(Store(where), settings)


def read_back(store, settings) -> int:
    """Print the lecture prepared at ``settings`` from ``store``; the exact command to run when there is none."""
    from ..tour import classroom

    t0 = time.perf_counter()
    lecture = classroom.read(store, settings)
    if lecture is None:
        raise VitlabError(classroom.missing(settings, store))
    for line in lecture.headline():
        print(line)
    print(f"read from the cache {store.directory} in {time.perf_counter() - t0:.1f} s: nothing computed "
          f"(open the app's Lecture page)")
    return 0


def prepare(args, settings, store) -> int:
    """Run the tour at ``settings`` (sharded under torchrun, as `vitlab tour`) and keep it in ``store``."""
    from ..engine import dist
    from ..engine.context import Run
    from ..inputs.data import open_source
    from ..inputs.models import load
    from ..tour import classroom

    classroom.writable(store)  # before any model runs: a lecture that cannot be kept is not worth computing
    ctx = dist.context(args)
    source = open_source(settings.data)
    models = [load(s, args.device) for s in settings.models]
    for m, spec in zip(models, settings.models):  # named as typed, in the tour's rows and the provenance
        m.display = spec
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
