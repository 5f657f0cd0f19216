"""The lecture's take-home summary (issue 41): a student's predictions beside the paper's answers and these models'
answers, with the figures, as one self-contained HTML file.

Built from a prepared :class:`~vitlab.tour.classroom.Lecture` only (its figures were drawn as SVG when it was
prepared), so downloading it computes nothing. Like the tour's report (:mod:`vitlab.tour.report`, whose style and
verdict colours it shares) it has no script, no stylesheet link and no fetched resource: it opens offline in any
browser and prints one step per page.

    Lecture, {claim: option index} ─summary_html─► summary.html
"""

from __future__ import annotations

import html
import re

from .classroom import Lecture
from .lecture import QUESTIONS, outcome, score
from .report import LEARNED_CLASS, STYLE, VERDICT_CLASS

EXTRA_STYLE = """
.you{font-size:1.25em;font-weight:700}.match{background:#d7f5dd;color:#0b6b24}.miss{background:#ffe0d6;color:#9a2a00}
.none{background:#e8eaf0;color:#333}.pick{display:inline-block;padding:.05em .5em;border-radius:.3em}
.ask{font-size:1.1em;margin:.2em 0 .6em}.steps td,.steps th{font-size:.8em;border-bottom:1px solid #eee}
"""
# The summary is opened from a student's disk: it runs nothing and fetches nothing, whatever a figure in it holds
# (the figures are checked as plain SVG when the lecture is read back, vitlab.tour.plainsvg; this is the second
# wall). Inline styles are all it needs; no script source is named, so none runs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
MARK = {True: ("match", "✓ as the paper"), False: ("miss", "✗ not the paper's answer"), None: ("none", "—")}


def scoped(svg: str, prefix: str) -> str:
    """``svg`` with its element ids (gradients, clip paths) and their references prefixed: several SVGs inline in
    one page share one id space, where vl-convert's "gradient_0" of a later figure would paint with the first's."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if not ids:
        return svg
    pattern = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
    svg = re.sub(rf'\bid="({pattern})"', rf'id="{prefix}-\1"', svg)
    return re.sub(rf'(url\(#|href="#)({pattern})([)"])', rf"\g<1>{prefix}-\2\3", svg)


def _step(k: int, key: str, lecture: Lecture, choice: int | None) -> str:
    e = html.escape
    row, q = lecture.row(key), QUESTIONS[key]
    said, words = outcome(key, choice, row), row.lines()
    css, mark = MARK[said["matches_paper"]]
    paper_svg, interval_svg = (scoped(svg, f"s{k}{part}") if svg else None for part, svg in
                               (("p", lecture.papers.get(row.figure)), ("i", lecture.intervals.get(row.figure))))
    figure = (f'<div class="paper">{paper_svg}</div>' if paper_svg else "") + (
        f'<div class="intervals">{interval_svg}</div>' if interval_svg else "")
    if not figure:
        figure = '<p class="nofig">No figure: this check could not be measured (see the evidence).</p>'
    pattern = VERDICT_CLASS.get(row.pattern, "canttell")
    learned = LEARNED_CLASS.get(row.learned, "canttell")
    return f"""<section class="slide" id="step{k}" data-step="{e(key)}">
<h2><span class="fig">{e(row.figure)}</span> {e(row.title)}</h2>
<p class="label">The question</p><p class="ask">{e(q.ask)}</p>
<p class="label">Your prediction</p>
<p class="you" data-prediction="{e(said['prediction'])}"><span class="pick {css}">{e(said['prediction'])}</span>
<small>{e(mark)}</small></p>
<p class="label">The paper's answer</p><p class="you" data-paper="{e(said['paper'])}">{e(said['paper'])}</p>
<div class="body"><div class="figure">{figure}</div>
<div class="text"><p class="label">The paper reports</p><blockquote class="claim">{e(words["paper"])}</blockquote>
<p class="label">Pattern: do these models show it?</p>
<p class="verdict {pattern}" data-verdict="{e(row.pattern)}">{e(row.pattern)}</p>
<p class="control">{e(said["models"])}</p>
<table class="numbers"><tr><th>statistic</th><td>{e(words["statistic"])}</td></tr>
<tr><th>on these models</th><td>{e(words["pattern_numbers"])}</td></tr>
<tr><th>interval</th><td>{e(row.interval)}</td></tr>
<tr><th>models</th><td>{e(words["models"])}</td></tr>
<tr><th>data</th><td>{e(words["data"])}</td></tr></table>
<p class="label">Our control</p><p class="control">{e(words["control_note"])}</p>
<p class="label">Learned: more than untrained?</p>
<p class="verdict {learned}" data-learned="{e(row.learned)}">{e(row.learned)}</p>
<p class="control">{e(words["learned_numbers"])}</p></div></div></section>"""


def _cover(lecture: Lecture, choices: dict[str, int | None], title: str) -> str:
    e = html.escape
    counts = score(choices, lecture.tour.rows)
    rows = []
    for k, key in enumerate(lecture.steps):
        row = lecture.row(key)
        said = outcome(key, choices.get(key), row)
        css, mark = MARK[said["matches_paper"]]
        rows.append(f'<tr data-step="{e(key)}"><td><a href="#step{k}">{e(row.figure)}</a></td>'
                    f'<td class="{css}">{e(said["prediction"])} {e(mark.split(" ")[0])}</td>'
                    f'<td>{e(said["paper"])}</td><td>{e(row.pattern)}</td><td>{e(row.learned)}</td></tr>')
    return f"""<section class="slide" id="cover"><h1>{e(title)}</h1>
<p>Raghu et al. 2021, "Do Vision Transformers See Like CNNs?", step by step: before each answer you chose what you
expected; here it is beside the paper's answer and what these models show ({e(lecture.settings.describe())};
prepared {e(lecture.made)}). <strong>Pattern</strong>: "shown" only when the statistic's 95 % interval clears the
claim's own null. <strong>Learned</strong>: "yes" only when the trained models' interval clears the untrained
twins'.</p>
<p class="n" data-matched="{counts['matched']}" data-steps="{counts['steps']}">{counts['matched']} of
{counts['steps']} predictions took the paper's answer <small>{counts['predicted']} predicted; these models showed the
paper's pattern in {counts['shown']} of {counts['steps']}</small></p>
<table class="steps"><tr><th>step</th><th>your prediction</th><th>the paper</th><th>pattern here</th>
<th>learned here</th></tr>{''.join(rows)}</table></section>"""


def _provenance(lecture: Lecture) -> str:
    e = html.escape
    prov = lecture.provenance
    models = "".join(f"<tr><td>{e(str(m.get('spec')))}</td><td><code>{e(str(m.get('fingerprint')))}</code></td>"
                     f"<td>{e(str(m.get('weights')))}</td></tr>" for m in prov.get("models", []))
    images = "".join(f"<tr><th>{e(str(k))}</th><td>{e(str(v))}</td></tr>" for k, v in prov.get("images", {}).items())
    libs = ", ".join(f"{e(str(k))} {e(str(v))}" for k, v in prov.get("versions", {}).items())
    return f"""<section class="slide" id="provenance"><h2>Provenance</h2>
<table class="prov" id="prov-models"><tr><th>model</th><th>fingerprint</th><th>weights</th></tr>{models}</table>
<table class="prov" id="prov-images">{images}</table><p class="prov">{libs}</p>
<p class="prov">Prepared with <code>{e(lecture.settings.command())}</code> on {e(lecture.made)}
({lecture.seconds:.0f} s).</p></section>"""


def summary_html(lecture: Lecture, choices: dict[str, int | None],
                 title: str = "Lecture summary: Do Vision Transformers See Like CNNs?") -> str:
    """The summary as one HTML string: the predictions table, one section per step (prediction, the paper's
    answer, the answers for these models with their numbers, the figures), provenance."""
    e = html.escape
    steps = "".join(_step(k, key, lecture, choices.get(key)) for k, key in enumerate(lecture.steps))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}{EXTRA_STYLE}</style>'
            f'</head><body>{_cover(lecture, choices, title)}{steps}{_provenance(lecture)}</body></html>\n')
