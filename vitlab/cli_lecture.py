"""``vitlab lecture``: prepare lecture mode ahead of class (``--prepare``), or read back what was prepared.

``vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet`` runs the whole tour at the lecture's settings, draws every
figure, and keeps the result in the disk cache (:mod:`vitlab.tour.classroom`); the app's Lecture page and a later
``vitlab lecture`` with the same settings only read it. The parser is :func:`vitlab.cli.add_lecture` (the tour's
flags); this module runs the command and imports nothing of ``vitlab.cli``.
"""

from __future__ import annotations

import time

from .errors import VitlabError


def read_only(args, settings) -> int:
    """``vitlab lecture`` without ``--prepare``: read the lecture back from the cache ``--cache-dir`` names, creating
    nothing (issue 46): a folder that holds no cache is said, in words, with the command that prepares one."""
    from pathlib import Path

    from .inputs.cache import Store, default_dir

    where = Path(args.cache_dir or default_dir()).expanduser()
    if not (where / "cache.db").is_file():
        what = "no such folder" if not where.exists() else "no vitlab cache in it"
        raise VitlabError(f"no cache at {where} ({what}): nothing is prepared there; prepare the lecture with "
                          f"`{settings.command(str(where))}`, or name the cache it went to with --cache-dir")
    return read_back(Store(where), settings)


def read_back(store, settings) -> int:
    """Print the lecture prepared at ``settings`` from ``store``; the exact command to run when there is none."""
    from .tour import classroom

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
    from .engine import dist
    from .engine.context import Run
    from .inputs.data import open_source
    from .inputs.models import load
    from .tour import classroom

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
