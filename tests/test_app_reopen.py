"""A reopened page says how its result was obtained (issue 47): each page's run caption names the batches computed
when it ran, and "0 batches computed" when a second browser session (the link opened again) read it back whole; a
Skips link logs no Streamlit warning; the code box says which rows of the command's CSV a page shows, and what a
link made over uploaded images does elsewhere."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
for p in (str(ROOT), str(APP)):
    if p not in sys.path:
        sys.path.insert(0, p)
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ("vit-cls", "resnet"))
LINK = {"a": "zoo:vit-cls", "b": "zoo:resnet", "data": "fashion-mnist:test", "n": "32", "bs": "16"}
TIMEOUT = 300

pytestmark = [pytest.mark.usefixtures("app_cache"),
              pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are not in assets/zoo")]


def open_link(page: str, params: dict) -> AppTest:
    """A fresh browser session on ``page`` with the URL's ``params`` (a link opened, or opened again)."""
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def run_captions(at) -> list[str]:
    return [c.value for c in at.caption if "batches computed" in c.value]


# page -> its widgets' values in the link (a small, quick view of each)
PAGES = {
    "attention": {},
    "skips": {"skips.value": "cosine"},
    "localization": {},
    "probes": {"probe.test": "50", "probe.draws": "2"},
    "models": {"mm.models": '["zoo:vit-cls", "zoo:resnet"]', "mm.depths": "[0.5, 1.0]"},
}


@pytest.mark.parametrize("page", list(PAGES))
def test_a_reopened_page_says_it_computed_nothing(page):
    first = open_link(page, {**LINK, **PAGES[page]})
    [said] = run_captions(first)
    # computed in this session: now, or on the run before the link's values were all taken (kept in this session)
    ran = re.search(r"(?:images; |first computed with )(\d+) batches computed, (\d+) from the cache", said)
    assert ran or said.startswith("32 images; 0 batches computed: result kept in this session"), said
    again = open_link(page, {**LINK, **PAGES[page]})  # the link opened again: a new session, the same server
    [said] = run_captions(again)
    assert re.match(r"\d+ images; 0 batches computed: result from the disk cache, page ready in", said), said
    if page != "attention":  # a result that keeps its RunInfo says what the first run did, not as if now
        assert f"(first computed with {ran[1]} batches computed, {ran[2]} from the cache" in said
    assert said.count("batches computed") == (1 if page == "attention" else 2), said
    if page == "localization":  # the layer's help counts blocks as its picker shows them: from 0
        picker = again.selectbox(key="loc.layer")
        first_tap = picker.options[0]
        assert first_tap.startswith("block 0"), picker.options
        assert "counted from 0" in picker.help and "(block 0 is 'blocks.0.resid_post' of a ViT)" in picker.help


def test_a_skips_link_logs_no_warning_with_a_stack_trace(monkeypatch, caplog):
    """A widget given a default and a link's value (Session State) makes Streamlit log a warning with a stack trace,
    once per process: the flag that keeps it to once is reset, so this test sees it if it happens."""
    from streamlit.elements.lib import policies

    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    logger = logging.getLogger(policies.__name__)
    monkeypatch.setattr(logger, "propagate", True)  # Streamlit's loggers keep to their own handler
    with caplog.at_level(logging.WARNING, logger=policies.__name__):
        at = open_link("skips", {**LINK, "skips.block": "3", "skips.which": "mlp", "skips.value": "cosine"})
    assert at.number_input(key="skips.block").value == 3
    assert not [r for r in caplog.records if "Session State API" in r.getMessage()], caplog.text
    # the same check sees the warning where a widget has both (the test can fail)
    fresh = AppTest.from_string("import streamlit as st\nst.session_state.setdefault('w', 5)\n"
                                "st.number_input('w', 0, 9, 1, key='w')\n")
    with caplog.at_level(logging.WARNING, logger=policies.__name__):
        fresh.run()
    assert [r for r in caplog.records if "Session State API" in r.getMessage()]


def test_the_code_box_says_which_rows_of_the_csv_a_page_shows():
    sim = open_link("similarity", {**LINK, "sim.view": "within B"})
    box = [c.value for c in sim.caption if "The command" in c.value]
    assert box == [("The command below writes `results/cka/cka.csv` (and its charts, run.json); this view shows "
                    "its rows with model_a = zoo:resnet and model_b = zoo:resnet:")], box
    mm = open_link("models", {**LINK, **PAGES["models"], "mm.depth": "1.0"})
    box = [c.value for c in mm.caption if "The command" in c.value]
    assert box == [("The command below writes `results/compare-models/compare_models.csv` (and its charts, "
                    "run.json); this view shows its rows with depth = 1:")], box
    skips = open_link("skips", LINK)  # a page whose table is the CSV's whole
    assert [c.value for c in skips.caption if "The command" in c.value] == [
        "The command that writes this page's table as `results/skip-ratio/skip_ratio_summary.csv` (and its charts, run.json):"]


def test_an_upload_views_link_box_does_not_promise_the_same_results():
    import lab

    uploads = lab.links.link_words(lab.Settings("zoo:vit-cls", "zoo:resnet", lab.UPLOADS, 4, 4, "auto",
                                                (("a.jpg", b"x"),)))
    assert "reads the same results" not in uploads and "asks for them to be uploaded again" in uploads
    bundled = lab.links.link_words(lab.Settings("zoo:vit-cls", "zoo:resnet", "samples", 4, 4, "auto"))
    assert "opened elsewhere, it reads the same results from this server's cache" in bundled
