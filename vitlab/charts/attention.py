"""Charts of the attention analyses (Raghu et al. 2021, Figs 3-6): each builder takes a result's ``to_frame()``.

Also :func:`overlay`, which colours an attention map or receptive field over the image the model saw (a uint8
array the app shows with ``st.image`` and the CLI writes as PNG).
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ..errors import VitlabError
from .common import PAGE_WIDTH, interval_tooltips
from .words import labels_in_words

# anchor colours of "inferno" (dark -> bright), interpolated linearly: enough for an overlay, no matplotlib needed
_INFERNO = np.array([[0, 0, 4], [40, 11, 84], [101, 21, 110], [159, 42, 99], [212, 72, 66], [245, 125, 21],
                     [250, 193, 39], [252, 255, 164]], dtype=np.float64)


def colourise(values: np.ndarray) -> np.ndarray:
    """(H, W) values in [0, 1] -> (H, W, 3) uint8 inferno colours."""
    v = np.clip(np.nan_to_num(values), 0, 1) * (len(_INFERNO) - 1)
    lo = np.floor(v).astype(int).clip(0, len(_INFERNO) - 2)
    t = (v - lo)[..., None]
    return ((1 - t) * _INFERNO[lo] + t * _INFERNO[lo + 1]).round().astype(np.uint8)


def overlay(image: np.ndarray, heat: np.ndarray, alpha: float = 0.6, min_side: int = 0) -> np.ndarray:
    """Blend ``heat`` (h, w), scaled to its maximum and resized to the image by nearest neighbour, over ``image``.

    ``min_side``: enlarge small images (e.g. 28 px Fashion-MNIST) by a whole factor first, so the result is legible.
    """
    img = np.asarray(image)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    factor = -(-min_side // min(img.shape[:2])) if min_side else 1
    if factor > 1:
        img = img.repeat(factor, axis=0).repeat(factor, axis=1)
    h, w = img.shape[:2]
    heat = np.asarray(heat, dtype=np.float64)
    rows = (np.arange(h) * heat.shape[0] // h)[:, None]
    cols = (np.arange(w) * heat.shape[1] // w)[None, :]
    peak = heat.max()
    colours = colourise(heat[rows, cols] / (peak if peak > 0 else 1.0)).astype(np.float64)
    return ((1 - alpha) * img[..., :3] + alpha * colours).round().astype(np.uint8)


def _facet_model(chart, frame: pd.DataFrame):
    """One panel per model, stacked (side by side, two ViT-B/16s ran past a 1280-px page's right edge)."""
    return chart.facet(row=alt.Row("model:N", title=None)) if frame["model"].nunique() > 1 else chart


# the distance chart's plot: at most this wide, so that with its y axis and a two-column head legend it fits the
# page (PAGE_WIDTH); ViT-B/16's 12 x 12 heads were drawn 2,522 px wide at 16 px a head (issue 51)
DISTANCE_PLOT_WIDTH = 600


def attention_distance_chart(frame: pd.DataFrame, units: str = "px", title: str | None = None,
                             selected: tuple[int, int] | None = None):
    """One dot per head per layer: x = block, heads side by side within it, y = mean attention distance (Raghu et al.
    Figs 3-4; ViT paper Fig 7).

    The dashed line is the distance uniform attention over all keys would give, in the frame's own convention
    (prefix keys dropped with or without renormalising); bars: the mean's 95 % interval over images. The y axis is
    fitted to the dots, their intervals and the uniform line (not 0 to the image side, where 4-12 heads of a small
    model pile up). ``selected``: (block, head) to ring.
    """
    col, std, label = ("distance_px", "std_px", "pixels") if units == "px" else ("distance_frac", "std_frac",
                                                                               "fraction of image side")
    heads, blocks = frame["head"].nunique(), frame["layer"].nunique()
    legend = alt.Legend(columns=2) if heads > 8 else alt.Legend()
    uniform = "uniform_px" if units == "px" else "uniform_frac"
    ranged = units == "px" and "distance_lo" in frame
    shown = [frame[col]] + ([frame["distance_lo"], frame["distance_hi"]] if ranged else []) + (
        [frame[uniform]] if uniform in frame else [])
    values = pd.concat(shown).astype(float)
    values = values[np.isfinite(values)]
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    pad = max((hi - lo) * 0.08, 1e-3 * max(abs(hi), 1.0))
    yscale = alt.Scale(domain=[max(0.0, lo - pad), hi + pad], zero=False, nice=False)
    x = alt.X("layer:O", title="block", axis=alt.Axis(labelAngle=0))
    offset = alt.XOffset("head:N", sort=sorted(frame["head"].unique()))
    # 16 px a head where that fits; beyond, the plot keeps its width and a block's heads draw closer (ViT-L/16's
    # 24 x 16 at 1.6 px a head: a column of dots per block, as the paper's Fig 3 draws them), on smaller dots
    width = int(min(DISTANCE_PLOT_WIDTH, max(300, 16 * heads * blocks + 8 * blocks)))
    step = width / max(1, heads * blocks)
    dot = float(np.clip((1.6 * step) ** 2, 14, 45))
    colours = alt.Scale(scheme="tableau20") if heads > 10 else alt.Scale()  # tableau10 repeats from head 10 on
    dots = alt.Chart().mark_circle(size=dot, opacity=0.85).encode(
        x=x, xOffset=offset,
        y=alt.Y(f"{col}:Q", title=f"mean attention distance ({label})", scale=yscale),
        color=alt.Color("head:N", title="head", legend=legend, scale=colours),
        tooltip=["model", "layer", "head", alt.Tooltip(f"{col}:Q", format=".3f"),
                 alt.Tooltip(f"{std}:Q", format=".3f", title="std over images"), "images",
                 *([alt.Tooltip("distance_lo:Q", format=".3f", title="95 % lo (px)"),
                    alt.Tooltip("distance_hi:Q", format=".3f", title="95 % hi (px)")] if "distance_lo" in frame
                   else []), *interval_tooltips(frame)],
    )
    layers = [dots]
    if ranged:  # the mean's 95 % interval over images
        layers.append(alt.Chart().mark_rule(opacity=0.6).encode(x=x, xOffset=offset, y="distance_lo:Q",
                                                                y2="distance_hi:Q",
                                                                color=alt.Color("head:N", legend=None,
                                                                                scale=colours)))
    if uniform in frame and frame[uniform].notna().any():
        layers.append(alt.Chart().mark_rule(strokeDash=[4, 3], color="grey").encode(
            y=f"mean({uniform}):Q", tooltip=[alt.Tooltip(f"mean({uniform}):Q", title="uniform attention",
                                                         format=".3f")]))
    if selected is not None:
        layers.append(alt.Chart().mark_point(size=170, filled=False, color="black", strokeWidth=2.5).encode(
            x=x, xOffset=offset, y=f"{col}:Q").transform_filter(
            f"datum.layer == {int(selected[0])} && datum.head == {int(selected[1])}"))
    chart = alt.layer(*layers, data=frame).properties(
        width=width, height=260,
        title=title or "Mean attention distance per head (dashed: uniform attention)")
    return _facet_model(chart, frame)


def sorted_heads_chart(frame: pd.DataFrame, layers: list[int] | None = None, units: str = "px"):
    """Heads sorted by distance within each block, one colour per block (Raghu et al. Fig 3's layout)."""
    col = "distance_px" if units == "px" else "distance_frac"
    part = frame if layers is None else frame[frame["layer"].isin(layers)]
    part = part.assign(rank=part.groupby(["model", "layer"])[col].rank(method="first").astype(int) - 1)
    chart = alt.Chart(part).mark_line(point=True).encode(
        x=alt.X("rank:O", title="heads sorted by mean distance"),
        y=alt.Y(f"{col}:Q", title=f"mean attention distance ({'pixels' if units == 'px' else 'fraction'})"),
        color=alt.Color("layer:O", title="block", scale=alt.Scale(scheme="viridis")),
        tooltip=["model", "layer", "head", alt.Tooltip(f"{col}:Q", format=".3f")],
    ).properties(width=260, height=260, title="Heads sorted by attention distance")
    return _facet_model(chart, part)


def parity_chart(frame: pd.DataFrame):
    """Max |difference| per block between captured and fused forwards, and captured vs recomputed softmax."""
    long = frame.melt(id_vars=["layer", "model"], value_vars=["max_abs_diff_output", "max_abs_diff_probs"],
                      var_name="check", value_name="max_abs_diff").dropna()
    long["check"] = long["check"].map({"max_abs_diff_output": "block output (capture vs fused)",
                                       "max_abs_diff_probs": "probabilities (hook vs recomputed)"})
    # log axis: exact zeros are drawn at the floor
    long["shown"] = long["max_abs_diff"].clip(lower=1e-12)
    return alt.Chart(long).mark_point(filled=True, size=70).encode(
        x=alt.X("layer:O", title="block"), xOffset="check:N",
        y=alt.Y("shown:Q", scale=alt.Scale(type="log", domain=[1e-12, max(1e-3, float(long["shown"].max()))]),
                title="max |difference| (exact zeros at 1e-12)"),
        shape=alt.Shape("check:N", legend=None),
        color=alt.Color("check:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0)),
        tooltip=["model", "layer", "check", alt.Tooltip("max_abs_diff:Q", format=".2e")],
    ).properties(width=max(240, 30 * frame["layer"].nunique()), height=220,
                 title=f"Attention capture parity: {frame['model'].iloc[0]}")


def attention_map_chart(frame: pd.DataFrame, size: int = 180, columns: int = 7, select: str | None = None,
                        image: str | None = None):
    """Heatmap of an AttentionMap frame over the patch grid; one panel per head when several; query marked.

    ``select`` names a point selection on (row, col): the app reads the clicked patch as the next query token.
    ``image``: the image in a person's words for the title ("image 0 (Ankle boot)"); default: its id's last part.
    """
    gh = int(frame["row"].max()) + 1
    heads = list(dict.fromkeys(frame["head"]))
    base = alt.Chart().encode(x=alt.X("col:O", title=None, axis=None),
                              y=alt.Y("row:O", title=None, axis=None))
    rect = base.mark_rect().encode(
        color=alt.Color("weight:Q", scale=alt.Scale(scheme="inferno"), title="attention"),
        tooltip=["head", "row", "col", alt.Tooltip("weight:Q", format=".4f")])
    if select:
        rect = rect.add_params(alt.selection_point(name=select, fields=["row", "col"], on="click"))
    query = base.transform_filter("isValid(datum.query_row) && datum.row == datum.query_row && "
                                  "datum.col == datum.query_col").mark_point(shape="cross", color="cyan", size=80)
    gw = int(frame["col"].max()) + 1
    cell = max(1, size // max(gh, gw))  # whole-pixel cells: fractional ones leave seams in PNGs
    layer = alt.layer(rect, query, data=frame).properties(width=cell * gw, height=cell * gh)
    first = frame.iloc[0]
    image = image or str(first["image"]).replace("\\", "/").rsplit("/", 1)[-1]
    title = f"{first['model']} · {image} · block {first['layer']} · query {first['query']}"
    if len(heads) > 1:
        return layer.facet(facet=alt.Facet("head:N", sort=heads, title="head"), columns=columns, title=title)
    return layer.properties(title=f"{title} · head {heads[0]}")


def head_subset_chart(frame: pd.DataFrame):
    """CKA of head subsets (local -> global) with the other model's layers (Raghu et al. Fig 5)."""
    order = list(dict.fromkeys(frame["layer_b"]))
    subsets = frame[~frame["all_heads"]]
    lines = alt.Chart(subsets).mark_line(point=True).encode(
        x=alt.X("layer_b:N", sort=order, title=f"{frame['model_b'].iloc[0]} layer",
                axis=alt.Axis(labelAngle=-45, labelLimit=170, labelExpr=labels_in_words(order))),
        y=alt.Y("cka:Q", title="CKA"),
        color=alt.Color("mean_distance_px:Q", scale=alt.Scale(scheme="viridis"), title="mean distance (px)",
                        legend=alt.Legend(type="gradient")),
        detail="subset:N",
        tooltip=["subset_label", "heads", alt.Tooltip("mean_distance_px:Q", format=".1f"), "layer_b",
                 alt.Tooltip("cka:Q", format=".4f")])
    ref = alt.Chart(frame[frame["all_heads"]]).mark_line(strokeDash=[4, 3], color="black").encode(
        x=alt.X("layer_b:N", sort=order), y="cka:Q", tooltip=["subset_label", alt.Tooltip("cka:Q", format=".4f")])
    layers = [lines, ref]
    if "cka_lo" in frame:  # each point's 95 % interval over batches
        layers.append(alt.Chart(subsets).mark_rule(opacity=0.5).encode(
            x=alt.X("layer_b:N", sort=order), y="cka_lo:Q", y2="cka_hi:Q",
            color=alt.Color("mean_distance_px:Q", scale=alt.Scale(scheme="viridis"), legend=None),
            detail="subset:N"))
    return alt.layer(*layers).properties(
        width=max(260, 34 * len(order)), height=260,
        title=f"{frame['model_a'].iloc[0]} head subsets (local → global) vs {frame['model_b'].iloc[0]}")


def receptive_field_chart(frame: pd.DataFrame, width: int = PAGE_WIDTH, min_tile: int = 150):
    """A grid of normalised effective receptive fields, one panel per layer (Raghu et al. Fig 6), as many a row as
    fit ``width`` (the legend included) with each tile at least ``min_tile`` px a side, so that a field's shape can
    be seen (ViT-B/16's 64 x 64 maps were 64-px tiles at six a row, a bright dot each: issue 51)."""
    order = list(dict.fromkeys(frame.sort_values("order")["layer"]))
    gh, gw = int(frame["row"].max()) + 1, int(frame["col"].max()) + 1
    side = max(gh, gw)
    room = width - _RF_LEGEND
    # whole-pixel cells (fractional ones leave seams in PNGs), as large as min_tile asks and the width allows
    cell = max(1, min(-(-min_tile // side), (room - _RF_GAP) // side))
    columns = max(1, min(len(order), (room + _RF_GAP) // (cell * side + _RF_GAP)))
    chart = alt.Chart(frame).mark_rect().encode(
        x=alt.X("col:O", axis=None), y=alt.Y("row:O", axis=None),
        color=alt.Color("value:Q", scale=alt.Scale(scheme="inferno", domain=[0, 1]), title="|grad| / max"),
        tooltip=["layer", "row", "col", alt.Tooltip("value:Q", format=".3f")],
    ).properties(width=cell * gw, height=cell * gh)
    first = frame.iloc[0]
    return chart.facet(facet=alt.Facet("layer:N", sort=order, title=None,
                                       header=alt.Header(labelExpr=labels_in_words(order))), columns=columns,
                       spacing=_RF_GAP,
                       title=f"Effective receptive fields ({first['residual']}-residual): {first['model']}")


_RF_LEGEND, _RF_GAP = 90, 16  # px: the colour legend beside the grid with its gap, and the gap between tiles


def receptive_radius_chart(summary: pd.DataFrame, width: int = 420):
    """Radius of the centred disc holding 50 % and 90 % of the gradient, as a fraction of the input side, per layer
    (``ReceptiveFieldResult.summary_frame()``); the 95 % intervals over images (``radius50_lo_frac`` ...), where
    present, as error bars with their numbers in the tooltip."""
    if summary.empty:
        raise VitlabError("no receptive-field radii to draw")
    order = list(dict.fromkeys(summary["layer"]))
    layers = []
    for mass in (50, 90):
        col, lo, hi = f"radius{mass}_frac", f"radius{mass}_lo_frac", f"radius{mass}_hi_frac"
        ranged = {lo, hi} <= set(summary) and summary[lo].notna().any()
        tooltip = ["model", "residual", "layer", alt.Tooltip(f"radius{mass}_px:Q", format=".1f", title=f"{mass} % px"),
                   alt.Tooltip(f"{col}:Q", format=".3f", title=f"{mass} % of side")]
        tooltip += [alt.Tooltip(f"{lo}:Q", format=".3f", title="95 % lo"),
                    alt.Tooltip(f"{hi}:Q", format=".3f", title="95 % hi")] if ranged else []
        base = alt.Chart(summary).transform_calculate(mass=f"'{mass} % of the gradient'").encode(
            x=alt.X("layer:N", sort=order, title="layer",
                    axis=alt.Axis(labelAngle=-45, labelLimit=170, labelExpr=labels_in_words(order))),
            y=alt.Y(f"{col}:Q", title="radius / input side", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("mass:N", title=None), detail="model:N", tooltip=tooltip)
        # points in a layer of their own, as in the probe chart: with point=True the dash legend loses its symbols
        layers += [base.mark_line().encode(strokeDash=alt.StrokeDash("residual:N", title="residual", legend=alt.Legend(
            symbolType="stroke", symbolStrokeColor="#444", symbolStrokeWidth=2))), base.mark_circle(size=28)]
        if ranged:
            layers.append(base.mark_rule(strokeWidth=1.5, opacity=0.7).encode(y=f"{lo}:Q", y2=f"{hi}:Q"))
    return alt.layer(*layers).properties(
        width=width, height=240, title=f"Receptive-field radius by layer: {', '.join(dict.fromkeys(summary['model']))}")
