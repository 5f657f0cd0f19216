"""Saved figures are data, never markup that could carry a script (issue 46): an SVG read back from the disk cache
is checked against an allow-list of plain SVG and written out again from its parsed tree.

A prepared lecture keeps its figures as SVG text (vl-convert's drawing of the tour's charts). Anyone who can write
the cache folder can rewrite that text with a valid checksum, and the take-home summary inlines it in HTML, where a
``<script>`` or an ``onload`` would run in every student's browser. :func:`plain_svg` accepts only what vl-convert
draws and SVG's other inert shapes: the elements of :data:`ELEMENTS` in the SVG namespace, the presentation,
geometry and ARIA attributes of :data:`ATTRIBUTES` (and ``aria-*``, ``data-*``), references only to ``#id`` inside
the figure (``href``, ``xlink:href``, ``url(#id)``). Anything else (a script, an event handler, a
``<foreignObject>``, a ``<style>`` element, a link, an image, an external reference, a DOCTYPE or entity) is
:class:`BadFigure` naming what it found; nothing is stripped, so a figure is shown as vitlab drew it or not at all.

The figure that comes back is serialised from the checked tree by this module (every text and attribute value
escaped), never the stored text itself: what a browser parses is exactly what was checked, comments, processing
instructions and CDATA tricks included. vl-convert's own figures come back unchanged, character for character.

    plain_svg(stored)  # -> the same SVG, or BadFigure("holds a <script>")
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

SVG = "http://www.w3.org/2000/svg"
XLINK = "http://www.w3.org/1999/xlink"

# SVG's inert drawing elements (no script, no link, no embedded document or image, no style sheet, no filter)
ELEMENTS = frozenset({
    "svg", "g", "defs", "symbol", "use", "title", "desc", "path", "rect", "circle", "ellipse", "line", "polyline",
    "polygon", "text", "tspan", "linearGradient", "radialGradient", "stop", "clipPath", "mask", "pattern", "marker",
})
# presentation, geometry and accessibility attributes; a value with ``url(...)`` may only name ``#id``
ATTRIBUTES = frozenset({
    "id", "class", "role", "version", "width", "height", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry",
    "fx", "fy", "dx", "dy", "d", "points", "viewBox", "preserveAspectRatio", "transform", "offset", "rotate",
    "textLength", "lengthAdjust", "fill", "fill-opacity", "fill-rule", "stroke", "stroke-width", "stroke-opacity",
    "stroke-linecap", "stroke-linejoin", "stroke-miterlimit", "stroke-dasharray", "stroke-dashoffset", "opacity",
    "display", "visibility", "pointer-events", "color", "clip-path", "clip-rule", "mask", "font-family",
    "font-size", "font-weight", "font-style", "font-variant", "letter-spacing", "word-spacing", "text-anchor",
    "text-decoration", "dominant-baseline", "alignment-baseline", "baseline-shift", "stop-color", "stop-opacity",
    "gradientUnits", "gradientTransform", "spreadMethod", "clipPathUnits", "maskUnits", "maskContentUnits",
    "patternUnits", "patternContentUnits", "patternTransform", "markerWidth", "markerHeight", "markerUnits", "refX",
    "refY", "orient", "marker-start", "marker-mid", "marker-end", "vector-effect", "shape-rendering",
    "text-rendering", "paint-order", "mix-blend-mode", "isolation", "lang", "style", "href",
})
_FREE = re.compile(r"(aria|data)-[a-z][a-z0-9-]*")  # ARIA and data attributes: words, never fetched or run
_FRAGMENT = re.compile(r"#[A-Za-z_][\w.:-]*")
_URL = re.compile(r"url\(\s*(['\"]?)([^)'\"]*)\1\s*\)", re.IGNORECASE)
# a style attribute of plain declarations only: no escapes (which hide words), no at-rules, no comments
_STYLE = re.compile(r"[\w\s:;#%.,()'\"+-]*")
_SPAN = 40  # characters of a bad value quoted in the message


class BadFigure(ValueError):
    """A stored figure that is not plain SVG: what it holds, in words ("holds a <script>")."""


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _SPAN else text[:_SPAN - 1] + "…"


def _name(tag: str) -> str:
    ns, _, local = tag[1:].partition("}") if tag.startswith("{") else ("", "", tag)
    return local if ns == SVG else f"{ns}:{local}" if ns else local


def _check_value(element: str, name: str, value: str) -> None:
    for _, target in _URL.findall(value):
        if not _FRAGMENT.fullmatch(target.strip()):
            raise BadFigure(f"holds an external reference ({name}='{_short(value)}' on <{element}>)")
    if "url(" in value.lower() and not _URL.search(value):
        raise BadFigure(f"holds a malformed reference ({name}='{_short(value)}' on <{element}>)")
    lowered = value.lower()
    if "javascript:" in lowered or "expression(" in lowered:
        raise BadFigure(f"holds a script in {name}='{_short(value)}' on <{element}>")


def _attribute(element: str, key: str, value: str) -> str:
    """The attribute's name as written out, or BadFigure."""
    if key == f"{{{XLINK}}}href" or key == "href":
        if not _FRAGMENT.fullmatch(value.strip()):
            raise BadFigure(f"holds an external reference (href='{_short(value)}' on <{element}>)")
        return "xlink:href" if key.startswith("{") else "href"
    if key.startswith("{"):
        raise BadFigure(f"holds the foreign attribute {_name(key)} on <{element}>")
    if key.lower().startswith("on"):
        raise BadFigure(f"holds an event handler ({key} on <{element}>)")
    if key not in ATTRIBUTES and not _FREE.fullmatch(key):
        raise BadFigure(f"holds the attribute {key} on <{element}>, which plain SVG figures never have")
    if not _FREE.fullmatch(key):  # an ARIA label or a data value is words ("Title text 'url(x)'"), never fetched
        _check_value(element, key, value)
    if key == "style" and not _STYLE.fullmatch(value):
        raise BadFigure(f"holds a style beyond plain declarations (style='{_short(value)}' on <{element}>)")
    return key


def _text(text: str | None) -> str:
    return (text or "").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(value: str) -> str:
    """An attribute value for double quotes (vl-convert's own escaping: an apostrophe stays as it is)."""
    return _text(value).replace('"', "&quot;")


def _write(el: ET.Element, out: list[str], root: bool) -> None:
    tag = _name(el.tag)
    if not el.tag.startswith(f"{{{SVG}}}"):
        raise BadFigure(f"holds a <{tag}> outside SVG")
    if tag not in ELEMENTS:
        raise BadFigure(f"holds a <{tag}>")
    if root and tag != "svg":
        raise BadFigure(f"is a <{tag}>, not an <svg>")
    attrs = [(_attribute(tag, k, v), v) for k, v in el.attrib.items()]
    if root:
        ns = [("xmlns", SVG)]
        if any(f"{{{XLINK}}}href" in e.attrib for e in el.iter()):
            ns.append(("xmlns:xlink", XLINK))
        attrs = ns + attrs
    out.append("<" + tag + "".join(f' {k}="{_attr(v)}"' for k, v in attrs))
    if el.text is None and not len(el) and not root:  # an empty figure keeps its closing tag, as it was written
        out.append("/>")
    else:
        out.append(">" + _text(el.text))
        for child in el:
            _write(child, out, False)
            out.append(_text(child.tail))
        out.append(f"</{tag}>")


_DECLARATION = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_XLINK_DECLARED = re.compile(r'^<svg\b[^>]*\sxmlns:xlink="http://www\.w3\.org/1999/xlink"')


def plain_svg(text: str) -> str:
    """``text`` (a stored figure) checked as plain SVG and written out again from its tree; :class:`BadFigure` with
    what it holds when it is anything else (the module's docstring)."""
    if not isinstance(text, str):
        raise BadFigure(f"is {type(text).__name__}, not SVG text")
    if _DECLARATION.search(text):
        raise BadFigure("holds a DOCTYPE or an entity declaration")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise BadFigure(f"cannot be read as SVG ({e})") from None
    out: list[str] = []
    _write(root, out, True)
    if _XLINK_DECLARED.match(text.lstrip()) and 'xmlns:xlink="' not in out[0]:
        # vl-convert declares the xlink namespace on every figure, used or not: kept, so its figures come back as
        # drawn (a declaration alone references nothing)
        out[0] = out[0].replace(f'xmlns="{SVG}"', f'xmlns="{SVG}" xmlns:xlink="{XLINK}"', 1)
    return "".join(out)
