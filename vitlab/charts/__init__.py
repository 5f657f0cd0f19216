"""Altair chart builders, used by the app pages and the CLI exports alike.

Each builder takes a tidy DataFrame (an analysis result's ``to_frame()``) and returns an ``alt.Chart``;
:func:`save` writes PNG and SVG (vl-convert), :func:`to_bytes` gives download bytes. One sub-module per family
of analyses: ``cka``, ``attention``, ``skips``, ``localization``, ``probes``, ``checkpoints``.
"""

from . import attention, checkpoints, localization, probes, skips
from .cka import cka_heatmap, cka_pair_charts
from .common import save, save_all, to_bytes

__all__ = ["attention", "checkpoints", "cka_heatmap", "cka_pair_charts", "localization", "probes", "save",
           "save_all", "skips", "to_bytes"]
