"""``vitlab report``: the Paper tour as one self-contained HTML file (an output of the tour row, not a row of its
own): the tour's flags, its models named as typed, and ``--out`` a path ending in .html."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ..table import ANALYSES
from .flags import DEVICE_HELP, HELP, MODEL_HELP, add_evidence_options, add_option, options_from_args, tour_defaults
from .runner import open_store, relabel


def add_report(sub) -> None:
    tour = ANALYSES["tour"]
    p = sub.add_parser("report", help=HELP["report"])
    p.add_argument("--model", "-m", action="append", required=True, help=MODEL_HELP + " (repeat for several)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data", "-d", default=tour.data, help=tour.data_help)
    for f in dataclasses.fields(tour.options):
        add_option(p, f)
    add_evidence_options(p, tour.options)
    tour_defaults(p)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: VITLAB_CACHE_DIR or ~/.cache/vitlab)")
    p.add_argument("--title", default=None, help="the report's title")
    p.add_argument("--out", "-o", default="report.html", help="the HTML file to write")
    p.set_defaults(func=run_report_command)


def run_report_command(args) -> int:
    from ..engine import dist
    from ..engine.context import Run
    from ..errors import VitlabError
    from ..inputs.data import open_source
    from ..inputs.models import check_fits, load, resolve_device
    from ..tour.report import ReportOptions, check_target, report

    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise VitlabError(f"--out '{out}': the report is one HTML file; give a path ending in .html")
    if out.is_dir():
        raise VitlabError(f"--out '{out}' is a folder; the report is one HTML file: give a path ending in .html")
    check_target(out)  # only over an earlier report of vitlab's, and said before anything is computed
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
