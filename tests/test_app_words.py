"""AppTest: pages speak a person's words (issue 38). The Localization page and its upload view name the data set and
the block in words ("Fashion-MNIST test set", "block 0", numbered as the model and the tour number it), never vitlab's internal names ('fashion-mnist:test',
'blocks.0') nor the machine's paths (the data set's folder, the cache folder); Home shows no cache path (Status in
the sidebar does, for whoever looks after the machine)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
sys.path.insert(0, str(APP))

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ZOO_READY = all((ROOT / "assets" / "zoo" / f"{n}.safetensors").is_file() for n in ("vit-cls", "resnet"))
SETTINGS = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.source": "fashion-mnist:test",
            "lab.images": 32, "lab.batch_size": 16, "loc.ref.images": 64}
INTERNAL = ("fashion-mnist:test", "fashion-mnist\\:test", "fashion-mnist:10000", "fashion-mnist\\:10000", "blocks.0",
            "blocks\\.0", "/usr/share", "datasets/")

pytestmark = [pytest.mark.usefixtures("app_cache"),  # a fresh disk cache for this module (conftest)
              pytest.mark.skipif(not ZOO_READY, reason="needs the zoo")]


def start(page: str | None) -> AppTest:
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    for k, v in SETTINGS.items():
        at.session_state[k] = v
    at.run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def cache_folder(at: AppTest) -> str:
    """The disk cache's folder, as Status in the sidebar names it (for whoever looks after the machine)."""
    status = next(c.value for c in at.sidebar.caption if c.value.startswith("Disk cache:"))
    folder = status.split("`")[1]
    assert folder.startswith("/"), status
    return folder


def page_text(at: AppTest) -> list[str]:
    """Every caption, markdown, note and image caption of the page itself (not the sidebar)."""
    main = at.main
    texts = [e.value for kind in ("caption", "markdown", "info", "warning") for e in main.get(kind)]
    return texts + [img.caption for e in main.get("image") for img in e.proto.imgs]


def test_localization_captions_in_words():
    at = start("localization")
    assert not at.error, [e.value for e in at.error]
    texts = page_text(at)
    shown = [t for t in texts if any(x in t for x in INTERNAL + (cache_folder(at),))]
    assert not shown, shown
    # 32 images < 64: the data-set statistic and the token's CKA map are measured on the reference set, said in words
    assert any("reference set, the Fashion-MNIST test set" in i.value for i in at.info), [i.value for i in at.info]
    caps = [c.value for c in at.main.caption]
    assert any(c.startswith("CKA with each patch") and "the Fashion-MNIST test set" in c for c in caps), caps
    grad = next(c for c in caps if c.startswith("gradient |∂h/∂x|"))
    assert " at block 0 on image 0 " in grad, grad  # the block and the image in words: 'image 0 (Ankle boot)'
    layer = at.selectbox(key="loc.layer")
    assert layer.value == "blocks.0.resid_post" and layer.options[0] == "block 0", layer.options


def test_home_shows_no_cache_path():
    at = start(None)
    texts, folder = page_text(at), cache_folder(at)
    assert not [t for t in texts if folder in t or "/usr/share" in t], texts
    assert any("The disk cache holds" in t for t in texts), texts


def test_home_escapes_folder_class_and_file_names(tmp_path, monkeypatch):
    """A folder's class (sub-folder) and file names are shown as written, never read as Markdown (an image's caption
    is Markdown too): '*x*' stays '*x*', not an italic x."""
    from PIL import Image

    monkeypatch.setenv("VITLAB_FOLDERS", str(tmp_path))  # the app reads folders only there (vitlab.inputs.folders)
    folder = tmp_path / "photos"
    (folder / "cats_*x*").mkdir(parents=True)
    for k in range(4):
        Image.new("RGB", (32, 32), (40 * k, 90, 200)).save(folder / "cats_*x*" / f"[{k}](y).png")
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    for k, v in {**SETTINGS, "lab.source": str(folder), "lab.images": 4, "lab.batch_size": 4}.items():
        at.session_state[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    images = next((m.value for m in at.main.markdown if "the analysis pages use" in m.value), None)
    assert images, [m.value for m in at.main.markdown] + [e.value for e in at.error]
    assert "classes cats\\_\\*x\\*" in images, images
    captions = [img.caption for e in at.main.get("image") for img in e.proto.imgs]
    # by its path inside the folder (not the machine's full path) and its class, escaped
    assert captions[0] == "cats\\_\\*x\\*/\\[0\\](y).png (cats\\_\\*x\\*)", captions
    assert not [c for c in captions if str(tmp_path) in c], captions


def test_token_norms_page_in_words():
    at = start("token_norms")
    assert not at.error, [e.value for e in at.error]
    texts = page_text(at)
    shown = [t for t in texts if any(x in t for x in INTERNAL + (cache_folder(at),))]
    assert not shown, shown
    left = next(c.value for c in at.main.caption if "left out per layer" in c.value)
    # 32 images in batches of 16: 2 batches, too few for an interval, said in the one convention
    assert left.startswith("bars: no interval: too few batches for one (2 < 4)"), left
    assert re.search(r"left out per layer: block 0 \d+, block \d+ \d+, block \d+ \d+\.$", left), left


def _axis_labels(spec, channel: str) -> dict[str, str]:
    """{value: label} an axis shows, by evaluating its labelExpr's lookup (``words.axis_words``) in Python."""
    import json

    expr = spec["encoding"][channel]["axis"]["labelExpr"]
    assert expr.endswith(")[datum.value] || datum.value"), expr
    return json.loads(expr[1:expr.index(")[datum.value]")])


def test_similarity_page_in_words():
    """Captions, pickers and the heatmap's axes name layers in words ("block 0 after attention", "stage 1 block 0"),
    numbered as the tour and the CLI number them; the tap's own name stays in the chart's data (tooltip, CSV)."""
    import json

    from vitlab.charts.words import layer_in_words

    at = start("similarity")
    assert not at.error, [e.value for e in at.error]
    taps = ("blocks.", "blocks\\.", "resid_", "resid\\_", "layer1.", "layer1\\.")
    shown = [t for t in page_text(at) if any(x in t for x in INTERNAL + taps)]
    assert not shown, shown
    la, lb = at.selectbox(key="sim.ab.la"), at.selectbox(key="sim.ab.lb")
    assert la.value == "blocks.0.resid_mid" and la.options[0] == "block 0 after attention", la.options
    assert lb.value == "layer1.0" and lb.options[0] == "stage 1 block 0", lb.options
    heat = next(c for c in at.get("vega_lite_chart") if "CKA: " in c.proto.spec)
    spec = json.loads(heat.proto.spec)
    for channel, side in (("x", "layer_b"), ("y", "layer_a")):
        labels = _axis_labels(spec, channel)
        assert labels and labels == {t: layer_in_words(t) for t in labels}, labels
        assert spec["encoding"][channel]["field"] == side  # the selection and the CSV keep the tap's name
    assert set(_axis_labels(spec, "y")) >= {"blocks.0.resid_mid", "blocks.5.resid_post"}
