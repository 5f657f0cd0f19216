"""Real size in the browser (issue 51): the pages a researcher opens on ViT-B/16 and ResNet-50 with the link
`?a=vit_base_patch16_224@random:0&b=resnet50@random:0&n=4&bs=4`, at 1280×720 with the sidebar open, draw their
charts inside the main column: no chart, image or text past its right edge, no two charts over each other, names
whole, warnings of one kind in one line, an empty chart said in words.

Four images in one batch keep the run short on two cores; the shapes are the real ones (197 tokens, 12 blocks × 12
heads, 16 ResNet blocks, 64 × 64 receptive fields). Receptive fields, whose tour check takes a backward pass per
block on 32 images whatever the page's count, run on ViT-Ti/16 and ResNet-10-T (the same 224-px input, 12 ViT
blocks, 64 × 64 fields), on a second server whose own pair that is. Screenshots go to $VITLAB_SHOTS_DIR (default
tests/_artifacts/real_size).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from .test_browser import ARGS, CHROMIUM, ROOT, SLOW, require_browser, serve_app

pytestmark = pytest.mark.browser

VIT_B, RESNET = "vit_base_patch16_224@random:0", "resnet50@random:0"
LINK = {"a": VIT_B, "b": RESNET, "n": "4", "bs": "4"}
SHOTS = Path(os.environ.get("VITLAB_SHOTS_DIR", ROOT / "tests" / "_artifacts" / "real_size"))

# what the main column holds that lies past its content's right edge, and which drawn charts overlap: every chart
# (svg/canvas), image, SVG text, and each text run outside code and tables (Range rects: a wrapped line is its own)
MEASURE = """() => {
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const m = main.getBoundingClientRect(), cs = getComputedStyle(main);
  const right = m.right - parseFloat(cs.paddingRight), left = m.left + parseFloat(cs.paddingLeft);
  const beyond = [], name = e => (e.getAttribute('class') || e.tagName).toString().slice(0, 40);
  const visible = r => r.width > 0 && r.height > 0;
  // a table (st.dataframe) draws on stacked canvases of its own: it scrolls inside its box, so it is left out
  const drawn = [...main.querySelectorAll('svg.marks, canvas, img, svg text')].filter(e =>
    !e.closest('[data-testid="stDataFrame"]'));
  for (const e of drawn) {
    const r = e.getBoundingClientRect();
    if (visible(r) && r.right > right + 1) beyond.push(`${name(e)} '${e.textContent.slice(0, 40)}' to ${r.right}`);
  }
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const host = n.parentElement;
    if (!n.textContent.trim() || host.closest('svg, pre, code, [data-testid="stDataFrame"]')) continue;
    const range = document.createRange(); range.selectNodeContents(n);
    for (const r of range.getClientRects())
      if (visible(r) && r.right > right + 1) beyond.push(`text '${n.textContent.slice(0, 40)}' to ${r.right}`);
  }
  const charts = drawn.filter(e => e.matches('svg.marks, canvas')).map(e => e.getBoundingClientRect())
    .filter(visible);
  const overlaps = [];
  charts.forEach((a, i) => charts.slice(i + 1).forEach(b => {
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) -
      Math.max(a.top, b.top);
    if (w > 1 && h > 1) overlaps.push([a.left, a.right, b.left, b.right]);
  }));
  return {left, right, beyond, overlaps};
}"""


def serve(tmp_path_factory, link: dict):
    """The app whose own choice is the link's pair, so that the link proposes nothing and a page runs on it at once
    (a link's models are only proposed: meanwhile the page would run on the server's)."""
    require_browser()
    tmp = tmp_path_factory.mktemp("real_size")
    env = {"VITLAB_MODEL_A": link["a"], "VITLAB_MODEL_B": link["b"], "VITLAB_DATA": "fashion-mnist:test",
           "VITLAB_IMAGES": link["n"], "VITLAB_BATCH_SIZE": link["bs"], "VITLAB_CACHE_DIR": str(tmp / "cache"),
           "HF_HUB_OFFLINE": "1"}
    return serve_app(tmp, env)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve(tmp_path_factory, LINK) as url:
        yield url


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    pg = context.new_page()
    pg.set_default_timeout(SLOW)
    yield pg
    context.close()


def settle(page) -> None:
    """Until nothing runs: no spinner and no running-status widget for two seconds in a row."""
    calm = 0
    for _ in range(SLOW // 250):
        busy = page.evaluate("() => !!document.querySelector('[data-testid=\"stSpinner\"], "
                             "[data-testid=\"stStatusWidget\"]')")
        calm = 0 if busy else calm + 1
        if calm >= 8:
            return
        page.wait_for_timeout(250)
    stuck(page, "the page kept running")


def open_page(page, server: str, path: str, link: dict = LINK):
    page.goto(f"{server}/{path}?{urllib.parse.urlencode(link)}")
    page.locator('[data-testid="stMainBlockContainer"] h1').first.wait_for()
    settle(page)


def chart(page, title: str):
    """The chart whose title holds ``title``, once drawn (a chart's element has no key class of its own)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    svg = page.locator("svg.marks").filter(has_text=title).first
    try:
        svg.wait_for()
    except PlaywrightTimeout:
        stuck(page, f"no chart titled '{title}'")
    settle(page)
    return svg


def stuck(page, what: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "stuck.png"))
    pytest.fail(f"{what}: {page.locator('[data-testid=stMainBlockContainer]').inner_text()[-800:]}")


def texts(svg) -> list[str]:
    return svg.evaluate("s => [...s.querySelectorAll('text')].map(t => t.textContent)")


def fits(page, name: str) -> dict:
    """Measure the page; save its screenshot (the whole main column: the viewport made as tall as the page)."""
    no_error(page)
    found = page.evaluate(MEASURE)
    width = page.viewport_size["width"]
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMainBlockContainer\"]').scrollHeight")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": width, "height": min(height + 120, 8000)})
    page.wait_for_timeout(600)
    page.screenshot(path=str(SHOTS / f"{name}_{width}.png"))
    page.set_viewport_size({"width": width, "height": 720})
    return found


def no_error(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, page.locator(
        '[data-testid="stException"]').first.inner_text()
    errors = page.locator('[data-testid="stAlert"]').filter(has_text="Unexpected error")
    assert errors.count() == 0, errors.first.inner_text()


def test_attention_draws_12_blocks_of_12_heads_inside_the_page_and_a_click_picks_a_head(page, server):
    open_page(page, server, "attention")
    svg = chart(page, "Mean attention distance per head")
    labels = texts(svg)
    assert [str(b) for b in range(12)] == [t for t in labels if t.isdigit() and int(t) < 12][:12], labels
    found = fits(page, "attention")
    assert not found["beyond"] and not found["overlaps"], found
    # a click on the last dot (block 11, head 11) shows that head's maps: the chart is still a head picker (the
    # mouse, not the element: a nearest-point selection lays an invisible Voronoi layer over the dots)
    dots = svg.locator("g.mark-symbol.role-mark").first.locator("path")
    assert dots.count() == 144
    dots.nth(143).scroll_into_view_if_needed()
    box = dots.nth(143).bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.get_by_text("block 11, head 11").first.wait_for()
    settle(page)
    no_error(page)


def test_skip_connections_say_one_warning_and_legend_only_the_lines_drawn(page, server):
    open_page(page, server, "skips")
    svg = chart(page, "CLS vs spatial tokens")
    said = page.locator('[data-testid="stAlert"]').filter(has_text="the long branch f(z) is zero")
    assert said.count() == 1, [said.nth(i).inner_text() for i in range(said.count())]
    assert f"{RESNET}, all 16 blocks (stage 1 block 0 to stage 4 block 2)" in said.first.inner_text()
    # the ResNet's line cannot be drawn (an infinite ratio in every block): named only in the subtitle, with why
    named = [t for t in texts(svg) if RESNET in t]
    assert named and all("not drawn" in t for t in named), named
    found = fits(page, "skips")
    assert not found["beyond"] and not found["overlaps"], found


def test_token_norms_say_an_empty_flag_chart_in_words(page, server):
    open_page(page, server, "token_norms")
    chart(page, "Token norms at block 11")
    words = page.locator('[data-testid="stAlert"]').filter(has_text="No token flagged")
    flags = page.locator("svg.marks").filter(has_text=f"{VIT_B}: flagged tokens")
    assert words.count() + flags.count() == 1  # one or the other, never an empty chart
    if words.count():  # a random ViT-B/16 has no high-norm tokens at k = 5 on four images
        assert f"none of {VIT_B}'s 24 layers" in words.first.inner_text()
    assert not [t for t in page.locator("svg.marks text").all_text_contents() if "0.000000" in t]
    found = fits(page, "token_norms")
    assert not found["beyond"] and not found["overlaps"], found


def test_many_models_names_are_whole_and_the_charts_apart_at_1280_and_1920_px(page, server):
    open_page(page, server, "models")
    heat, mds = chart(page, "linear CKA at depth"), chart(page, "Models at depth")
    for svg in (heat, mds):
        shown = texts(svg)
        assert not [t for t in shown if "…" in t], shown
    assert "vit_base_patch16_224@random:0" in "".join(texts(heat)) and RESNET in texts(heat)
    assert VIT_B in texts(mds)
    for width in (1280, 1920):
        page.set_viewport_size({"width": width, "height": 720})
        page.wait_for_function(f"() => window.innerWidth === {width}")
        page.wait_for_timeout(500)
        found = fits(page, "models")
        assert not found["beyond"] and not found["overlaps"], (width, found)
        h, m = heat.bounding_box(), mds.bounding_box()
        assert h["x"] + h["width"] <= m["x"], (width, h, m)  # side by side, apart
    page.set_viewport_size({"width": 1280, "height": 720})


SMALL = {**LINK, "a": "vit_tiny_patch16_224@random:0", "b": "resnet10t@random:0"}


def test_receptive_field_tiles_show_a_shape_inside_the_page(browser, tmp_path_factory):
    with serve(tmp_path_factory, SMALL) as url:
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        page = context.new_page()
        page.set_default_timeout(SLOW)
        try:
            receptive_fields_fit(page, url)
        finally:
            context.close()


def receptive_fields_fit(page, server: str) -> None:
    open_page(page, server, "receptive", SMALL)
    # 64 x 64 fields of 12 blocks: a canvas (Vega draws large charts so), three tiles of 192 px a row (3 px a cell),
    # four rows, where six tiles of 64 px a row were drawn before
    grid = page.locator('[data-testid="stVegaLiteChart"] canvas').first
    try:
        grid.wait_for()
    except Exception:  # noqa: BLE001 (the page's words say why)
        stuck(page, "no receptive-field grid")
    settle(page)
    box = grid.bounding_box()
    assert box["width"] >= 3 * 150 and box["height"] >= 4 * 150, box
    assert SMALL["a"] in page.locator('[data-testid="stMainBlockContainer"]').inner_text()
    found = fits(page, "receptive")
    assert not found["beyond"] and not found["overlaps"], found
