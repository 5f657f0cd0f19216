"""Localization charts (Raghu et al. 2021, Figs 9-10); input: ``LocalizationResult.to_frame()`` / ``.summary()``."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ..errors import VitlabError
from .common import interval_tooltips


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
                      title: str | None = None):
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
    ring = base.mark_point(shape="square", filled=False, color="#00d0ff", size=60, strokeWidth=2).transform_filter(
        alt.datum.own)
    model, layer = frame["model"].iloc[0], frame["layer"].iloc[0]
    return alt.layer(rect, ring, data=part).properties(width=cell, height=cell).facet(
        facet=alt.Facet("token_label:N", sort=order, title=None), columns=columns,
    ).properties(title=title or f"CKA of a token with the input patch at each position: {model} {layer}")


def localization_summary_chart(summary: pd.DataFrame, cell: int = 150, title: str | None = None):
    """Per model and layer, each spatial token drawn at its own position, coloured by the CKA with its own patch;
    a dot where that patch is the token's best match (argmax): how well each token localizes (Figs 9-10)."""
    spatial = summary[summary["kind"] == "spatial"].copy()
    if spatial.empty:
        raise VitlabError("no spatial tokens to summarise")
    spatial["panel"] = spatial["model"] + " · " + spatial["layer"]
    base = alt.Chart().encode(x=alt.X("token_col:O", title=None, axis=None),
                              y=alt.Y("token_row:O", title=None, axis=None))
    rect = base.mark_rect().encode(
        color=alt.Color("own_cka:Q", scale=alt.Scale(scheme="magma", domain=[0, 1]), title="CKA with own patch"),
        tooltip=["model", "layer", "token", "token_row", "token_col", alt.Tooltip("own_cka:Q", format=".3f"),
                 "own_rank", "argmax_position", "localized"])
    dots = base.mark_circle(color="#00d0ff", size=18).transform_filter(alt.datum.localized)
    return alt.layer(rect, dots, data=spatial).properties(width=cell, height=cell).facet(
        facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(spatial["panel"]))), columns=3,
    ).properties(title=title or "CKA of each token with its own input patch (dot: own patch is the best match)")


def localization_rate_chart(rate: pd.DataFrame, title: str | None = None, width: int = 360):
    """Fraction of spatial tokens whose best-matching input patch is their own, per layer and model
    (``LocalizationReport.rates()``), with its 95 % interval over batches (error bars) and chance level 1/positions
    (a tick) when the frame has them."""
    x = alt.X("layer:N", sort=list(dict.fromkeys(rate["layer"])), title=None)
    extra = [c for c in ("rate_lo", "rate_hi", "chance", "corrected") if c in rate]
    tooltip = ["model", "layer", alt.Tooltip("localized:Q", format=".2f"), alt.Tooltip("own_cka:Q", format=".3f")]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".2f") for c in extra] + interval_tooltips(rate)
    bars = alt.Chart(rate).mark_bar().encode(
        x=x, xOffset="model:N", color="model:N",
        y=alt.Y("localized:Q", scale=alt.Scale(domain=[0, 1]), title="tokens whose own patch is the best match"),
        tooltip=tooltip)
    layers = [bars]
    if {"rate_lo", "rate_hi"} <= set(extra) and rate["rate_lo"].notna().any():
        layers.append(alt.Chart(rate).mark_rule(color="black").encode(x=x, xOffset="model:N", y="rate_lo:Q",
                                                                      y2="rate_hi:Q", tooltip=tooltip))
    if "chance" in extra:
        layers.append(alt.Chart(rate).mark_tick(color="grey", thickness=2, size=14).encode(
            x=x, xOffset="model:N", y="chance:Q", tooltip=[alt.Tooltip("chance:Q", format=".3f", title="chance")]))
    return alt.layer(*layers).properties(width=width, height=220,
                                         title=title or "How well tokens localize (tick: chance level)")
