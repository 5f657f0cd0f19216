"""Run several ``vitlab`` commands in one process, writing only their CSV tables and run.json.

    torchrun --nproc_per_node 2 tests/dist_driver.py COMMANDS.json    # one process group for every command
    python tests/dist_driver.py COMMANDS.json                         # the same commands in one process

``COMMANDS.json`` is a list of argument lists (``["cka", "-m", "zoo:vit-cls", ...]``). One launch runs them all
(each torchrun launch costs seconds of imports); the commands go through the CLI's own runner
(``vitlab.cli.runner.run_analysis``) inside one ``dist.guard()``, so the process group, the failure watcher and rank
0's outputs are those of ``python -m vitlab``. Charts are not written: the tests compare tables.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def tables_only(analysis, result, opts, out: Path, names=None) -> list:
    """``vitlab.cli.runner.write_outputs`` without charts or extra files: the CSV tables the tests compare."""
    written = []
    for stem, frame in analysis.tables(result).items():
        frame.to_csv(out / f"{stem}.csv", index=False)
        written.append(out / f"{stem}.csv")
    return written


def run_commands(commands: list[list[str]]) -> None:
    """Every command in turn, in this process's group (a no-op group in one process)."""
    from vitlab import cli, pipeline
    from vitlab.cli import runner
    from vitlab.engine import dist

    saved, runner.write_outputs = runner.write_outputs, tables_only  # where run_analysis looks it up
    try:
        with dist.guard():
            for argv in commands:
                args = cli.build_parser().parse_args(argv)
                with pipeline.defaults(getattr(args, "workers", None), getattr(args, "worker_kind", None)):
                    args.func(args)
    finally:
        runner.write_outputs = saved


if __name__ == "__main__":
    from vitlab.errors import VitlabError

    try:
        run_commands(json.loads(Path(sys.argv[1]).read_text()))
    except VitlabError as e:
        print(f"vitlab: error: {e}", file=sys.stderr)
        sys.exit(2)
