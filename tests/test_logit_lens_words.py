"""The Logit lens page as a student reads it (issue 47): every markdown, caption, alert, chart title and table cell
passes the lecture's sentence checks (tests/test_lecture_words.py :func:`faults`) and names no tap or config internal
(the model names the page's pickers use stay: this is an analysis page, not the lecture); no sentence runs past 40
words; the x axis says what depth is, and the table's block words are exactly where the chart draws each block; the
run line (which the browser's clock ends with "shown … after your click") is a caption of its own, with no model
name in it. The CSV keeps the layers' own names (tests/test_logit_lens.py checks its numbers)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.test_lecture_words import faults

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))
pytest.importorskip("streamlit")

FOUR = ("vit-cls", "vit-gap-14", "mixer", "resnet")
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in FOUR)
LONGEST = 40  # words in one sentence


def page_faults(text: str) -> list[str]:
    """:func:`faults` less the model specs (the page names its models as its pickers do) and bracketed estimates
    (every analysis page writes an interval as "0.52 [0.28, 0.74]"; the lecture says it in words)."""
    return [f for f in faults(text) if not f.startswith(("a zoo spec", "an untrained spec", "a bracketed estimate"))]


def as_read(text: str) -> str:
    """Markdown as a person reads it: escapes, bold and word joiners removed."""
    return re.sub(r"\\([^\w\s])", r"\1", text).replace("\u2060", "").replace("**", "")


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.?!])\s+", as_read(text)) if s.strip()]


def chart_titles(spec) -> list[str]:
    """Every title in a Vega-Lite spec (chart, panel, axis, legend), as drawn."""
    out = []
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "title" and isinstance(v, str):
                out.append(v)
            elif k == "title" and isinstance(v, dict) and isinstance(v.get("text"), str):
                out.append(v["text"])
            elif k not in ("data", "datasets"):
                out += chart_titles(v)
    elif isinstance(spec, list):
        out += [t for v in spec for t in chart_titles(v)]
    return out


def test_the_checks_catch_what_the_page_said_before():
    """What the page said before issue 47 fails: the check can fail."""
    assert page_faults("the last block's readout against the model's logits, max |difference|: zoo:vit-cls "
                       "1.2e-07; zoo:resnet layer1.0 blocks.3.resid_post; then fc_norm and head")
    long = ("What the model applies after its last block (final norm, its own pooling: the CLS token, or the mean of "
            "the tokens for a GAP ViT or a Mixer, a ResNet's pooled map; then the head) read out at every block, so "
            "the last block's readout is the model's own logits.")
    assert max(len(s.split()) for s in sentences(long)) > LONGEST
    assert page_faults("zoo:vit-cls: 0.52 [0.28, 0.74] at block 1 of 6.") == []


@pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are not trained")
@pytest.mark.usefixtures("app_cache")
def test_every_word_on_the_page_reads_as_sentences_without_tap_names():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "Home.py"), default_timeout=600)
    for k, v in {"lab.source": "fashion-mnist:test", "lab.images": 64, "lab.batch_size": 16}.items():
        at.session_state[k] = v
    at.run()
    at.switch_page("views/logit_lens.py").run()
    at.button(key="lens.zoo").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    specs = [f"zoo:{n}" for n in FOUR]

    main = at.main  # the sidebar's status (versions, folders) is not the page's reading
    words = [t.value for t in main.title] + [m.value for m in main.markdown] + [c.value for c in main.caption] + \
        [a.value for a in [*main.info, *main.warning]]
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    titles = chart_titles(spec)
    table = at.dataframe[0].value
    cells = list(table.columns) + [str(v) for v in table.drop(columns="model").to_numpy().ravel()]
    for text in words + titles + cells:
        assert page_faults(as_read(text)) == [], (page_faults(as_read(text)), text)
        for s in sentences(text):
            assert len(s.split()) <= LONGEST, s
    assert "layer" not in table.columns and not table["block"].str.contains(r"\.\d").any()  # no tap name

    # depth in words: the axis says what it is, and "block k of L" is where the chart draws the block (k / L)
    assert "normalised block depth" not in titles and "depth in the model: block k of L at k / L" in titles
    assert any("block k of its L blocks sits at k / L" in c.value for c in main.caption)
    kl = table["block"].str.extract(r"^block (\d+) of (\d+)").astype(int)
    assert (abs(table["depth"] - kl[0] / kl[1]) < 1e-3).all()
    from vitlab.analyses.logit_lens import LensReport

    [report] = [v for v in at.session_state["lab.memo"].values() if isinstance(v, LensReport) and
                [r.model for r in v.results] == list(dict.fromkeys(table["model"]))]
    csv = report.to_frame()
    assert list(csv["layer"][csv["model"] == "zoo:vit-cls"]) == [f"blocks.{i}.resid_post" for i in range(6)]
    assert (abs(csv["depth"].to_numpy() - table["depth"].to_numpy()) < 1e-3).all()  # same rows, same order

    # the run line ends a caption of its own: the browser's clock can only land after it, never inside a name
    runs = [c.value for c in main.caption if "batches computed" in c.value]
    assert len(runs) == 1 and not any(m in runs[0] for m in specs), runs
    assert set(specs) <= set(table["model"])
