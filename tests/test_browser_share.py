"""End-to-end links (issue 41): a link copied from each analysis page, opened in a new browser context (no shared
session, cookies or storage), shows the same settings and the same headline numbers, read from the cache.

The session's server (tests/conftest.py, shared with tests/test_browser.py); small settings (zoo models, 32 images,
batches of 16).
Marked `browser`.
"""

from __future__ import annotations

import re
import urllib.parse

import pytest

from tests.test_browser import (
    ARGS,
    CHROMIUM,
    SHOTS,
    SLOW,
    ZOO_READY,
    _clipped,
    _internal_names,
    _no_exception,
    _settle,
)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not ZOO_READY, reason="the zoo's checkpoints are missing")]

LINK = {"a": "zoo:vit-cls", "b": "zoo:resnet", "data": "fashion-mnist:test", "n": "32", "bs": "16"}
LEAD = "On these models:"
PATTERN = "Pattern:"  # a claim page's lead (app/claim.py): its numbers are on the pattern line, under the statistic
# page url -> (the page's own choices in the first link, the text that carries the page's headline numbers)
PAGES = {
    "skips": ({"skips.value": "cosine"}, PATTERN),
    "logit_lens": ({}, LEAD),
    "attention": ({"att.layer": "1"}, PATTERN),
    "heads": ({}, PATTERN),
    "receptive": ({}, PATTERN),
    "probes": ({"probe.draws": "2", "probe.test": "50"}, PATTERN),
    "checkpoints": ({"ckpt.preset": "sidebar", "b": "zoo:vit-cls-10pct"}, PATTERN),
    "models": ({"mm.models": '["zoo:vit-cls", "zoo:resnet"]'}, "most alike"),
    "ablation": ({"abl.draws": "2"}, "of the intact model"),
    "token_norms": ({}, LEAD),
    "similarity": ({"sim.view": "within A"}, PATTERN),
    "localization": ({"n": "64"}, PATTERN),
    "attribution": ({"attr.orders": "2"}, "deletion"),
    "attention-parity": ({}, "logits"),  # the generic page
}


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def _open(browser, url: str):
    """A new browser context (a new visitor) on ``url``, settled."""
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(SLOW)
    page.goto(url)
    _settle(page)
    page.locator('[data-testid="stExpander"]').filter(has_text="Link and code").first.wait_for()
    _settle(page)
    return context, page


def _link(page) -> str:
    """The link in the page's box, once the run that fills it has finished (a link's first run may rerun the page
    to set the page's own choices)."""
    box = page.locator('[data-testid="stExpander"]').filter(has_text="Link and code").first
    code = box.locator("pre").filter(has_text="http://")
    for _ in range(3):
        _settle(page)
        if not box.locator("pre").first.is_visible():
            box.locator("summary").first.click()
        code.first.wait_for()
        _settle(page)
        if code.count():
            break
    return code.first.inner_text().strip()


def _headline(page, marker: str) -> str:
    text = page.locator('[data-testid="stMarkdownContainer"], [data-testid="stCaptionContainer"], '
                        '[data-testid="stImageCaption"]').filter(
        has_text=marker).first
    text.wait_for()
    return text.inner_text()


def _query(url: str) -> dict:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


@pytest.mark.parametrize("path", list(PAGES))
def test_a_copied_link_reopens_the_same_view_in_a_new_browser(browser, server, path):
    view, marker = PAGES[path]
    first, page = _open(browser, f"{server}/{path}?{urllib.parse.urlencode({**LINK, **view})}")
    try:
        _no_exception(page)
        link = _link(page)
        headline = _headline(page, marker)
        if path == "skips":  # the README's picture of the box: the page finished, the box open
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.locator('[data-testid="stExpander"]').filter(has_text="Link and code").first.screenshot(
                path=str(SHOTS / "app_link_and_code.png"))
    finally:
        first.close()
    assert urllib.parse.urlsplit(link).path == f"/{path}"
    query = _query(link)
    assert {k: query.get(k) for k in {**LINK, **view}} == {**LINK, **view}
    assert re.search(r"\d", headline), headline

    second, again = _open(browser, link)  # a new context: nothing of the first session, only the link
    try:
        _no_exception(again)
        from playwright.sync_api import expect

        # expect() keeps its own 5-s default, not the page's: the sidebar may draw after the main column when loaded
        expect(again.get_by_role("spinbutton", name="Images", exact=True)).to_have_value({**LINK, **view}["n"],
                                                                                         timeout=SLOW)
        assert _headline(again, marker) == headline
        assert _query(_link(again)) == query  # every setting, the page's own included, came back
        runs = again.locator('[data-testid="stCaptionContainer"]').filter(has_text="batches computed")
        if runs.count():
            assert "0 batches computed" in runs.first.inner_text(), runs.first.inner_text()
        # the same view as a 1280-px laptop sees it (issue 38): nothing cut, everything named in words
        again.set_viewport_size({"width": 1280, "height": 720})
        again.wait_for_function("() => window.innerWidth === 1280")
        assert not _clipped(again), _clipped(again)
        assert not _internal_names(again), _internal_names(again)
    finally:
        second.close()


# what a link may try to bring alive in the page (issue 46); ` < > [ ] are refused before they are shown
HOSTILE = "https://evil.example/login **bold** $x^2$ :smile: :material/home: www.evil.example a@evil.example _em_"


def test_a_hostile_name_from_a_link_is_shown_as_written_by_the_browsers_renderer(browser, server):
    """Read the HTML Streamlit's own renderer made of the link's error (GFM bare links, maths, emoji and icon
    shortcodes are made alive after Markdown's escapes are read, so only the browser can tell)."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.set_default_timeout(SLOW)
    try:
        page.goto(f"{server}/skips?{urllib.parse.urlencode({**LINK, 'a': HOSTILE})}")
        box = page.locator('[data-testid="stAlert"]').filter(has_text="model A").first
        box.wait_for()
        _settle(page)
        html = box.inner_html()
        text = box.inner_text().replace("\u2060", "")
        assert HOSTILE in text, text  # shown whole, as typed
        alive = box.locator("a, strong, em, .katex, [role=img], .stMarkdownColoredText")
        assert alive.count() == 0, html
        assert "😄" not in text, text
    finally:
        context.close()
