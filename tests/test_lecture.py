"""Lecture mode (issue 41): the table of questions (one per claim, in the paper's order, the paper's option marked),
a prediction's outcome, the prepared lecture kept in and read from the disk cache, the command that prepares it,
and the take-home summary (predictions beside the answers, with the figures, offline)."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from html import escape
from pathlib import Path

import pytest

from vitlab import VitlabError
from vitlab.engine.context import RunInfo
from vitlab.inputs.cache import Store
from vitlab.stats.evidence import Estimate
from vitlab.tour import (
    CLAIMS,
    TourOptions,
    TourReport,
    cant_tell,
    check_skips,
    check_uniformity,
    classroom,
    glossary,
    lecture,
    summary,
)

ROOT = Path(__file__).resolve().parent.parent
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ("vit-cls", "resnet"))


# ---------------------------------------------------------------- the table


def test_one_question_per_claim_in_the_papers_order_with_the_papers_option_marked():
    assert list(lecture.QUESTIONS) == list(CLAIMS)
    for key, q in lecture.QUESTIONS.items():
        assert len(q.options) >= 3 and len(set(q.options)) == len(q.options), key
        assert 0 <= q.paper < len(q.options), key
        assert q.paper_option == q.options[q.paper]
        # asked before the answer: the heading is not the claim's title, which can give the answer away
        assert q.topic != CLAIMS[key].title and q.ask.endswith("?"), key
    # the paper's option is not always in the same place, so its position tells nothing
    assert len({q.paper for q in lecture.QUESTIONS.values()}) >= 2


def test_the_papers_option_says_what_the_claim_says():
    q = lecture.QUESTIONS
    assert "ViT" in q["cka"].paper_option and "more alike" in q["cka"].paper_option
    assert q["skips"].paper_option == "In the ViT"
    assert q["removal"].paper_option.startswith("Less alike")
    assert q["gap"].paper_option == "It gets weaker"
    assert q["scale"].paper_option == "In the higher layers"


HEDGES = ("some", "others", "only", "both", "neither", "about", "mostly", "partly")


def test_the_options_do_not_give_the_answer_away():
    """Alike in length (the longest at most 1.5 times the shortest) and in hedging: the paper's option is never the
    only one with a hedge word, and never the only long one."""
    for key, q in lecture.QUESTIONS.items():
        lengths = [len(o) for o in q.options]
        assert max(lengths) <= 1.5 * min(lengths), (key, q.options)
        hedged = [any(re.search(rf"\b{h}\b", o.lower()) for h in HEDGES) for o in q.options]
        if hedged[q.paper]:
            assert sum(hedged) >= 2, (key, q.options)
        assert len(q.paper_option) < max(lengths) or lengths.count(max(lengths)) > 1 or \
            max(lengths) <= 1.2 * sorted(lengths)[1], (key, q.options)


def test_path_follows_the_paper_whatever_order_the_claims_are_named_in():
    assert lecture.path() == list(CLAIMS)
    assert lecture.path(["skips", "cka", "gap"]) == ["cka", "skips", "gap"]
    with pytest.raises(VitlabError, match="unknown claim\\(s\\) figs: choose from cka, distance"):
        lecture.path(["cka", "figs"])


def _check(key: str, pattern_shown: bool):
    """A real check of claim ``key`` whose pattern is shown (interval above its null) or not (below it)."""
    v = 0.3 if pattern_shown else -0.1
    stat = Estimate(v, v - 0.05, v + 0.05, "batches", 4, "jackknife t")
    if key == "cka":
        return check_uniformity(stat, None, "detail")
    return check_skips(Estimate(2.0 + v, 1.9 + v, 2.1 + v, "batches", 4, "jackknife t"),
                       Estimate(2.0, 1.99, 2.01, "batches", 4, "jackknife t"), "detail")


def test_outcome_puts_the_prediction_beside_the_paper_and_these_models():
    shown, not_shown = _check("cka", True), _check("cka", False)
    assert shown.pattern == "shown" and not_shown.pattern == "not shown"
    q = lecture.QUESTIONS["cka"]
    right = lecture.outcome("cka", q.paper, shown)
    assert right == {"prediction": q.paper_option, "paper": q.paper_option, "matches_paper": True,
                     "pattern": "shown", "models": "these models show the paper's answer"}
    wrong = lecture.outcome("cka", (q.paper + 1) % len(q.options), not_shown)
    assert wrong["matches_paper"] is False and wrong["prediction"] != q.paper_option
    assert wrong["models"] == "these models do not go the paper's way"
    none = lecture.outcome("cka", None, cant_tell("cka", "no ResNet"))
    assert none["prediction"] == "no prediction" and none["matches_paper"] is None and none["pattern"] == "can't tell"
    with pytest.raises(VitlabError, match="claim 'cka': choice 3 is not one of its 3 options"):
        lecture.outcome("cka", 3, shown)


def test_score_counts_predictions_matches_and_shown_patterns():
    rows = [_check("cka", True), _check("skips", False)]
    p = {k: lecture.QUESTIONS[k].paper for k in ("cka", "skips")}
    assert lecture.score({"cka": p["cka"], "skips": p["skips"]}, rows) == {
        "steps": 2, "predicted": 2, "matched": 2, "shown": 1}
    assert lecture.score({"cka": (p["cka"] + 1) % 3}, rows) == {"steps": 2, "predicted": 1, "matched": 0, "shown": 1}


# ---------------------------------------------------------------- settings, the command, the store


def test_the_named_command_prepares_exactly_these_settings():
    """The command the page names, parsed by the real CLI, gives back the same settings (and so the same key)."""
    from vitlab.cli import build_parser, options_from_args
    from vitlab.table import ANALYSES

    tour = TourOptions(images=64, batch_size=16, control="none", only=("skips", "cka"),
                       gap_pair=("zoo:vit-cls", "zoo:vit-gap"))
    settings = classroom.settings(["zoo:vit-cls", "zoo:resnet"], "samples", tour, bootstrap=50, seed=3)
    assert settings.tour.only == ("cka", "skips")
    words = shlex.split(settings.command("/tmp/elsewhere"))
    assert words[:3] == ["vitlab", "lecture", "--prepare"] and words[-2:] == ["--cache-dir", "/tmp/elsewhere"]
    args = build_parser("lecture").parse_args(words[1:])
    again = classroom.settings(args.model, args.data, options_from_args(ANALYSES["tour"], args), args.bootstrap,
                               args.seed)
    assert again == settings and again.key() == settings.key()
    assert classroom.settings().command() == ("vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet --images 256 "
                                              "--batch-size 32")
    assert settings.describe() == "zoo:vit-cls and zoo:resnet, vitlab's sample photographs, first 64 images, in " \
                                  "batches of 16"


def fake_lecture(settings=None) -> classroom.Lecture:
    """A lecture of two steps built from real checks (no model run), with stand-in figures."""
    settings = settings or classroom.settings(tour=TourOptions(images=64, batch_size=16, only=("cka", "skips")))
    rows = [_check("cka", True), _check("skips", False)]
    rows = [replace(r, models="zoo:vit-cls; zoo:resnet", images=64, batches=4, batch_size=16) for r in rows]
    import pandas as pd

    columns = ["figure", "label", "role", "value", "lo", "hi", "unit", "units", "interval"]
    frames = {r.figure: pd.DataFrame([[r.figure, "ViT", "statistic", r.statistic, r.lo, r.hi, "batches", 4, "t"]],
                                     columns=columns) for r in rows}
    tour = TourReport(rows, {}, ["zoo:vit-cls", "zoo:resnet"], RunInfo(batches_computed=8), frames)
    papers = {"Figs 1-2": '<svg xmlns="http://www.w3.org/2000/svg" data-fig="cka"><rect/></svg>'}
    intervals = {r.figure: f'<svg xmlns="http://www.w3.org/2000/svg" data-int="{r.figure}"></svg>' for r in rows}
    prov = {"models": [{"spec": "zoo:vit-cls", "fingerprint": "abc", "weights": "zoo"}], "images": {"count": 64},
            "versions": {"vitlab": "0.1.0"}}
    return classroom.Lecture(settings, tour, papers, intervals, prov, "2026-12-06 03:00 UTC", 12.0)


def test_a_kept_lecture_is_read_back_whole_and_listed_newest_first(tmp_path):
    store = Store(tmp_path / "store")
    assert classroom.prepared(store) == []
    first = fake_lecture()
    assert classroom.read(store, first.settings) is None
    classroom.keep(store, first)
    other = fake_lecture(replace(first.settings, bootstrap=50))
    classroom.keep(store, other)
    classroom.keep(store, first)  # prepared again: listed once, first
    assert [e.settings for e in classroom.prepared(store)] == [first.settings, other.settings]
    back = classroom.read(Store(tmp_path / "store"), first.settings)
    assert back.steps == ["cka", "skips"] and back.papers == first.papers and back.intervals == first.intervals
    assert back.to_frame().equals(first.to_frame()) and back.tour.info.batches_computed == 8
    assert classroom.read(store, replace(first.settings, seed=9)) is None
    text = classroom.missing(replace(first.settings, seed=9), store)
    assert f"--seed 9 --cache-dir {tmp_path / 'store'}`" in text and text.startswith("No prepared lecture for ")


def test_a_cache_that_cannot_keep_a_lecture_is_named():
    with pytest.raises(VitlabError, match="the lecture cannot be kept: the disk cache is off"):
        classroom.keep(Store(None), fake_lecture())


# ---------------------------------------------------------------- the summary


def test_summary_puts_each_prediction_beside_the_answers_with_the_figures():
    lec = fake_lecture()
    q = lecture.QUESTIONS
    choices = {"cka": q["cka"].paper, "skips": (q["skips"].paper + 1) % 3}
    text = summary.summary_html(lec, choices)
    for k, key in enumerate(["cka", "skips"]):
        section = text[text.index(f'id="step{k}" data-step="{key}"'):]
        section = section[:section.index("</section>")]
        assert f'data-prediction="{escape(q[key].options[choices[key]])}"' in section
        assert f'data-paper="{escape(q[key].paper_option)}"' in section
        assert f'data-verdict="{escape(lec.row(key).pattern)}"' in section
        assert f'data-int="{lec.row(key).figure}"' in section  # its interval figure
        said = glossary.student(key, lec.row(key), lec.settings)  # a student's words, the numbers in How we know
        assert escape(said.meaning) in section and all(escape(line) in section for line in said.how)
        assert '<details class="how"><summary>How we know</summary>' in section
    assert 'data-fig="cka"' in text and "✓ as the paper" in text and "✗ not the paper&#x27;s answer" in text
    assert 'data-matched="1" data-steps="2"' in text
    assert summary.summary_html(lec, {}).count("no prediction") >= 2


def offline_problems(text: str) -> list[str]:
    """What would make an HTML file reach beyond itself: scripts, links, sources, imports, URLs other than XML
    namespaces, links other than to its own sections."""
    found = [t for t in ("<script", "<link", "<iframe", "@import", "src=") if t in text.lower()]
    found += [u for u in re.findall(r"url\(([^)]*)\)", text) if not u.startswith("#")]
    found += [u for u in re.findall(r"https?://[^\"'\s<>)]+", text) if not u.startswith("http://www.w3.org/")]
    found += [h for h in re.findall(r'href="([^"]*)"', text) if not h.startswith("#")]
    return found


def test_summary_opens_offline():
    text = summary.summary_html(fake_lecture(), {"cka": 0})
    assert offline_problems(text) == []
    assert offline_problems(text + '<img src="https://example.org/x.png">') == ["src=", "https://example.org/x.png"]
    assert offline_problems(text + '<p style="background:url(a.png)">') == ["a.png"]


def test_each_inline_figure_keeps_its_own_ids():
    svg = '<svg><defs><linearGradient id="gradient_0"/></defs><path fill="url(#gradient_0)"/><use href="#g"/>' \
          '<g id="g"/></svg>'
    assert summary.scoped(svg, "s1p") == (
        '<svg><defs><linearGradient id="s1p-gradient_0"/></defs>'
        '<path fill="url(#s1p-gradient_0)"/><use href="#s1p-g"/><g id="s1p-g"/></svg>')
    assert summary.scoped("<svg><rect/></svg>", "x") == "<svg><rect/></svg>"


# ---------------------------------------------------------------- the command


@pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are not trained")
def test_prepare_then_a_second_run_reads_the_store_and_computes_nothing(tmp_path, capsys, monkeypatch):
    import vitlab.inputs.models
    import vitlab.tour
    from vitlab.cli import main

    cache = tmp_path / "lecture-cache"  # not the default (conftest): the named command must give it
    args = ["lecture", "-n", "64", "-b", "16", "--only", "skips,cka", "--cache-dir", str(cache)]
    assert main(args) == 2  # nothing prepared yet: the exact command to run
    err = capsys.readouterr().err
    assert (f"`vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet --images 64 --batch-size 16 --only cka,skips "
            f"--cache-dir {cache}`") in err
    assert main(["lecture", "--prepare", *args[1:]]) == 0
    prepared = capsys.readouterr().out
    assert f"lecture kept in the cache {cache}" in prepared

    def never(*a, **k):
        raise AssertionError("a prepared lecture was computed again")

    monkeypatch.setattr(vitlab.tour, "run_tour", never)
    monkeypatch.setattr(vitlab.inputs.models, "load", never)
    assert main(args) == 0
    again = capsys.readouterr().out
    assert "nothing computed" in again
    lines = [line for line in prepared.splitlines() if line.startswith(("Figs 1-2", "Fig 7", "tour:"))]
    assert len(lines) == 3 and all(line in again for line in lines)
    store = Store(cache)
    [entry] = classroom.prepared(store)
    lec = classroom.read(store, entry.settings)
    assert lec.steps == ["cka", "skips"] and set(lec.intervals) == {"Figs 1-2", "Fig 7"}
    assert all(s.startswith("<svg") for s in [*lec.papers.values(), *lec.intervals.values()])
    text = summary.summary_html(lec, {"cka": 1})
    assert offline_problems(text) == [] and text.count("<svg") == len(lec.papers) + len(lec.intervals)
    ids = re.findall(r'\bid="([^"]+)"', text)
    # the CKA heatmaps' legend, scoped to its step (vl-convert numbers its gradients per process: _0 or _138)
    assert len(ids) == len(set(ids)) and any(re.fullmatch(r"s0p-gradient_\d+", i) for i in ids), ids
