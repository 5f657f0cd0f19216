"""One row of the table of analyses (``vitlab.table``): the :class:`Analysis` record, and the :class:`Ref` by which
a row names an analysis module's options and engine function without importing it.

``vitlab --help`` reads every row (name, help) and imports no analysis module, so neither torch nor timm; a row's
``options`` or ``engine`` is imported when first read (a command that runs, a page that opens, ``COMMAND --help``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine.context import Run

ARITIES = ("one", "pair", "many", "pairs")


@dataclass(frozen=True)
class Ref:
    """A name in a module that a row holds until it is first read: the table, and with it ``vitlab --help``, imports
    no analysis module (nor torch) until a command runs or a page opens."""

    module: str
    name: str

    def resolve(self):
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self, *args, **kwargs):  # a row's helper calling a module's function (``similarity.describe``)
        return self.resolve()(*args, **kwargs)


class Lazy:
    """A module as the rows name it: ``attention.AttentionDistanceOptions`` is ``Ref(module, name)``, not an import.
    tests/test_imports.py counts ``Lazy("vitlab.x")`` as an import of ``vitlab.x`` by the module that writes it."""

    def __init__(self, module: str):
        self._module = module

    def __getattr__(self, name: str) -> Ref:
        if name.startswith("_"):  # copy, pickle and inspect probe for dunders: those are not the module's names
            raise AttributeError(name)
        return Ref(self._module, name)


def _no_extra(result, opts) -> dict:
    return {}


def _headline(result) -> list[str]:
    return list(result.headline())


@dataclass(frozen=True)
class Analysis:
    """One analysis: what it is (name, title, paper figure), how it runs (arity, options, engine) and what it
    writes and shows (tables, charts, headline, run.json fields); where it lives in the app and the docs."""

    name: str  # CLI sub-command and the stem of its default output folder
    title: str
    figure: str  # the paper's figure(s), e.g. "Figs 3-4"
    arity: str  # one | pair | many | pairs
    options: type  # frozen dataclass with option() fields
    engine: Callable  # engine(models, source, opts, run) -> result
    help: str  # one line: the CLI help and the home page blurb
    tables: Callable[[Any], dict]  # result -> {csv stem: DataFrame}
    charts: Callable[[Any, Any], dict] = lambda result, opts: {}  # (result, opts) -> {file stem: alt.Chart}
    headline: Callable[[Any], list[str]] = _headline  # result -> the lines the CLI prints
    record: Callable[[Any, Any], dict] = _no_extra  # (result, opts) -> extra run.json fields
    # (result, names: vitlab.inputs.outdir.OutputNames) -> other files written (npz, images), each at a path from
    # names.path / names.paths, so that no two outputs share a file
    files: Callable[[Any, Any], list] | None = None
    status: Callable[[Any], int] | None = None  # result -> exit status (default 0)
    # runs under torchrun: batches split across ranks, results combined; False: one image (or a check) that rank 0
    # runs alone under torchrun, saying so (docs/scale-out.md)
    shards: bool = True
    amp: bool = False  # offers --amp (bf16 autocast on GPU)
    cache: bool = True  # offers --no-cache / --cache-dir
    data: str = "samples"  # default --data
    data_help: str = "samples | fashion-mnist[:train|test[:FOLDER]] | cifar10[:split] | cifar100[:split] | FOLDER"
    other_help: str = "the model to compare with"  # arity 'pair': help of --other
    page: str | None = None  # the app page (app/views/<page>.py) that shows it
    page_title: str | None = None  # the page's title in the navigation, when it differs from ``title``
    icon: str = ":material/analytics:"
    docs: str | None = None  # docs/<docs>.md
    section: str = "Analyses"  # navigation section
    out: str | None = None  # default --out (None: results/<name>)
    claims: tuple[str, ...] = ()  # the paper tour's steps (keys of vitlab.tour.CLAIMS) this analysis checks

    def __getattribute__(self, name: str):
        value = object.__getattribute__(self, name)
        if type(value) is Ref:  # a field naming a module's object (options, engine): imported on first read
            value = value.resolve()
            object.__setattr__(self, name, value)
        return value

    @property
    def default_out(self) -> str:
        return self.out or f"results/{self.name}"

    def call(self, models, source, opts=None, run_: Run | None = None):
        """Call the engine with ``models`` shaped by the arity (a list for 'one'/'pair' is unpacked)."""
        opts = opts if opts is not None else self.options()
        if self.arity == "one":
            first = models[0] if isinstance(models, (list, tuple)) else models
            return self.engine(first, source, opts, run_)
        if self.arity == "pair":
            return self.engine(models[0], models[1], source, opts, run_)
        return self.engine(list(models), source, opts, run_)
