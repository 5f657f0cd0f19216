"""Altair chart builders, used by the app pages and the CLI exports alike.

Each builder takes a tidy DataFrame (an analysis result's ``to_frame()``) and returns an ``alt.Chart``;
:func:`save` writes PNG and SVG (vl-convert), :func:`to_bytes` gives download bytes.
"""

from .common import save, save_all, to_bytes
from .cka import cka_heatmap, cka_pair_charts

__all__ = ["cka_heatmap", "cka_pair_charts", "save", "save_all", "to_bytes"]
