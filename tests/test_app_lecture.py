"""AppTest of the Lecture page (issue 41): with nothing prepared it names the command and computes nothing; with a
prepared lecture it walks the path: Reveal waits for a prediction, Next waits for the reveal, the progress bar counts
the revealed steps, each revealed step shows the prediction beside the paper's answer and these models' answers with
the figures; the end offers the summary. No model is loaded and no check is run on the page."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from tests.test_lecture_words import faults, long_sentences, svg_words
from vitlab.tour import CLAIMS, classroom, lecture

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


def test_a_first_visit_offers_to_prepare_the_lecture_not_an_error(app_cache, monkeypatch):
    """Nothing prepared: the lecture's settings (the command's defaults), a button, the command for a terminal, and
    nothing computed until the button is pressed; no error box."""
    at = open_page(monkeypatch)
    assert not at.error and at.title[0].value == "Lecture"
    assert at.markdown[0].value.startswith("No lecture is prepared on this server yet")
    assert at.number_input(key="lecture.new.n").value == 256 and at.number_input(key="lecture.new.bs").value == 32
    assert at.pills(key="lecture.new.steps").value == [c.figure for c in CLAIMS.values()]
    assert at.toggle(key="lecture.new.twins").value
    assert at.code[0].value == "vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet --images 256 --batch-size 32"
    assert not at.button(key="lecture.go").disabled
    at.number_input(key="lecture.new.n").set_value(64).run()
    at.pills(key="lecture.new.steps").set_value(["Fig 7", "Figs 1-2"]).run()
    at.toggle(key="lecture.new.twins").set_value(False).run()
    assert at.code[0].value == ("vitlab lecture --prepare -m zoo:vit-cls -m zoo:resnet --images 64 --batch-size 32 "
                                "--control none --only cka,skips")
    assert [m.value for m in at.sidebar.markdown] == ["No lecture chosen yet."]


def test_a_server_that_only_reads_says_the_lecturer_has_not_prepared_it(app_cache, monkeypatch):
    monkeypatch.setenv("VITLAB_LECTURE_PREPARE", "0")
    at = open_page(monkeypatch)
    assert not at.error and not at.button
    assert at.info[0].value.startswith("The lecturer has not prepared this lecture yet.")
    assert "(VITLAB_LECTURE_PREPARE=0)" in at.caption[0].value  # the lecturer's fold: why, and the command
    assert at.code[0].value.startswith("vitlab lecture --prepare")


def test_a_cancelled_preparation_is_said_and_the_settings_come_back(app_cache, monkeypatch):
    at = open_page(monkeypatch)
    at.session_state["lecture.prepare"] = classroom.settings()
    at.session_state["lab.cancelled.Preparing the lecture"] = True  # what lab.compute's Cancel sets
    at.run()
    assert not at.exception and at.info[0].value.startswith("Preparing was cancelled: nothing was kept.")
    assert not at.button(key="lecture.go").disabled and not at.get("progress")


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


def blocks(node, kind: str | None = "flex_container"):
    """Every node under ``node`` (of ``kind``; None: every kind), depth first."""
    for child in getattr(node, "children", {}).values():
        if kind is None or getattr(child, "type", None) == kind:
            yield child
        yield from blocks(child, kind)


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
        # what the figures draw reads as the page does: models in words (titles, panels, legends), no tap name
        drawn = [t for u in figures for t in svg_words(base64.b64decode(u.split(",", 1)[1]).decode())]
        assert drawn and [f for t in drawn for f in faults(t)] == [], [(t, faults(t)) for t in drawn if faults(t)]
        assert any("trained ViT" in t for t in drawn)
        assert at.get("progress")[0].proto.text == f"{k + 1} of 3 steps revealed"
        words = " ".join(student_words(at.main))
        assert faults(words) == [] and "How we know" in [e.label for e in at.expander], faults(words)
        assert [s for w in student_words(at.main) for s in long_sentences(w)] == []  # each element read as it shows
        at.button(key="lecture.next").click().run()
    assert "1 of 3" in at.markdown[0].value  # predictions that took the paper's answer: the first only
    assert [r for r in at.table[0].value["as the paper"]] == ["✓", "✗", "✗"]
    # the step column stays on one line ("Figs 1-2", not "Figs 1-" / "2"): the table sits in the container the
    # page's style keeps from wrapping
    [holder] = [b for b in blocks(at.main, None) if getattr(b, "proto", None) is not None
                and getattr(b.proto, "id", "").endswith("-lecture-summary")]
    assert [t for t in blocks(holder, None) if t.type == "table"]
    assert ".st-key-lecture-summary td:first-child, .st-key-lecture-summary th:first-child {white-space: nowrap}" \
        in " ".join(h.proto.body for h in at.get("html"))
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


# ------------------------------------------------------------------ preparing on the page


def test_the_page_prepares_the_lecture_the_command_would_and_opens_it(tmp_path, monkeypatch):
    """Small settings chosen on the page, one click: the lecture kept is the one `vitlab lecture` reads back at the
    same settings (one key), and the page opens its first step, reading it from the cache."""
    if not ZOO_READY:
        pytest.skip("the zoo's checkpoints are not trained")
    import lab

    from vitlab.cli import main
    from vitlab.tour import TourOptions

    module_store = str(lab.store().directory)
    monkeypatch.setenv("VITLAB_CACHE_DIR", str(tmp_path / "page-cache"))
    lab.store.clear()
    try:
        at = AppTest.from_file(str(APP / "Home.py"), default_timeout=600)
        at.switch_page("views/lecture.py").run()
        at.number_input(key="lecture.new.n").set_value(64).run()
        at.number_input(key="lecture.new.bs").set_value(16).run()
        at.pills(key="lecture.new.steps").set_value(["Figs 1-2", "Fig 7"]).run()
        at.button(key="lecture.go").click().run()
        assert not at.exception and not at.error, [e.message for e in at.exception]
        assert at.subheader[0].value == lecture.QUESTIONS["cka"].topic
        assert "Now: 0 batches computed, read from the disk cache" in caption_text(at)
        want = classroom.settings(tour=TourOptions(images=64, batch_size=16, only=("cka", "skips")))
        assert [e.settings for e in classroom.prepared(lab.store())] == [want]
        kept = classroom.read(lab.store(), want)
        assert kept is not None and kept.steps == ["cka", "skips"]
        assert main(["lecture", "-n", "64", "-b", "16", "--only", "cka,skips", "--cache-dir",
                     str(lab.store().directory)]) == 0
        said = [m.value for m in at.sidebar.markdown]
        assert said[0].startswith("**Models:** the trained ViT and the trained ResNet"), said
    finally:  # the module's store again (one per process), for the tests after this one
        monkeypatch.setenv("VITLAB_CACHE_DIR", module_store)
        lab.store.clear()
        lab.store()


# ------------------------------------------------------------------ the sidebar


def test_the_lecture_sidebar_shows_its_settings_and_other_pages_keep_their_pickers(prepared, monkeypatch):
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    at.run()
    at.selectbox(key="w.model_a.kind").set_value("zoo:mixer").run()
    at.number_input(key="w.images").set_value(48).run()
    before = {w.key: w.value for w in [*at.sidebar.selectbox, *at.sidebar.number_input]}
    at.switch_page("views/lecture.py").run()
    assert not at.exception
    assert not at.sidebar.selectbox and not at.sidebar.number_input and not at.sidebar.text_input
    [said] = [m.value for m in at.sidebar.markdown]
    assert said == ("**Models:** the trained ViT and the trained ResNet  \n**Images:** Fashion-MNIST test set, 64 "
                    "images  \n**Batch:** 16 images  \n**Steps:** Figs 1-2, Fig 7, Fig 10")
    # no Status fold (vitlab's install folder, the disk cache's folder, the sidebar's model specs) for a student: the
    # only fold is the lecturer's, and nothing outside it names a folder of this machine or a model spec
    assert [e.label for e in at.sidebar.expander] == ["For the lecturer: how this lecture was prepared"]
    lecturer = at.sidebar.expander[0]
    shown = [e.value for e in [*at.sidebar.markdown, *at.sidebar.caption, *at.markdown, *at.caption, *at.subheader]
             if not any(e is x for x in [*lecturer.caption, *lecturer.markdown])]
    folders = [str(ROOT), os.environ["VITLAB_CACHE_DIR"]]
    assert shown and not [t for t in shown if any(f in str(t) for f in folders) or "zoo:" in str(t)], shown
    at.switch_page("views/home.py").run()
    assert {w.key: w.value for w in [*at.sidebar.selectbox, *at.sidebar.number_input]} == before
    assert "Status" in [e.label for e in at.sidebar.expander]  # other pages keep it


# ------------------------------------------------------------------ a reload keeps the student's place


def lecture_link(params: dict) -> AppTest:
    """A fresh browser session (a reload, or the link opened again) on the Lecture page with the URL's ``params``."""
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    at.query_params = dict(params)
    at.switch_page("views/lecture.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_a_reload_finds_the_student_where_they_were_and_a_kept_prediction_reveals(prepared, monkeypatch):
    at = open_page(monkeypatch)
    q = lecture.QUESTIONS
    at.radio(key="lecture.choice.cka").set_value(q["cka"].options[2]).run()
    at.button(key="lecture.reveal").click().run()
    at.button(key="lecture.next").click().run()
    at.radio(key="lecture.choice.skips").set_value(q["skips"].options[1]).run()
    link = dict(at.query_params)
    assert {k: link[k] for k in ("step", "said", "shown")} == {"step": "2", "said": "21", "shown": "1"}
    again = lecture_link(link)
    assert again.subheader[0].value == q["skips"].topic and not again.info
    assert again.radio(key="lecture.choice.skips").value == q["skips"].options[1]
    assert not again.button(key="lecture.reveal").disabled  # the kept prediction reveals without a new pick
    assert again.get("progress")[0].proto.text == "1 of 3 steps revealed"
    again.button(key="lecture.reveal").click().run()
    assert any(f"**You predicted:** {q['skips'].options[1]}." in b.value for b in [*again.success, *again.error])
    again.button(key="lecture.prev").click().run()  # the step revealed before the reload stays revealed
    assert any(f"**You predicted:** {q['cka'].options[2]}." in b.value for b in [*again.success, *again.error])
    assert dict(again.query_params)["step"] == "1" and dict(again.query_params)["shown"] == "2"


@pytest.mark.parametrize("edit", [{"shown": "3"}, {"said": "212"}, {"step": "3"}, {"sig": "0" * 20}, {"lecture": "x"}])
def test_an_edited_link_is_refused_in_words_and_the_path_starts_at_step_one(prepared, monkeypatch, edit):
    at = open_page(monkeypatch)
    at.radio(key="lecture.choice.cka").set_value(lecture.QUESTIONS["cka"].options[0]).run()
    at.button(key="lecture.reveal").click().run()
    at = lecture_link({**dict(at.query_params), **edit})
    assert at.info[0].value.startswith("This link's place in the lecture was not taken: ")
    assert at.subheader[0].value == lecture.QUESTIONS["cka"].topic and at.button(key="lecture.reveal").disabled
    assert at.get("progress")[0].proto.text == "0 of 3 steps revealed"


def test_a_signed_place_is_still_checked_against_the_path():
    """Even a place this server signed never jumps ahead: the step past the first unrevealed one, a revealed step
    without a prediction, a prediction past the open step, an option that is not one."""
    steps, key, secret = ["cka", "skips", "gap"], "k" * 40, b"s" * 32
    ok = lecture.Place(1, (("cka", 0), ("skips", 2)), 1)
    assert lecture.read_place(lecture.place_query(ok, steps, key, secret), steps, key, secret) == ok
    assert lecture.read_place({}, steps, key, secret) is None
    for bad, why in [(lecture.Place(2, (("cka", 0),), 1), "past the first one not yet revealed"),
                     (lecture.Place(0, (("cka", 0),), 2), "reveals a step without a prediction"),
                     (lecture.Place(0, (("cka", 0), ("gap", 1)), 0), "predicts a step past the first one"),
                     (lecture.Place(0, (("cka", 3),), 0), "is not an option of step 1")]:
        with pytest.raises(lecture.PlaceRefused, match=why):
            lecture.read_place(lecture.place_query(bad, steps, key, secret), steps, key, secret)
    with pytest.raises(lecture.PlaceRefused, match="not written by this lab"):
        lecture.read_place(lecture.place_query(ok, steps, key, secret), steps, key, b"t" * 32)


# ------------------------------------------------------------------ a class on one server


def test_a_click_collects_no_garbage_over_the_whole_heap_a_computation_does(prepared, monkeypatch):
    """Streamlit's full collection after every run (~0.22 s of CPU with torch in the heap: nine tenths of a click,
    bench/class_bench.py) is off; the app collects the whole heap only after a run that did work."""
    import lab
    from streamlit import config

    at = open_page(monkeypatch)
    assert config.get_option("runner.postScriptGC") is False
    full = []
    monkeypatch.setattr(lab.runs.gc, "collect", lambda generation=2: full.append(generation) or 0)
    at.radio(key="lecture.choice.cka").set_value(lecture.QUESTIONS["cka"].options[0]).run()
    at.button(key="lecture.reveal").click().run()
    at.button(key="lecture.next").click().run()
    assert not at.exception and full == []
    lab.runs.begin_run()  # a run that computed: its garbage (activations, per-batch statistics) is collected
    assert not lab.runs.end_run() and full == []
    assert lab.compute(("gc test",), lambda run: 1, "A test", persist=False) == 1
    assert lab.runs.end_run() and full == [2]


def test_a_restarted_server_on_the_same_cache_takes_the_places_it_wrote(tmp_path):
    """The key that signs a student's place is kept in the disk cache: a restart (a new process: a new Store on the
    same folder) still takes a place written before it; a planted key that is not 64 hex digits is replaced, and a
    lab on another cache refuses the place."""
    from vitlab.inputs.cache import Store, make_key
    from vitlab.tour import classroom

    steps, key = ["cka", "skips", "gap"], "k" * 40
    place = lecture.Place(1, (("cka", 0), ("skips", 2)), 1)
    before = classroom.place_secret(Store(tmp_path / "cache"))
    query = lecture.place_query(place, steps, key, before)
    after = Store(tmp_path / "cache")  # the restarted server
    assert classroom.place_secret(after) == before and len(before) == 32
    assert lecture.read_place(query, steps, key, classroom.place_secret(after)) == place
    with pytest.raises(lecture.PlaceRefused, match="written by a server on another cache"):
        lecture.read_place(query, steps, key, classroom.place_secret(Store(tmp_path / "other")))
    for planted in ["zz" * 32, "ab" * 31, 12, ["ab" * 32]]:
        after.put_json(make_key(*classroom._SECRET_KEY), planted)
        fresh = classroom.place_secret(after)
        assert fresh != before and len(fresh) == 32 and classroom.place_secret(after) == fresh
    assert len(classroom.place_secret(None)) == 32 and classroom.place_secret(None) != classroom.place_secret(None)
