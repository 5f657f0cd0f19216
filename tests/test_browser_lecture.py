"""End-to-end lecture mode (issue 41's "done when"): `vitlab lecture --prepare` on the zoo at small settings, then the
app in headless Chromium walks the Lecture page: on every step it predicts, reveals, and goes on; it reaches the end,
downloads the summary, and opens it offline. No step computes: every step's status caption says 0 batches computed,
read from the disk cache, and the sidebar's status lists no loaded model at the end (VITLAB_WARMUP=0: nothing is
loaded in the background either). Screenshots of a step before and after its reveal at 1280x720
(docs/img/lecture.png with VITLAB_SCREENSHOTS=docs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest

from tests.test_browser import ARGS, CHROMIUM, ROOT, SHOTS, SLOW, ZOO_READY, require_browser, serve_app
from vitlab.tour import CLAIMS, lecture

pytestmark = pytest.mark.browser

DOCS = os.environ.get("VITLAB_SCREENSHOTS") == "docs"


def _settle(page) -> None:
    page.wait_for_timeout(400)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=SLOW)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_browser()
    if not ZOO_READY:
        pytest.skip("the zoo's checkpoints are not trained")
    tmp = tmp_path_factory.mktemp("lecture")
    env = {"VITLAB_CACHE_DIR": str(tmp / "cache"), "HF_HUB_OFFLINE": "1", "VITLAB_WARMUP": "0",
           "PYTHONPATH": str(ROOT)}
    # prepared ahead of class, by the command the docs give (small settings: 64 images in 4 batches)
    prep = subprocess.run([sys.executable, "-m", "vitlab", "lecture", "--prepare", "-n", "64", "-b", "16"],
                          env={**os.environ, **env}, cwd=ROOT, capture_output=True, text=True, timeout=1200,
                          check=False)
    assert prep.returncode == 0, prep.stderr[-3000:]
    assert "lecture kept in the cache" in prep.stdout
    with serve_app(tmp, env) as url:  # tests/test_browser.py's server, on this cache and environment
        yield url


def _no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, page.locator(
        '[data-testid="stException"]').first.inner_text()
    unexpected = page.locator('[data-testid="stAlert"]').filter(has_text="Unexpected error")
    assert unexpected.count() == 0, unexpected.first.inner_text()


def _shot(page, name: str, folder: Path = SHOTS) -> None:
    """The viewport (what a projector shows) once the page has settled and every figure has loaded."""
    _settle(page)
    page.wait_for_function("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)", timeout=SLOW)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"))


def _fits(page) -> None:
    """What a projector shows is the whole step: the main block's content ends inside the window, nothing scrolls."""
    box = page.evaluate("""() => ({bottom: document.querySelector('[data-testid="stMainBlockContainer"]')
        .getBoundingClientRect().bottom, scroll: document.scrollingElement.scrollHeight,
        main: document.querySelector('[data-testid="stMain"]').scrollHeight, height: innerHeight})""")
    assert box["bottom"] <= box["height"] and box["main"] <= box["height"] and box["scroll"] <= box["height"], box


def _step(page, k: int, key: str, choice: int, reload: bool = False, shots: bool = True) -> None:
    """Step k: the question before the answer, a prediction, the reveal, the answer beside it (``reload``: the page
    reloaded after the prediction: the step and the prediction are kept, and Reveal opens without a new pick)."""
    q, claim = lecture.QUESTIONS[key], CLAIMS[key]
    main = page.locator('[data-testid="stMain"]')
    main.get_by_text(f"Lecture · {claim.figure} · step {k + 1} of 10", exact=True).wait_for()
    _settle(page)
    assert page.locator('[data-testid="stProgress"]').inner_text().strip().endswith(f"{k} of 10 steps revealed")
    side = page.locator('[data-testid="stSidebar"]')
    assert side.get_by_text("Now: 0 batches computed, read from the disk cache").count() == 1
    assert main.get_by_text(q.ask).count() == 1 and main.get_by_text(claim.claim).count() == 0
    assert page.get_by_role("button", name="Reveal the answer").is_disabled()
    assert page.get_by_role("button", name=re.compile("^(Next|Summary) ▶$")).is_disabled()
    if k == 0 and shots:
        _shot(page, "lecture_ask", ROOT / "tests" / "_artifacts")
    main.locator('[data-testid="stRadio"] [role="radiogroup"] label').nth(choice).click()
    _settle(page)
    if reload:
        page.reload()
        main.get_by_text(f"Lecture · {claim.figure} · step {k + 1} of 10", exact=True).wait_for()
        _settle(page)
        assert main.locator('[data-testid="stRadio"] input').nth(choice).is_checked()
        assert page.locator('[data-testid="stProgress"]').inner_text().strip().endswith(f"{k} of 10 steps revealed")
    page.get_by_role("button", name="Reveal the answer").click()
    main.get_by_text(f"{k + 1} of 10 steps revealed").wait_for()
    _settle(page)
    _no_exception(page)
    assert main.get_by_text(claim.claim).count() == 1
    said = main.locator('[data-testid="stAlert"]').filter(has_text="You predicted:").inner_text()
    assert q.options[choice] in said and f"The paper: {q.paper_option}" in said
    assert main.locator('[data-testid="stAlert"]').filter(has_text="Pattern: ").count() == 1
    assert main.locator('[data-testid="stRadio"]').count() == 0  # the prediction is kept, not changed
    figures = main.locator('[class*="st-key-lecture-fig-"] img')  # drawn when prepared, inline SVG
    assert figures.count() >= 1 and figures.first.get_attribute("src").startswith("data:image/svg+xml")
    page.wait_for_function("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)", timeout=SLOW)
    _fits(page)
    if k == 0 and shots:
        _shot(page, "lecture")
    page.get_by_role("button", name=re.compile("^(Next|Summary) ▶$")).click()
    _settle(page)


def test_lecture_predicts_reveals_reaches_the_end_and_downloads_the_summary(server, tmp_path):
    from playwright.sync_api import sync_playwright

    steps = list(CLAIMS)
    choices = {key: (lecture.QUESTIONS[key].paper + (k % 2)) % 3 for k, key in enumerate(steps)}  # every other
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720}, accept_downloads=True)
            page.set_default_timeout(SLOW)
            page.goto(f"{server}/lecture")
            _settle(page)
            _no_exception(page)
            for k, key in enumerate(steps):
                _step(page, k, key, choices[key], reload=k == 4)
            main = page.locator('[data-testid="stMain"]')
            assert main.get_by_text("5 of 10").count() >= 1  # predictions that took the paper's answer
            with page.expect_download() as dl:
                page.get_by_role("button", name="Download your summary (HTML)").click()
            path = tmp_path / "summary.html"
            dl.value.save_as(path)
            text = path.read_text(encoding="utf-8")
            for key in steps:
                q = lecture.QUESTIONS[key]
                assert f'data-step="{key}">' in text
                assert f'data-prediction="{escape(q.options[choices[key]])}"' in text
            # nothing was loaded or run on this server: no model in the lecturer's fold (a student's sidebar has no
            # Status fold)
            folds = page.locator('[data-testid="stSidebar"] [data-testid="stExpander"]')
            assert folds.filter(has_text="Status").count() == 0
            folds.filter(has_text="For the lecturer").click()
            assert page.get_by_text("Models loaded on this server: none; 0.00 GiB held").count() == 1
            _open_offline(browser, path)
        finally:
            browser.close()


def _open_offline(browser, path: Path) -> None:
    """The downloaded summary in a fresh context with the network cut: every section and figure is there, and it
    asked for nothing but its own file."""
    context = browser.new_context(offline=True)
    asked = []
    context.on("request", lambda r: asked.append(r.url))
    page = context.new_page()
    page.goto(path.as_uri())
    assert page.locator("section.slide").count() == 13  # cover, 10 steps, the words used, provenance
    assert page.locator("section.slide svg").count() >= 10
    assert page.locator('[data-matched="5"][data-steps="10"]').count() == 1
    assert asked == [path.as_uri()], asked
    context.close()


def test_every_revealed_step_fits_a_1920x1080_screen(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1920, "height": 1080})
            page.set_default_timeout(SLOW)
            page.goto(f"{server}/lecture")
            _settle(page)
            for k, key in enumerate(CLAIMS):
                _step(page, k, key, 0, shots=False)  # the screenshots are the 1280x720 walk's
        finally:
            browser.close()


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory):
    require_browser()
    if not ZOO_READY:
        pytest.skip("the zoo's checkpoints are not trained")
    tmp = tmp_path_factory.mktemp("lecture-first")
    env = {"VITLAB_CACHE_DIR": str(tmp / "cache"), "HF_HUB_OFFLINE": "1", "VITLAB_WARMUP": "0",
           "PYTHONPATH": str(ROOT)}
    with serve_app(tmp, env) as url:
        yield url


def test_a_first_visit_prepares_the_lecture_from_the_page(empty_server):
    """Nothing prepared: no error, the settings; 64 images in batches of 16 and two steps chosen on the page, one
    click, a progress bar with Cancel, then the lecture opens at its first step, read from the cache."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(SLOW)
            page.goto(f"{empty_server}/lecture")
            _settle(page)
            main = page.locator('[data-testid="stMain"]')
            main.get_by_text("No lecture is prepared on this server yet").wait_for()
            assert page.locator('[data-testid="stAlert"]').filter(has_text="cache").count() == 0  # no error box
            for label, value in (("Images", "64"), ("Batch", "16")):
                box = main.get_by_label(label, exact=True)
                box.fill(value)
                box.press("Enter")
                _settle(page)
            pills = main.locator('[data-testid="stButtonGroup"] button')
            for figure in [c.figure for k, c in CLAIMS.items() if k not in ("cka", "skips")]:
                pills.filter(has_text=f"{figure}: ").click()
                _settle(page)
            code = main.locator('[data-testid="stCode"]').inner_text()
            assert "--images 64 --batch-size 16 --only cka,skips" in code, code
            main.get_by_role("button", name="Prepare the lecture").click()
            # while it runs: lab.compute's progress bar ("Preparing the lecture: …") and its Cancel
            main.locator('[data-testid="stProgress"]').filter(has_text="Preparing the lecture: ").wait_for()
            main.get_by_role("button", name="Cancel").wait_for()
            main.get_by_text(f"Lecture · {CLAIMS['cka'].figure} · step 1 of 2", exact=True).wait_for(timeout=600_000)
            _settle(page)
            _no_exception(page)
            assert main.get_by_text(lecture.QUESTIONS["cka"].ask).count() == 1
            side = page.locator('[data-testid="stSidebar"]')
            assert side.get_by_text("Now: 0 batches computed, read from the disk cache").count() == 1
            page.screenshot(path=str(ROOT / "tests" / "_artifacts" / "lecture_first_visit.png"))
        finally:
            browser.close()
