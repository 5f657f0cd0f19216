"""Showing: a page's lead, charts as built, export buttons (PNG/SVG/CSV), the run caption, clicks on charts, and
Markdown-safe names."""

from __future__ import annotations

import functools
from collections.abc import Callable

import streamlit as st

from vitlab import charts
from vitlab.charts.common import image_png, slug

from .runs import _run_state
from .text import _LINE_START, _MARKDOWN, md_plain  # noqa: F401 - the one escaping function


def check_lines(row) -> dict[str, str]:
    """A tour check's words (``vitlab.tour.Check.lines``), each shown as written: they name models, images and data
    sets that came from outside (a checkpoint's file name, an image's decode note)."""
    return {k: md_plain(v) if isinstance(v, str) else v for k, v in row.lines().items()}


PAPER_LEAD, OURS_LEAD = "The paper reports", "On these models:"


def finding(paper: str, ours: str | None = None, why: str | None = None) -> None:
    """The lead of an analysis page (issue 33): what the paper reports, then what *these* models show, computed by
    this page's own run (statistic in words, value, 95 % interval with its unit and count). When the page's chart
    cannot speak to the claim (e.g. no local heads to compare), ``why`` says so in place of ``ours``.
    Pages never state the paper's finding as fact: its words always sit next to the answer for these models."""
    st.markdown(f"**{PAPER_LEAD}** {paper.strip()}")
    if ours:  # the engine's words name models and images that came from outside: shown as written
        st.markdown(f"**{OURS_LEAD}** {md_plain(ours.strip(), lines=True)}")
    else:
        why = md_plain(why.strip(), lines=True) if why else "this page cannot answer the claim with these settings."
        st.info(f"**{OURS_LEAD}** {why}")


def answer(paper: str, found, missing: str) -> None:
    """:func:`finding` from a result's ``Finding`` (``vitlab.analyses.findings``: ``ours`` or ``why``), or, when
    the page computed nothing (``found`` is None), ``missing`` in place of the answer."""
    if found is None:
        finding(paper, why=missing)
    else:
        finding(paper, found.ours, found.why)


MIME = {"png": "image/png", "svg": "image/svg+xml", "csv": "text/csv"}


def export(chart, frame, stem: str, key: str) -> None:
    """PNG / SVG / CSV download buttons; the files are made only when a button is pressed."""
    row = st.container(horizontal=True, gap="small")
    for fmt in ("png", "svg", "csv"):
        row.download_button(fmt.upper(), data=functools.partial(charts.to_bytes, chart, fmt, frame),
                            file_name=f"{slug(stem)}.{fmt}", mime=MIME[fmt], key=f"dl.{key}.{fmt}",
                            on_click="ignore", help=f"Download this chart as {fmt.upper()}")


def export_image(image, frame, stem: str, key: str) -> None:
    """PNG download of an image the page shows (an attention overlay, what the model sees) and, when ``frame`` is
    given, CSV of the numbers it was drawn from (e.g. ``AttentionMap.to_frame()``)."""
    files = {"png": functools.partial(image_png, image)}
    if frame is not None:
        files["csv"] = functools.partial(charts.to_bytes, None, "csv", frame)
    row = st.container(horizontal=True, gap="small")
    for fmt, data in files.items():
        row.download_button(fmt.upper(), data=data, file_name=f"{slug(stem)}.{fmt}", mime=MIME[fmt],
                            key=f"dl.{key}.{fmt}", on_click="ignore",
                            help="Download this image as PNG" if fmt == "png" else "Download its values as CSV")


def image(img, frame, stem: str, key: str, caption: str | None = None) -> None:
    """Show an image (uint8 array from the engine) with its downloads (:func:`export_image`)."""
    st.image(img, caption=caption, width="stretch")
    export_image(img, frame, stem, key)


def counts(info) -> str:
    return f"{info.batches_computed} batches computed, {info.batches_from_cache} from the cache"


ORIGINS = {"disk": "result from the disk cache", "memory": "result kept in this session"}


def run_caption(info, images: int) -> str:
    """One line on how the page's result was obtained (computed now, how many batches and from the cache; or read
    back whole: 0 batches computed) and how long the page took: the wall time from the start of this script run to
    the result. ``info`` is the result's RunInfo or, for a result that carries none (one model's attention
    distances), the result itself as ``compute`` returned it: the counts are then the run's own, known when it ran."""
    origin = _run_state()["origins"].get(id(info)) if "lab.run" in st.session_state else None
    ran = origin[2] if origin is not None and len(origin) > 2 else None
    carried = info if hasattr(info, "batches_computed") else None  # the counts of the run that made the result
    if origin is None:
        text = f"{images} images" + (f"; {counts(carried)}, {carried.seconds:.1f} s" if carried else "")
    elif origin[0] in ("computed", "recomputed"):
        done = ran or carried
        text = f"{images} images; {counts(done)}, {done.seconds:.1f} s in the engine; page ready in {origin[1]:.1f} " \
               "s on the server"
        if origin[0] == "recomputed":
            text += "; its saved result was unreadable (Status says why) and was recomputed"
    else:  # read back whole: nothing ran now
        first = f" (first computed with {counts(carried)}, {carried.seconds:.1f} s in the engine)" if carried else ""
        text = (f"{images} images; 0 batches computed: {ORIGINS[origin[0]]}, page ready in {origin[1]:.1f} s on "
                f"the server{first}")
    info = carried or ran
    if info is None:
        return text
    if info.skipped_images:
        named = "; ".join(md_plain(why) for _, why in info.skipped_images[:5])
        more = f"; and {len(info.skipped_images) - 5} more" if len(info.skipped_images) > 5 else ""
        text += f"; {len(info.skipped_images)} unreadable image(s) skipped: {named}{more}"
    notices = getattr(info, "notices", [])
    if notices:
        text += "; " + "; ".join(f"{md_plain(name.split('/')[-1])}: {md_plain(what)}" for name, what in notices[:5])
    return text


def so_far(images: Callable[[object], int], of: int) -> Callable[[object, int, int], str]:
    """The words of a running estimate over batches: "Running estimate from 16 of 32 images (batch 1 of 2)"
    (``images(estimate)``: the images it rests on; ``of``: the images the run was asked for)."""
    return lambda estimate, done, total: (f"Running estimate from {images(estimate)} of {of} images (batch {done} "
                                          f"of {total})")


class Running:
    """The ``early`` callback of :func:`lab.compute` made by :func:`running`: draws each estimate in its box,
    replacing the one before; :meth:`clear` empties the box (``compute`` calls it when the run ends, whichever way)."""

    def __init__(self, draw: Callable[[object, str], None], words: Callable[[object, int, int], str]):
        self.box, self.draw, self.words = st.empty(), draw, words

    def __call__(self, estimate, done: int, total: int) -> None:
        with self.box.container(border=True):
            st.markdown(f"**{md_plain(self.words(estimate, done, total))}**: refined in place as the run goes on; "
                        "the final result replaces it.")
            self.draw(estimate, f"early{done}")

    def clear(self) -> None:
        self.box.empty()


def running(draw: Callable[[object, str], None], words: Callable[[object, int, int], str]) -> Running:
    """A place on the page for a run's running estimate (here, where it is called), and the ``early`` callback of
    :func:`lab.compute` that draws each estimate there under words that say what it is: ``words(estimate, done,
    total)`` (:func:`so_far`: "Running estimate from 16 of 32 images (batch 1 of 2)"), then "refined in place as the
    run goes on; the final result replaces it". ``draw(estimate, key)`` draws the page's chart(s) of an estimate
    (``key``: a prefix for their keys, new for each estimate). The box is emptied when the run ends, so the final
    result, drawn below it, stands alone."""
    return Running(draw, words)


def clickable(chart, name: str, fields: list[str], nearest: bool = False):
    """The chart with a click selection on ``fields`` (read back with :func:`clicked`); ``nearest`` picks the
    mark closest to the pointer (small dots are hard to hit)."""
    import altair as alt

    return chart.add_params(alt.selection_point(name=name, fields=fields, on="click", nearest=nearest))


def clicked(event, name: str, fields: list[str]) -> dict | None:
    """The fields of the point clicked in ``st.altair_chart(..., on_select='rerun')``'s event, or None."""
    points = (event or {}).get("selection", {}).get(name) or []
    return {f: points[0][f] for f in fields} if points and all(f in points[0] for f in fields) else None


def follow_click(prefix: str, click: dict | None, keys: dict[str, str]) -> None:
    """Move pickers (session keys ``keys[field]``) to a newly clicked point; later picker changes stay."""
    last = f"{prefix}.last_click"
    if click and click != st.session_state.get(last):
        for field, key in keys.items():
            st.session_state[key] = click[field]
    st.session_state[last] = click


def image_name(src) -> Callable[[int], str]:
    """A select box's name for image i of ``src``: its file name (a folder's image by its path inside the folder,
    not the machine's full path), or "image 12 (Ankle boot)" for a data set's item (never an internal id such as
    'fashion-mnist:test:/usr/share/datasets/fashion-mnist:10000#12')."""
    def name(i: int) -> str:
        text = src.item_id(i)
        if text.startswith(f"{src.name}#"):
            text = f"image {i}"
        elif text.startswith(f"{src.name.rstrip('/')}/"):
            text = text[len(src.name.rstrip("/")) + 1:]
        label = src.label(i)
        return f"{text} ({src.classes[label]})" if label is not None and src.classes else text

    return name


def chart(altair_chart, key: str, on_select: str = "ignore"):
    """Draw a vitlab chart as built (its own size and colours, as in the PNG/SVG exports).

    Streamlit would otherwise 'fit' a single view into its declared width, axes and legend included, which
    squeezes the plot of a chart with a wide legend to nothing; 'pad' keeps the declared plot size.
    """
    import altair as alt

    sized = altair_chart.properties(autosize=alt.AutoSizeParams(type="pad", contains="padding"))
    return st.altair_chart(sized, key=key, width="content", theme=None, on_select=on_select)

