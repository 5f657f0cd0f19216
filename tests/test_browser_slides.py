"""Present the tour fits a projector: every slide, sidebar open and collapsed, at 1280×720 and 1920×1080, shows its
last element inside the viewport (no scrolling) and no two of its boxes (the claim, the answers, the figures)
overlap.

One server and one computed tour (the session's ``server`` of tests/conftest.py, shared with test_browser); one page
walks the slides and is resized with ``set_viewport_size`` for each viewport, so each slide is drawn once per sidebar
state. Waits are for conditions (the run finished, every chart drawn, the layout unchanged over a few frames), never
for time.
Screenshots of every slide go to tests/_artifacts (docs/img with VITLAB_SCREENSHOTS=docs, the first slide only).
"""

from __future__ import annotations

import pytest

from tests.test_browser import ARGS, CHROMIUM, SHOTS, SLOW, ZOO_READY, _goto, _no_exception, _settle

pytestmark = pytest.mark.browser

VIEWPORTS = ((1280, 720), (1920, 1080))
TOLERANCE = 1  # px: sub-pixel rounding of bounding boxes

# every element container of the main column (its last one is the slide's last element); the slide's boxes by role
MEASURE = """() => {
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const seen = el => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
                       return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  let bottom = 0, right = 0;
  for (const el of main.querySelectorAll('[data-testid="stElementContainer"], canvas, svg.marks')) {
    if (!seen(el)) continue;
    const r = el.getBoundingClientRect();
    bottom = Math.max(bottom, r.bottom); right = Math.max(right, r.right);
  }
  const box = el => { const r = el.getBoundingClientRect();
                      return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
  const boxes = {};
  const claim = document.querySelector('.present-claim');
  if (claim) boxes.claim = box(claim);
  document.querySelectorAll('[data-answer]').forEach(el => { boxes['answer ' + el.dataset.answer] = box(el); });
  document.querySelectorAll('.present-numbers').forEach((el, i) => { boxes['numbers ' + i] = box(el); });
  document.querySelectorAll('[data-testid="stVegaLiteChart"]').forEach((el, i) => {
    const drawn = el.querySelector('canvas, svg.marks');
    if (drawn && seen(drawn)) boxes['figure ' + i] = box(drawn);
  });
  // the paper figure's drawn width (an SVG keeps its aspect ratio inside its box) against its column's
  const column = document.querySelector('.st-key-present-figure');
  const paper = column && column.querySelector('svg.marks');
  let fill = null;
  if (paper && seen(paper)) {
    const r = paper.getBoundingClientRect(), vb = paper.viewBox.baseVal;
    const drawn = vb && vb.width ? Math.min(r.width, r.height * vb.width / vb.height) : r.width;
    fill = [drawn / column.getBoundingClientRect().width, Math.round(r.width), Math.round(r.height),
            `${vb.width}×${vb.height}`];
  }
  // the interval chart's type as drawn (its font size times the SVG's scale) and its labels that cross
  const iv = document.querySelector('.st-key-present-intervals svg.marks');
  let font = null, crossed = [];
  if (iv && seen(iv)) {
    const r = iv.getBoundingClientRect(), vb = iv.viewBox.baseVal;
    const scale = vb && vb.width ? Math.min(r.width / vb.width, r.height / vb.height) : 1;
    const texts = [...iv.querySelectorAll('text')]  // Vega hides the labels it drops for overlap (opacity 0)
      .filter(t => t.textContent.trim() && seen(t) && t.getAttribute('opacity') !== '0');
    font = Math.min(...texts.map(t => parseFloat(getComputedStyle(t).fontSize) * scale));
    const rects = texts.map(t => t.getBoundingClientRect());
    rects.forEach((a, i) => rects.forEach((b, j) => {
      if (j > i && Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
          Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1)
        crossed.push(texts[i].textContent + ' × ' + texts[j].textContent); }));
  }
  return {width: innerWidth, height: innerHeight, bottom, right, boxes, fill, font, crossed};
}"""

# true once every chart is drawn, nothing runs, and the layout (sizes of the drawn charts, the main column's height)
# has stayed the same for 5 animation frames in a row
STABLE = """() => {
  if (document.querySelector('[data-testid="stStatusWidget"]')) return false;
  const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')];
  if (charts.length < 2 || charts.some(c => !c.querySelector('canvas, svg.marks'))) return false;
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const sig = JSON.stringify([innerWidth, innerHeight, main.scrollHeight, main.getBoundingClientRect().width,
    ...charts.map(c => { const d = c.querySelector('canvas, svg.marks').getBoundingClientRect();
                         return [Math.round(d.width), Math.round(d.height)]; })]);
  if (window.__vitlabSig === sig) { window.__vitlabSame = (window.__vitlabSame || 0) + 1; }
  else { window.__vitlabSig = sig; window.__vitlabSame = 0; }
  return window.__vitlabSame >= 5;
}"""


def stable(page) -> None:
    page.evaluate("() => { window.__vitlabSig = null; window.__vitlabSame = 0; }")
    page.wait_for_function(STABLE, polling="raf", timeout=SLOW)


def overlaps(boxes: dict) -> list[str]:
    names = list(boxes)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            p, q = boxes[a], boxes[b]
            w = min(p["right"], q["right"]) - max(p["left"], q["left"])
            h = min(p["bottom"], q["bottom"]) - max(p["top"], q["top"])
            if w > TOLERANCE and h > TOLERANCE:
                out.append(f"{a} × {b} ({w:.0f}×{h:.0f} px)")
    return out


SIDEBAR_OPEN = """() => { const r = document.querySelector('[data-testid="stSidebar"]').getBoundingClientRect();
                          return r.right > 50 && r.width > 50; }"""


def set_sidebar(page, open_: bool) -> None:
    """Open or collapse the sidebar with its own buttons, and wait until it has moved."""
    if page.evaluate(SIDEBAR_OPEN) == open_:
        return
    if open_:
        page.locator('[data-testid="stExpandSidebarButton"]').click()
    else:
        page.locator('[data-testid="stSidebar"]').hover()
        page.locator('[data-testid="stSidebarCollapseButton"] button').click()
    page.wait_for_function(SIDEBAR_OPEN if open_ else f"() => !({SIDEBAR_OPEN})()")


def measure_all(page, server: str, viewports=VIEWPORTS, shots=None) -> list[dict]:
    """Every slide × sidebar state × viewport: {slide, sidebar, viewport, overflow_y, overflow_x, overlaps}."""
    from vitlab.tour import CLAIMS

    page.set_viewport_size({"width": viewports[0][0], "height": viewports[0][1]})
    _goto(page, server, "present")
    first = next(iter(CLAIMS.values()))
    page.get_by_text(f"{first.figure} · 1 / {len(CLAIMS)}", exact=True).wait_for()  # the tour computed
    out = []
    for open_ in (True, False):
        set_sidebar(page, open_)
        for k, claim in enumerate(CLAIMS.values()):
            page.get_by_text(f"{claim.figure} · {k + 1} / {len(CLAIMS)}", exact=True).wait_for()
            _no_exception(page)
            for w, h in viewports:
                page.set_viewport_size({"width": w, "height": h})
                stable(page)
                m = page.evaluate(MEASURE)
                out.append({"slide": claim.figure, "sidebar": "open" if open_ else "collapsed",
                            "viewport": f"{w}x{h}", "overflow_y": round(m["bottom"] - m["height"]),
                            "overflow_x": round(m["right"] - m["width"]), "overlaps": overlaps(m["boxes"]),
                            "boxes": sorted(m["boxes"]), "fill": m["fill"], "font": m["font"],
                            "crossed": m["crossed"]})
                if shots:
                    page.screenshot(path=f"{shots}/slide{k + 1:02d}_{w}x{h}_{'open' if open_ else 'closed'}.png")
            page.get_by_role("button", name="Next ▶").click()
            _settle(page)
    return out


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            pg = browser.new_page(viewport={"width": VIEWPORTS[0][0], "height": VIEWPORTS[0][1]})
            pg.set_default_timeout(SLOW)
            yield pg
        finally:
            browser.close()


def test_every_slide_fits_the_viewport_without_overlap(page, server):
    if not ZOO_READY:
        pytest.skip("the tour compares a ViT with a ResNet: the zoo models are needed")
    SHOTS.mkdir(parents=True, exist_ok=True)
    found = measure_all(page, server, shots=str(SHOTS) if SHOTS.name == "_artifacts" else None)
    where = lambda r: f"{r['slide']} at {r['viewport']}, sidebar {r['sidebar']}"  # noqa: E731
    for r in found:  # every slide has its claim, both answers and its figures, drawn
        assert {"claim", "answer pattern", "answer learned", "figure 0", "figure 1"} <= set(r["boxes"]), where(r)
    below = [f"{where(r)}: {r['overflow_y']} px below" for r in found if r["overflow_y"] > TOLERANCE]
    wide = [f"{where(r)}: {r['overflow_x']} px right" for r in found if r["overflow_x"] > TOLERANCE]
    crossed = [f"{where(r)}: {', '.join(r['overlaps'])}" for r in found if r["overlaps"]]
    # issue 38: every paper figure fills its column on a 1920-px screen (faceted ones kept 609-734 px)
    narrow = [f"{where(r)}: the figure fills {r['fill'][0]:.0%} of its column (its box {r['fill'][1]}×"
              f"{r['fill'][2]} px, drawn {r['fill'][3]})" for r in found
              if r["viewport"] == "1920x1080" and r["fill"] is not None and r["fill"][0] < 0.8]
    # the interval chart readable when projected: 12-px type or more at 1280×720, no two of its labels crossing
    small = [f"{where(r)}: interval chart type {r['font']:.1f} px, labels crossed: {r['crossed']}" for r in found
             if r["font"] is not None and (r["font"] < 12 - 0.05 or r["crossed"])]
    problems = below + wide + crossed + narrow + small
    assert not problems, "\n".join(problems)


# the Paper tour page: every figure of its figure column, and every text of the page (headings, paragraphs, the
# answer boxes, captions, buttons), as boxes
TOUR_BOXES = """() => {
  const seen = el => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
                       return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const box = el => { const r = el.getBoundingClientRect();
                      return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
  const main = document.querySelector('[data-testid="stMain"]');
  const figures = [...main.querySelectorAll('[data-testid="stVegaLiteChart"] :is(svg.marks, canvas)')]
    .filter(seen).map(box);
  const texts = [...main.querySelectorAll('[data-testid="stMarkdownContainer"], [data-testid="stAlert"], '
    + '[data-testid="stCaptionContainer"], [data-testid="stHeading"], button')]
    .filter(el => seen(el) && !el.closest('[data-testid="stVegaLiteChart"], [data-testid="stElementToolbar"]'))
    .map(el => ({...box(el), text: el.innerText.slice(0, 40)}));
  return {figures, texts};
}"""

TOUR_STABLE = STABLE.replace("charts.length < 2", "charts.length < 1")


def test_paper_tour_page_draws_no_figure_over_its_text(page, server):
    """Issue 38: at 1280×720 and 1440×900 every figure of the Paper tour page stays in its column, clear of the
    claim, the answers and every other text."""
    import re

    from vitlab.tour import CLAIMS

    page.set_viewport_size({"width": 1280, "height": 720})
    _goto(page, server, "tour")
    first = next(iter(CLAIMS.values()))
    page.get_by_text(f"{first.figure}: {first.title}", exact=True).wait_for()  # the tour computed
    problems = []
    for claim in CLAIMS.values():
        page.locator('[data-testid="stRadio"] label').filter(has_text=re.compile(f"^{re.escape(claim.figure)}$")) \
            .first.click()
        page.get_by_text(f"{claim.figure}: {claim.title}", exact=True).wait_for()
        _settle(page)
        _no_exception(page)
        for w, h in ((1280, 720), (1440, 900)):
            page.set_viewport_size({"width": w, "height": h})
            page.evaluate("() => { window.__vitlabSig = null; window.__vitlabSame = 0; }")
            page.wait_for_function(TOUR_STABLE, polling="raf", timeout=SLOW)
            m = page.evaluate(TOUR_BOXES)
            assert m["figures"], f"{claim.figure} at {w}x{h}: no figure drawn"
            for i, f in enumerate(m["figures"]):
                for t in m["texts"]:
                    crossed = overlaps({f"figure {i}": f, f"text '{t['text']}'": t})
                    problems += [f"{claim.figure} at {w}x{h}: {c}" for c in crossed]
        page.set_viewport_size({"width": 1280, "height": 720})
    assert not problems, "\n".join(problems)
    # the run caption says what the person waited: from the click (the last figure chosen) to the page drawn
    shown = page.locator(".vitlab-shown").first
    shown.wait_for(state="attached")
    page.wait_for_function("() => /shown \\d+\\.\\d s after your click/.test("
                           "document.querySelector('.vitlab-shown').textContent)")
