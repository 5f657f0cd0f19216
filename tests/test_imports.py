"""The package's import graph has no cycle (imports inside functions count too); which folder may import which is
tests/test_import_direction.py."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vitlab"


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (``vitlab`` itself left out)."""
    top = root.name
    files = {".".join(p.relative_to(root.parent).with_suffix("").parts): p for p in root.rglob("*.py")}
    mods = {(m[: -len(".__init__")] if m.endswith(".__init__") else m): p for m, p in files.items()}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(max(node.level - 1, 0)):
                    base = base.rsplit(".", 1)[0]
                full = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
                subs = [f"{full}.{a.name}" for a in node.names]
                # `from . import sibling` inside a package depends on the sibling, not on the package's __init__
                # (already being imported when this module runs); from outside, the __init__ runs first
                inside = mod.startswith(f"{full}.") and all(t in mods for t in subs)
                targets = subs if inside else [full] + subs
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                # a module named by its dotted path in a call (importlib.import_module, the table's lazy modules)
                targets = [node.args[0].value] if isinstance(node.args[0].value, str) else []
            else:
                continue
            graph[mod].update(t for t in targets if t in mods and t not in (mod, top))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..a import y\nimport json\n")
    (pkg / "d.py").write_text("from . import a\n")
    (pkg / "e.py").write_text("import importlib\nlater = importlib.import_module('pkg.d')\n")
    graph = import_graph(pkg)
    assert graph["pkg.b"] == {"pkg.sub", "pkg.sub.c"} and graph["pkg.sub.c"] == {"pkg.a"}
    assert graph["pkg.e"] == {"pkg.d"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_vitlab_has_no_import_cycle():
    graph = import_graph()
    assert {"vitlab.cli", "vitlab.table", "vitlab.inputs.models", "vitlab.engine.dist"} <= set(graph)
    assert cycles(graph) == []


def test_engine_modules_do_not_import_the_front_ends():
    graph = import_graph()

    def front(mod: str) -> bool:  # the table, and the command line: the vitlab.cli package and every module in it
        return mod in ("vitlab.table", "vitlab.cli") or mod.startswith("vitlab.cli.")

    for mod, targets in graph.items():
        if not front(mod) and mod not in ("vitlab", "vitlab.__main__"):
            assert not {t for t in targets if front(t)}, f"{mod} imports {[t for t in targets if front(t)]}"
