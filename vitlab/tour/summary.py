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

from . import glossary
from .classroom import Lecture
from .lecture import QUESTIONS, outcome, score
from .report import LEARNED_CLASS, STYLE, VERDICT_CLASS

EXTRA_STYLE = """
.you{font-size:1.25em;font-weight:700}.match{background:#d7f5dd;color:#0b6b24}.miss{background:#ffe0d6;color:#9a2a00}
.none{background:#e8eaf0;color:#333}.pick{display:inline-block;padding:.05em .5em;border-radius:.3em}
.ask{font-size:1.1em;margin:.2em 0 .6em}.steps td,.steps th{font-size:.8em;border-bottom:1px solid #eee}
.steps td.fig{white-space:nowrap}.term{font-size:.85em;color:#333;margin:.2em 0}details{margin:.5em 0}
details summary{cursor:pointer;font-weight:600}.how li{font-size:.85em}
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


def _terms(terms: list) -> str:
    e = html.escape
    return "".join(f'<p class="term"><strong>{e(t.name)}</strong>: {e(t.sentence)}</p>' for t in terms)


def _step(k: int, key: str, lecture: Lecture, choice: int | None, terms: tuple[list, list]) -> str:
    e = html.escape
    row, q = lecture.row(key), QUESTIONS[key]
    said, student = outcome(key, choice, row), glossary.student(key, row, lecture.settings)
    css, mark = MARK[said["matches_paper"]]
    paper_svg, interval_svg = (scoped(svg, f"s{k}{part}") if svg else None for part, svg in
                               (("p", lecture.papers.get(row.figure)), ("i", lecture.intervals.get(row.figure))))
    figure = (f'<div class="paper">{paper_svg}</div>' if paper_svg else "") + (
        f'<div class="intervals">{interval_svg}</div>' if interval_svg else "")
    if not figure:
        figure = '<p class="nofig">No figure: this step could not be measured on these models.</p>'
    pattern = VERDICT_CLASS.get(row.pattern, "canttell")
    learned = LEARNED_CLASS.get(student.learned, "canttell")
    how = "".join(f"<li>{e(line)}</li>" for line in student.how)
    return f"""<section class="slide" id="step{k}" data-step="{e(key)}">
<h2><span class="fig">{e(row.figure)}</span> {e(q.topic)}</h2>
<p class="label">The question</p><p class="ask">{e(q.ask)}</p><p class="control">{e(student.compared)}</p>
<div class="terms">{_terms(terms[0])}</div>
<p class="label">Your prediction</p>
<p class="you" data-prediction="{e(said['prediction'])}"><span class="pick {css}">{e(said['prediction'])}</span>
<small>{e(mark)}</small></p>
<p class="label">The paper's answer</p><p class="you" data-paper="{e(said['paper'])}">{e(said['paper'])}</p>
<div class="body"><div class="figure">{figure}</div>
<div class="text"><p class="label">The paper reports</p><blockquote class="claim">{e(row.claim)}</blockquote>
<p class="label">Pattern: do these models show it?</p>
<p class="verdict {pattern}" data-verdict="{e(row.pattern)}">{e(row.pattern)}</p>
<p class="control meaning">{e(student.meaning)}</p>
<p class="label">Learned: did training make it?</p>
<p class="verdict {learned}" data-learned="{e(student.learned)}">{e(student.learned)}</p>
<p class="control">{e(student.learned_text)}</p>
<div class="terms">{_terms(terms[1])}</div>
<details class="how"><summary>How we know</summary><ul>{how}</ul></details>
<details class="lecturer"><summary>For the lecturer: exact models and measurements</summary>
<p class="prov">Models: {e(row.models) or "none"}. {e(row.evidence)}</p></details></div></div></section>"""


def _cover(lecture: Lecture, choices: dict[str, int | None], title: str) -> str:
    e = html.escape
    counts = score(choices, lecture.tour.rows)
    rows = []
    for k, key in enumerate(lecture.steps):
        row = lecture.row(key)
        said = outcome(key, choices.get(key), row)
        css, mark = MARK[said["matches_paper"]]
        learned = glossary.student(key, row, lecture.settings).learned
        rows.append(f'<tr data-step="{e(key)}"><td class="fig"><a href="#step{k}">{e(row.figure)}</a></td>'
                    f'<td class="{css}">{e(said["prediction"])} {e(mark.split(" ")[0])}</td>'
                    f'<td>{e(said["paper"])}</td><td>{e(row.pattern)}</td><td>{e(learned)}</td></tr>')
    return f"""<section class="slide" id="cover"><h1>{e(title)}</h1>
<p>Raghu et al. 2021, "Do Vision Transformers See Like CNNs?", step by step: before each answer you chose what you
expected; here it is beside the paper's answer and what these models show ({e(glossary.settings_words(
lecture.settings))}; prepared {e(lecture.made)}). <strong>Pattern</strong>: "shown" only when the measured value's
95 % interval clears what the claim is compared with. <strong>Learned</strong>: "yes" only when the trained models'
interval clears their untrained twins'.</p>
<p class="n" data-matched="{counts['matched']}" data-steps="{counts['steps']}">{counts['matched']} of
{counts['steps']} predictions took the paper's answer <small>{counts['predicted']} predicted; these models showed the
paper's pattern in {counts['shown']} of {counts['steps']}</small></p>
<table class="steps"><tr><th>step</th><th>your prediction</th><th>the paper</th><th>pattern here</th>
<th>learned here</th></tr>{''.join(rows)}</table></section>"""


def _glossary(lecture: Lecture) -> str:
    """Every word the path explains, in the order it met them."""
    terms = [t for pair in glossary.first_terms(lecture.steps).values() for part in pair for t in part]
    return f'<section class="slide" id="glossary"><h2>Words used</h2>{_terms(terms)}</section>'


def _provenance(lecture: Lecture) -> str:
    """The lecturer's detail: exact model specs and fingerprints, the images (by name: no folder of the machine that
    prepared it), versions and the command."""
    e = html.escape
    prov = lecture.provenance
    models = "".join(f"<tr><td>{e(str(m.get('spec')))}</td><td><code>{e(str(m.get('fingerprint')))}</code></td>"
                     f"<td>{e(str(m.get('weights')))}</td></tr>" for m in prov.get("models", []))
    images = "".join(f"<tr><th>{e(str(k))}</th><td>{e(glossary.source_words(v) if k == 'source' else str(v))}</td>"
                     f"</tr>" for k, v in prov.get("images", {}).items())
    libs = ", ".join(f"{e(str(k))} {e(str(v))}" for k, v in prov.get("versions", {}).items())
    return f"""<section class="slide lecturer" id="provenance"><h2>Provenance</h2>
<details class="lecturer" open><summary>For the lecturer: exact models, images and versions</summary>
<table class="prov" id="prov-models"><tr><th>model</th><th>fingerprint</th><th>weights</th></tr>{models}</table>
<table class="prov" id="prov-images">{images}</table><p class="prov">{libs}</p>
<p class="prov">Prepared with <code>{e(lecture.settings.command())}</code> on {e(lecture.made)}
({lecture.seconds:.0f} s).</p></details></section>"""


def summary_html(lecture: Lecture, choices: dict[str, int | None],
                 title: str = "Lecture summary: Do Vision Transformers See Like CNNs?") -> str:
    """The summary as one HTML string: the predictions table, one section per step (prediction, the paper's
    answer, the answers for these models with their numbers, the figures), provenance."""
    e = html.escape
    terms = glossary.first_terms(lecture.steps)
    steps = "".join(_step(k, key, lecture, choices.get(key), terms[key]) for k, key in enumerate(lecture.steps))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}{EXTRA_STYLE}</style>'
            f'</head><body>{_cover(lecture, choices, title)}{steps}{_glossary(lecture)}{_provenance(lecture)}</body></html>\n')
