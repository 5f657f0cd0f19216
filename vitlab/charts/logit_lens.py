"""Logit-lens charts; input: ``LensReport.to_frame()`` (one row per model and block)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ..errors import VitlabError
from .common import interval_tooltips

MEASURES = {"accuracy": "top-1 accuracy (labels)", "agreement": "agreement with the final prediction"}
# the x axis in words (issue 47): block k of a model's L blocks is drawn at k / L, so models of different depths share
# one axis; the first block sits at 1 / L, the last at 1
DEPTH = "depth in the model: block k of L at k / L"


def lens_long(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with one row per model, block and measure (accuracy | agreement): value, lo, hi, and ``block`` in
    words ("block 2 of 6", as the page's table says it); blocks without a readout (or without labels, for accuracy)
    left out."""
    from .words import block_words

    keep = ["model", "layer", "block", "block_index", "depth", "chance",
            *[c for c in ("interval_method", "interval_units", "interval_unit") if c in frame]]
    frame = frame.copy()
    layers = {m: list(g.sort_values("block_index")["layer"]) for m, g in frame.groupby("model", sort=False)}
    frame["block"] = [block_words(layers[m], int(i)) for m, i in zip(frame["model"], frame["block_index"])]
    parts = []
    for m in MEASURES:
        part = frame[keep].copy()
        part["measure"], part["value"] = m, frame[m]
        part["lo"], part["hi"] = frame[f"{m}_lo"], frame[f"{m}_hi"]
        parts.append(part[part["value"].notna()])
    return pd.concat(parts, ignore_index=True)


def lens_lines(frame: pd.DataFrame, width: int = 285, height: int = 200):
    """Two panels, accuracy and agreement against depth (block k of L at k / L): one line per model, its 95 % interval
    over batches as a band (where there are 4 batches or more); a dashed rule at chance (the most common class's
    share) in the accuracy panel."""
    if frame.empty:
        raise VitlabError("no logit-lens results to draw")
    data = lens_long(frame)
    if data.empty:
        raise VitlabError("no block of these models has a readout to draw")
    panels = []
    for m, title in MEASURES.items():
        part = data[data["measure"] == m]
        if part.empty:
            continue
        base = alt.Chart(part).encode(
            x=alt.X("depth:Q", title=DEPTH, scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("model:N", legend=alt.Legend(labelLimit=300, symbolType="stroke", symbolStrokeWidth=2,
                                                         symbolOpacity=1)),
            tooltip=["model", "block", alt.Tooltip("value:Q", format=".3f", title=m),
                     alt.Tooltip("lo:Q", format=".3f", title="95 % lo"),
                     alt.Tooltip("hi:Q", format=".3f", title="95 % hi"), *interval_tooltips(part)])
        y = alt.Y("value:Q", title=title, scale=alt.Scale(domain=[0, 1]))
        band = base.mark_area(opacity=0.18).encode(y=alt.Y("lo:Q", title=title, scale=alt.Scale(domain=[0, 1])),
                                                   y2="hi:Q")
        layers = [band, base.mark_line().encode(y=y), base.mark_circle(size=30).encode(y=y)]
        if m == "accuracy" and part["chance"].notna().any():
            level = pd.DataFrame({"chance": sorted(part["chance"].dropna().unique())})
            layers.append(alt.Chart(level).mark_rule(color="#888", strokeDash=[4, 3]).encode(
                y="chance:Q", tooltip=[alt.Tooltip("chance:Q", format=".3f",
                                                   title="chance: the most common class's share")]))
        panels.append(alt.layer(*layers).properties(width=width, height=height, title=title))
    return alt.hconcat(*panels).properties(title="Logit lens: each block read out by the model's own norm and head")
