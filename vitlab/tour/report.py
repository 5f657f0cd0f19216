"""One self-contained HTML file of the Paper tour: every figure as inline SVG, the verdicts with their intervals, and
where it all came from. For presenting without a server (a projector laptop, a report to send).

Each claim's section holds the paper-style figure (``TourReport.paper_charts``: CKA heatmaps, head distances,
receptive-field maps, skip-ratio curves, localization maps, probe curves, from the tour's own run), its two answers
(pattern and learned) with their intervals, and the interval chart. The file has no script, no stylesheet link and no
fetched resource: the charts are Vega-Lite rendered to SVG by vl-convert ahead of time, the style is one inline
``<style>``. Each figure fills one screen (CSS scroll snapping), so Page Down / the arrow keys step through the figures
in any browser; it also prints one figure per page.

    models, source ─tour.run_tour─► TourReport ─render_html(+ provenance)─► report.html

Provenance: per model its spec, fingerprint and weights source (zoo checkpoint with its sha256, random seed,
pretrained tag, or local file); the images (source, count, a sha256 over the items used, in order); vitlab's and
the libraries' versions; the time it was made and how long it took.
"""

from __future__ import annotations

import hashlib
import html
import platform
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..charts.words import data_in_words
from ..engine.context import Run
from ..errors import VitlabError
from ..inputs.data import ImageSource, select
from ..inputs.models import LoadedModel, sha256_file
from . import TourOptions, TourReport, run_tour

LIBRARIES = ("torch", "timm", "numpy", "pandas", "altair", "vl-convert-python", "pillow", "streamlit")
VERDICT_CLASS = {"shown": "shown", "not shown": "notshown", "can't tell": "canttell"}


@dataclass(frozen=True)
class ReportOptions:
    """What goes into the report."""

    tour: TourOptions = field(default_factory=TourOptions, metadata={"help": "the tour's options"})
    title: str = field(default="vitlab: Do Vision Transformers See Like CNNs?, checked on these models",
                       metadata={"help": "the report's title"})


@dataclass
class ReportResult:
    html: str
    tour: TourReport
    provenance: dict
    seconds: float

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        check_target(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.html, encoding="utf-8")
        return path


# the mark of a report vitlab wrote: only a file that carries it near its start is written over
GENERATOR = '<meta name="generator" content="vitlab report">'


def check_target(path: str | Path) -> None:
    """Refuse to write the report over a file vitlab did not write (docs/hardening.md: vitlab touches only what it
    wrote): a file at ``path`` must be an earlier vitlab report. Called before anything is computed, and again
    before writing."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise VitlabError(f"--out '{path}' is already there and is not a file vitlab wrote (a link or a folder): "
                          "choose another --out")
    with path.open("rb") as f:
        head = f.read(4096)
    if GENERATOR.encode() not in head:
        raise VitlabError(f"--out '{path}' is already there and is not a report vitlab wrote: move it away, or "
                          "choose another --out")

    def summary(self) -> dict:
        return {"bytes": len(self.html.encode()), "seconds": round(self.seconds, 2), **self.tour.summary()}


# ---------------------------------------------------------------- provenance


def weights_source(loaded: LoadedModel) -> str:
    """Where a model's weights came from, in words."""
    w = loaded.spec.weights
    if w == "zoo":
        from .. import zoo

        path = zoo.checkpoint_path(loaded.spec.name)
        return f"vitlab zoo checkpoint {path.name} (sha256 {sha256_file(path)[:16]}…)"
    if w.startswith("zoo@random:"):
        return f"untrained twin of zoo:{loaded.spec.name}, random init seed {w.split(':')[-1]}"
    if w.startswith("random:"):
        return f"random init, seed {w.split(':')[-1]}"
    if w == "pretrained":
        return f"timm pretrained weights '{loaded.spec.name}' (Hugging Face hub cache)"
    return f"local checkpoint {w} (sha256 {sha256_file(Path(w))[:16]}…)"


def images_hash(source: ImageSource, indices: list[int]) -> str:
    """sha256 over the item keys (content hashes or dataset positions) of the images used, in order."""
    h = hashlib.sha256()
    for i in indices:
        h.update(source.item_key(i).encode())
        h.update(b"\0")
    return h.hexdigest()


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    out = {"vitlab": __version__, "python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            out[lib] = "not installed"
    return out


def provenance(models: list[LoadedModel], source: ImageSource, opts: TourOptions, seconds: float,
               run: Run) -> dict:
    indices = select(source, opts.images, opts.shuffle)
    return {
        "models": [{"spec": m.label, "architecture": m.spec.name, "fingerprint": m.fingerprint,
                    "weights": weights_source(m), "input": "x".join(str(v) for v in m.data_config["input_size"]),
                    "layout": m.memory_format}
                   for m in models],
        "images": {"source": source.name, "count": len(indices), "sha256": images_hash(source, indices),
                   "order": "first N" if opts.shuffle is None else f"shuffled, seed {opts.shuffle}",
                   "batch size": opts.batch_size},
        "resampling": {"bootstrap resamples": run.bootstrap, "seed": run.seed, "controls": opts.control},
        "versions": versions(),
        "made": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "seconds": round(seconds, 1),
    }


# ---------------------------------------------------------------- in words

def images_in_words(name: str, count: int, order: str = "first N") -> str:
    """The images a tour used, for people: "Fashion-MNIST test set, first 256 images", not the internal source name
    ('fashion-mnist:test:/usr/share/datasets/fashion-mnist:10000', a folder path)."""
    what = data_in_words(name)
    if what.startswith("the folder "):
        what = f"images in {what}"
    images = f"{count} image{'s' * (int(count) != 1)}"
    how = f"first {images}" if order == "first N" else f"{images} ({order})"
    return f"{what}, {how}"


def data_counts(source: ImageSource, opts: TourOptions) -> tuple[int, int]:
    """(images, batches) of a tour on ``source``: the images it reads and the batches they make, the units its
    intervals resample (a check reports its own units in ``Check.interval_units``)."""
    n = len(select(source, opts.images, opts.shuffle))
    return n, -(-n // max(1, opts.batch_size))


def counts_line(row, data: str) -> str:
    """A section's large "n = 32 images · 4 batches" with what they are: the counts its own statistic used
    (``Check.images``: Fig 6 its first images, Fig 11 its probe pool), not the tour's (issue 37)."""
    e = html.escape
    if not row.images:
        return f'<p class="n">n not recorded <small>{e(data)}</small></p>'
    what = row.data_note or data
    return (f'<p class="n" data-images="{row.images}" data-batches="{row.batches}">n = {row.images} images · '
            f'{row.batches} batches <small>{e(what)}, batches of {row.batch_size}</small></p>')


# ---------------------------------------------------------------- HTML


_TAG = re.compile(r"<[^<>]*>")
_ATTR = re.compile(r'([\w:-]+)="([^"]*)"')
_LONG = re.compile(r"(\d+\.\d)\d+")
_WORDS = ("aria-", "title", "id", "class", "href", "xlink:href")  # attributes a person reads or a link follows


def shorten_svg(svg: str) -> str:
    """``svg`` with the numbers of its drawing attributes (coordinates, paths, transforms) cut to one decimal:
    vl-convert writes up to 15 digits, a tenth of a pixel is invisible, and the file halves. Only inside tags and never in an
    attribute a person reads (aria labels, titles): the text of an axis label ("0.85") is the chart's own words and
    stays as drawn (issue 38: rounding it gave axes that read "0.8, 0.8, 0.9")."""
    def attr(m: re.Match) -> str:
        name, value = m.group(1), m.group(2)
        return m.group(0) if name.startswith(_WORDS) else name + '="' + _LONG.sub(r"\1", value) + '"'

    return _TAG.sub(lambda t: _ATTR.sub(attr, t.group(0)), svg)


def chart_svg(chart) -> str:
    """An Altair chart (or its Vega-Lite spec, a dict) as an inline ``<svg>`` element (vl-convert; no script, no
    fetched resource)."""
    import json

    import vl_convert as vlc

    svg = vlc.vegalite_to_svg(json.dumps(chart) if isinstance(chart, dict) else chart.to_json())
    svg = svg[svg.index("<svg"):]  # drop any XML prolog: the SVG is embedded in HTML
    return shorten_svg(svg)


LEARNED_CLASS = {"yes": "shown", "no": "notshown"}


def _slide(k: int, row, svg: str | None, paper: str | None = None, counts: str = "") -> str:
    """One claim: the paper-style figure, the two answers with their numbers and intervals, the interval chart."""
    e = html.escape
    pattern = VERDICT_CLASS.get(row.pattern, "canttell")
    learned = LEARNED_CLASS.get(row.learned, "canttell")
    figure = (f'<div class="paper" data-figure="{e(row.figure)}">{paper}</div>' if paper else "") + (
        f'<div class="intervals">{svg}</div>' if svg else "")
    if not figure:
        figure = '<p class="nofig">No figure: this check could not be measured (see the evidence).</p>'
    words = row.lines()  # the same words as the app and the slides: never "nan" or "n/a" (issue 33)
    return f"""<section class="slide" id="fig{k}" data-figure="{e(row.figure)}">
<h2><span class="fig">{e(row.figure)}</span> {e(row.title)}</h2>{counts}
<div class="body"><div class="figure">{figure}</div>
<div class="text"><p class="label">The paper reports</p><blockquote class="claim">{e(words["paper"])}</blockquote>
<p class="label">Pattern: do these models show it?</p>
<p class="verdict {pattern}" data-verdict="{e(row.pattern)}">{e(row.pattern)}</p>
<table class="numbers"><tr><th>statistic</th><td>{e(words["statistic"])}</td></tr>
<tr><th>on these models</th><td>{e(words["pattern_numbers"])}</td></tr>
<tr><th>interval</th><td class="basis">{e(row.interval)}</td></tr>
<tr><th>models</th><td>{e(words["models"])}</td></tr></table>
<p class="label">Our control</p><p class="control">{e(words["control_note"])}</p>
<p class="label">Learned: more than untrained?</p>
<p class="verdict {learned}" data-learned="{e(row.learned)}">{e(row.learned)}</p>
<p class="control">{e(words["learned_numbers"])}</p>
<p class="evidence">{e(row.evidence)}</p></div></div></section>"""


def _provenance_html(prov: dict) -> str:
    e = html.escape
    models = "".join(f"<tr><td>{e(m['spec'])}</td><td>{e(m['architecture'])}</td><td><code>{e(m['fingerprint'])}"
                     f"</code></td><td>{e(m['weights'])}</td><td>{e(m['input'])}</td><td>{e(m['layout'])}</td></tr>"
                     for m in prov["models"])
    img = prov["images"]
    images = "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in img.items())
    resampling = "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in prov["resampling"].items())
    libs = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in prov["versions"].items())
    return f"""<section class="slide" id="provenance"><h2>Provenance</h2>
<h3>Models</h3><table class="prov" id="prov-models"><tr><th>spec</th><th>architecture</th><th>fingerprint</th>
<th>weights</th><th>input</th><th>layout</th></tr>{models}</table>
<h3>Images</h3><table class="prov" id="prov-images">{images}</table>
<h3>Resampling</h3><table class="prov">{resampling}</table>
<h3>Software</h3><table class="prov" id="prov-versions">{libs}</table>
<p id="prov-made">Made {e(prov['made'])} by vitlab {e(prov['versions']['vitlab'])};
the tour ran {prov['seconds']} s.</p></section>"""


STYLE = """
@page{size:A4 landscape;margin:10mm}
section.slide{break-inside:avoid;page-break-inside:avoid;break-before:page;page-break-before:always}
section#cover{break-before:auto;page-break-before:auto}
html{scroll-snap-type:y mandatory}body{margin:0;font:clamp(11px,min(1.05vw,1.75vh),20px)/1.35 system-ui,-apple-system,
Segoe UI,Roboto,sans-serif;color:#1d1d1f;background:#fff}.slide{min-height:100vh;box-sizing:border-box;
padding:2.5vh 3vw;scroll-snap-align:start;border-bottom:1px solid #ddd}h1{font-size:2.4em;margin:0 0 .4em}
h2{font-size:1.7em;margin:0 0 .2em}.fig{color:#666;font-weight:400}.n{font-size:1.2em;font-weight:700;margin:0 0 .4em}
.n small{font-size:.6em;font-weight:400;color:#666}
.body{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:2.5vw;align-items:start}
.figure svg{display:block;width:100%;height:auto;max-height:calc(100vh - 12em - 22vh)}
.intervals svg{max-height:22vh;margin-top:1vh}
.label{font-size:.75em;text-transform:uppercase;letter-spacing:.08em;color:#666;margin:.6em 0 .1em}
.claim{font-size:1.1em;margin:0;border-left:4px solid #999;padding-left:.7em}
.verdict{display:inline-block;font-size:1.35em;font-weight:700;padding:0 .6em;border-radius:.3em;margin:.1em 0}
.shown{background:#d7f5dd;color:#0b6b24}.notshown{background:#ffe0d6;color:#9a2a00}
.canttell{background:#e8eaf0;color:#333}table{border-collapse:collapse}th,td{padding:.1em .5em;text-align:left;
vertical-align:top}.numbers{font-size:.9em}.numbers th{white-space:nowrap}.numbers td{font-variant-numeric:tabular-nums}
.control{margin:.2em 0}.evidence{color:#444;font-size:.78em;margin:.4em 0 0}
.prov{font-size:.75em;margin-bottom:1em}.prov th{color:#555}.summary td,.summary th{font-size:1.1em}
nav ol{columns:2;font-size:.9em}a{color:#0645ad}
@media print{html{scroll-snap-type:none}.slide{min-height:0;height:auto;border:0;padding:0}body{font-size:8.5pt}
.figure svg{max-height:105mm}.intervals svg{max-height:32mm}.evidence{font-size:.8em}}
"""


def render_html(tour: TourReport, prov: dict, title: str) -> str:
    """The report as one HTML string (every figure an inline SVG)."""
    e = html.escape
    if title == ReportOptions.__dataclass_fields__["title"].default:  # the old default read "…CNNs?, checked on…"
        title = f"Do Vision Transformers See Like CNNs? Raghu et al. 2021, checked on {', '.join(tour.models[:2])}"
    img = prov["images"]
    data = images_in_words(img["source"], img["count"], img.get("order", "first N"))
    slides, toc = [], []
    for k, row in enumerate(tour.rows):
        frame = tour.frames.get(row.figure) if tour.frames else None
        has = row.figure in tour.charts and (frame is None or len(frame))
        paper = tour.paper_charts.get(row.figure)
        slides.append(_slide(k, row, chart_svg(tour.charts[row.figure]) if has else None,
                             chart_svg(paper) if paper is not None else None, counts_line(row, data)))
        toc.append(f'<li><a href="#fig{k}">{e(row.figure)}: {e(row.title)}</a>: pattern {e(row.pattern)}, '
                   f'learned {e(row.learned)}</li>')
    counts = {f"pattern: {k}": v for k, v in tour.summary().items()}
    counts.update({f"learned: {k}": v for k, v in tour.learned_summary().items()})
    cover = f"""<section class="slide" id="cover"><h1>{e(title)}</h1>
<p>Raghu et al. 2021, "Do Vision Transformers See Like CNNs?": each claim checked on
{e(', '.join(tour.models))} over the {e(data)}.
Two answers per claim: <strong>pattern</strong> ("shown" only when the statistic's 95 % interval clears the claim's own
null) and <strong>learned</strong> ("yes" only when the trained models' interval clears the untrained twins').</p>
<table class="summary">{''.join(f'<tr><th>{e(k)}</th><td>{v}</td></tr>' for k, v in counts.items())}</table>
<nav><ol>{''.join(toc)}</ol></nav><p><a href="#provenance">Provenance</a></p></section>"""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'{GENERATOR}<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style>'
            '</head>'
            f'<body>{cover}{"".join(slides)}{_provenance_html(prov)}</body></html>\n')


def report(models: list[LoadedModel], source: ImageSource, opts: ReportOptions, run: Run,
           tour: TourReport | None = None) -> ReportResult:
    """Run the tour (or take one already run on these models and source) and render it."""
    if not models:
        raise VitlabError("a report needs models: give a ViT and a ResNet, e.g. -m zoo:vit-cls -m zoo:resnet")
    t0 = time.perf_counter()
    tour = tour if tour is not None else run_tour(models, source, opts.tour, run)
    seconds = time.perf_counter() - t0
    prov = provenance(models, source, opts.tour, seconds, run)
    text = render_html(tour, prov, opts.title)
    return ReportResult(text, tour, prov, time.perf_counter() - t0)
