"""AppTest of the Lecture page (issue 41): with nothing prepared it names the command and computes nothing; with a
prepared lecture it walks the path: Reveal waits for a prediction, Next waits for the reveal, the progress bar counts
the revealed steps, each revealed step shows the prediction beside the paper's answer and these models' answers with
the figures; the end offers the summary. No model is loaded and no check is run on the page."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from tests.test_lecture_words import faults
from vitlab.tour import CLAIMS, lecture

pytestmark = pytest.mark.usefixtures("app_cache")  # a fresh disk cache for this module (conftest)
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ("vit-cls", "resnet"))
ONLY = "skips,cka,gap"  # three steps, named out of order: the page follows the paper's


def open_page(monkeypatch) -> AppTest:
    """The Lecture page, after the home page (which loads the sidebar's models); from then on any model load or tour
    run fails the test (VITLAB_STRICT lets the error through)."""
    import vitlab.inputs.models
    import vitlab.tour

    def never(*a, **k):
        raise AssertionError("the Lecture page computed")

    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    at.run()
    monkeypatch.setattr(vitlab.tour, "run_tour", never)
    monkeypatch.setattr(vitlab.inputs.models, "load", never)
    at.switch_page("views/lecture.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_without_a_prepared_lecture_the_page_names_the_command(app_cache, monkeypatch):
    at = open_page(monkeypatch)
    assert "No lecture is prepared" in at.error[0].value
    assert at.code[0].value == "vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet --images 256 --batch-size 32"


@pytest.fixture(scope="module")
def prepared(app_cache):
    """A lecture of three steps prepared into the app's store (one per process) by the real command."""
    if not ZOO_READY:
        pytest.skip("the zoo's checkpoints are not trained")
    import lab

    from vitlab.cli import main

    cache = str(lab.store().directory)
    assert main(["lecture", "--prepare", "-n", "64", "-b", "16", "--only", ONLY, "--cache-dir", cache]) == 0


def caption_text(at) -> str:
    return " ".join(c.value for c in at.caption)


def student_words(node) -> list[str]:
    """Every text a student reads on the page: the main area's elements, the lecturer's folded detail left out."""
    if getattr(node, "type", None) == "expander" and str(node.label).startswith("For the lecturer"):
        return []
    if hasattr(node, "children"):
        return [t for child in node.children.values() for t in student_words(child)]
    kind, value = getattr(node, "type", None), None
    if kind == "radio":
        value = " ".join(map(str, node.options))
    elif kind in ("table", "arrow_table"):
        value = " ".join(str(v) for v in node.value.to_numpy().ravel())
    elif kind not in ("image", "download_button", "button", "html") and isinstance(getattr(node, "value", None), str):
        value = node.value
    return [value] if value else []


def test_the_path_asks_before_it_tells_and_ends_with_the_summary(prepared, monkeypatch):
    at = open_page(monkeypatch)
    steps = ["cka", "skips", "gap"]
    assert "Now: 0 batches computed, read from the disk cache" in caption_text(at)
    for k, key in enumerate(steps):
        q, claim = lecture.QUESTIONS[key], CLAIMS[key]
        assert at.get("progress")[0].proto.text == f"{k} of 3 steps revealed"
        assert at.subheader[0].value == q.topic and q.ask in at.markdown[0].value
        assert at.button(key="lecture.reveal").disabled and at.button(key="lecture.next").disabled
        assert not any(claim.claim in m.value for m in at.markdown)  # the paper's words wait for the reveal
        choice = (q.paper + k) % len(q.options)  # the paper's option on the first step only
        at.radio(key=f"lecture.choice.{key}").set_value(q.options[choice]).run()
        assert not at.button(key="lecture.reveal").disabled
        at.button(key="lecture.reveal").click().run()
        assert not at.exception, [e.message for e in at.exception]
        # a neutral heading after the reveal too (the claim's title asserts the paper over "not shown")
        assert at.subheader[0].value == q.topic and not at.radio  # the prediction is kept, not changed
        boxes = [b.value for b in [*at.success, *at.error]]
        assert any(f"**You predicted:** {q.options[choice]}. **The paper:** {q.paper_option}." in b for b in boxes)
        assert (at.success if choice == q.paper else at.error)[0].value.startswith("**You predicted:**")
        assert any(claim.claim in m.value for m in at.markdown)
        assert any(b.value.startswith("**Pattern: ") for b in [*at.success, *at.warning, *at.info])
        figures = [i.proto.imgs[0].url for i in at.get("image")]  # drawn when the lecture was prepared, inline
        assert figures and all(u.startswith("data:image/svg+xml;base64,") for u in figures)
        assert at.get("progress")[0].proto.text == f"{k + 1} of 3 steps revealed"
        words = " ".join(student_words(at.main))
        assert faults(words) == [] and "How we know" in [e.label for e in at.expander], faults(words)
        at.button(key="lecture.next").click().run()
    assert "1 of 3" in at.markdown[0].value  # predictions that took the paper's answer: the first only
    assert [r for r in at.table[0].value["as the paper"]] == ["✓", "✗", "✗"]
    assert [d.label for d in at.get("download_button")] == ["Download your summary (HTML)"]
    at.button(key="lecture.back").click().run()
    assert at.subheader[0].value == lecture.QUESTIONS["gap"].topic and not at.radio
    assert faults(" ".join(student_words(at.main))) == []
    at.button(key="lecture.prev").click().run()  # back along the path: revealed steps stay revealed
    assert at.subheader[0].value == lecture.QUESTIONS["skips"].topic and not at.radio
    at.button(key="lecture.next").click().run()
    at.button(key="lecture.next").click().run()
    at.button(key="lecture.restart").click().run()
    assert at.subheader[0].value == lecture.QUESTIONS["cka"].topic and at.button(key="lecture.next").disabled
    assert not at.exception


def test_navigation_is_locked_to_the_path(prepared, monkeypatch):
    """A step number past the first unrevealed step (a stale or edited session) falls back to that step."""
    at = open_page(monkeypatch)
    at.session_state["lecture.step"] = 2
    at.run()
    assert at.subheader[0].value == lecture.QUESTIONS["cka"].topic
    assert at.get("progress")[0].proto.text == "0 of 3 steps revealed"
