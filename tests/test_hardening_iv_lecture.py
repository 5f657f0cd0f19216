"""Hardening IV (issue 46): a prepared lecture is untrusted input. A lecture entry rewritten in the cache with a valid
checksum (a figure carrying a script, an event handler, a foreign object or an external reference; a verdict word of
no closed set) is a miss said in words with the command that prepares it again, never a script in a student's
summary, an "Unexpected error" or a traceback; vl-convert's own figures pass the check unchanged; the summary forbids
scripts (Content-Security-Policy); the data folder's name is shown escaped and the prepare command quoted, in a code
block; ``vitlab lecture`` without ``--prepare`` creates nothing."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.test_lecture import fake_lecture
from vitlab.inputs.cache import Store
from vitlab.tour import TourOptions, classroom, saved, summary
from vitlab.tour.plainsvg import BadFigure, plain_svg

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
NS = 'xmlns="http://www.w3.org/2000/svg"'
XNS = 'xmlns:xlink="http://www.w3.org/1999/xlink"'


def plant(store: Store, lecture: classroom.Lecture) -> None:
    """Rewrite the lecture's entry as an attacker with write access to the cache would: a valid checksum."""
    assert saved.save(store, lecture.settings.key(), lecture)


# ---------------------------------------------------------------- figures: plain SVG or nothing


HOSTILE = {
    "script": (f'<svg {NS}><script>alert(1)</script><rect/></svg>', "holds a <script>"),
    "onload": (f'<svg {NS} onload="alert(1)"><rect/></svg>', "holds an event handler (onload on <svg>)"),
    "onclick": (f'<svg {NS}><g><rect onclick="alert(1)"/></g></svg>', "event handler (onclick on <rect>)"),
    "foreign": (f'<svg {NS}><foreignObject><p>x</p></foreignObject></svg>', "holds a <foreignObject>"),
    "use-href": (f'<svg {NS}><use href="https://evil.example/x.svg#a"/></svg>',
                 "external reference (href='https://evil.example/x.svg#a' on <use>)"),
    "xlink": (f'<svg {NS} {XNS}><use xlink:href="javascript:alert(1)"/></svg>', "external reference"),
    "fill-url": (f'<svg {NS}><rect fill="url(https://evil.example/t.png)"/></svg>', "external reference (fill="),
    "style-el": (f'<svg {NS}><style>@import url(https://evil.example/a.css);</style></svg>', "holds a <style>"),
    "style-attr": (f'<svg {NS}><rect style="background:url(//evil.example/t)"/></svg>', "external reference"),
    "style-escape": (f'<svg {NS}><rect style="fill:\\75rl(x)"/></svg>', "style beyond plain declarations"),
    "image": (f'<svg {NS}><image href="data:image/svg+xml;base64,AAAA"/></svg>', "holds a <image>"),
    "link": (f'<svg {NS}><a href="#x"><text>x</text></a></svg>', "holds a <a>"),
    "xhtml": (f'<svg {NS}><h:script xmlns:h="http://www.w3.org/1999/xhtml">alert(1)</h:script></svg>',
              "outside SVG"),
    "entity": (f'<!DOCTYPE svg [<!ENTITY x "y">]><svg {NS}><text>&x;</text></svg>', "DOCTYPE or an entity"),
    "html": ('<script>alert(1)</script>', "outside SVG"),
    "broken": (f'<svg {NS}><g></svg>', "cannot be read as SVG"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_figure_that_could_run_or_fetch_is_refused_by_name(name):
    text, said = HOSTILE[name]
    with pytest.raises(BadFigure) as e:
        plain_svg(text)
    assert said in str(e.value)


def test_plain_svg_comes_back_as_drawn_and_what_a_browser_reads_is_what_was_checked():
    drawn = (f'<svg {NS} {XNS} version="1.1" viewBox="0 0 10 10"><defs><linearGradient id="gradient_0" x1="0" '
             f'y1="0"><stop offset="0" stop-color="#fff"/></linearGradient></defs><g transform="translate(1,2)">'
             f'<path d="M0,0h1" fill="url(#gradient_0)" aria-label="Title text \'a &amp; b\'"/><use href="#g"/>'
             f'<text font-size="10px" data-x="1" aria-label="url(x) javascript: words">0.5 &lt; 1</text></g>'
             f'<g id="g"/></svg>')
    assert plain_svg(drawn) == drawn
    assert plain_svg(f'<svg {NS} data-fig="cka"><rect/></svg>') == f'<svg {NS} data-fig="cka"><rect/></svg>'
    # comments, processing instructions and CDATA are read by the checker and written back as text: a browser's
    # HTML parser never sees markup the checker did not
    sly = f'<svg {NS}><!-- <script>x</script> --><?x y?><text><![CDATA[</text><script>alert(1)</script>]]></text></svg>'
    assert plain_svg(sly) == (f'<svg {NS}><text>&lt;/text&gt;&lt;script&gt;alert(1)&lt;/script&gt;</text></svg>')


@pytest.fixture(scope="module")
def real_lecture(tmp_path_factory):
    """A lecture whose figures vl-convert drew exactly as ``vitlab lecture --prepare`` draws them (the tour's own
    charts from its figure data, :func:`vitlab.tour.report.chart_svg`): CKA heatmaps with their gradient legend,
    text, paths, and each step's interval chart; kept in a store. Only the measuring is left out (no model runs)."""
    import numpy as np
    import pandas as pd

    from vitlab.tour.report import chart_svg

    layers = [f"blocks.{i}" for i in range(4)]
    rng = np.random.default_rng(0)
    cka = pd.DataFrame([{"model_a": m, "model_b": m, "layer_a": a, "layer_b": b, "cka": float(rng.uniform())}
                        for m in ("zoo:vit-cls", "zoo:resnet") for a in layers for b in layers])
    lec = fake_lecture()
    tour = saved.tour_charts(replace(lec.tour, figures={"Figs 1-2": {"cka": cka}}))
    papers = {f: chart_svg(c) for f, c in tour.paper_charts.items()}  # as classroom.prepare draws them
    intervals = {r.figure: chart_svg(tour.charts[r.figure]) for r in tour.rows}
    store = Store(tmp_path_factory.mktemp("lecture46") / "cache")
    classroom.keep(store, replace(lec, tour=tour, papers=papers, intervals=intervals))
    return store, lec.settings


def test_vl_converts_figures_pass_the_check_unchanged(real_lecture):
    store, settings = real_lecture
    raw = saved.load(store, settings.key())  # as stored, before the lecture's own check
    lec = classroom.read(store, settings)
    assert lec.papers == raw.papers and lec.intervals == raw.intervals and store.warnings == []
    svgs = [*lec.papers.values(), *lec.intervals.values()]
    assert len(svgs) == 3 and all("<text" in s and "<path" in s for s in svgs)
    assert "<linearGradient" in lec.papers["Figs 1-2"] and re.search(r'fill="url\(#gradient_\d+\)"',
                                                                     lec.papers["Figs 1-2"])


def test_the_summary_forbids_scripts(real_lecture):
    store, settings = real_lecture
    text = summary.summary_html(classroom.read(store, settings), {"cka": 1})
    head = text[:text.index("</head>")]
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', head).group(1)
    assert "default-src 'none'" in policy and "script-src" not in policy and "unsafe-eval" not in policy
    assert head.index("Content-Security-Policy") < head.index("<style>")  # in force before anything it governs
    assert "<script" not in text.lower() and not re.search(r"\son[a-z]+=", text)


@pytest.mark.parametrize("name", ["script", "onload", "foreign", "use-href"])
def test_a_planted_figure_is_a_miss_said_once_with_the_command(tmp_path, name):
    store = Store(tmp_path / "store")
    lec = fake_lecture()
    classroom.keep(store, lec)
    plant(store, replace(lec, papers={"Figs 1-2": HOSTILE[name][0]}))
    with pytest.raises(classroom.BadLecture) as e:
        classroom.read(store, lec.settings)
    message = str(e.value)
    assert message.startswith(f"the prepared lecture in the cache {store.directory} failed its check (the "
                              f"paper-style figure of Figs 1-2 holds ") and HOSTILE[name][1] in message
    assert message.endswith(f"prepare it again with `{lec.settings.command(str(store.directory))}`")
    assert len(store.warnings) == 1 and "BadEntry" in store.warnings[0]
    assert classroom.read(store, lec.settings) is None  # dropped: the next read is a plain miss
    assert len(store.warnings) == 1


@pytest.mark.parametrize("field, word, said", [
    ("pattern", "hacked", "Figs 1-2's pattern answer 'hacked' is not one of shown, not shown, can't tell"),
    ("learned", "hacked", "Figs 1-2's learned answer 'hacked' is not one of yes, no, can't tell, n.a."),
    ("figure", "Fig 99", "a step of the figure 'Fig 99', which no claim has"),
    ("title", "Click here", "Figs 1-2's title or claim is not the paper's"),
])
def test_a_planted_answer_outside_its_closed_set_is_a_miss(tmp_path, field, word, said):
    store = Store(tmp_path / "store")
    lec = fake_lecture()
    rows = [replace(lec.tour.rows[0], **{field: word}), *lec.tour.rows[1:]]
    frames = {**lec.tour.frames, rows[0].figure: lec.tour.frames["Figs 1-2"]}  # its data too: only the check refuses
    plant(store, replace(lec, tour=replace(lec.tour, rows=rows, frames=frames)))
    with pytest.raises(classroom.BadLecture, match=re.escape(f"failed its check ({said})")):
        classroom.read(store, lec.settings)


# ---------------------------------------------------------------- the command


def test_reading_back_creates_no_cache_folder(tmp_path, capsys, monkeypatch):
    from vitlab.cli import main

    missing = tmp_path / "a" / "b"
    assert main(["lecture", "--cache-dir", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"no cache at {missing} (no such folder): nothing is prepared there; prepare the lecture with `vitlab " \
           f"lecture --prepare -m zoo:vit-cls -m zoo:resnet --images 256 --batch-size 32 --cache-dir {missing}`" in err
    assert "Traceback" not in err and not (tmp_path / "a").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["lecture", "--cache-dir", str(empty)]) == 2
    assert "(no vitlab cache in it)" in capsys.readouterr().err and list(empty.iterdir()) == []
    monkeypatch.setenv("VITLAB_CACHE_DIR", str(tmp_path / "default"))
    assert main(["lecture"]) == 2 and not (tmp_path / "default").exists()


def test_reading_back_a_planted_lecture_says_so_in_words(tmp_path, capsys):
    from vitlab.cli import main

    store = Store(tmp_path / "store")
    lec = fake_lecture()
    rows = [replace(lec.tour.rows[0], pattern="hacked"), *lec.tour.rows[1:]]
    plant(store, replace(lec, tour=replace(lec.tour, rows=rows)))
    words = shlex.split(lec.settings.command(str(store.directory)))
    assert main([w for w in words[1:] if w != "--prepare"]) == 2
    err = capsys.readouterr().err
    assert "failed its check (Figs 1-2's pattern answer 'hacked' is not one of" in err and "Traceback" not in err


# ---------------------------------------------------------------- the page


@pytest.fixture()
def page_store(tmp_path, monkeypatch):
    """The app's store (one per process, st.cache_resource) in this test's own folder."""
    pytest.importorskip("streamlit")
    sys.path.insert(0, str(APP))
    import lab

    monkeypatch.setenv("VITLAB_CACHE_DIR", str(tmp_path / "app-cache"))
    lab.store.clear()
    yield lab.store()
    lab.store.clear()


def open_lecture_page():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "views" / "lecture.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]  # VITLAB_STRICT: an Unexpected error fails here
    return at


@pytest.mark.parametrize("plant_what", ["verdict", "script"])
def test_the_page_says_a_planted_lecture_in_words(page_store, plant_what):
    lec = fake_lecture()
    lec = replace(lec, made=f"2026-12-07 {plant_what}")  # its own read on this server (the page keys on it)
    classroom.keep(page_store, lec)
    if plant_what == "verdict":
        bad = replace(lec, tour=replace(lec.tour, rows=[replace(lec.tour.rows[0], pattern="hacked"),
                                                        *lec.tour.rows[1:]]))
    else:
        bad = replace(lec, papers={"Figs 1-2": HOSTILE["script"][0]})
    plant(page_store, bad)
    at = open_lecture_page()
    [error] = at.error
    assert "failed its check" in error.value and "prepare it again with the command below" in error.value
    assert at.code[0].value == lec.settings.command(str(page_store.directory))
    at.run()  # said the same on the next rerun, never an Unexpected error
    assert not at.exception and "failed its check" in at.error[0].value


def test_a_folder_name_cannot_break_the_caption_or_the_command(page_store):
    from vitlab.cli import build_parser

    name = "/data/cl`ass **bold** $x$ :red[y] www.evil.example"
    settings = classroom.settings(data=name, tour=TourOptions(images=64, batch_size=16, only=("cka", "skips")))
    words = shlex.split(settings.command(str(page_store.directory)))
    assert build_parser("lecture").parse_args(words[1:]).data == name  # round-trips through the shell and the CLI
    classroom.keep(page_store, replace(fake_lecture(settings), made="2026-12-07 **made** [x](https://e.x)"))
    at = open_lecture_page()
    [said] = [c for c in at.caption if c.value.startswith("Prepared ")]  # the lecturer's fold: how it was prepared
    caption = said.value.replace("\u2060", "")  # the invisible joiners that break bare links, shortcodes
    assert "cl\\`ass \\*\\*bold\\*\\* \\$x\\$ :red\\[y\\]" in caption and "**bold**" not in caption
    assert "\\*\\*made\\*\\* \\[x\\](https://" in caption and not re.search(r"(?<!\\)\]\(", caption)
    assert ":\u2060red" in said.value and "https:\u2060//" in said.value
    assert "`" not in caption.replace("\\`", "")  # no code span: the command is in its own code block
    shown = shlex.split(at.code[-1].value)
    assert at.code[-1].value == settings.command() and shown[shown.index("--data") + 1] == name
