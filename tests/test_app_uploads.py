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


def captions(at) -> list[str]:
    return [i.proto.imgs[0].caption for i in at.get("image")]


def test_two_uploads_use_the_reference_set_and_the_token_maps_draw():
    at = start(photos(), **{"lab.source": "uploads"})
    assert not at.error, [e.value for e in at.error]
    notes = [i.value for i in at.info]
    assert any("2 image(s) given: too few" in n and "reference set fashion-mnist:test" in n for n in notes), notes
    at.number_input(key="loc.row").set_value(1).run()  # a click on the token grid sets these two
    at.number_input(key="loc.col").set_value(2).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    caps = captions(at)
    assert len(caps) == 3, caps
    assert "reference set" in caps[0] and "95 % jackknife t" in caps[0] and "[" in caps[0]
    assert "token (1,2)" in caps[1] and "own patch" in caps[1] and "3×3" in caps[1]
    assert "attention of token (1,2) at blocks." in caps[2]
    downloads = [d.label for d in at.get("download_button")]
    assert downloads.count("PNG") >= len(charts(at)) + 3


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
