"""Export of charts: PNG/SVG through vl-convert, CSV from the chart's own data frame."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import altair as alt

from ..errors import VitlabError

alt.data_transformers.disable_max_rows()
FORMATS = ("png", "svg", "csv")
# the app's main column at 1280 px with the sidebar open (1280 - 300 sidebar - 2 x 80 padding, measured in Chromium
# by tests/test_browser_real_size.py); a chart drawn whole on a page is at most this wide, axes and legend included
PAGE_WIDTH = 820
# one of two columns of that page (st.columns(2): 16 px between them)
HALF_WIDTH = (PAGE_WIDTH - 16) // 2


def slug(text: str, limit: int = 120) -> str:
    """A file-name-safe version of a label, at most ``limit`` characters; a longer one is cut and ends in a hash
    of the whole label, so two labels that differ only past the cut never share a file."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "chart"
    if len(safe) <= limit:
        return safe
    return f"{safe[:limit - 17]}_{hashlib.sha1(text.encode()).hexdigest()[:16]}"


def to_bytes(chart: alt.TopLevelMixin, fmt: str, frame=None, scale: float = 2.0) -> bytes:
    """Bytes of ``chart`` as PNG or SVG, or of ``frame`` as CSV (for download buttons and files)."""
    if fmt == "csv":
        if frame is None:
            raise VitlabError("CSV export needs the chart's data frame")
        return frame.to_csv(index=False).encode()
    import vl_convert as vlc

    spec = chart.to_json()
    if fmt == "png":
        return vlc.vegalite_to_png(spec, scale=scale)
    if fmt == "svg":
        return vlc.vegalite_to_svg(spec).encode()
    raise VitlabError(f"export format must be one of {', '.join(FORMATS)}, not '{fmt}'")


def image_png(image) -> bytes:
    """PNG bytes of an image array (H, W) or (H, W, 3|4) of uint8, e.g. an attention overlay, for downloads."""
    from io import BytesIO

    import numpy as np
    from PIL import Image

    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (3, 4)):
        raise VitlabError(f"image_png needs a uint8 (H, W) or (H, W, 3|4) array, not {arr.dtype} {arr.shape}")
    buf = BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def save(chart: alt.TopLevelMixin, out_dir: str | Path, stem: str, frame=None) -> list[Path]:
    """Write ``stem``.png and .svg (and .csv when ``frame`` is given) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in ("png", "svg") + (("csv",) if frame is not None else ()):
        path = out / f"{slug(stem)}.{fmt}"
        path.write_bytes(to_bytes(chart, fmt, frame))
        written.append(path)
    return written


def save_all(charts: dict[str, alt.TopLevelMixin], out_dir: str | Path) -> list[Path]:
    paths: list[Path] = []
    for stem, chart in charts.items():
        paths += save(chart, out_dir, stem)
    return paths


def interval_tooltips(frame) -> list:
    """Tooltips saying what an interval rests on (its method, unit and how many), where the frame says it."""
    cols = [("interval_method", "interval"), ("interval_units", "units"), ("interval_unit", "unit")]
    return [alt.Tooltip(f"{c}:{'Q' if c == 'interval_units' else 'N'}", title=t) for c, t in cols if c in frame]
