"""The code behind a view (issue 41): the ``vitlab`` command and the Python call on the public API that recompute
an app page's table with the same models, data and options.

Both are plain text made from one row of the table of analyses (``vitlab.table``): its command name, its arity
(how models are given), its options dataclass (a field that differs from its default becomes the flag the CLI
builds from the same field, :mod:`vitlab.cli.flags`) and its tables (which CSV the page offers). Nothing here runs a
model; the app shows the text, tests run it.

    row, models, data, opts ─command_line─► "vitlab skip-ratio --model zoo:vit-cls ... --out results/skip-ratio"
    row, models, data, opts ─python_call──► "import vitlab\\n...\\ntables['skip_ratio_summary'].to_csv(...)"
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from ..errors import VitlabError
from ..row import Analysis
from .flags import flag_names

__all__ = ["command_line", "option_values", "python_call", "table_file"]

DEFAULT_DEVICE = "auto"


def option_values(opts) -> dict[str, Any]:
    """The options that differ from their dataclass defaults, in field order (what a command must say)."""
    out = {}
    for f in dataclasses.fields(opts):
        value = getattr(opts, f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if value != default:
            out[f.name] = value
    return out


def _check(row: Analysis, models, data: str) -> None:
    if data == "uploads":
        raise VitlabError("uploaded images have no command line: save them in a folder and give that folder as "
                          "--data FOLDER (or vitlab.open_source('FOLDER'))")
    if not data:
        raise VitlabError("the images of this view are not a data source a command can name: choose the images in "
                          "the sidebar to get its command")
    if row.arity == "pairs":
        if not models or any(len(p) != 2 for p in models):
            raise VitlabError(f"vitlab {row.name} takes pairs of models (A, B)")
    elif not models or (row.arity == "one" and len(models) != 1) or (row.arity == "pair" and len(models) != 2):
        raise VitlabError(f"vitlab {row.name} takes {dict(one='one model', pair='two models').get(row.arity, 'models')}"
                          f", not {len(models)}")


def _model_args(row: Analysis, models) -> list[str]:
    if row.arity == "pairs":
        return [w for a, b in models for w in ("--pair", a, b)]
    if row.arity == "pair":
        return ["--model", models[0], "--other", models[1]]
    return [w for m in models for w in ("--model", m)]


def _flag_args(f: dataclasses.Field, value) -> list[str]:
    flag = flag_names(f)[0]
    if isinstance(value, bool):
        if not value:  # a switch cannot be turned off on the command line: the only False is its default
            raise VitlabError(f"--{f.name} is a switch that is off by default: leave it out")
        return [flag]
    if isinstance(value, (tuple, list)):
        return [flag, ",".join(map(str, value))]
    return [flag, str(value)]


def table_file(row: Analysis, table: str) -> str:
    """The CSV file the command writes for ``table`` (a key of ``row.tables(result)``), under its ``--out``."""
    return f"{row.default_out}/{table}.csv"


def command_line(row: Analysis, models, data: str, opts, device: str = DEFAULT_DEVICE,
                 out: str | None = None) -> str:
    """The shell command that recomputes ``row`` on ``models`` (specs; pairs for arity 'pairs') and ``data``
    with ``opts``; every word quoted for a POSIX shell. Raises VitlabError for what a command cannot take
    (uploaded images)."""
    _check(row, models, data)
    words = ["vitlab", row.name, *_model_args(row, models)]
    if device != DEFAULT_DEVICE:  # in the order `--help` lists them: --device before --data
        words += ["--device", device]
    words += ["--data", data]
    given = option_values(opts)
    for f in dataclasses.fields(opts):  # a flag the CLI requires is said even at its dataclass default
        if f.name in given or f.metadata.get("required"):
            words += _flag_args(f, getattr(opts, f.name))
    words += ["--out", out or row.default_out]
    return " ".join(shlex.quote(str(w)) for w in words)


def _public(obj) -> str:
    """``obj``'s dotted name through the public surface (``vitlab.skips.skip_ratios``, ``vitlab.tour.run_tour``)."""
    import sys

    import vitlab

    module, name = obj.__module__, obj.__qualname__
    for public, (path, attr) in vitlab._PUBLIC.items():
        if attr is None and path == module:
            return f"vitlab.{public}.{name}"
    for public, (path, attr) in vitlab._PUBLIC.items():  # a package that re-exports it (vitlab.tour)
        if attr is None and module.startswith(path + ".") and getattr(sys.modules.get(path), name, None) is obj:
            return f"vitlab.{public}.{name}"
    raise VitlabError(f"{module}.{name} is not on vitlab's public surface: name its module in vitlab._PUBLIC")


def _models_code(row: Analysis, models, device: str) -> list[str]:
    dev = "" if device == DEFAULT_DEVICE else f", {device!r}"
    if row.arity == "pairs":
        specs = list(dict.fromkeys(s for p in models for s in p))
        lines = ["loaded = {s: vitlab.load(s" + dev + ") for s in " + repr(specs) + "}"]
        return lines + [f"models = [(loaded[a], loaded[b]) for a, b in {[tuple(p) for p in models]!r}]"]
    if row.arity == "one":
        return [f"model = vitlab.load({models[0]!r}{dev})"]
    return [f"models = [{', '.join(f'vitlab.load({m!r}{dev})' for m in models)}]"]


def _engine_args(row: Analysis) -> str:
    return {"one": "model", "pair": "*models"}.get(row.arity, "models")


def python_call(row: Analysis, models, data: str, opts, table: str, device: str = DEFAULT_DEVICE) -> str:
    """A short script on the public API (``import vitlab``) that recomputes ``row`` with the same inputs and writes
    the page's CSV ``table`` (a key of ``row.tables(result)``) as ``<table>.csv`` in the current folder."""
    _check(row, models, data)
    kwargs = ", ".join(f"{k}={v!r}" for k, v in option_values(opts).items())
    return "\n".join([
        "import vitlab",
        "",
        *_models_code(row, models, device),
        f"source = vitlab.open_source({data!r})",
        f"opts = {_public(type(opts))}({kwargs})",
        f"result = {_public(row.engine)}({_engine_args(row)}, source, opts, vitlab.Run(store=vitlab.Store('default')))",
        f"vitlab.ANALYSES[{row.name!r}].tables(result)[{table!r}].to_csv({table + '.csv'!r}, index=False)",
    ])
