"""Presenting the Paper tour: one figure per screen in large type (the paper's figure drawn from this run, the paper's
claim, the two answers on these models, pattern and learned, with their numbers and intervals), Previous / Next buttons
with the ← and → keys, and the whole tour as one self-contained HTML file to take away (vitlab.report: inline SVG
figures, verdicts, provenance; opens offline with no server)."""

import functools
from dataclasses import replace
from html import escape

import lab
import streamlit as st

from vitlab import report as report_mod
from vitlab import tour
from vitlab.engine.context import Run

STEPS = list(tour.CLAIMS)
BOOTSTRAP = 200  # the Paper tour page's default: the two pages share one computed tour
STYLE = """<style>
.present-fig {font-size: 1.3rem; color: #777; margin: 0}
.present-title {font-size: 2.6rem; font-weight: 700; line-height: 1.15; margin: 0 0 .6rem}
.present-label {font-size: .95rem; text-transform: uppercase; letter-spacing: .08em; color: #777; margin: 1rem 0 .2rem}
.present-claim {font-size: 1.6rem; line-height: 1.35; border-left: 5px solid #aaa; padding-left: .8rem}
.present-verdict {display: inline-block; font-size: 2.2rem; font-weight: 800; padding: .1rem .9rem;
                  border-radius: .4rem; margin: .2rem 0 .6rem}
.v-shown {background: #d7f5dd; color: #0b6b24} .v-notshown {background: #ffe0d6; color: #9a2a00}
.v-canttell {background: #e8eaf0; color: #333}
.present-numbers {font-size: 1.45rem; font-variant-numeric: tabular-nums; line-height: 1.5}
.present-evidence {font-size: 1.05rem; color: #555}
.present-paper {font-size: .95rem; text-transform: uppercase; letter-spacing: .08em; color: #777; margin: 0}
</style>"""


def move(delta: int) -> None:
    i = STEPS.index(st.session_state.get("present.step", STEPS[0]))
    st.session_state["present.step"] = STEPS[(i + delta) % len(STEPS)]


def number(x: float) -> str:
    return "n/a" if x != x else f"{x:.3f}"


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
            f'<p class="present-evidence" data-part="data">{escape(words["data"])}; models: '
            f'{escape(words["models"] or "none")}</p>'
            f'<p class="present-evidence">{escape(words["interval_text"])}</p>')


def report_html(models, src, opts, boot, done) -> bytes:
    """The tour already computed, rendered with its provenance (only when the button is pressed)."""
    result = report_mod.report(models, src, report_mod.ReportOptions(opts), Run(bootstrap=boot, seed=0), tour=done)
    return result.html.encode()


st.html(STYLE)
s = lab.settings()
opts = tour.TourOptions(images=s.images, batch_size=max(4, s.batch_size), control="random")
done = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    done = lab.compute(("tour", s.key, opts, BOOTSTRAP), lambda run: tour.run_tour(
        [a, b], src, opts, replace(run, bootstrap=BOOTSTRAP, seed=0)), "Paper tour")
if done is not None:
    step = st.session_state.setdefault("present.step", STEPS[0])
    k = STEPS.index(step)
    row = done.rows[k]
    st.html(f'<p class="present-fig">{row.figure} · {k + 1} / {len(STEPS)}</p>'
            f'<p class="present-title">{escape(row.title)}</p>')
    nav = st.columns([1, 1, 4, 2])
    nav[0].button("◀ Previous", key="present.prev", on_click=move, args=(-1,), shortcut="Left",
                  help="or press ←")
    nav[1].button("Next ▶", key="present.next", on_click=move, args=(1,), shortcut="Right", type="primary",
                  help="or press →")
    nav[3].download_button("Download report (HTML)", functools.partial(report_html, [a, b], src, opts, BOOTSTRAP,
                                                                        done),
                           "vitlab_report.html", "text/html", key="present.report", on_click="ignore",
                           help="The whole tour in one file: every figure, verdict and interval, and provenance; "
                                "opens offline in any browser")
    left, right = st.columns([3, 2], gap="large")
    with right:
        st.html(slide_text(row))
        st.html(f'<p class="present-evidence">{escape(row.evidence)}</p>')
    with left:
        paper = done.paper_charts.get(row.figure)
        if paper is not None:
            st.html(f'<p class="present-paper" data-figure="{escape(row.figure)}">{escape(row.figure)} as the paper '
                    f'draws it, from this run</p>')
            lab.chart(paper, key=f"present.{step}.paper")
            lab.export(paper, done.paper_frame(row.figure), f"tour_{step}_paper", f"present.{step}.paper")
        frame = done.frames.get(row.figure)
        if frame is not None and len(frame):
            chart = done.charts[row.figure].properties(width=400).configure_legend(orient="bottom")
            lab.chart(chart, key=f"present.{step}.chart")
            lab.export(chart, frame, f"tour_{step}", f"present.{step}")
        elif paper is None:
            st.info("No figure: this check could not be measured on these models (see the evidence).")
