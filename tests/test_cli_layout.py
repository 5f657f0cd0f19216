"""The command line is one package, ``vitlab/cli/`` (issue 49), beside ``tour/``, ``analyses/`` and the table: its
modules each under 500 lines, no loose ``cli.py``, ``cli_lecture.py`` or ``recipe.py`` left beside the engine's
folders, every importer moved with it, and ``python -m vitlab`` (and the ``vitlab`` script) with the same commands."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib

from vitlab.table import ANALYSES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vitlab"
GONE = ("cli", "cli_lecture", "recipe")  # the loose modules the package replaced
# the commands beside the table's rows before the package, in `vitlab --help`'s order: the same commands after it
EXTRA = ["taps", "cache", "zoo", "report", "lecture", "app"]


def test_the_command_line_is_one_package_of_small_modules():
    cli = PACKAGE / "cli"
    assert (cli / "__init__.py").is_file()
    assert not [name for name in GONE if (PACKAGE / f"{name}.py").exists()]
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in cli.glob("*.py")}
    assert {"__init__.py", "parser.py", "runner.py", "lecture.py", "recipe.py", "app.py"} <= set(sizes), sizes
    assert max(sizes.values()) < 500, sizes


def _stale_imports(path: Path) -> list[str]:
    """The imports in ``path`` of a module the package replaced (``vitlab.recipe``, ``from vitlab import cli_lecture``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "vitlab"]
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                  if n in ("vitlab.recipe", "vitlab.cli_lecture") or n.startswith(("vitlab.recipe.",
                                                                                    "vitlab.cli_lecture."))]
    return found


def test_no_importer_names_a_module_the_package_replaced():
    files = [p for folder in ("vitlab", "app", "tests", "bench") for p in (ROOT / folder).rglob("*.py")]
    assert len(files) > 50
    assert [hit for p in files for hit in _stale_imports(p)] == []
    assert importlib.util.find_spec("vitlab.cli.recipe").origin == str(PACKAGE / "cli" / "recipe.py")


def test_the_script_and_python_m_vitlab_list_the_same_commands():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["vitlab"].partition(":")
    assert (module, name) == ("vitlab.cli", "main") and callable(getattr(importlib.import_module(module), name))
    out = subprocess.run([sys.executable, "-m", "vitlab", "--help"], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    listed = re.search(r"\{([a-z,-]+)\}", out.stdout).group(1).split(",")
    assert listed == [*ANALYSES, *EXTRA]
