"""End-to-end in headless Chromium: the upload view (two photos, a token clicked: reference-set CKA map, gradient map,
attention map), the presentation layout (arrow keys), and the report file opened from disk with no server.

Marked `browser`, as tests/test_browser.py (whose server and page fixtures it uses). Screenshots go to docs/img/ with
VITLAB_SCREENSHOTS=docs (app_uploads.png, app_present.png, report.png).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_browser import (ROOT, SHOTS, ZOO_READY, _choose, _goto, _nav, _no_exception,
                                _settle, _shot, page, server)  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not ZOO_READY, reason="needs the zoo checkpoints")]
PHOTOS = ("astronaut.jpg", "chelsea.jpg")


def test_upload_two_photos_click_a_token_see_the_three_maps(page, server):  # noqa: F811
    _goto(page, server, "")
    _choose(page, "Images", "Uploaded images…")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').first.set_input_files(
        files=[{"name": n, "mimeType": "image/jpeg", "buffer": (ROOT / "assets" / "samples" / n).read_bytes()}
               for n in PHOTOS])
    _settle(page)
    _nav(page, "localization")
    page.get_by_text("2 image(s) given: too few").first.wait_for()
    page.get_by_text("gradient |∂h/∂x| of token (0,0)").first.wait_for()
    _no_exception(page)
    grid = page.locator('[data-testid="stVegaLiteChart"]').nth(1)
    marks = grid.locator("g.mark-rect.role-mark path")
    mark = marks.nth(marks.count() // 2 + 1)  # a token in the middle of the grid
    mark.scroll_into_view_if_needed()
    box = mark.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.2)
    _settle(page)
    page.wait_for_function("() => !document.body.innerText.includes('of token (0,0)')")
    captions = page.locator('[data-testid="stImageCaption"]').all_inner_texts()
    assert any("reference set" in c and "95 % jackknife t" in c for c in captions), captions
    assert any("gradient |∂h/∂x| of token" in c and "own patch" in c for c in captions), captions
    assert any("attention of token" in c for c in captions), captions
    _no_exception(page)
    page.get_by_text("This token on your image").first.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stImage\"] img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)")
    assert page.locator('[data-testid="stImage"] img').count() == 3
    _shot(page, "uploads")


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
