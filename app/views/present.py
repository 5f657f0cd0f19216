"""Presenting the Paper tour: one figure per screen in large type (the paper's figure drawn from this run, the paper's
claim, the two answers on these models, pattern and learned, with their numbers and intervals), Previous / Next buttons
with the ← and → keys, and the whole tour as one self-contained HTML file to take away (vitlab.report: inline SVG
figures, verdicts, provenance; opens offline with no server)."""

import functools
from dataclasses import replace
from html import escape

import altair as alt
import lab
import streamlit as st

from vitlab import report as report_mod
from vitlab import tour
from vitlab.engine.context import Run

STEPS = list(tour.CLAIMS)
# Projector layout, this page only (the <style> goes when the page does): Streamlit's header shrunk to its buttons,
# the padding compressed, type sized by the viewport (clamp of vw and vh: the smaller screen side rules), and each
# figure an SVG scaled to its column (its frame too: a faceted figure's frame otherwise keeps the figure's own
# 609-734 px) and to the height left under the title (2.8rem and the title's lines in --present-type), so that a
# slide fits 1280×720 to 1920×1080 with the sidebar open or collapsed (tests/test_browser_slides.py measures it).
STYLE = """<style>
:root {--present-type: clamp(.8rem, min(1vw, 1.9vh), 1.45rem)}
[data-testid="stHeader"] {background: transparent; height: 2.4rem; pointer-events: none}
[data-testid="stHeader"] * {pointer-events: auto}
[data-testid="stMainBlockContainer"] {padding: 2.2rem 1.6vw .4rem !important; max-width: none !important}
[data-testid="stMainBlockContainer"] [data-testid="stVerticalBlock"] {gap: .35rem}
.present-fig {font-size: calc(var(--present-type) * .95); color: #777; margin: 0}
.present-title {font-size: calc(var(--present-type) * 1.9); font-weight: 700; line-height: 1.1; margin: 0}
.present-label {font-size: calc(var(--present-type) * .72); text-transform: uppercase; letter-spacing: .08em;
                color: #777; margin: .45em 0 .1em}
.present-claim {font-size: calc(var(--present-type) * 1.08); line-height: 1.3; border-left: 5px solid #aaa;
                padding-left: .7em}
.present-verdict {display: inline-block; font-size: calc(var(--present-type) * 1.45); font-weight: 800;
                  padding: 0 .6em; border-radius: .35rem; margin: .1em 0 .15em}
.v-shown {background: #d7f5dd; color: #0b6b24} .v-notshown {background: #ffe0d6; color: #9a2a00}
.v-canttell {background: #e8eaf0; color: #333}
.present-numbers {font-size: calc(var(--present-type) * .95); font-variant-numeric: tabular-nums; line-height: 1.35}
.present-numbers span {font-size: .8em !important}
.present-numbers[style] {font-size: calc(var(--present-type) * .9) !important}
.present-evidence {font-size: calc(var(--present-type) * .72); color: #555; margin: .2em 0 0}
.present-n {font-size: calc(var(--present-type) * 1.2); font-weight: 700; margin: 0; line-height: 1.2;
            font-variant-numeric: tabular-nums}
.present-n small {font-size: .6em; font-weight: 400; color: #666}
.present-paper {font-size: calc(var(--present-type) * .72); text-transform: uppercase; letter-spacing: .08em;
                color: #777; margin: 0}
.present-more {font-size: calc(var(--present-type) * .72); color: #555}
.present-more summary {cursor: pointer; color: #777}
.st-key-present-figure [data-testid="stVegaLiteChart"] svg.marks {width: 100% !important; height: auto !important;
    max-height: calc(100vh - 2.8rem - var(--present-type) * 5.8) !important}
.st-key-present-figure [data-testid="stFullScreenFrame"] > div,
.st-key-present-figure [data-testid="stVegaLiteChart"] {width: 100% !important}
.st-key-present-intervals [data-testid="stVegaLiteChart"] svg.marks {width: 100% !important;
    height: auto !important; max-height: 27vh !important}
.st-key-present-top button p {font-size: calc(var(--present-type) * .8)}
</style>"""
SVG = {"embedOptions": {"renderer": "svg"}}  # scales with its box (a canvas would blur or keep its pixel size)


def move(delta: int) -> None:
    i = STEPS.index(st.session_state.get("present.step", STEPS[0]))
    st.session_state["present.step"] = STEPS[(i + delta) % len(STEPS)]


LEARNED_CSS = {"yes": "v-shown", "no": "v-notshown"}


def slide_text(row) -> str:
    """The right-hand text of a slide from the check's words (``Check.lines``: never "nan" or "n/a [n/a, n/a]"):
    the paper's claim alone, the statistic named, the two answers with their numbers, the app's own control on its
    own line, the interval's basis, the models and the images in batches."""
    words = row.lines()
    css = {"shown": "v-shown", "not shown": "v-notshown"}.get(row.pattern, "v-canttell")
    return (f'<p class="present-label">The paper</p><div class="present-claim">{escape(words["paper"])}</div>'
            f'<p class="present-label">Pattern: do these models show it?</p>'
            f'<div class="present-verdict {css}" data-answer="pattern">{escape(row.pattern)}</div>'
            f'<div class="present-numbers">statistic: {escape(words["statistic"])}<br>'
            f'<b>{escape(words["pattern_numbers"])}</b></div>'
            f'<p class="present-label">Learned: more than untrained?</p>'
            f'<div class="present-verdict {LEARNED_CSS.get(row.learned, "v-canttell")}" data-answer="learned">'
            f'{escape(row.learned)}</div><div class="present-numbers" style="font-size:1.15rem">'
            f'{escape(words["learned_numbers"])}</div>'
            f'<p class="present-label">Control</p><p class="present-evidence" data-part="control">'
            f'{escape(words["control_note"])}</p>'
            f'<p class="present-evidence" data-part="data">models: {escape(words["models"] or "none")}</p>'
            f'<p class="present-evidence">{escape(words["interval_text"])}</p>')


def interval_chart(chart, frame) -> alt.LayerChart:
    """The interval chart of a slide, readable when projected: drawn at its column's width (not scaled down), 12-px
    labels on 16-px rows (none overlap), without the title and legend the slide's text already gives (each row's
    label names its estimate), so that it fits under the text at 1280×720."""
    return (chart.properties(title="", height=alt.Step(16))
            .configure_axis(labelFontSize=12, titleFontSize=12, labelLimit=240, titlePadding=8)
            .configure_legend(disable=True))


def report_html(models, src, opts, boot, done) -> bytes:
    """The tour already computed, rendered with its provenance (only when the button is pressed)."""
    result = report_mod.report(models, src, report_mod.ReportOptions(opts), Run(bootstrap=boot, seed=0), tour=done)
    return result.html.encode()


def draw(chart, key: str, width: str = "stretch") -> None:
    """A figure at its column's width (its height follows, bounded by the slide's CSS), drawn as SVG."""
    st.altair_chart(chart.properties(usermeta=SVG), key=key, width=width, theme=None)


def tour_settings() -> tuple[tour.TourOptions, int, str]:
    """The Paper tour page's images, batch size, twins and resamples (issue 37: the slides and the page show the same
    rows), or, when that page has not been opened, the tour default; and a line that says which."""
    kept = st.session_state.get(lab.TOUR_SETTINGS)
    if not kept:
        opts = tour.TourOptions(control="random")
        return opts, tour.TOUR_BOOTSTRAP, (f"The tour default ({opts.images} images in batches of {opts.batch_size}, "
                                           f"untrained twins, {tour.TOUR_BOOTSTRAP} resamples), as the handout: the "
                                           "Paper tour page has not been opened.")
    opts = tour.TourOptions(images=int(kept["tour.images"]), batch_size=int(kept["tour.batch_size"]),
                            control="random" if kept["tour.twins"] else "none")
    boot = int(kept["tour.bootstrap"])
    return opts, boot, (f"The Paper tour page's settings: {opts.images} images in batches of {opts.batch_size}, "
                        f"{'untrained twins' if kept['tour.twins'] else 'no untrained twins'}, {boot} resamples.")


def counts_html(row, units: str) -> str:
    """The counts this slide's statistic used (Check.images: Fig 6 its first images, Fig 11 its probe pool)."""
    what = row.data_note or units
    return (f'<p class="present-n" data-images="{row.images}" data-batches="{row.batches}">n = {row.images} images · '
            f'{row.batches} batches<br><small>{escape(what)}, batches of {row.batch_size}</small></p>')


st.html(STYLE)
s = lab.settings()
# the Paper tour page's settings (or the tour default the page and `vitlab report` start on): one computed tour
opts, BOOTSTRAP, which = tour_settings()
done = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    done = lab.compute(("tour", s.key, opts, BOOTSTRAP), lambda run: tour.run_tour(
        [a, b], src, opts, replace(run, bootstrap=BOOTSTRAP, seed=tour.TOUR_SEED)), "Paper tour")
if done is not None:
    step = st.session_state.setdefault("present.step", STEPS[0])
    k = STEPS.index(step)
    row = done.rows[k]
    images, batches = report_mod.data_counts(src, opts)
    head, tools = st.container(key="present-top").columns([1, 1], vertical_alignment="bottom")
    head.html(f'<p class="present-fig">{row.figure} · {k + 1} / {len(STEPS)}</p>'
              f'<p class="present-title">{escape(row.title)}</p>')
    nav = tools.container(horizontal=True, horizontal_alignment="right", gap="small")
    nav.button("◀ Previous", key="present.prev", on_click=move, args=(-1,), shortcut="Left", help="or press ←")
    nav.button("Next ▶", key="present.next", on_click=move, args=(1,), shortcut="Right", type="primary",
               help="or press →")
    nav.download_button("Download report (HTML)", functools.partial(report_html, [a, b], src, opts, BOOTSTRAP,
                                                                     done),
                        "vitlab_report.html", "text/html", key="present.report", on_click="ignore",
                        help="The whole tour in one file: every figure, verdict and interval, and provenance; "
                             "opens offline in any browser")
    paper = done.paper_charts.get(row.figure)
    frame = done.frames.get(row.figure)
    with nav.popover("Data", help="This slide's figures as PNG / SVG / CSV"):
        if paper is not None:
            st.caption("Paper-style figure")
            lab.export(paper, done.paper_frame(row.figure), f"tour_{step}_paper", f"present.{step}.paper")
        if frame is not None and len(frame):
            st.caption("Intervals")
            lab.export(done.charts[row.figure], frame, f"tour_{step}", f"present.{step}")
    left, right = st.columns([5, 4], gap="medium")  # the text column wide enough for Fig 6 at 1280×720
    with right.container(key="present-text"):
        st.html(counts_html(row, report_mod.images_in_words(src.name, images)))
        st.html(slide_text(row))
        if frame is not None and len(frame):
            with st.container(key="present-intervals"):
                draw(interval_chart(done.charts[row.figure], frame), f"present.{step}.chart")
        st.html(f'<details class="present-more"><summary>Evidence</summary><p class="present-evidence">'
                f'{escape(which)} {escape(row.evidence)}</p></details>')
    with left.container(key="present-figure"):
        if paper is not None:
            st.html(f'<p class="present-paper" data-figure="{escape(row.figure)}">{escape(row.figure)} as the paper '
                    f'draws it, from this run</p>')
            draw(paper, f"present.{step}.paper")
        elif frame is None or not len(frame):
            st.info("No figure: this check could not be measured on these models (see the evidence).")
