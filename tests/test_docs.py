"""The docs follow the code: the README's table of analyses is the one the table prints, its links lead to pages
that exist, every figure in docs/img is shown somewhere, and the front door stays short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from vitlab import table

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
START, END = "<!-- analyses:start -->\n", "<!-- analyses:end -->"


def front_doors() -> list[Path]:
    """README.md, which holds the generated table."""
    readme = ROOT / "README.md"
    assert START in readme.read_text(), "README.md does not hold the table of analyses"
    return [readme]


def test_the_table_of_analyses_is_the_generated_one():
    printed = subprocess.run([sys.executable, "-m", "vitlab.table", "--markdown"], capture_output=True, text=True,
                             check=True, cwd=ROOT).stdout
    assert printed == table.markdown() and printed.count("\n") == len(table.ANALYSES) + 2
    for path in front_doors():
        text = path.read_text()
        assert text[text.index(START) + len(START):text.index(END)] == printed, (
            f"{path.name}: the table of analyses differs from `python -m vitlab.table --markdown`; paste it in")
        assert len(text.splitlines()) <= 150, f"{path.name}: a front door of at most 150 lines"


def test_every_row_links_a_docs_page_that_exists_and_names_its_command():
    for a in table.ANALYSES.values():
        assert a.docs, a.name
        page = DOCS / f"{a.docs}.md"
        assert page.is_file(), page
        assert f"vitlab {a.name}" in page.read_text() or a.name in page.read_text(), (a.name, page)


def test_relative_links_and_images_in_the_docs_resolve():
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    shown = set()
    for page in pages:
        base = ROOT if page.name == "README.md" else DOCS
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            path = (base / target).resolve()
            assert path.exists(), f"{page.name}: broken link {target}"
            shown.add(path)
    figures = {p.resolve() for p in (DOCS / "img").glob("*.png")}
    assert figures and not figures - shown, sorted(p.name for p in figures - shown)
