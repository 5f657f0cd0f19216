"""AppTest of the presentation layout of the Paper tour: one figure per screen with the paper-style figure, its
claim, both answers (pattern and learned) and their numbers; Previous / Next (← / →) walk every figure and wrap;
the report download is offered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

import vitlab

SETTINGS = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
            "lab.images": 16, "lab.batch_size": 8}


pytestmark = pytest.mark.usefixtures("app_cache")  # a fresh disk cache for this module (conftest)


def html_text(at) -> str:
    return " ".join(h.proto.body for h in at.get("html"))


def test_presentation_walks_every_figure_with_claim_verdict_numbers_and_offers_the_report():
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=600)
    for k, v in SETTINGS.items():
        at.session_state[k] = v
    at.run()
    at.switch_page("views/present.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    claims = list(vitlab.tour.CLAIMS.values())
    seen = []
    for k, claim in enumerate(claims):
        text = html_text(at)
        assert f"{k + 1} / {len(claims)}" in text and claim.title in text
        plain = text.replace("&#x27;", "'")
        assert "present-verdict" in text and "statistic" in text and "95 % interval:" in text
        verdict = next(v for v in ("can't tell", "not shown", "shown") if f'data-answer="pattern">{v}<' in plain)
        learned = next(v for v in ("yes", "no", "can't tell", "n.a.") if f'data-answer="learned">{v}<' in plain)
        seen.append((verdict, learned))
        # the paper-style figure of this claim, drawn from the tour's run, and the interval chart
        assert f'class="present-paper" data-figure="{claim.figure}"' in text, claim.figure
        assert len(at.get("vega_lite_chart")) >= 2
        at.button(key="present.next").click().run()
        assert not at.exception, [e.message for e in at.exception]
    assert claims[0].title in html_text(at)  # Next wraps around
    at.button(key="present.prev").click().run()
    assert claims[-1].title in html_text(at)
    assert "Download report (HTML)" in [d.label for d in at.get("download_button")]
    assert len(seen) == len(claims)


def test_presentation_runs_the_paper_tour_pages_settings_and_says_so():
    """Issue 37: the slides measure what the Paper tour page is set to (its images, batches, twins, resamples), not
    always the handout default; each slide's counts are those its statistic used."""
    import lab

    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=600)
    for k, v in SETTINGS.items():
        at.session_state[k] = v
    at.session_state[lab.TOUR_SETTINGS] = {"tour.images": 32, "tour.batch_size": 8, "tour.twins": False,
                                           "tour.bootstrap": 50}
    at.run()
    at.switch_page("views/present.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    text = html_text(at)
    assert 'data-images="32" data-batches="4"' in text, text[:400]
    assert "The Paper tour page&#x27;s settings: 32 images in batches of 8" in text
    at.session_state["present.step"] = "receptive"
    at.run()
    text = html_text(at)  # Fig 6: its own first 32 images, in batches of 8 (a backward pass each)
    assert 'data-images="32" data-batches="4"' in text and "backward pass" in text
    at.session_state["present.step"] = "probes"
    at.run()
    assert 'data-images="500"' in html_text(at)  # Fig 11: the probe pool of its few-shot draws
