"""The Logit lens page at 1280×720 in the browser (issue 47): with the zoo's four models its chart, words and table lie
inside the main column (no column of the table cut: the table does not scroll sideways), and the browser's clock
("shown … after your click") ends the run line, a caption with no model name in it, also after the model list
changes. Screenshots go to $VITLAB_SHOTS_DIR (default tests/_artifacts/real_size)."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from .test_browser import ARGS, CHROMIUM, ROOT, SLOW, require_browser, serve_app
from .test_browser_real_size import MEASURE, chart, settle

pytestmark = pytest.mark.browser
FOUR = ["zoo:vit-cls", "zoo:vit-gap-14", "zoo:mixer", "zoo:resnet"]
ZOO_READY = all((ROOT / "assets" / "zoo" / f"{m[4:]}.safetensors").is_file() for m in FOUR)

# the table's own scroller (glide data grid): wider inside than its box means a column is cut at the right
TABLE = """() => [...document.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller')].map(s => {
  const stack = s.querySelector('.dvn-stack');
  return [Math.max(s.scrollWidth, stack ? stack.getBoundingClientRect().width : 0), s.clientWidth];
})"""
# the run line as drawn: its text, and whether the clock's words are its last
RUN_LINE = """() => [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
  .filter(c => c.textContent.includes('batches computed')).map(c => {
    const p = c.querySelector('p') || c, span = p.querySelector('.vitlab-shown');
    return {text: c.textContent, last: !!span && p.lastChild === span};
  })"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    require_browser()
    if not ZOO_READY:
        pytest.skip("the zoo's checkpoints are not trained")
    from playwright.sync_api import sync_playwright

    tmp = tmp_path_factory.mktemp("lens")
    env = {"VITLAB_MODEL_A": "zoo:vit-cls", "VITLAB_MODEL_B": "zoo:resnet", "VITLAB_DATA": "fashion-mnist:test",
           "VITLAB_IMAGES": "64", "VITLAB_BATCH_SIZE": "16", "VITLAB_CACHE_DIR": str(tmp / "cache"),
           "HF_HUB_OFFLINE": "1"}
    with serve_app(tmp, env) as url, sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            pg = b.new_context(viewport={"width": 1280, "height": 720}).new_page()
            pg.set_default_timeout(SLOW)
            pg.goto(f"{url}/logit_lens?" + urllib.parse.urlencode({"lens.models": json.dumps(FOUR)}))
            yield pg
        finally:
            b.close()


def clock_ends_a_caption_without_names(page) -> None:
    page.wait_for_function("() => !!document.querySelector('.vitlab-shown')")
    page.wait_for_timeout(400)
    [line] = page.evaluate(RUN_LINE)
    assert line["last"] and "after" in line["text"].rsplit(";", 1)[-1], line
    assert not any(m in line["text"] for m in FOUR), line


def test_the_lens_fits_1280_px_and_the_clock_never_lands_in_a_name(page):
    chart(page, "Logit lens")
    page.wait_for_function("() => [...document.querySelectorAll('svg.marks')].some(s => s.textContent.includes("
                           "'zoo:mixer')) && document.querySelector('[data-testid=\"stDataFrame\"]')")
    settle(page)
    found = page.evaluate(MEASURE)  # what lies past the main column's right edge, and which charts overlap
    assert found["beyond"] == [] and found["overlaps"] == [], found
    tables = page.evaluate(TABLE)
    assert tables and all(inner <= box + 1 for inner, box in tables), tables
    clock_ends_a_caption_without_names(page)
    # the model list changes: the captions are redrawn, the clock's words still end the run line
    page.locator('[data-testid="stMultiSelect"] input').first.click()
    page.keyboard.press("Backspace")  # zoo:resnet (still read out: the sidebar's B), then zoo:mixer
    page.keyboard.press("Backspace")
    page.keyboard.press("Escape")
    page.wait_for_function("() => { const s = [...document.querySelectorAll('svg.marks')]; return s.length && "
                           "!s.some(x => x.textContent.includes('zoo:mixer')); }")
    settle(page)
    assert page.evaluate(MEASURE)["beyond"] == []
    clock_ends_a_caption_without_names(page)
