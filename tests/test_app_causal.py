"""AppTest tests of the causal pages: head ablation, attribution (also on uploads), token norms; errors in place."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

SETTINGS = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
            "lab.images": 16, "lab.batch_size": 8}


pytestmark = pytest.mark.usefixtures("app_cache")  # a fresh disk cache for this module (conftest)


def start(page: str, **overrides) -> AppTest:
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=240)
    for k, v in {**SETTINGS, **overrides}.items():
        at.session_state[k] = v
    at.run()
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at  # with source 'uploads' the page shows "no images uploaded" until the uploader gets files


def exports(at: AppTest) -> list[str]:
    return [d.label for d in at.get("download_button")]


def test_ablation_page_draws_three_curves_per_metric_and_the_verdicts():
    at = start("ablation", **{"abl.k": 2, "abl.draws": 2})
    assert not at.error, [e.value for e in at.error]
    charts = list(at.get("vega_lite_chart"))
    assert len(charts) == 3 and exports(at).count("PNG") >= 3 and exports(at).count("CSV") >= 3
    verdicts = at.dataframe[0].value
    assert set(verdicts["k"]) == {1, 2} and set(verdicts["mode"]) == {"zero", "mean"}


def test_ablation_page_on_a_cnn_says_so():
    at = start("ablation", **{"lab.model_a": "zoo:resnet", "lab.model_b": "zoo:vit-cls"})
    assert any("ViT" in e.value for e in at.error)


def test_attribution_page_on_the_dataset_and_on_an_upload():
    at = start("attribution", **{"attr.orders": 2})
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("image")) == 1 + 4  # the image and the four default maps
    assert len(list(at.get("vega_lite_chart"))) == 1
    methods = set(at.dataframe[0].value["method"])
    assert methods == {"rollout", "rollout:max:0.9", "rollout:min:0.9", "grad-rollout", "random order"}
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (40, 40), 200).save(buf, "PNG")
    up = start("attribution", **{"lab.source": "uploads", "attr.orders": 1, "attr.model": "B"})
    up.sidebar.file_uploader(key="w.uploads").set_value([("shirt.png", buf.getvalue(), "image/png")]).run()
    assert not up.error, [e.value for e in up.error]
    assert len(up.get("image")) == 2 and set(up.dataframe[0].value["method"]) == {"gradcam", "random order"}
    assert exports(up).count("PNG") >= 3


def test_token_norms_page_with_and_without_flags():
    at = start("token_norms", **{"tn.k": 1.0})
    assert not at.error, [e.value for e in at.error]
    # flags, histogram, two CKA maps, attention distance, localization rates with and without flagged tokens
    assert len(list(at.get("vega_lite_chart"))) == 6
    assert len(at.get("image")) == 3  # flagged tokens; the attention map with all keys and with flagged masked
    frame = at.dataframe[-1].value
    assert (frame["flagged_tokens"] > 0).any()  # k = 1 flags some tokens on the zoo ViT
    cnn = start("token_norms", **{"tn.model": "B"})
    assert any("token model" in e.value for e in cnn.error)
