"""CKA heatmaps (Raghu et al. 2021, Figs 1-2)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ..errors import VitlabError
from .common import interval_tooltips
from .words import axis_words, layer_words


def layer_labels(frame: pd.DataFrame, side: str, families: dict[str, str] | None = None) -> str:
    """The ``labelExpr`` of a layer axis ('a' or 'b'): the side's layers in words ("block 0 after attention",
    "stage 2 block 1"; ``families`` {model label: 'vit' | 'mixer' | ...} words a Mixer's mid-block tap as after
    token mixing); the field, the selection, the tooltip and the CSV keep the tap's own name."""
    model = frame[f"model_{side}"].iloc[0]
    return axis_words(layer_words(dict.fromkeys(frame[f"layer_{side}"]), (families or {}).get(model)))


def cka_heatmap(frame: pd.DataFrame, title: str | None = None, size: int = 360, select: str | None = None,
                families: dict[str, str] | None = None):
    """Heatmap of one model pair: layer_b across (x), layer_a up (y), colour = CKA in [0, 1].

    ``frame`` has the columns of ``CKAResult.to_frame()``; layer order is kept as given, labelled in words
    (``layer_labels``). ``select`` names a point selection on (layer_a, layer_b) so the app can tell which cell was
    clicked.
    """
    order_a = list(dict.fromkeys(frame["layer_a"]))
    order_b = list(dict.fromkeys(frame["layer_b"]))
    ma, mb = frame["model_a"].iloc[0], frame["model_b"].iloc[0]
    tooltip = ["model_a", "layer_a", "model_b", "layer_b", alt.Tooltip("cka:Q", format=".4f")]
    if "cka_std" in frame:
        tooltip.append(alt.Tooltip("cka_std:Q", format=".4f"))
    for col, name in (("cka_lo", "95 % lo"), ("cka_hi", "95 % hi"), ("p_null", "p (permutation null)"),
                      ("null_hi", "null 97.5 %")):
        if col in frame and frame[col].notna().any():  # all NaN: not measured (no --permutations), not "null"
            tooltip.append(alt.Tooltip(f"{col}:Q", format=".4f", title=name))
    tooltip += interval_tooltips(frame)
    chart = alt.Chart(frame).mark_rect().encode(
        x=alt.X("layer_b:N", sort=order_b, title=f"{mb} layer",
                axis=alt.Axis(labelAngle=-60, labelLimit=170, labelExpr=layer_labels(frame, "b", families))),
        y=alt.Y("layer_a:N", sort=list(reversed(order_a)), title=f"{ma} layer",
                axis=alt.Axis(labelLimit=170, labelExpr=layer_labels(frame, "a", families))),
        color=alt.Color("cka:Q", scale=alt.Scale(scheme="magma", domain=[0, 1]), title="CKA"),
        tooltip=tooltip,
    ).properties(width=size, height=size, title=title or f"CKA: {ma} vs {mb}")
    if select:
        sel = alt.selection_point(name=select, fields=["layer_a", "layer_b"], on="click")
        chart = chart.add_params(sel).encode(opacity=alt.condition(sel, alt.value(1.0), alt.value(0.55)))
    return chart


def cka_profile(frame: pd.DataFrame, along: str = "layer_b", title: str | None = None, width: int = 220,
                height: int = 160, families: dict[str, str] | None = None):
    """Bars of CKA against every layer on one side (``along``: 'layer_a' or 'layer_b'), layer order kept.

    ``frame``: rows of ``CKAResult.to_frame()`` with the other side's layer fixed (one row of a heatmap).
    """
    if along not in ("layer_a", "layer_b"):
        raise VitlabError(f"cka_profile: along must be 'layer_a' or 'layer_b', not {along!r}")
    model = frame["model_a" if along == "layer_a" else "model_b"].iloc[0]
    return alt.Chart(frame).mark_bar().encode(
        x=alt.X(f"{along}:N", sort=list(dict.fromkeys(frame[along])), title=f"{model} layer",
                axis=alt.Axis(labelAngle=-60, labelLimit=170,
                              labelExpr=layer_labels(frame, along[-1], families))),
        y=alt.Y("cka:Q", scale=alt.Scale(domain=[0, 1]), title="CKA"),
        tooltip=["model_a", "layer_a", "model_b", "layer_b", alt.Tooltip("cka:Q", format=".4f")],
    ).properties(width=width, height=height, title=title or "")


def cka_pair_charts(frame: pd.DataFrame) -> dict[str, alt.Chart]:
    """One heatmap per (model_a, model_b) pair in ``frame``, keyed 'cka_A__vs__B'."""
    charts = {}
    for (ma, mb), part in frame.groupby(["model_a", "model_b"], sort=False):
        charts[f"cka_{ma}__vs__{mb}"] = cka_heatmap(part.reset_index(drop=True))
    return charts
