"""The paper-style figure of each tour claim (Raghu et al. 2021), drawn from the data the tour's run already holds
(``TourReport.figures``; nothing is recomputed), in the paper's own forms: CKA heatmaps side by side with layer
numbers for ticks (Figs 1-2, 8), mean attention distance per head with each block's heads sorted by distance along
x (Figs 3-4), head distance against CKA with the CNN (Fig 5), receptive-field maps (Fig 6), the token × block
heatmap of ‖z‖/‖f(z)‖ beside its per-block lines (Fig 7), token-by-position CKA maps at each model's own grid size
(Figs 9-10), probe curves (Fig 11) and block-by-block CKA curves (Fig 12). Every builder takes the frames one
``measure_*`` returned.

Sizes: every figure is laid out for a design box of about 620 × 520 px with type that stays legible when the figure
is scaled down to a 1280-px slide's column or up to a 1920-px one (the slides and the report scale the SVG to their
column; the figure's own pixel size only sets its aspect ratio and the type's size relative to the marks). Legends
list only what is drawn: a model whose values are all non-finite (a zero branch) has no rows, so no legend entry.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

FONT = {"label": 13, "title": 14, "chart": 16}
HEAT = 250  # px: one heatmap of a 2 × 2 grid
GRID = 130  # px: one map of a 4-column grid


def styled(chart):
    """The figure's type sizes (top level only: after this the chart cannot be concatenated)."""
    return (chart.configure_axis(labelFontSize=FONT["label"], titleFontSize=FONT["title"])
            .configure_legend(labelFontSize=FONT["label"], titleFontSize=FONT["label"], labelLimit=260)
            .configure_header(labelFontSize=FONT["label"], titleFontSize=FONT["title"])
            .configure_title(fontSize=FONT["chart"], anchor="start", limit=640)
            .configure_view(strokeWidth=0))


def _layer_numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """Each layer name's position in its model's order (the paper's heatmaps number layers, they do not name them)."""
    out = frame.copy()
    for col in ("layer_a", "layer_b"):
        order = {name: i for i, name in enumerate(dict.fromkeys(frame[col]))}
        out[col.replace("layer", "index")] = out[col].map(order)
    return out


def heatmaps(frame: pd.DataFrame, title: str, size: int = HEAT) -> alt.ConcatChart:
    """Self-CKA heatmaps of each model side by side, two to a row (the trained pair, then the twins): layer number
    across and up, as the paper draws them (rows of ``CKAResult.to_frame``). Each map is a little wider than tall,
    so that the 2 × 2 figure fills a 16:9 slide's column (a square one is held back by the screen's height)."""
    maps = []
    for model, part in frame.groupby("model_a", sort=False):
        part = _layer_numbers(part)
        n = int(part["index_a"].max()) + 1
        ticks = list(range(0, n, max(1, n // 6)))
        maps.append(alt.Chart(part, title=alt.Title(model, fontSize=FONT["title"])).mark_rect().encode(
            x=alt.X("index_b:O", title="layer", axis=alt.Axis(values=ticks, labelAngle=0)),
            y=alt.Y("index_a:O", title="layer", sort="descending", axis=alt.Axis(values=ticks)),
            color=alt.Color("cka:Q", scale=alt.Scale(scheme="magma", domain=[0, 1]), title="CKA"),
            tooltip=["layer_a", "layer_b", alt.Tooltip("cka:Q", format=".3f")],
        ).properties(width=round(size * 1.15), height=size))
    return alt.concat(*maps, columns=2, spacing=24).properties(title=title)


def image_grid(frame: pd.DataFrame, title: str, size: int = GRID, columns: int = 4, scheme: str = "viridis",
               value_title: str = "value", outline_own: bool = False, aspect: float = 1.0) -> alt.FacetChart:
    """One small heatmap per panel (row, col, value), e.g. receptive-field maps or a token's CKA with each
    position. Each panel keeps its own grid: a 2 × 2 map fills its square as a 4 × 4 one does (the paper draws each
    model at its own resolution); a panel's name too long for one line is written on two at its ': '
    ("zoo:vit-cls@random:0" above "token 10"), whole, never cut at a panel's width. ``aspect``: a panel's width over
    its height (a little over 1 lets a 4 × 4 grid fill a 16:9 slide's column). ``outline_own`` circles the cells
    marked ``own`` (a token's own position)."""
    side = int(frame["row"].max()) + 1 if len(frame) else 0
    if side > 16:  # a 28 × 28 map is 784 SVG paths a panel: drawn as 2 × 2 cell means, a quarter of the file
        frame = frame.assign(row=frame["row"] // 2, col=frame["col"] // 2).groupby(
            ["panel", "row", "col"], sort=False, as_index=False).agg(value=("value", "mean"))
    width = round(size * aspect)
    base = alt.Chart().encode(x=alt.X("col:O", axis=None), y=alt.Y("row:O", axis=None))
    rect = base.mark_rect().encode(color=alt.Color("value:Q", scale=alt.Scale(scheme=scheme), title=value_title),
                                   tooltip=["panel", "row", "col", alt.Tooltip("value:Q", format=".3f")])
    layers = [rect]
    if outline_own and "own" in frame:
        layers.append(base.transform_filter("datum.own").mark_point(shape="circle", color="white", size=size * 1.2,
                                                                    filled=False, strokeWidth=3))
    return alt.layer(*layers, data=frame).properties(width=width, height=size).facet(
        facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(frame["panel"])),
                        header=alt.Header(labelLimit=width + 28, labelFontSize=12, labelExpr=(
                            f"length(datum.label) * 6.7 > {width + 12} ? split(datum.label, ': ') : datum.label"))),
        columns=columns, spacing={"row": 6, "column": 12},
    ).resolve_scale(x="independent", y="independent").properties(title=title)


def head_distances(frame: pd.DataFrame, title: str) -> alt.HConcatChart:
    """Figs 3-4: one dot per head, x = block with the block's heads sorted by mean attention distance (as the paper
    spreads them), y = mean distance with its 95 % interval over images; dashed: uniform attention. One panel per
    model (the trained ViT, then its untrained twin) on a shared y axis."""
    f = frame.copy()
    heads = f.groupby(["model", "layer"])["head"].transform("count")
    rank = f.groupby(["model", "layer"])["distance_px"].rank(method="first") - 1
    f["x"] = f["layer"] + (rank + 0.5) / heads * 0.8 - 0.4  # heads of block b spread over [b - 0.4, b + 0.4]
    blocks = sorted(f["layer"].unique())
    panels = []
    for model, part in f.groupby("model", sort=False):
        base = alt.Chart(part)
        x = alt.X("x:Q", title="block (heads sorted by distance)", scale=alt.Scale(domain=[-0.6, blocks[-1] + 0.6]),
                  axis=alt.Axis(values=blocks, format="d", grid=False))
        y_title = "mean attention distance (px)"
        y = alt.Y("distance_px:Q", title=y_title, scale=alt.Scale(zero=False))
        tooltip = ["model", "layer", "head", alt.Tooltip("distance_px:Q", format=".2f"),
                   alt.Tooltip("distance_lo:Q", format=".2f", title="95 % lo"),
                   alt.Tooltip("distance_hi:Q", format=".2f", title="95 % hi")]
        panels.append(alt.layer(
            base.mark_rule(color="#999", strokeDash=[6, 4]).encode(y="mean(uniform_px):Q"),
            base.mark_rule(color="#bbb").encode(x=x, y=alt.Y("distance_lo:Q", title=y_title), y2="distance_hi:Q"),
            base.mark_circle(size=70, opacity=0.9).encode(x=x, y=y, color=alt.Color(
                "layer:O", scale=alt.Scale(scheme="viridis"), legend=None), tooltip=tooltip),
        ).properties(width=290, height=330, title=alt.Title(model, fontSize=FONT["title"])))
    return alt.hconcat(*panels, spacing=18).resolve_scale(y="shared").properties(title=title)


def head_scatter(frame: pd.DataFrame, title: str) -> alt.Chart:
    """Fig 5: each lower-block head's mean attention distance against its mean CKA with the CNN's lower layers."""
    return alt.Chart(frame).mark_circle(size=90, opacity=0.85).encode(
        x=alt.X("distance_px:Q", title="mean attention distance (px)", scale=alt.Scale(zero=False)),
        y=alt.Y("cka:Q", title="mean CKA with the CNN's lower layers", scale=alt.Scale(zero=False)),
        color=alt.Color("block:O", title="block", scale=alt.Scale(scheme="viridis")),
        shape=alt.Shape("model:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["model", "head", alt.Tooltip("distance_px:Q", format=".2f"), alt.Tooltip("cka:Q", format=".3f")],
    ).properties(title=title, width=560, height=420)


def curves(frame: pd.DataFrame, x: str, y: str, colour: str, title: str, y_title: str, dash: str | None = None,
           interval: tuple[str, str] | None = None, log: bool = False, x_title: str = "normalised depth",
           width: int = 560, height: int = 400):
    """Lines of ``y`` against ``x`` per ``colour`` (and ``dash``), with error bars from ``interval`` columns. Rows
    whose ``y`` is not finite are dropped first, so a series with nothing to draw has no legend entry."""
    frame = frame[np.isfinite(frame[y].astype(float))]
    enc = {"x": alt.X(f"{x}:Q", title=x_title),
           "y": alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(type="log") if log else alt.Scale(zero=False)),
           "color": alt.Color(f"{colour}:N", title=None, legend=alt.Legend(labelLimit=300, orient="bottom",
                                                                            columns=2))}
    tooltip = [colour, *([dash] if dash else []), alt.Tooltip(f"{y}:Q", format=".3f")]
    if interval:
        tooltip += [alt.Tooltip(f"{interval[0]}:Q", format=".3f", title="95 % lo"),
                    alt.Tooltip(f"{interval[1]}:Q", format=".3f", title="95 % hi")]
    base = alt.Chart(frame).encode(**enc, tooltip=tooltip)
    lines = base.mark_line(point=False, strokeWidth=2.5).encode(
        **({"strokeDash": alt.StrokeDash(f"{dash}:N", title=None, legend=alt.Legend(orient="bottom"))} if dash
           else {}), detail=f"{dash or colour}:N")
    layers = [lines, base.mark_circle(size=50)]
    if interval:
        layers.append(base.mark_rule().encode(y=f"{interval[0]}:Q", y2=f"{interval[1]}:Q"))
    return alt.layer(*layers).properties(title=title, width=width, height=height)


def skip_figure(frame: pd.DataFrame, title: str) -> alt.HConcatChart:
    """Fig 7 as in the paper: left, the trained ViT's ‖z‖/‖f(z)‖ per token (the CLS token first, then the spatial
    tokens) and block, log colour: the CLS token's phase transition shows as its column changing where the spatial
    tokens' do not; right, the per-block mean over CLS and over spatial tokens of every model drawn (rows of
    ``measure._skip_curve``: model, block, depth, token, kind, ratio)."""
    f = frame[np.isfinite(frame["ratio"].astype(float)) & (frame["ratio"] > 0)]
    vit = f[f["kind"] == "cls"]["model"].unique()
    panels = []
    if len(vit):
        tokens = f[f["model"] == vit[0]]
        order = list(dict.fromkeys(tokens.sort_values("token")["token_label"]))
        panels.append(alt.Chart(tokens, title=alt.Title(f"{vit[0]}: per token", fontSize=FONT["title"])).mark_rect()
                      .encode(x=alt.X("token_label:O", sort=order, title="token (CLS, then spatial)",
                                      axis=alt.Axis(labelAngle=0, values=order[:1] + order[5::4])),
                              y=alt.Y("block:O", title="block", sort="descending"),
                              color=alt.Color("ratio:Q", scale=alt.Scale(type="log", scheme="viridis"),
                                              title="‖z‖/‖f(z)‖", legend=alt.Legend(orient="bottom")),
                              tooltip=["model", "block", "token_label", alt.Tooltip("ratio:Q", format=".2f")])
                      .properties(width=230, height=300))
    lines = alt.Chart(f).transform_aggregate(ratio="mean(ratio)", groupby=["model", "kind", "block"])
    enc = {"x": alt.X("block:Q", title="block", axis=alt.Axis(format="d", tickMinStep=1)),
           "y": alt.Y("ratio:Q", title="‖z‖ / ‖f(z)‖ (mean over tokens)", scale=alt.Scale(type="log")),
           "color": alt.Color("model:N", title=None, legend=alt.Legend(orient="bottom", columns=1, labelLimit=260)),
           "strokeDash": alt.StrokeDash("kind:N", title=None, legend=alt.Legend(orient="bottom")),
           "tooltip": ["model", "kind", "block", alt.Tooltip("ratio:Q", format=".2f")]}
    panels.append(alt.layer(lines.mark_line(strokeWidth=2.5).encode(**enc),
                            lines.mark_circle(size=45).encode(**{k: v for k, v in enc.items() if k != "strokeDash"}))
                  .properties(width=300, height=300, title=alt.Title("per block", fontSize=FONT["title"])))
    return alt.hconcat(*panels, spacing=30).resolve_scale(color="independent").properties(title=title)


def paper_chart(key: str, data: dict, figure: str):
    """The paper-style chart of claim ``key`` from its figure data (styled: a top-level chart); None when the check
    left none."""
    if not data:
        return None
    return styled(_paper_chart(key, data, f"{figure} (as in the paper)"))


def _paper_chart(key: str, data: dict, title: str):
    if key in ("cka", "removal"):
        # counted as the lecture's words count it ("block 4 of 6": the 4th of 6; the CSV keeps the model's index)
        n, b = data.get("blocks"), data.get("block")
        extra = "" if b is None else (f": the left model trained without the skips of block {b + 1} of {n}" if n
                                      else f": block {b} trained without its skips in the left model")
        return heatmaps(data["cka"], title + extra)
    if key == "distance":
        return head_distances(data["distance"], title)
    if key == "heads":
        return head_scatter(data["heads"], title)
    if key == "receptive":
        # the ViT's attention sublayer and the CNN's first block, both after their residual (issue 37)
        return image_grid(data["fields"], title + ": mean |gradient| of the centre token, normalised; both after "
                          "their residual",
                          value_title="|gradient|")
    if key == "skips":
        return skip_figure(data["skips"], title)
    if key in ("localization", "gap"):
        return image_grid(data["maps"], title + ": CKA of a token with each input position (circle: its own)",
                          size=110, scheme="magma", value_title="CKA", outline_own=True, aspect=1.2)
    if key == "probes":
        return curves(data["probes"], "depth", "accuracy", "model", title, "few-shot test accuracy",
                      dash="representation", interval=("accuracy_lo", "accuracy_hi"))
    if key == "scale":
        return curves(data["scale"], "depth", "cka", "pair", title, "CKA with the full-data model, block by block")
    raise KeyError(key)
