"""The paper-style figure of each tour claim (Raghu et al. 2021), drawn from the data the tour's run already holds
(``TourReport.figures``; nothing is recomputed): CKA heatmaps side by side (Figs 1-2, 8), mean attention distance
per head and block (Figs 3-4), head distance against CKA with the CNN (Fig 5), receptive-field maps (Fig 6), skip
ratio curves (Fig 7), token-by-position CKA maps (Figs 9-10), probe curves (Fig 11) and block-by-block CKA curves
(Fig 12). Every builder takes the frames one ``measure_*`` returned."""

from __future__ import annotations

import altair as alt
import pandas as pd

from .attention import attention_distance_chart
from .cka import cka_heatmap


def heatmaps(frame: pd.DataFrame, title: str, size: int = 170) -> alt.ConcatChart:
    """Self-CKA heatmaps of each model side by side, two to a row (the trained pair, then the twins) so that a
    slide's column holds them (rows of ``CKAResult.to_frame``)."""
    maps = [cka_heatmap(part, title=model, size=size).properties(width=size, height=size)
            for model, part in frame.groupby("model_a", sort=False)]
    return alt.concat(*maps, columns=2).properties(title=title)


def image_grid(frame: pd.DataFrame, title: str, size: int = 120, columns: int = 4, scheme: str = "viridis",
               value_title: str = "value", outline_own: bool = False) -> alt.FacetChart:
    """One small heatmap per panel (row, col, value), e.g. receptive-field maps or a token's CKA with each
    position; ``outline_own`` circles the cells marked ``own`` (a token's own position)."""
    base = alt.Chart().encode(x=alt.X("col:O", axis=None), y=alt.Y("row:O", axis=None))
    rect = base.mark_rect().encode(color=alt.Color("value:Q", scale=alt.Scale(scheme=scheme), title=value_title),
                                   tooltip=["panel", "row", "col", alt.Tooltip("value:Q", format=".3f")])
    layers = [rect]
    if outline_own and "own" in frame:
        layers.append(base.transform_filter("datum.own").mark_point(shape="circle", color="white", size=60,
                                                                    filled=False, strokeWidth=2))
    return alt.layer(*layers, data=frame).properties(width=size, height=size).facet(
        facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(frame["panel"]))), columns=columns,
    ).properties(title=title)


def head_scatter(frame: pd.DataFrame, title: str) -> alt.Chart:
    """Fig 5: each lower-block head's mean attention distance against its mean CKA with the CNN's lower layers."""
    return alt.Chart(frame).mark_circle(size=70, opacity=0.85).encode(
        x=alt.X("distance_px:Q", title="mean attention distance (px)", scale=alt.Scale(zero=False)),
        y=alt.Y("cka:Q", title="mean CKA with the CNN's lower layers", scale=alt.Scale(zero=False)),
        color=alt.Color("block:N", title="block"), shape=alt.Shape("model:N", title=None),
        tooltip=["model", "head", alt.Tooltip("distance_px:Q", format=".2f"), alt.Tooltip("cka:Q", format=".3f")],
    ).properties(title=title, width=380, height=300)


def curves(frame: pd.DataFrame, x: str, y: str, colour: str, title: str, y_title: str, dash: str | None = None,
           interval: tuple[str, str] | None = None, log: bool = False, x_title: str = "normalised depth"):
    """Lines of ``y`` against ``x`` per ``colour`` (and ``dash``), with error bars from ``interval`` columns."""
    enc = {"x": alt.X(f"{x}:Q", title=x_title),
           "y": alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(type="log") if log else alt.Scale(zero=False)),
           "color": alt.Color(f"{colour}:N", title=None, legend=alt.Legend(labelLimit=300, orient="bottom"))}
    tooltip = [colour, *([dash] if dash else []), alt.Tooltip(f"{y}:Q", format=".3f")]
    if interval:
        tooltip += [alt.Tooltip(f"{interval[0]}:Q", format=".3f", title="95 % lo"),
                    alt.Tooltip(f"{interval[1]}:Q", format=".3f", title="95 % hi")]
    base = alt.Chart(frame).encode(**enc, tooltip=tooltip)
    lines = base.mark_line(point=False).encode(
        **({"strokeDash": alt.StrokeDash(f"{dash}:N", title=None, legend=alt.Legend(orient="bottom"))} if dash
           else {}), detail=f"{dash or colour}:N")
    layers = [lines, base.mark_circle(size=40)]
    if interval:
        layers.append(base.mark_rule().encode(y=f"{interval[0]}:Q", y2=f"{interval[1]}:Q"))
    return alt.layer(*layers).properties(title=title, width=380, height=260)


def paper_chart(key: str, data: dict, figure: str):
    """The paper-style chart of claim ``key`` from its figure data; None when the check left none."""
    if not data:
        return None
    title = f"{figure} (as in the paper)"
    if key in ("cka", "removal"):
        extra = f": block {data['block']} trained without its skips in the left model" if "block" in data else ""
        return heatmaps(data["cka"], title + extra)
    if key == "distance":
        return attention_distance_chart(data["distance"], title=title)
    if key == "heads":
        return head_scatter(data["heads"], title)
    if key == "receptive":
        return image_grid(data["fields"], title + ": mean |gradient| of the centre token, normalised",
                          value_title="|gradient|")
    if key == "skips":
        return curves(data["skips"], "depth", "ratio", "model", title, "‖z‖ / ‖f(z)‖ (mean over tokens)",
                      dash="kind", log=True)
    if key in ("localization", "gap"):
        return image_grid(data["maps"], title + ": CKA of a token with each input position (circle: its own)",
                          size=90, scheme="magma", value_title="CKA", outline_own=True)
    if key == "probes":
        return curves(data["probes"], "depth", "accuracy", "model", title, "few-shot test accuracy",
                      dash="representation", interval=("accuracy_lo", "accuracy_hi"))
    if key == "scale":
        return curves(data["scale"], "depth", "cka", "pair", title, "CKA with the full-data model, block by block")
    raise KeyError(key)
