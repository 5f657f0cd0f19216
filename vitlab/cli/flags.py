"""Flags made from the table: an options dataclass's fields become argparse options, and parsed flags become the
options dataclass again. Every command that takes an analysis's options (its row, ``report``, ``lecture``) and the
code behind a view (:mod:`vitlab.cli.recipe`) name a field's flag through :func:`flag_names`.

    dataclasses.Field ─add_option─► --flag on a parser        argparse.Namespace ─options_from_args─► options
"""

from __future__ import annotations

import argparse
import dataclasses

from ..options import parse_ints, parse_strs
from ..table import Analysis

MODEL_HELP = ("model spec NAME[@WEIGHTS] or zoo:NAME[@random[:SEED]]; WEIGHTS: pretrained (default), "
              "random[:SEED] (the untrained twin), or a .safetensors/.pth/.bin file")
DEVICE_HELP = "auto (CUDA when present), cpu, cuda, cuda:N"
SCALARS = {"int": int, "float": float, "str": str}
HELP = {  # the commands beside the table's rows, in one line each (``zoo``'s is vitlab.zoo.cli's)
    "taps": "list a model's taps (representation points) and its family",
    "cache": "show or clear the disk cache",
    "zoo": "vitlab's own Fashion-MNIST reference models",
    "report": "the Paper tour as one self-contained HTML file (figures, verdicts, provenance) that opens offline "
              "with no server",
    "lecture": "lecture mode: --prepare runs the tour once ahead of class and keeps it in the disk cache for the "
               "app's Lecture page; without --prepare, reads the prepared lecture back",
    "app": "start the Streamlit app, on localhost only, from any folder",
}


def flag_names(f: dataclasses.Field) -> list[str]:
    """The flag of an options field (``--batch-size``, or its ``flag`` metadata), then its short form if any."""
    names = [f.metadata.get("flag") or "--" + f.name.replace("_", "-")]
    return names + ([f.metadata["short"]] if f.metadata.get("short") else [])


def add_option(p: argparse.ArgumentParser, f: dataclasses.Field) -> None:
    """One options field as a flag of ``p``; its default stays None, so that a flag not given keeps the dataclass's."""
    meta, kind = f.metadata, f.metadata.get("kind")
    help_ = meta.get("help", "").replace("%", "%%")  # argparse formats help strings with %
    if f.default not in (None, False) and "default" not in help_:
        shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        # after a list of choices ("random: ...; none") a parenthesis would read as the last choice's: "none
        # (default: random)" (issue 47); a sentence of its own reads right
        help_ += f". Default: {shown}." if meta.get("choices") else f" (default: {shown})"
    kw: dict = {"dest": f.name, "help": help_, "default": None}
    base = str(f.type).split("|")[0].strip()
    if base == "bool":
        p.add_argument(*flag_names(f), action="store_true", dest=f.name, help=help_)
        return
    if kind is None:
        kw["type"] = SCALARS.get(base, str)
    if meta.get("choices"):
        kw["choices"] = meta["choices"]
    if meta.get("metavar"):
        kw["metavar"] = meta["metavar"]
    if meta.get("required"):
        kw["required"] = True
    p.add_argument(*flag_names(f), **kw)


def options_from_args(analysis: Analysis, args):
    """The analysis's options dataclass from parsed flags (flags not given keep the dataclass defaults)."""
    given = {}
    for f in dataclasses.fields(analysis.options):
        value = getattr(args, f.name, None)
        if value is None or (value is False and f.default is not True):
            continue
        kind = f.metadata.get("kind")
        if kind == "ints":
            value = parse_ints(value, flag_names(f)[0])
        elif kind == "strs":
            value = parse_strs(value)
        given[f.name] = value
    return analysis.options(**given)


def add_evidence_options(p: argparse.ArgumentParser, options: type) -> None:
    """``--bootstrap B`` and ``--seed S``: the resampling behind every 95 % interval (docs/evidence.md). An
    analysis whose options already have a ``seed`` (probe: its split) shares that flag."""
    p.add_argument("--bootstrap", type=int, default=200, metavar="B",
                   help="bootstrap resamples for each 95 %% interval (over batches, images or few-shot draws; "
                        "default: 200; 0: no intervals)")
    if "seed" not in {f.name for f in dataclasses.fields(options)}:
        p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of the permutation nulls")


def tour_defaults(p: argparse.ArgumentParser) -> None:
    """`vitlab tour`, `vitlab report` and `vitlab lecture` resample with the tour default (vitlab.tour.TOUR_BOOTSTRAP,
    TOUR_SEED), the one the Paper tour page and the slides use, so screen and handout print the same rows (issue 33)."""
    from ..tour.checks import TOUR_BOOTSTRAP, TOUR_SEED

    p.set_defaults(bootstrap=TOUR_BOOTSTRAP, seed=TOUR_SEED)


def row_help(analysis: Analysis) -> str:
    """A row's one-line help, escaped for argparse (which formats help strings with %)."""
    return analysis.help.replace("%", "%%")
