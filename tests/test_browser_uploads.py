"""End-to-end in headless Chromium: the upload view (two photos, a token clicked: reference-set CKA map, gradient map,
attention map), the presentation layout (arrow keys), and the report file opened from disk with no server.

Marked `browser`, as tests/test_browser.py (whose page fixture it uses, on the session's server of tests/conftest.py).
Screenshots go to docs/img/ with VITLAB_SCREENSHOTS=docs (app_uploads.png, app_present.png, report.png).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_browser import (ROOT, SHOTS, ZOO_READY, _choose, _click_mark, _goto, _nav, _no_exception,
                                _settle, _shot, page)  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not ZOO_READY, reason="needs the zoo checkpoints")]
PHOTOS = ("astronaut.jpg", "chelsea.jpg")


def _map_captions(page) -> list[str]:
    return [c for c in page.locator('[data-testid="stCaptionContainer"]').all_inner_texts()
            if c.startswith(("CKA with each patch", "gradient |∂h/∂x|", "attention of token"))]


def _wait_captions(page, *needles: tuple[str, ...]) -> None:
    """Wait until, for each group of ``needles``, one map caption holds all of its words, then until the run ends:
    each map's caption is written when that map is drawn, so a caption read earlier can be the previous token's or
    missing (on a loaded machine the attention map came last and its caption was read before it was there)."""
    for words in needles:
        caption = page.locator('[data-testid="stCaptionContainer"]')
        for w in words:
            caption = caption.filter(has_text=w)
        caption.first.wait_for()
    _settle(page)


def _chart(page, title: str):
    """The Vega chart whose SVG holds ``title`` (charts are found by what they say, not by their place)."""
    return page.locator('[data-testid="stVegaLiteChart"]').filter(has_text=title).first


def test_upload_two_photos_click_a_token_see_the_three_maps(page, server):  # noqa: F811
    _goto(page, server, "")
    _choose(page, "Images", "Uploaded images…")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').first.set_input_files(
        files=[{"name": n, "mimeType": "image/jpeg", "buffer": (ROOT / "assets" / "samples" / n).read_bytes()}
               for n in PHOTOS])
    _settle(page)
    _nav(page, "localization")
    page.get_by_text("2 image(s) given: too few").first.wait_for()
    page.get_by_text("gradient |∂h/∂x| of token (2,2)").first.wait_for()  # a 4×4 grid starts at its centre
    _no_exception(page)
    grid = _chart(page, "click a token")
    _click_mark(page, grid, "rect", 0, at=0.2)  # token (0, 0), off the centre dot (a mark of another layer)
    page.wait_for_function("() => !document.body.innerText.includes('of token (2,2)')")
    _wait_captions(page, ("reference set", "95 % jackknife Fieller"), ("gradient |∂h/∂x| of token (0,0)", "own patch"),
                   ("attention of token (0,0)",))
    captions = _map_captions(page)
    assert any("reference set" in c and "95 % jackknife Fieller" in c for c in captions), captions
    assert any("gradient |∂h/∂x| of token (0,0)" in c and "own patch" in c for c in captions), captions
    assert any("attention of token (0,0)" in c for c in captions), captions
    _no_exception(page)
    page.get_by_text("This token on your image").first.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stImage\"] img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)")
    assert page.locator('[data-testid="stImage"] img').count() == 1  # the original; the maps are charts
    for title in ("CKA over the reference set", "Gradient on this image", "Attention on this image"):
        _chart(page, title).locator("g.role-legend").first.wait_for()
    _shot(page, "uploads")


def _wide_png() -> bytes:
    """300×200, colour: a horizontal red-blue ramp over a vertical green one."""
    from io import BytesIO

    import numpy as np
    from PIL import Image

    yy, xx = np.mgrid[0:200, 0:300]
    arr = np.stack([xx * 255 // 299, yy * 255 // 199, 255 - xx * 255 // 299], -1).astype("uint8")
    buf = BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def test_click_a_point_on_an_uploaded_non_square_photo_picks_that_token(page, server):  # noqa: F811
    """Issue 34: upload a 300×200 colour PNG on the Localization page; the original and the model's input are shown
    with what the transform did; a click on the model's input picks the token under the pointer, and the three maps
    move to it, each with its colour bar and the token outlined."""
    _goto(page, server, "")
    _nav(page, "localization")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').last.set_input_files(
        files=[{"name": "wide.png", "mimeType": "image/png", "buffer": _wide_png()}])
    _settle(page)
    page.get_by_text("on wide.png:").first.wait_for()
    _settle(page)
    _no_exception(page)
    seen = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="What the model sees").first
    assert "300×200" in seen.inner_text() and "centre-cropped" in seen.inner_text(), seen.inner_text()
    picker = _chart(page, "What the model sees: click a token")
    picker.locator("g.mark-image image").first.wait_for()
    text = " ".join(picker.locator("text").all_text_contents())
    rows = int(text.split("(")[1].split("×")[0])  # "click a token (4×4 grid)"
    cols = int(text.split("×")[1].split(" ")[0])
    row, col = rows - 1, 0  # the bottom-left token: never the centre one the view starts on
    picture = picker.locator("g.mark-image image").first
    picture.scroll_into_view_if_needed()
    box = picture.bounding_box()
    page.mouse.click(box["x"] + box["width"] * (col + 0.5) / cols, box["y"] + box["height"] * (row + 0.5) / rows)
    _settle(page)
    _wait_captions(page, (f"of token ({row},{col})", "on wide.png:"), (f"attention of token ({row},{col})",))
    _no_exception(page)
    assert page.get_by_label("Token row", exact=True).input_value() == str(row)
    assert page.get_by_label("Token column", exact=True).input_value() == str(col)
    caps = _map_captions(page)
    assert any(f"of token ({row},{col})" in c and "on wide.png:" in c for c in caps), caps
    assert any(f"attention of token ({row},{col})" in c for c in caps), caps
    # the picker and every map name the token they outline, and each map has its colour bar
    assert f"outlined: token (row {row}, col {col})" in " ".join(picker.locator("text").all_text_contents())
    for title, legend in (("CKA over the reference set", "CKA"), ("Gradient on this image", "|∂h/∂x| / max"),
                          ("Attention on this image", "attention weight")):
        chart = _chart(page, title)
        words = " ".join(chart.locator("text").all_text_contents())
        assert f"token (row {row}, col {col})" in words, words
        assert chart.locator("g.role-legend").count() == 1, title
        assert legend in " ".join(chart.locator("g.role-legend text").all_text_contents()), title
    page.get_by_text("This token on your image").first.evaluate("e => e.scrollIntoView({block: 'start'})")
    _shot(page, "uploads_click")


def test_presentation_layout_moves_with_the_arrow_keys(page, server):  # noqa: F811
    _goto(page, server, "")
    _nav(page, "present")
    page.get_by_text("1 / 10").first.wait_for()
    # the slide number shows before the run ends and the buttons that carry the arrow-key shortcuts exist: a key
    # pressed then is lost (this failed on a slow machine). Wait for the whole navigation row and the run's end.
    page.get_by_role("button", name="Download report (HTML)").wait_for()
    _settle(page)
    _no_exception(page)
    _shot(page, "present")
    page.get_by_text("1 / 10").first.click()  # focus the page, not a widget
    page.keyboard.press("ArrowRight")
    _settle(page)
    page.get_by_text("2 / 10").first.wait_for()
    page.keyboard.press("ArrowLeft")
    _settle(page)
    page.get_by_text("1 / 10").first.wait_for()
    assert page.get_by_role("button", name="Download report (HTML)").count() == 1


def test_report_file_opens_from_disk_with_no_server(page, tmp_path):  # noqa: F811
    """The report, made by the CLI, opened from file:// in a fresh tab of the test's Chromium; every request that is
    not file:// is refused (the app's server is no part of this test)."""
    out = tmp_path / "report.html"
    cmd = [sys.executable, "-m", "vitlab", "report", "-m", "zoo:vit-cls", "-m", "zoo:resnet", "--data",
           "fashion-mnist:test", "-n", "64", "-b", "16", "--bootstrap", "100", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "VITLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    requested = []

    def only_files(route):
        requested.append(route.request.url)
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            route.abort()

    pg = page.context.browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        pg.route("**/*", only_files)
        pg.goto(out.as_uri())
        figures = pg.locator("section[data-figure]")
        assert figures.count() == 10
        for k in range(figures.count()):
            section = figures.nth(k)
            section.scroll_into_view_if_needed()
            # the paper-style figure of the claim (offline SVG), both answers beside it
            assert section.locator(".paper svg").count() == 1, section.get_attribute("data-figure")
            assert section.locator("[data-verdict]").inner_text() in ("shown", "not shown", "can't tell")
            assert section.locator("[data-learned]").inner_text() in ("yes", "no", "can't tell", "n.a.")
        assert pg.locator(".paper svg").count() == 10
        text = pg.locator("#provenance").inner_text()
        for needle in ("zoo:vit-cls", "zoo:resnet", "fingerprint", "sha256", "fashion-mnist:test", "64", "torch",
                       "timm", "vitlab", "UTC"):
            assert needle in text, needle
        pg.locator("section[data-figure]").nth(5).scroll_into_view_if_needed()
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / "report.png"))
    finally:
        pg.close()
    assert requested and all(u.startswith("file://") for u in requested), requested
