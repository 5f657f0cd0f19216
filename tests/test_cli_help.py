"""`vitlab --help` and `vitlab COMMAND --help` answer without torch or timm (issue 25): the table's rows name their
options and engine functions lazily, and the parser builds the flags of the named command only. Timing is measured
by bench/cli_startup.py, not asserted here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vitlab.cli import HELP, build_parser
from vitlab.table import ANALYSES

ROOT = Path(__file__).resolve().parent.parent


def imported(*args: str) -> tuple[str, set[str]]:
    """stdout of ``python -X importtime -m vitlab ARGS`` and the top-level packages it imported."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "vitlab", *args], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines()
             if line.startswith("import time:")}
    assert "vitlab" in names  # the log is the import log of this run
    return out.stdout, names


def test_help_lists_every_command_without_torch_or_timm():
    text, names = imported("--help")
    assert not names & {"torch", "timm", "numpy"}, names & {"torch", "timm", "numpy"}
    for name in [*ANALYSES, *HELP]:
        assert name in text


@pytest.mark.parametrize("command, flag", [("cka", "--kernel"), ("report", "--title"), ("lecture", "--prepare")])
def test_command_help_shows_its_flags_without_torch_or_timm(command, flag):
    text, names = imported(command, "--help")
    heavy = {"torch", "timm", "pandas", "altair"}  # the report's tour measures and charts load when a tour runs
    assert flag in text and not names & heavy, names & heavy


@pytest.mark.parametrize("args", [("zoo", "--help"), ("zoo", "train", "--help"), ("zoo", "list")])
def test_zoo_help_and_list_answer_without_torch_or_timm(args):
    text, names = imported(*args)
    assert not names & {"torch", "timm"}, names & {"torch", "timm"}
    if args[-1] == "list":  # the listing reads the cards: every recipe, with the accuracy its card gives
        from vitlab.zoo import RECIPES, card

        for name in RECIPES:
            row = next(line for line in text.splitlines() if line.split()[0] == name)
            assert f"{card(name)['test_accuracy']:.4f}" in row
    else:
        assert "--help" in text or "--max-steps" in text


def test_a_command_imports_what_it_runs(tmp_path):
    _, names = imported("taps", "-m", "test_vit@random:0", "--device", "cpu")
    assert {"torch", "timm"} <= names


def _subcommands(parser) -> dict[str, str]:
    (action,) = [a for a in parser._actions if a.dest == "command"]
    return {c.dest: c.help for c in action._choices_actions}


def test_the_short_parser_lists_the_same_commands_and_help_as_the_full_one():
    full, short = _subcommands(build_parser()), _subcommands(build_parser(""))
    assert list(full) == [*ANALYSES, *HELP] and short == full
    one = build_parser("cka")
    assert _subcommands(one) == full
    assert one.parse_args(["cka", "-m", "zoo:vit-cls", "--kernel", "rbf"]).kernel == "rbf"


def test_a_row_names_a_module_without_importing_it_until_read():
    from vitlab.row import Lazy, Ref
    from vitlab.stats import cka

    ref = Lazy("vitlab.stats.cka").MIN_UNBIASED_BATCH
    assert ref == Ref("vitlab.stats.cka", "MIN_UNBIASED_BATCH") and ref.resolve() == cka.MIN_UNBIASED_BATCH == 4
    k = np.arange(16.0).reshape(4, 4)
    assert np.array_equal(Lazy("vitlab.stats.cka").u_center(k), cka.u_center(k))  # a helper called through a Ref
    row = ANALYSES["similarity"]
    assert type(object.__getattribute__(row, "engine")) in (Ref, type(cka.u_center))
    assert callable(row.engine) and type(row.engine) is not Ref and row.options.__name__ == "SimilarityOptions"


@pytest.mark.parametrize("rank", ["0", "1"])
def test_bookkeeping_under_torchrun_runs_on_rank_0_alone_without_torch(rank, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WORLD_SIZE="2", RANK=rank, LOCAL_RANK=rank)
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "vitlab", "cache", "info", "--cache-dir",
                          str(tmp_path / "c")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines()
             if line.startswith("import time:")}
    assert not names & {"torch", "timm"}, names & {"torch", "timm"}
    notes = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    if rank == "0":
        assert out.stdout and notes == ["vitlab cache runs in one process: under torchrun rank 0 runs it and the other "
                                        "1 rank(s) exit"]
    else:
        assert out.stdout == "" and notes == []
