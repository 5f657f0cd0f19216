"""Localization charts (Raghu et al. 2021, Figs 9-10); input: ``LocalizationResult.to_frame()`` / ``.summary()``."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ..errors import VitlabError
from .common import interval_tooltips
from .words import layer_in_words

OUTLINE = "#00e5ff"  # the chosen token's outline on every map: cyan reads on magma/inferno and on grey photos


def spread_tokens(frame: pd.DataFrame, count: int = 6) -> list[int]:
    """A few spatial tokens spread over the grid (corners, centre, ...), for a compact figure like Fig 9."""
    spatial = frame[frame["kind"] == "spatial"][["token", "token_row", "token_col"]].drop_duplicates()
    if spatial.empty:
        return sorted(frame["token"].unique())[:count]
    rows, cols = spatial["token_row"].max() + 1, spatial["token_col"].max() + 1
    wanted = [(0, 0), (0, cols - 1), (rows // 2, cols // 2), (rows - 1, 0), (rows - 1, cols - 1),
              (rows // 4, cols // 4),
              (rows // 2, 0), (0, cols // 2)]
    picks = []
    for r, c in wanted:
        hit = spatial[(spatial["token_row"] == r) & (spatial["token_col"] == c)]["token"]
        if len(hit) and int(hit.iloc[0]) not in picks:
            picks.append(int(hit.iloc[0]))
    return picks[:count]


def localization_maps(frame: pd.DataFrame, tokens: list[int] | None = None, columns: int = 6, cell: int = 110,
                      title: str | list[str] | None = None):
    """One heatmap over grid positions per token: CKA between that token and each input patch (Fig 9).

    ``frame`` holds one model and layer; the token's own position is ringed.
    """
    if frame.empty:
        raise VitlabError("no localization result to draw")
    if frame[["model", "layer"]].drop_duplicates().shape[0] != 1:
        raise VitlabError("localization_maps draws one model and layer: filter the frame first")
    tokens = tokens if tokens is not None else spread_tokens(frame)
    part = frame[frame["token"].isin(tokens)].copy()
    part["token_label"] = part.apply(lambda r: "CLS" if r["kind"] == "cls" else
                                     f"token {r['token']} ({r['token_row']},{r['token_col']})", axis=1)
    order = list(dict.fromkeys(part.sort_values("token")["token_label"]))
    base = alt.Chart().encode(x=alt.X("pos_col:O", title=None, axis=None), y=alt.Y("pos_row:O", title=None, axis=None))
    rect = base.mark_rect().encode(color=alt.Color("cka:Q", scale=alt.Scale(scheme="magma", domain=[0, 1]),
                                                   title="CKA"),
                                   tooltip=["token", "pos_row", "pos_col", alt.Tooltip("cka:Q", format=".3f")])
    ring = base.mark_rect(filled=False, stroke=OUTLINE, strokeWidth=3).transform_filter(
        alt.datum.own)
    model, layer = frame["model"].iloc[0], frame["layer"].iloc[0]
    return alt.layer(rect, ring, data=part).properties(width=cell, height=cell).facet(
        facet=alt.Facet("token_label:N", sort=order, title=None), columns=columns,
    ).properties(title=title or f"CKA of a token with the input patch at each position: {model} {layer}")


def localization_summary_chart(summary: pd.DataFrame, cell: int = 150, title: str | None = None,
                               selected: tuple[int, int] | None = None, select: str | None = None):
    """Per model and layer, each spatial token drawn at its own position, coloured by the CKA with its own patch;
    a dot where that patch is the token's best match (argmax): how well each token localizes (Figs 9-10).

    ``selected``: (row, col) of a token to outline; ``select``: name of a click selection on (token_row, token_col)
    on the cells (the page reads the clicked token with ``lab.clicked``). Grey cells: CKA undefined (NaN)."""
    spatial = summary[summary["kind"] == "spatial"].copy()
    if spatial.empty:
        raise VitlabError("no spatial tokens to summarise")
    spatial["panel"] = spatial["model"] + " · " + spatial["layer"].map(lambda t: layer_in_words(str(t)))
    side = int(max(spatial["token_row"].max(), spatial["token_col"].max())) + 1
    cell = max(1, cell // side) * side  # whole-pixel cells: a 14x14 grid in 220 px left seams
    base = alt.Chart().encode(x=alt.X("token_col:O", title=None, axis=None),
                              y=alt.Y("token_row:O", title=None, axis=None))
    rect = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        color=alt.condition("isValid(datum.own_cka) && isFinite(datum.own_cka)",
                            alt.Color("own_cka:Q", scale=alt.Scale(scheme="magma", domain=[0, 1]),
                                      title=["CKA with", "own patch"], legend=alt.Legend(titleLimit=400)),
                            alt.value("#cccccc")),
        tooltip=["model", "layer", "token", "token_row", "token_col", alt.Tooltip("own_cka:Q", format=".3f"),
                 "own_rank", "argmax_position", "localized"])
    if select:
        rect = rect.add_params(alt.selection_point(name=select, fields=["token_row", "token_col"], on="click"))
    dots = base.mark_circle(color="#00d0ff", size=max(18, min(60, (cell // side) ** 2 // 10))).transform_filter(
        alt.datum.localized)
    layers = [rect, dots]
    if selected is not None:
        layers.append(base.mark_rect(filled=False, stroke="#00e5ff", strokeWidth=3).transform_filter(
            f"datum.token_row == {int(selected[0])} && datum.token_col == {int(selected[1])}"))
    return alt.layer(*layers, data=spatial).properties(width=cell, height=cell).facet(
        facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(spatial["panel"]))), columns=3,
    ).properties(title=title or "CKA of each token with its own input patch (dot: own patch is the best match)")


LABEL_PX_PER_CHAR = 6.5  # a generous width of one character of an axis label at Vega's default 10 px font


def layer_axis(layers, width: int) -> tuple[list[str], alt.Axis]:
    """The x axis of a per-layer chart in words ("block 1", "stage 2 block 1": ``words.layer_in_words``), in the
    frame's order: level while every label fits its band of the ``width``, else turned 35° (6 layers of two models
    at 360 px overlapped level at 1280 px: issue 38)."""
    words = list(dict.fromkeys(layer_in_words(str(x)) for x in layers))
    band = width / max(1, len(words))
    fits = max(len(w) for w in words) * LABEL_PX_PER_CHAR <= band - 4
    return words, alt.Axis(labelAngle=0 if fits else -35, labelLimit=140, labelOverlap=False)


def localization_rate_chart(rate: pd.DataFrame, title: str | None = None, width: int = 360,
                            corrected: bool | None = None, bars: str = "bars: 95 % interval"):
    """How well tokens localize, per layer and model (``LocalizationReport.rates()``).

    ``corrected`` (default: when the frame has it): the chance-corrected rate (rate − chance) / (1 − chance), where
    chance is 1/positions, so grids of different sizes (chance 0.005 at 14×14, 0.06 at 4×4, 0.25 at 2×2) share one
    scale: 0 = chance, 1 = every token's own patch is its best match; its 95 % interval (error bars) is the raw
    interval mapped the same way. Otherwise the raw fraction of tokens, with chance as a tick on each bar.
    Layers are labelled in words (tooltip and CSV: the tap's name); ``bars`` says what the error bars are
    (``LocalizationReport.interval_caption``)."""
    corrected = ("corrected" in rate) if corrected is None else corrected
    words, axis = layer_axis(rate["layer"], width)
    rate = rate.assign(where=[layer_in_words(str(x)) for x in rate["layer"]])
    x = alt.X("where:N", sort=words, title=None, axis=axis)
    extra = [c for c in ("rate_lo", "rate_hi", "chance", "corrected", "corrected_lo", "corrected_hi") if c in rate]
    tooltip = ["model", "layer", alt.Tooltip("localized:Q", format=".2f", title="rate"),
               alt.Tooltip("own_cka:Q", format=".3f")]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".3f") for c in extra] + interval_tooltips(rate)
    value, lo, hi = ("corrected", "corrected_lo", "corrected_hi") if corrected else ("localized", "rate_lo", "rate_hi")
    label = ("localization above chance" if corrected else
             "tokens whose own patch is the best match")
    low = min(0.0, float(rate[[c for c in (value, lo) if c in rate]].min().min()))
    columns = alt.Chart(rate).mark_bar().encode(
        x=x, xOffset="model:N", color="model:N",
        y=alt.Y(f"{value}:Q", scale=alt.Scale(domain=[0.0 if np.isnan(low) else low, 1]), title=label),
        tooltip=tooltip)
    layers = [columns]
    if {lo, hi} <= set(rate) and rate[lo].notna().any():
        layers.append(alt.Chart(rate).mark_rule(color="black").encode(x=x, xOffset="model:N", y=f"{lo}:Q",
                                                                      y2=f"{hi}:Q", tooltip=tooltip))
    if corrected:
        layers.append(alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(color="grey", strokeDash=[4, 3]).encode(
            y="y:Q"))
    elif "chance" in extra:
        layers.append(alt.Chart(rate).mark_tick(color="grey", thickness=2, size=14).encode(
            x=x, xOffset="model:N", y="chance:Q", tooltip=[alt.Tooltip("chance:Q", format=".3f", title="chance")]))
    default = (["How well tokens localize, above chance: (rate − chance) / (1 − chance)",
                "0 = chance level 1/positions, 1 = every token's own patch is its best match", bars]
               if corrected else ["How well tokens localize (tick: chance level)", bars])
    return alt.layer(*layers).properties(width=width, height=220, title=title or default)




def image_uri(picture: np.ndarray, side: int) -> str:
    """(H, W[, 3]) uint8 -> a PNG data URI, enlarged by a whole factor (nearest neighbour) to at least ``side`` px:
    a chart's ``mark_image`` then shows the model's pixels as blocks, not a browser's blur of a 28 px image."""
    import base64
    import io

    from PIL import Image

    img = np.asarray(picture, dtype=np.uint8)
    k = max(1, -(-side // min(img.shape[:2])))
    img = img.repeat(k, axis=0).repeat(k, axis=1)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _grid_scales(grid: tuple[int, int]):
    """x over columns [0, gw], y over rows [0, gh] downwards: token (r, c) is the square [c, c+1] × [r, r+1]."""
    gh, gw = grid
    return (alt.Scale(domain=[0, gw], nice=False, zero=False), alt.Scale(domain=[0, gh], nice=False, zero=False,
                                                                        reverse=True))


def _image_layer(picture: np.ndarray, grid: tuple[int, int], width: int, height: int):
    xs, ys = _grid_scales(grid)
    frame = pd.DataFrame({"url": [image_uri(picture, max(width, height))], "x": [0.0], "y": [0.0]})
    return alt.Chart(frame).mark_image(width=width, height=height, align="left", baseline="top").encode(
        x=alt.X("x:Q", scale=xs, axis=None), y=alt.Y("y:Q", scale=ys, axis=None), url="url:N")


def _outline(grid: tuple[int, int], token: tuple[int, int], label: str | None = None):
    xs, ys = _grid_scales(grid)
    r, c = int(token[0]), int(token[1])
    frame = pd.DataFrame({"x": [c], "x2": [c + 1], "y": [r], "y2": [r + 1], "token": [f"({r}, {c})"]})
    return alt.Chart(frame).mark_rect(filled=False, stroke=OUTLINE, strokeWidth=3).encode(
        x=alt.X("x:Q", scale=xs, axis=None), x2="x2:Q", y=alt.Y("y:Q", scale=ys, axis=None), y2="y2:Q",
        tooltip=[alt.Tooltip("token:N", title=label or "chosen token (row, col)")])


def token_picker_chart(picture: np.ndarray, grid: tuple[int, int], selected: tuple[int, int], size: int = 336,
                       select: str | None = "pick", title: str | None = None):
    """The model's input image with its token grid drawn over it, the chosen token outlined; ``select`` names a click
    selection on (token_row, token_col) (read back with ``lab.clicked``): click the image to pick a token.

    Cells are whole pixels and at least 24 px (a 14×14 grid takes 336 px)."""
    gh, gw = grid
    cell = max(24, size // max(gh, gw))
    width, height = cell * gw, cell * gh
    xs, ys = _grid_scales(grid)
    r, c = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    cells = pd.DataFrame({"token_row": r.ravel(), "token_col": c.ravel()})
    cells = cells.assign(x=cells["token_col"], x2=cells["token_col"] + 1, y=cells["token_row"],
                         y2=cells["token_row"] + 1)
    # near-transparent fill, not none: an unfilled rect takes no clicks inside it
    grid_layer = alt.Chart(cells).mark_rect(fill="white", fillOpacity=0.01, stroke="white", strokeOpacity=0.45,
                                            strokeWidth=1, cursor="pointer").encode(
        x=alt.X("x:Q", scale=xs, axis=None), x2="x2:Q", y=alt.Y("y:Q", scale=ys, axis=None), y2="y2:Q",
        tooltip=[alt.Tooltip("token_row:Q", title="row"), alt.Tooltip("token_col:Q", title="col")])
    if select:
        grid_layer = grid_layer.add_params(alt.selection_point(name=select, fields=["token_row", "token_col"],
                                                               on="click"))
    chart = alt.layer(_image_layer(picture, grid, width, height), grid_layer, _outline(grid, selected))
    return chart.properties(width=width, height=height, title=alt.Title(
        title or f"What the model sees: click a token ({gh}×{gw} grid)",
        subtitle=f"outlined: token (row {selected[0]}, col {selected[1]})"))


def token_picker_frame(grid: tuple[int, int], selected: tuple[int, int]) -> pd.DataFrame:
    """The picker's cells (token_row, token_col, chosen): the CSV beside its PNG/SVG."""
    r, c = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    return pd.DataFrame({"token_row": r.ravel(), "token_col": c.ravel(),
                         "chosen": (r.ravel() == selected[0]) & (c.ravel() == selected[1])})


def _pooled(values: np.ndarray, most: int) -> np.ndarray:
    """Mean-pool an (h, w) map by a whole factor so that neither side exceeds ``most`` cells (a 224 px gradient map
    as 50,176 rects would stall the browser); NaN stays NaN."""
    v = np.asarray(values, dtype=np.float64)
    k = max(1, -(-max(v.shape) // most))
    if k == 1:
        return v
    h, w = v.shape[0] // k * k, v.shape[1] // k * k
    return v[:h, :w].reshape(h // k, k, w // k, k).mean(axis=(1, 3))


def token_map_chart(values: np.ndarray, grid: tuple[int, int], token: tuple[int, int], title, legend: str,
                    picture: np.ndarray | None = None, size: int = 240, scheme: str = "inferno",
                    domain: tuple[float, float] | None = None, opacity: float = 0.65, most: int = 56,
                    relative: bool = False, subtitle: str | None = None):
    """One map of one token as a heatmap with its colour bar, the token outlined: ``values`` (h, w) over the token
    grid (CKA, attention) or over input pixels (gradient), drawn on the grid's frame [0, gw] × [0, gh].

    ``picture`` (the model's input, uint8): drawn under the map (``opacity``), for maps *of this image*; a map of
    a data-set statistic is drawn without it, so it cannot read as a statement about the image. ``relative``: divide
    by the map's maximum (a gradient's scale means nothing across images)."""
    gh, gw = grid
    v = _pooled(values, most)
    peak = np.nanmax(v) if np.isfinite(v).any() else 0.0
    v = v / peak if relative and peak > 0 else v
    h, w = v.shape
    cell = max(1, size // max(gh, gw))
    width, height = cell * gw, cell * gh
    xs, ys = _grid_scales(grid)
    r, c = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    frame = pd.DataFrame({"x": c.ravel() * gw / w, "x2": (c.ravel() + 1) * gw / w, "y": r.ravel() * gh / h,
                          "y2": (r.ravel() + 1) * gh / h, "value": v.ravel(),
                          "token_row": (r.ravel() * gh) // h, "token_col": (c.ravel() * gw) // w})
    frame = frame[np.isfinite(frame["value"])]  # undefined cells stay blank (said in words beside the map)
    scale = alt.Scale(scheme=scheme, domain=list(domain)) if domain else alt.Scale(scheme=scheme, zero=True)
    heat = alt.Chart(frame).mark_rect(opacity=opacity if picture is not None else 1.0).encode(
        x=alt.X("x:Q", scale=xs, axis=None), x2="x2:Q", y=alt.Y("y:Q", scale=ys, axis=None), y2="y2:Q",
        color=alt.Color("value:Q", scale=scale, title=legend,
                        legend=alt.Legend(type="gradient", orient="bottom", direction="horizontal",
                                          gradientLength=max(80, width - 90), titleLimit=400)),
        tooltip=[alt.Tooltip("token_row:Q", title="row"), alt.Tooltip("token_col:Q", title="col"),
                 alt.Tooltip("value:Q", format=".3f", title=legend)])
    layers = ([_image_layer(picture, grid, width, height)] if picture is not None else []) + [heat,
                                                                                             _outline(grid, token)]
    return alt.layer(*layers).properties(width=width, height=height,
                                         title=alt.Title(title, subtitle=subtitle) if subtitle else title)


def original_with_box(image, box: tuple[float, float, float, float], side: int = 480) -> np.ndarray:
    """The original image (PIL), shrunk to at most ``side`` px, with the part the model's input covers
    (``vitlab.inputs.images.describe_model_input(...).box``, original pixels) outlined: (H, W, 3) uint8."""
    from PIL import ImageDraw

    img = image.convert("RGB")
    k = min(1.0, side / max(img.size))
    if k < 1.0:
        img = img.resize((max(1, round(img.width * k)), max(1, round(img.height * k))))
    draw = ImageDraw.Draw(img)
    left, top, right, bottom = (v * k for v in box)
    width = max(2, round(max(img.size) / 160))
    draw.rectangle([left, top, right - 1, bottom - 1], outline=(0, 229, 255), width=width)
    return np.asarray(img)
