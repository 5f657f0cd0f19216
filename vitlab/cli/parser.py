"""The ``vitlab`` parser, made from the table: one sub-command per row of :data:`vitlab.table.ANALYSES` (its models,
``--data``, the fields of its options dataclass as flags, ``--out``), then the commands beside the rows (``taps``,
``cache``, ``zoo``, ``report``, ``lecture``, ``app``), each registered by the module that runs it.

    Analysis row ─add_analysis─► sub-parser whose func is run_analysis(row, args)
"""

from __future__ import annotations

import argparse
import dataclasses

from ..resources import VersionAction
from ..table import ANALYSES, Analysis
from .app import add_app
from .commands import add_cache, add_taps, add_zoo
from .flags import DEVICE_HELP, HELP, MODEL_HELP, add_evidence_options, add_option, row_help, tour_defaults
from .lecture import add_lecture
from .report import add_report
from .runner import run_analysis

DESCRIPTION = "The ``vitlab`` command (also ``python -m vitlab``): headless runs and exports."
EXTRA = {"taps": add_taps, "cache": add_cache, "zoo": add_zoo, "report": add_report, "lecture": add_lecture,
         "app": add_app}  # the commands beside the table's rows, in the order `vitlab --help` lists them


def add_analysis(sub, analysis: Analysis) -> argparse.ArgumentParser:
    """Register one row of the table as a sub-command."""
    help_ = row_help(analysis)
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
        add_option(p, f)
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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``vitlab`` parser with the flags of ``command`` only (None: of every sub-command). The others get their
    one-line help, which needs no analysis module: ``vitlab --help`` imports neither torch nor timm, and
    ``vitlab COMMAND`` imports what COMMAND runs."""
    parser = argparse.ArgumentParser(prog="vitlab", description=DESCRIPTION)
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    for analysis in ANALYSES.values():
        if command in (None, analysis.name):
            add_analysis(sub, analysis)
        else:
            sub.add_parser(analysis.name, help=row_help(analysis))
    for name, add in EXTRA.items():
        if command in (None, name):
            add(sub)
        else:
            sub.add_parser(name, help=HELP[name])
    return parser
