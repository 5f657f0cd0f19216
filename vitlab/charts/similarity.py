"""Charts of the similarity measures: per-measure heatmaps, the agreement view, sensitivity, many models."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from ..stats.measures import MEASURES
from .cka import layer_labels
from .words import names_wrapped


def _scale(measure: str) -> alt.Scale:
    # a distance's colour runs the other way, so "alike" is bright under every measure
    if MEASURES[measure].kind == "distance":
        return alt.Scale(scheme="magma", domain=[0, math.pi / 2], reverse=True, nice=False)
    return alt.Scale(scheme="magma", domain=[0, 1])


def measure_heatmap(frame: pd.DataFrame, size: int = 360, select: str | None = None, title: str | None = None,
                    families: dict[str, str] | None = None):
    """One (model_a, model_b, measure) map from ``SimilarityReport.pair_frame``: layer_b across, layer_a up, layers
    in words (``cka.layer_labels``)."""
    measure = frame["measure"].iloc[0]
    ma, mb = frame["model_a"].iloc[0], frame["model_b"].iloc[0]
    chart = alt.Chart(frame).mark_rect().encode(
        x=alt.X("layer_b:N", sort=list(dict.fromkeys(frame["layer_b"])), title=f"{mb} layer",
                axis=alt.Axis(labelAngle=-60, labelLimit=170, labelExpr=layer_labels(frame, "b", families))),
        y=alt.Y("layer_a:N", sort=list(reversed(list(dict.fromkeys(frame["layer_a"])))), title=f"{ma} layer",
                axis=alt.Axis(labelLimit=170, labelExpr=layer_labels(frame, "a", families))),
        color=alt.Color("value:Q", scale=_scale(measure), title=MEASURES[measure].title),
        tooltip=["measure", "model_a", "layer_a", "model_b", "layer_b", alt.Tooltip("value:Q", format=".4f")],
    ).properties(width=size, height=size, title=title or f"{MEASURES[measure].title}: {ma} vs {mb}")
    if select:
        sel = alt.selection_point(name=select, fields=["layer_a", "layer_b"], on="click")
        chart = chart.add_params(sel).encode(opacity=alt.condition(sel, alt.value(1.0), alt.value(0.55)))
    return chart


def measure_grid(frames: list[pd.DataFrame], size: int = 170, columns: int = 3, families: dict[str, str] | None = None):
    """Every measure's map of one view side by side (independent colour scales, each titled by its measure)."""
    cells = [measure_heatmap(f, size=size, title=MEASURES[f["measure"].iloc[0]].title, families=families)
             for f in frames]
    # each row and the stack resolve apart: nested concats otherwise merge the measures' colour domains
    rows = [alt.hconcat(*cells[i:i + columns]).resolve_scale(color="independent")
            for i in range(0, len(cells), columns)]
    return alt.vconcat(*rows).resolve_scale(color="independent")


def correlation_heatmap(frame: pd.DataFrame, size: int = 260):
    """Spearman ρ between measures (``AgreementResult.correlation_frame``), with the value printed in each cell."""
    order = list(dict.fromkeys(frame["measure_1"]))
    base = alt.Chart(frame).encode(
        x=alt.X("measure_2:N", sort=order, title=None, axis=alt.Axis(labelAngle=-45)),
        y=alt.Y("measure_1:N", sort=order, title=None))
    rect = base.mark_rect().encode(
        color=alt.Color("spearman:Q", scale=alt.Scale(scheme="blueorange", domain=[-1, 1]), title="Spearman ρ"),
        tooltip=["measure_1", "measure_2", alt.Tooltip("spearman:Q", format=".3f"), "verdict"])
    text = base.mark_text(fontSize=10).encode(text=alt.Text("spearman:Q", format=".2f"))
    return (rect + text).properties(width=size, height=size, title="Rank correlation between measures")


def sensitivity_chart(frame: pd.DataFrame, width: int = 320, height: int = 180):
    """CKA under each check (``SensitivityResult.to_frame``), the baseline as a rule."""
    rows = frame[frame["check"] != "top-direction energy share"].copy()
    rows["label"] = [f"{c} {s} k={k}" if c == "remove top PCs" else c for c, s, k in
                     zip(rows["check"], rows["side"], rows["k"])]
    base = float(rows.loc[rows["check"] == "baseline", "value"].iloc[0])
    bars = alt.Chart(rows).mark_bar().encode(
        y=alt.Y("label:N", sort=list(rows["label"]), title=None),
        x=alt.X("value:Q", title="CKA"),
        color=alt.Color("check:N", legend=None),
        tooltip=["check", "side", "k", alt.Tooltip("value:Q", format=".4f"), alt.Tooltip("change:Q", format="+.4f"),
                 "detail"])
    rule = alt.Chart(pd.DataFrame({"value": [base]})).mark_rule(strokeDash=[4, 3]).encode(x="value:Q")
    layers = [bars, rule]
    skipped = rows[rows["value"].isna()].assign(value=0.0, said="not run")
    if len(skipped):  # a check that was not run has no bar: its row says so rather than looking like CKA 0
        layers.append(alt.Chart(skipped).mark_text(align="left", dx=3, fontSize=11, color="#555").encode(
            y=alt.Y("label:N", sort=list(rows["label"])), x="value:Q", text="said:N", tooltip=["detail"]))
    return alt.layer(*layers).properties(width=width, height=height,
                                         title="CKA under each check (dashed: as measured)")


def models_heatmap(frame: pd.DataFrame, size: int = 300):
    """models x models matrix of one depth (rows of ``ManyModelsResult.to_frame`` with one depth); each model's
    name whole, on lines of at most 20 characters (``names_wrapped``), so that at ``size`` 200 it fits half of a
    1280-px page (HALF_WIDTH) beside the MDS map."""
    measure, depth = frame["measure"].iloc[0], frame["depth"].iloc[0]
    order = list(dict.fromkeys(frame["model_a"]))
    names = names_wrapped(order)
    base = alt.Chart(frame).encode(
        x=alt.X("model_b:N", sort=order, title=None, axis=alt.Axis(labelAngle=-45, labelLimit=0, labelExpr=names)),
        y=alt.Y("model_a:N", sort=order, title=None, axis=alt.Axis(labelLimit=0, labelExpr=names)))
    rect = base.mark_rect().encode(
        color=alt.Color("value:Q", scale=_scale(measure), title=MEASURES[measure].title,
                        legend=alt.Legend(titleLimit=0, gradientLength=min(size, 200))),
        tooltip=["model_a", "tap_a", "model_b", "tap_b", alt.Tooltip("value:Q", format=".4f")])
    text = base.mark_text(fontSize=9).encode(text=alt.Text("value:Q", format=".2f"))
    return (rect + text).properties(width=size, height=size, title=f"{MEASURES[measure].title} at depth {depth:g}")


def mds_scatter(frame: pd.DataFrame, size: int = 300):
    """2-D classical MDS of the models at one depth (rows of ``ManyModelsResult.coords_frame``): each model a
    colour and a shape, named whole in the legend under the plot (a name written beside its point ran past the
    chart's edge and over its neighbour: issue 51)."""
    depth, explained = frame["depth"].iloc[0], frame["explained"].iloc[0]
    order = list(dict.fromkeys(frame["model"]))
    colours = alt.Scale(scheme="tableau20") if len(order) > 10 else alt.Scale()
    # one legend for both channels: Vega-Lite merges them only where legend and sort are alike
    legend = alt.Legend(orient="bottom", direction="vertical", columns=1, labelLimit=0,
                        labelExpr=names_wrapped(order, 40))
    return alt.Chart(frame).mark_point(size=90, filled=True, opacity=0.9).encode(
        x=alt.X("x:Q", title="MDS 1", scale=alt.Scale(padding=12)),
        y=alt.Y("y:Q", title="MDS 2", scale=alt.Scale(padding=12)),
        color=alt.Color("model:N", scale=colours, title="model", legend=legend),  # a sort here splits the legend
        shape=alt.Shape("model:N", title="model", legend=legend),
        tooltip=["model", "tap", alt.Tooltip("x:Q", format=".3f"), alt.Tooltip("y:Q", format=".3f")],
    ).properties(width=size, height=size, title=alt.TitleParams(
        f"Models at depth {depth:g}", subtitle=f"classical MDS, {explained:.0%} of the variance"))


def compare_models_charts(result) -> dict[str, alt.TopLevelMixin]:
    """Heatmap and MDS scatter per depth, keyed for ``charts.save_all``."""
    frame, coords = result.to_frame(), result.coords_frame()
    out = {}
    for d in result.depths:
        out[f"models_{result.measure}_depth{d:g}"] = models_heatmap(frame[frame["depth"] == d])
        out[f"mds_{result.measure}_depth{d:g}"] = mds_scatter(coords[coords["depth"] == d])
    return out
