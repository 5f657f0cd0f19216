"""Smaller words of issue 47 ("Teach II"): `vitlab lecture --help` says its default apart from the last choice; the
shown command lists --device before --data, as `--help` does; the Attention page's lead keeps the paper's words
when its model cannot load; the Localization layer's help counts blocks as its picker does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vitlab import ANALYSES, cli
from vitlab.cli import recipe
from vitlab.tour import CLAIMS

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
for p in (str(ROOT), str(APP)):
    if p not in sys.path:
        sys.path.insert(0, p)


def help_text(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse's line breaks undone


def test_lecture_help_says_its_default_apart_from_the_last_choice(capsys):
    said = help_text(capsys, "lecture")
    assert "training; none. Default: random." in said and "none (default" not in said, said
    assert "(over batches, images or few-shot draws; default: 200; 0: no intervals)" in said
    assert "Gram kernel. Default: linear." in help_text(capsys, "cka")


@pytest.mark.parametrize("name", ["cka", "skip-ratio", "attention-distance"])
def test_the_shown_command_lists_device_before_data_as_help_does(capsys, name):
    row = ANALYSES[name]
    models = ["zoo:vit-cls"] if row.arity == "one" else ["zoo:vit-cls", "zoo:resnet"]
    words = recipe.command_line(row, models, "fashion-mnist:test", row.options(), "cpu").split()
    said = help_text(capsys, name)
    assert said.index("--device") < said.index("--data") and words.index("--device") < words.index("--data"), words
    assert words[words.index("--device") + 1] == "cpu" and words[words.index("--data") + 1] == "fashion-mnist:test"


pytest.importorskip("streamlit")


@pytest.mark.usefixtures("app_cache")
def test_attention_with_a_model_that_cannot_load_keeps_the_papers_words(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("VITLAB_MODEL_A", "no_such_model@random")
    monkeypatch.setenv("VITLAB_MODEL_B", "no_such_model@random")
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    at.switch_page("views/attention.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.error and "no_such_model" in at.error[0].value  # the load's own error, in place
    lead = [m.value for m in at.markdown if m.value.startswith("**The paper reports**")]
    assert lead == [f"**The paper reports** (Figs 3-4) {CLAIMS['distance'].claim}"], lead
