"""The handout (`vitlab report`) as the eye meets it (issue 38): printed, one A4 page per section; on screen, each
section inside a 1440×900 viewport. A real tour's report (the zoo pair, 32 images) opened in headless Chromium."""

from __future__ import annotations

import re

import pytest

import vitlab
from tests.test_browser import ARGS, CHROMIUM, ZOO_READY
from vitlab import report as R
from vitlab import tour as T
from vitlab.engine.context import Run

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def handout() -> str:
    if not ZOO_READY:
        pytest.skip("the tour compares a ViT with a ResNet: the zoo models are needed")
    src = vitlab.open_source("fashion-mnist:test")
    models = [vitlab.load("zoo:vit-cls", "cpu"), vitlab.load("zoo:resnet", "cpu")]
    opts = T.TourOptions(images=32, batch_size=8, rf_images=4, probe_draws=4, probe_test=60, probe_shots=3,
                         permutations=50)
    tour = T.run_tour(models, src, opts, Run(bootstrap=50, seed=0))
    return R.render_html(tour, R.provenance(models, src, opts, 1.0, Run()), R.ReportOptions().title)


def test_one_a4_page_per_section_and_each_section_fits_a_1440x900_screen(handout):
    from playwright.sync_api import sync_playwright

    sections = handout.count('<section class="slide"')
    assert sections == len(T.CLAIMS) + 2  # cover, one per claim, provenance
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(120_000)
            page.set_content(handout, wait_until="load")
            heights = page.evaluate("""() => [...document.querySelectorAll('section.slide')].map(s => {
                const r = s.getBoundingClientRect(); let bottom = r.top;
                for (const el of s.querySelectorAll('*')) bottom = Math.max(bottom, el.getBoundingClientRect().bottom);
                return [s.id, Math.ceil(Math.max(s.scrollHeight, bottom - r.top))]; })""")
            tall = [f"{sid}: {h} px" for sid, h in heights if h > 900]
            assert not tall, tall
            pdf = page.pdf(format="A4", landscape=True, prefer_css_page_size=True)
        finally:
            browser.close()
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert pages == sections, f"{pages} printed pages for {sections} sections"
