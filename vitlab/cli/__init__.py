"""The ``vitlab`` command (also ``python -m vitlab``): headless runs and exports.

One sub-command per row of :data:`vitlab.table.ANALYSES`, all run by :func:`vitlab.cli.runner.run_analysis`; plus
``taps``, ``cache``, ``zoo``, ``report``, ``lecture`` and ``app``. Every user error ends with one line on stderr and
exit status 2; results go to ``--out DIR`` as CSV, JSON and PNG/SVG charts.

    flags.py     an options dataclass's fields as flags, and parsed flags back as the options
    parser.py    the parser made from the table: a sub-command per row, then the commands beside the rows
    runner.py    the one runner: a row run from its flags, its outputs and run.json written
    commands.py  taps, cache, zoo: bookkeeping, in one process
    report.py    the Paper tour as one HTML file
    lecture.py   lecture mode: the tour prepared ahead of class, and read back
    app.py       the Streamlit app, its server a child that vitlab's stop signals reach
    recipe.py    the code behind a view: the command line and the Python call that recompute an app page

The top layer of vitlab: it may import any part of vitlab, and no part of the engine imports it
(tests/test_import_direction.py). A monkeypatch belongs on the module that owns the name (``vitlab.cli.app.serve``,
``vitlab.cli.runner.write_outputs``): the names below are re-exported for callers, not looked up through here.
"""

from __future__ import annotations

import os
import sys

from ..errors import VitlabError
from .app import app_command
from .flags import HELP, options_from_args
from .parser import add_analysis, build_parser
from .runner import run_analysis

__all__ = ["HELP", "add_analysis", "app_command", "build_parser", "command_of", "main", "options_from_args",
           "run_analysis"]

ONE_PROCESS = ("taps", "cache", "zoo")  # bookkeeping: under torchrun rank 0 runs them alone, with no process group


def run_one_process(args) -> int:
    """A bookkeeping command: no process group and no pipeline, so ``zoo list`` and ``cache`` import no torch. Under
    torchrun rank 0 runs it alone and the other ranks exit."""
    if os.environ.get("WORLD_SIZE", "").strip() not in ("", "0", "1"):
        from ..engine import dist

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
        from ..engine import dist, pipeline

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
