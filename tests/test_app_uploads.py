"""AppTest of the upload view (Localization page): photos uploaded, a token clicked, the reference-set CKA map, the
gradient map and the attention map drawn, no error; with 2 uploads the page says it uses the reference set."""

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

SETTINGS = {"lab.model_a": "zoo:vit-cls", "lab.model_b": "zoo:resnet", "lab.images": 32, "lab.batch_size": 16,
            "loc.ref.images": 64}
PHOTOS = ("astronaut.jpg", "chelsea.jpg")


pytestmark = pytest.mark.usefixtures("app_cache")  # a fresh disk cache for this module (conftest)


def photos():
    return tuple((n, (vitlab.data.ASSETS / "samples" / n).read_bytes()) for n in PHOTOS)


def start(uploads=(), **overrides) -> AppTest:
    """The app with ``overrides`` in session state, ``uploads`` given to the sidebar's uploader (as a user does),
    then the Localization page."""
    at = AppTest.from_file(str(APP / "Home.py"), default_timeout=300)
    for k, v in {**SETTINGS, **overrides}.items():
        at.session_state[k] = v
    at.run()
    if uploads:
        at.sidebar.file_uploader(key="w.uploads").set_value([(n, b, "image/jpeg") for n, b in uploads]).run()
    at.switch_page("views/localization.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


MAPS = ("CKA with each patch", "gradient |∂h/∂x|", "attention of token")


def captions(at) -> list[str]:
    """The captions of the token's maps (reference-set CKA, gradient, attention), in that order."""
    return [c.value for c in at.caption if c.value.startswith(MAPS)]


def test_two_uploads_use_the_reference_set_and_the_token_maps_draw():
    at = start(photos(), **{"lab.source": "uploads"})
    assert not at.error, [e.value for e in at.error]
    notes = [i.value for i in at.info]
    assert any("2 image(s) given: too few" in n and "reference set, the Fashion-MNIST test set" in n
               for n in notes), notes
    at.number_input(key="loc.row").set_value(1).run()  # a click on the token grid sets these two
    at.number_input(key="loc.col").set_value(2).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    caps = captions(at)
    assert len(caps) == 3, caps
    assert "reference set" in caps[0] and "95 % jackknife Fieller" in caps[0] and "[" in caps[0]
    assert "token (1,2)" in caps[1] and "own patch" in caps[1] and "3×3" in caps[1]
    assert "attention of token (1,2) at block 0," in caps[2]
    downloads = [d.label for d in at.get("download_button")]
    assert downloads.count("PNG") >= len(charts(at)) - 1  # every chart but the token picker


def charts(at):
    return list(at.get("vega_lite_chart"))


def test_page_upload_of_photos_and_image_choice():
    at = start(**{"lab.source": "fashion-mnist:test", "lab.images": 64})
    assert not any("too few" in i.value for i in at.info)  # 64 sidebar images: the data-set part uses them
    files = [(n, b, "image/jpeg") for n, b in photos()]
    at.file_uploader(key="loc.upload").set_value(files).run()
    image_picker(at).set_value(1).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    assert any("2 image(s) given" in i.value for i in at.info)  # the token view's CKA map: the reference set
    caps = captions(at)
    assert len(caps) == 3 and f"on {PHOTOS[1]}:" in caps[1], caps


def image_picker(at):
    return next(s for s in at.selectbox if s.label == "Image")


def test_a_new_upload_of_as_many_images_gets_its_own_label_and_maps():
    """The picker and the token view follow the uploaded content, not the number of images: replacing one upload by
    another showed the first one's name in the picker and, from the session's memo, its maps."""
    import io

    from PIL import Image

    at = start(**{"lab.source": "fashion-mnist:test", "lab.images": 64})
    name, data = photos()[0]
    at.file_uploader(key="loc.upload").set_value([(name, data, "image/jpeg")]).run()
    first = captions(at)[1]
    assert image_picker(at).options == [name] and f"on {name}:" in first, first
    buf = io.BytesIO()
    Image.new("RGB", (90, 60), (20, 120, 220)).save(buf, "PNG")
    at.file_uploader(key="loc.upload").set_value([("blue.png", buf.getvalue(), "image/png")]).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    second = captions(at)[1]
    assert image_picker(at).options == ["blue.png"] and "on blue.png:" in second, second
    numbers = [c.split(":", 1)[1] for c in (first, second)]  # the view's own shares, after the image's name
    assert numbers[0] != numbers[1], numbers


def test_a_cnn_position_shows_gradient_and_says_it_has_no_attention():
    at = start(photos(), **{"lab.source": "uploads", "loc.slot": "B"})
    assert not at.error, [e.value for e in at.error]
    assert any("has no attention" in i.value for i in at.info)
    assert len(captions(at)) == 2


def wide_png() -> bytes:
    """A 300×200 colour gradient: not square, not grey."""
    import io

    import numpy as np
    from PIL import Image

    yy, xx = np.mgrid[0:200, 0:300]
    arr = np.stack([xx * 255 // 299, yy * 255 // 199, 255 - xx * 255 // 299], -1).astype("uint8")
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def specs(at) -> list[dict]:
    """The Vega-Lite specs of the page's charts."""
    import json

    return [json.loads(c.proto.spec) for c in charts(at)]


def layers_of(spec: dict) -> list[dict]:
    return spec.get("layer") or spec.get("spec", {}).get("layer") or []


def test_upload_view_says_what_the_model_sees_and_starts_on_the_centre_token():
    at = start(**{"lab.source": "fashion-mnist:test", "lab.images": 64})
    at.file_uploader(key="loc.upload").set_value([("wide.png", wide_png(), "image/png")]).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    seen = [c.value for c in at.caption if "What the model sees" in c.value]
    # zoo:vit-cls's transform: Resize(28) (shorter side) then CenterCrop(28), one channel
    assert len(seen) == 1 and "300×200 → grey (1 channel)" in seen[0], seen
    assert "shorter side resized to 28 px (300×200 → 42×28, aspect kept)" in seen[0], seen
    assert "centre-cropped to 28×28: 33 % of the width cut" in seen[0] and "sees 28×28 grey" in seen[0], seen
    # 4×4 tokens: the view starts on (2, 2), not on the constant black corner (0, 0)
    assert (at.number_input(key="loc.row").value, at.number_input(key="loc.col").value) == (2, 2)
    caps = captions(at)
    assert "token (2,2)" in caps[1] and "on wide.png:" in caps[1], caps
    by_title = {}
    for spec in specs(at):
        title = spec.get("title")
        text = title.get("text") if isinstance(title, dict) else title
        by_title[" ".join(text) if isinstance(text, list) else str(text)] = spec
    ref = next((v for k, v in by_title.items() if k.startswith("CKA over the reference set")), None)
    assert ref is not None, list(by_title)
    assert "not this image" in next(k for k in by_title if k.startswith("CKA over the reference set"))
    grad = by_title["Gradient on this image"]
    attn = by_title["Attention on this image"]
    for spec, legend in ((ref, "CKA"), (grad, "|∂h/∂x| / max"), (attn, "attention weight")):
        layers = layers_of(spec)
        colours = [lyr["encoding"]["color"] for lyr in layers if "color" in lyr.get("encoding", {})]
        assert [c["title"] for c in colours] == [legend], colours  # one colour bar per map
        outlines = [lyr for lyr in layers if isinstance(lyr.get("mark"), dict) and lyr["mark"].get("filled") is False]
        assert len(outlines) == 1  # the chosen token's outline
    # the reference-set map is not drawn over the upload; the two maps of this image are
    assert not any(lyr.get("mark", {}).get("type") == "image" for lyr in layers_of(ref))
    assert all(any(lyr.get("mark", {}).get("type") == "image" for lyr in layers_of(s)) for s in (grad, attn))


def test_a_token_row_and_column_move_every_map_and_outline():
    at = start(**{"lab.source": "fashion-mnist:test", "lab.images": 64})
    at.file_uploader(key="loc.upload").set_value([("wide.png", wide_png(), "image/png")]).run()
    at.number_input(key="loc.row").set_value(0).run()
    at.number_input(key="loc.col").set_value(3).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    caps = captions(at)
    assert "token (0,3)" in caps[1] and "token (0,3)" in caps[2], caps
    subtitles = [str(spec["title"].get("subtitle")) for spec in specs(at) if isinstance(spec.get("title"), dict)]
    # the picker ("outlined: token (row 0, col 3)") and the three maps name the token their outline marks
    assert sum("token (row 0, col 3)" in t for t in subtitles) == 4, subtitles
