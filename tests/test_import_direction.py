"""The folders of ``vitlab`` import one way only, lowest first (imports inside functions count too):

    errors, options, progress   shared leaves (and resources: which vitlab this is, where its app and assets are)
    stats                       pure kernels and folds: import nothing of vitlab but ``errors``
    charts                      DataFrame -> Altair chart; know measure names (stats), nothing of models or passes
    inputs, zoo                 models and their taps, images, data sources, cache, hub, output folders; the zoo's
                                own models (loaded by ``inputs.models``, trained on ``inputs.fmnist``)
    engine                      the one cached pass: knows no analysis
    analyses                    one module per analysis: knows no tour, table, CLI or app
    tour                        the paper's claims checked with the analyses, and its HTML report
    table, row                  the table of analyses (the tour is one of its rows) and its record
    cli, __main__, vitlab       the command line (a package: parser, runner, lecture, the code behind a view)
                                and the public surface: they may import everything, nothing below imports them

A module may import its own layer and any lower one, never a higher one.
"""

from __future__ import annotations

from .test_imports import import_graph

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("leaves", ("errors", "options", "progress", "resources")),
    ("stats", ("stats",)),
    ("charts", ("charts",)),
    ("inputs", ("inputs", "zoo")),
    ("engine", ("engine",)),
    ("analyses", ("analyses",)),
    ("tour", ("tour",)),
    ("table", ("table", "row")),
    ("front", ("cli", "__main__", "")),
]
STATS_MAY_IMPORT = {"errors"}  # stats uses nothing of vitlab but its errors


def layer_of(module: str) -> tuple[int, str]:
    """(rank, layer name) of a package module, by its first name below the package ('' for the package itself)."""
    first = module.split(".")[1] if "." in module else ""
    for rank, (name, members) in enumerate(LAYERS):
        if first in members:
            return rank, name
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS in {__name__}")


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer, or out of stats to anything but errors, in words."""
    found = []
    for mod in sorted(graph):
        rank, name = layer_of(mod)
        for target in sorted(graph[mod]):
            t_rank, t_name = layer_of(target)
            if t_rank > rank:
                found.append(f"{mod} ({name}) imports {target} ({t_name}), a higher layer")
            elif name == "stats" and t_name != "stats" and target.split(".", 1)[1] not in STATS_MAY_IMPORT:
                found.append(f"{mod} (stats) imports {target}: stats may import nothing of vitlab but errors")
    return found


def test_the_direction_check_finds_planted_violations(tmp_path):
    pkg = tmp_path / "pkg"
    for folder in ("stats", "engine", "analyses", "inputs"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "options.py").write_text("from .errors import E\n")
    (pkg / "stats" / "k.py").write_text("from ..errors import E\nfrom ..options import option\n")
    (pkg / "inputs" / "models.py").write_text("def f():\n    from ..analyses import attention\n")
    (pkg / "analyses" / "attention.py").write_text("from ..engine import run\nfrom ..stats.k import g\n")
    (pkg / "engine" / "run.py").write_text("from ..inputs.models import load\nfrom ..stats import k\n")
    assert violations(import_graph(pkg)) == [
        "pkg.inputs.models (inputs) imports pkg.analyses (analyses), a higher layer",
        "pkg.inputs.models (inputs) imports pkg.analyses.attention (analyses), a higher layer",
        "pkg.stats.k (stats) imports pkg.options: stats may import nothing of vitlab but errors",
    ]


def test_every_module_is_in_a_layer_and_the_folders_hold_what_they_say():
    graph = import_graph()
    for mod in graph:
        layer_of(mod)
    assert {"vitlab.stats.cka", "vitlab.inputs.models", "vitlab.engine.run", "vitlab.analyses.attention",
            "vitlab.tour.measure", "vitlab.table"} <= set(graph)


def test_vitlab_imports_go_down_the_layers_only():
    assert violations(import_graph()) == []
