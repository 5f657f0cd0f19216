"""``vitlab report``: the Paper tour as one self-contained HTML file (inline SVG figures, verdicts with their
intervals, provenance), to open offline in any browser. Its flags are the tour row's (``vitlab tour``) plus
``--title`` and ``--out FILE.html``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from .cli import (DEVICE_HELP, MODEL_HELP, _add_option, add_evidence_options, open_store, options_from_args,
                  relabel)


def add_report(sub) -> None:
    from .analyses import ANALYSES

    tour = ANALYSES["tour"]
    p = sub.add_parser("report", help="the Paper tour as one self-contained HTML file (figures, verdicts, "
                                      "provenance) that opens offline with no server")
    p.add_argument("--model", "-m", action="append", required=True, help=MODEL_HELP + " (repeat for several)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data", "-d", default=tour.data, help=tour.data_help)
    for f in dataclasses.fields(tour.options):
        _add_option(p, f)
    add_evidence_options(p, tour.options)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: VITLAB_CACHE_DIR or ~/.cache/vitlab)")
    p.add_argument("--title", default=None, help="the report's title")
    p.add_argument("--out", "-o", default="report.html", help="the HTML file to write")
    p.set_defaults(func=run_report_command)


def run_report_command(args) -> int:
    from .analyses import ANALYSES
    from .context import Run
    from .data import open_source
    from .errors import VitlabError
    from .models import load
    from .progress import tqdm_progress
    from .report import ReportOptions, report

    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise VitlabError(f"--out '{out}': the report is one HTML file; give a path ending in .html")
    t0 = time.perf_counter()
    tour_opts = options_from_args(ANALYSES["tour"], args)
    source = open_source(args.data)
    models = [load(s, args.device) for s in args.model]
    relabel(models, args.model)
    opts = ReportOptions(tour_opts, args.title) if args.title else ReportOptions(tour_opts)
    progress = tqdm_progress("report")
    try:
        result = report(models, source, opts, Run(store=open_store(args), progress=progress, seed=args.seed,
                                                  bootstrap=args.bootstrap))
    finally:
        progress.close()
    result.write(out)
    counts = result.tour.summary()
    print(f"report: {out} ({len(result.html.encode()) / 1024:.0f} KiB, {len(result.tour.rows)} figures: "
          + ", ".join(f"{v} {k}" for k, v in counts.items()) + f"; {time.perf_counter() - t0:.1f} s)")
    return 0
