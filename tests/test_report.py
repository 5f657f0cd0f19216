"""vitlab report: one self-contained HTML file (every figure an inline SVG, every verdict, the provenance block, nothing
fetched), its provenance, and the CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from html.parser import HTMLParser

import altair as alt
import numpy as np
import pandas as pd
import pytest

import vitlab
from vitlab import report as R
from vitlab import tour as T
from vitlab.cli import main
from vitlab.engine.context import Run, RunInfo
from vitlab.stats.evidence import Estimate


class Page(HTMLParser):
    """Collects tags, attributes and the text inside elements with an id or a data-verdict."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(text: str) -> Page:
    p = Page()
    p.feed(text)
    return p


def assert_self_contained(text: str) -> None:
    page = parse(text)
    tags = {t for t, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}, tags
    for tag, attrs in page.tags:
        for k in ("src", "href", "xlink:href"):
            if k in attrs:
                assert attrs[k].startswith("#"), (tag, k, attrs[k])  # in-page anchors only
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", text) and "@import" not in text


def fake_tour() -> T.TourReport:
    E = Estimate
    jk = E.jackknife(0.5, np.array([0.45, 0.55, 0.5, 0.52]), "batches")
    rows = [T.make_check("cka", jk, E(0.1, 0.1, 0.1), "twin", "ev 1",
                         learned=T.Learned(E(0.5, 0.4, 0.6), E(0.2, 0.15, 0.25))),
            T.make_check("skips", E(0.1, 0.0, 0.2), E(0.3, 0.25, 0.35), "control", "ev 2"),
            T.cant_tell("scale", "no ViT among the models")]
    rows = [dataclasses.replace(r, claim=c) for r, c in zip(rows, ("claim one <b>", "claim two", "claim three"))]
    frames, charts, papers = {}, {}, {}
    for r in rows[:2]:
        frames[r.figure] = pd.DataFrame({"label": ["a", "b"], "role": ["statistic", "control"], "value": [1.0, 2.0],
                                         "lo": [0.5, 1.5], "hi": [1.5, 2.5]})
        charts[r.figure] = alt.Chart(frames[r.figure]).mark_point().encode(x="value:Q", y="label:N")
        papers[r.figure] = alt.Chart(frames[r.figure]).mark_rect().encode(x="label:N", y="role:N", color="value:Q")
    frames["Fig 12"] = pd.DataFrame(columns=["label", "role", "value", "lo", "hi"])
    charts["Fig 12"] = alt.Chart(frames["Fig 12"]).mark_point()
    return T.TourReport(rows, charts, ["m1", "m2"], RunInfo(), frames, {}, papers)


def test_html_has_every_figure_verdict_and_provenance_and_nothing_external():
    vit = vitlab.load("zoo:vit-cls", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    opts = T.TourOptions(images=40)
    prov = R.provenance([vit], src, opts, 1.5, Run(bootstrap=77, seed=3))
    text = R.render_html(fake_tour(), prov, "A <title>")
    assert_self_contained(text)
    page = parse(text)
    sections = [a for t, a in page.tags if t == "section"]
    assert [s.get("data-figure") for s in sections if "data-figure" in s] == ["Figs 1-2", "Fig 7", "Fig 12"]
    # each measured claim: its paper-style figure and its interval chart; Fig 12 could not be measured: said
    assert text.count("<svg") == 4 and "No figure" in text
    papers = [a["data-figure"] for t, a in page.tags if t == "div" and a.get("class") == "paper"]
    assert papers == ["Figs 1-2", "Fig 7"]
    verdicts = [a["data-verdict"] for t, a in page.tags if "data-verdict" in a]
    assert verdicts == ["shown", "not shown", "can't tell"]
    learned = [a["data-learned"] for t, a in page.tags if "data-learned" in a]
    assert learned == ["yes", "can't tell", "n.a."]
    body = "".join(page.text)
    # the rows in the tour's words (Check.lines): the control named, an unmeasured check says why, never n/a or nan
    assert "against twin" in body and "not measured: no ViT among the models" in body
    assert "jackknife t over 4 batches" in body and "n/a" not in body and not re.search(r"\bnan\b", body, re.I)
    assert "0.500 [0.400, 0.600]" in body and "0.200 [0.150, 0.250]" in body  # trained vs untrained twins
    assert "claim one <b>" in body and "<b>" not in text.split("<body>")[1].replace("&lt;b&gt;", "")  # escaped
    assert any(a.get("id") == "provenance" for _, a in page.tags)
    ckpt = vitlab.zoo.checkpoint_path("vit-cls")
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest()[:16] in body
    assert vit.fingerprint in body and "zoo:vit-cls" in body
    assert prov["models"][0]["layout"] == "contiguous" and "<th>layout</th>" in text
    keys = "".join(src.item_key(i) + "\0" for i in range(40)).encode()
    assert hashlib.sha256(keys).hexdigest() in body and "fashion-mnist:test" in body
    for lib in ("vitlab", "torch", "timm", "altair", "vl-convert-python"):
        assert lib in body
    assert "UTC" in body and "77" in body


def test_weights_source_and_image_hash_change_with_their_inputs():
    src = vitlab.open_source("fashion-mnist:test")
    assert R.images_hash(src, [0, 1]) != R.images_hash(src, [1, 0]) != R.images_hash(src, [0, 2])
    assert R.weights_source(vitlab.load("test_vit@random:5", "cpu")) == "random init, seed 5"
    assert "untrained twin" in R.weights_source(vitlab.load("zoo:vit-cls@random:1", "cpu"))


def test_cli_report_on_the_zoo_writes_one_self_contained_file(tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    rc = main(["report", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "--data", "fashion-mnist:test", "-n", "32",
               "-b", "8", "--only", "skips,localization", "--bootstrap", "50", "--control", "none",
               "--out", str(out)])
    assert rc == 0
    text = out.read_text()
    assert_self_contained(text)
    assert text.count("<svg") == 4 and text.count('data-verdict="') == 2 and text.count('data-learned="') == 2
    assert "Fig 7" in text and "Fig 9" in text and 'id="provenance"' in text
    assert "report:" in capsys.readouterr().out


def test_cli_report_wants_an_html_path(tmp_path, capsys):
    assert main(["report", "-m", "zoo:vit-cls", "--out", str(tmp_path / "r")]) == 2
    assert "ending in .html" in capsys.readouterr().err


def test_report_needs_models():
    with pytest.raises(vitlab.VitlabError, match="needs models"):
        R.report([], vitlab.open_source("samples"), R.ReportOptions(), Run())


def test_each_section_prints_on_its_own_a4_page_and_names_the_data_for_people():
    """Print CSS: A4 pages, every figure's section starts a page and is not split; the cover names the images in
    words, not by the source's internal name (a folder path); the title is the paper's question. The page count
    of the printed file (one per section) is measured with Chromium + pdfinfo in docs/presenting.md."""
    vit = vitlab.load("zoo:vit-cls", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    prov = R.provenance([vit], src, T.TourOptions(images=40, batch_size=8), 1.5, Run(bootstrap=7, seed=3))
    rep = fake_tour()
    # each section's counts are what its own statistic used (issue 37): Fig 6's 32 images, the tour's 40 elsewhere
    rep.rows[0] = dataclasses.replace(rep.rows[0], images=40, batches=5, batch_size=8)
    rep.rows[1] = dataclasses.replace(rep.rows[1], images=32, batches=4, batch_size=8,
                                      data_note="the first images: a backward pass each")
    text = R.render_html(rep, prov, R.ReportOptions().title)
    assert "@page{size:A4" in text and "break-inside:avoid" in text and "break-before:page" in text
    assert text.count('<section class="slide"') == len(fake_tour().rows) + 2  # cover, figures, provenance
    assert "Fashion-MNIST test set, first 40 images" in text
    assert "n = 40 images · 5 batches" in text and "n = 32 images · 4 batches" in text
    assert "the first images: a backward pass each, batches of 8" in text and "n not recorded" in text
    assert "CNNs?, checked on these models" not in text


def axis_labels(text: str) -> list[list[str]]:
    """The tick labels of every axis of every SVG figure in a report, one list per axis, as a reader sees them."""
    axes = []
    for svg in re.findall(r"<svg.*?</svg>", text, re.S):
        for group in re.findall(r'<g class="mark-text role-axis-label"[^>]*>(.*?)</g>', svg, re.S):
            axes.append(re.findall(r"<text[^>]*>([^<]*)</text>", group))
    return axes


def test_shortening_cuts_coordinates_and_never_text():
    svg = ('<svg width="100.123456" viewBox="0 0 100.123456 50.987654"><g aria-label="values from 0.8125 to 0.9375">'
           '<text transform="translate(9.87654321,17.5)">0.8125</text><title>0.8125</title></g></svg>')
    out = R.shorten_svg(svg)
    assert 'width="100.1"' in out and 'viewBox="0 0 100.1 50.9"' in out and 'translate(9.8,17.5)' in out
    assert ">0.8125</text>" in out and "<title>0.8125</title>" in out and 'from 0.8125 to 0.9375"' in out


def test_every_axis_of_every_handout_figure_reads_distinct_ticks():
    """Issue 38: the handout's SVG shortening rounded tick-label text, so axes read "0.8, 0.8, 0.9". Every axis of
    every figure of a real tour's handout (paper-style figures and interval charts) has distinct tick labels, and
    the handout shows the same labels as the chart rendered without shortening."""
    import vl_convert as vlc

    src = vitlab.open_source("fashion-mnist:test")
    models = [vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")]
    opts = T.TourOptions(images=32, batch_size=8, rf_images=4, probe_draws=4, probe_test=60, probe_shots=3,
                         permutations=50)
    tour = T.run_tour(models, src, opts, Run(bootstrap=50, seed=0))
    text = R.render_html(tour, R.provenance(models, src, opts, 1.0, Run()), R.ReportOptions().title)
    axes = axis_labels(text)
    assert len(axes) >= 20  # every figure has its axes (image grids have none)
    for labels in axes:
        assert len(labels) == len(set(labels)), labels
    raw = [vlc.vegalite_to_svg(c.to_json()) for c in (*tour.paper_charts.values(), *tour.charts.values())]
    assert sorted(map(tuple, axes)) == sorted(map(tuple, axis_labels("".join(raw))))


def test_the_report_writes_only_over_a_report_vitlab_wrote(tmp_path, capsys, monkeypatch):
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    rc = main(["report", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "-n", "8", "-b", "4", "--out", str(mine)])
    assert rc == 2 and mine.read_text() == "<html>my notes</html>"
    assert "is not a report vitlab wrote" in capsys.readouterr().err

    def never(*args, **kwargs):
        raise AssertionError("the report was computed before its --out was checked")

    monkeypatch.setattr(R, "report", never)  # refused before any model runs
    assert main(["report", "-m", "zoo:vit-cls", "--out", str(mine)]) == 2
    ours = tmp_path / "report.html"
    ours.write_text(f"<!DOCTYPE html>\n<html><head>{R.GENERATOR}</head></html>\n")
    R.check_target(ours)  # an earlier vitlab report: written over
    (tmp_path / "folder.html").mkdir()
    with pytest.raises(vitlab.VitlabError, match="not a file vitlab wrote"):
        R.check_target(tmp_path / "folder.html")
