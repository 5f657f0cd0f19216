"""``vitlab report``: the Paper tour as one self-contained HTML file (inline SVG figures, verdicts with their
intervals, provenance), to open offline in any browser."""

from __future__ import annotations

import sys
import time
from dataclasses import fields
from pathlib import Path

from .cli import add_data_options, add_model_options, load_models, open_store, relabel


def add_report(sub) -> None:
    from .cli_evidence import add_evidence_options
    from .tour import TourOptions

    defaults = {f.name: f.default for f in fields(TourOptions)}
    p = sub.add_parser("report", help="the Paper tour as one self-contained HTML file (figures, verdicts, "
                                      "provenance) that opens offline")
    add_model_options(p)
    add_data_options(p, images=defaults["images"], batch_size=defaults["batch_size"])
    p.set_defaults(data="fashion-mnist:test")
    p.add_argument("--control", choices=("random", "none"), default=defaults["control"],
                   help="random: untrained twins (NAME@random) as controls where a claim depends on training")
    p.add_argument("--only", default=None, help="comma-separated checks (default: all)")
    p.add_argument("--title", default=None, help="the report's title")
    add_evidence_options(p)
    p.add_argument("--out", "-o", default="report.html", help="the HTML file to write")
    p.set_defaults(func=run_report_command)


def run_report_command(args) -> int:
    from .context import Run
    from .data import open_source
    from .errors import VitlabError
    from .progress import tqdm_progress
    from .report import ReportOptions, report
    from .tour import TourOptions

    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise VitlabError(f"--out '{out}': the report is one HTML file; give a path ending in .html")
    t0 = time.perf_counter()
    source = open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    only = tuple(k.strip() for k in args.only.split(",") if k.strip()) if args.only else ()
    tour = TourOptions(images=args.images, shuffle=args.shuffle, batch_size=args.batch_size, control=args.control,
                       only=only)
    opts = ReportOptions(tour, args.title) if args.title else ReportOptions(tour)
    progress = tqdm_progress("report")
    try:
        result = report(models, source, opts, Run(store=open_store(args), progress=progress, seed=args.seed,
                                                  bootstrap=args.bootstrap))
    finally:
        progress.close()
    result.write(out)
    counts = result.tour.summary()
    print(f"report: {out} ({len(result.html.encode()) / 1024:.0f} KiB, {len(result.tour.rows)} figures: "
          + ", ".join(f"{v} {k}" for k, v in counts.items()) + f"; {time.perf_counter() - t0:.1f} s)",
          file=sys.stdout)
    return 0


REPORT_COMMANDS = [add_report]
