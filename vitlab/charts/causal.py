"""Charts of the causal analyses: head ablation curves, attribution faithfulness, token-norm artefacts.

Each builder takes a result's frame (``summary()``, ``cka_frame()``, ``to_frame()``, ``histogram_frame()``).
"""

from __future__ import annotations

import textwrap

import altair as alt
import pandas as pd

from .common import PAGE_WIDTH
from .words import labels_in_words, layer_in_words

SELECTION_COLOURS = alt.Scale(domain=["local", "global", "random"], range=["#1b9e77", "#d95f02", "#7570b3"])
METRIC_TITLES = {"delta_accuracy": "Δ accuracy vs the intact model", "kl": "KL(intact ‖ ablated), nats"}
# a plot beside its y axis within the page (PAGE_WIDTH): ViT-L/16's 48 taps at 22 px ran to 1,056 px
_PLOT_MAX = PAGE_WIDTH - 120


def ablation_curves(summary: pd.DataFrame, metric: str = "delta_accuracy"):
    """The three curves (most local, most global, random heads) side by side on one axis per mode: mean and
    interval (bootstrap over images for local/global, range over draws for random) against k."""
    part = summary[summary["metric"] == metric]
    base = alt.Chart().encode(
        x=alt.X("k:Q", title="heads ablated (k)", axis=alt.Axis(tickMinStep=1)),
        color=alt.Color("selection:N", scale=SELECTION_COLOURS, title="heads"),
        xOffset=alt.XOffset("selection:N"))
    tooltip = ["mode", "selection", "k", alt.Tooltip("mean:Q", format=".4f"), alt.Tooltip("lo:Q", format=".4f"),
               alt.Tooltip("hi:Q", format=".4f"), "interval", "draws"]
    line = base.mark_line(point=True).encode(y=alt.Y("mean:Q", title=METRIC_TITLES.get(metric, metric)),
                                             tooltip=tooltip)
    bars = base.mark_errorbar(ticks=True).encode(y=alt.Y("lo:Q", title=METRIC_TITLES.get(metric, metric)),
                                                 y2="hi:Q", tooltip=tooltip)
    zero = alt.Chart().mark_rule(color="grey", strokeDash=[4, 3]).encode(y=alt.datum(0))
    return alt.layer(zero, bars, line, data=part).properties(width=260, height=220).facet(
        column=alt.Column("mode:N", title="ablation"),
        title=f"{part['model'].iloc[0] if len(part) else ''}: {METRIC_TITLES.get(metric, metric)}")


def ablation_cka_chart(cka: pd.DataFrame, k: int | None = None):
    """CKA of every block output with the intact model (solid) and mean CKA with the other model's lower layers
    (dashed), per selection, at ``k`` heads (default the largest); random: mean over draws."""
    k = int(cka["k"].max()) if k is None else int(k)
    part = cka[cka["k"] == k].groupby(["mode", "selection", "layer", "depth"], as_index=False)[
        ["cka_intact", "cka_other", "cka_other_intact"]].mean()
    long = part.melt(id_vars=["mode", "selection", "layer", "depth"], value_vars=["cka_intact", "cka_other"],
                     var_name="compared_with", value_name="cka")
    long["compared_with"] = long["compared_with"].map({"cka_intact": "intact model, same block",
                                                       "cka_other": "other model's lower layers (mean)"})
    order = list(dict.fromkeys(part.sort_values("depth")["layer"]))
    return alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("layer:N", sort=order, title="block output",
                axis=alt.Axis(labelAngle=-45, labelExpr=labels_in_words(order))),
        y=alt.Y("cka:Q", title="CKA", scale=alt.Scale(zero=False)),
        color=alt.Color("selection:N", scale=SELECTION_COLOURS, title="heads"),
        strokeDash=alt.StrokeDash("compared_with:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0)),
        tooltip=["mode", "selection", "layer", "compared_with", alt.Tooltip("cka:Q", format=".4f")],
    ).properties(width=260, height=220).facet(column=alt.Column("mode:N", title="ablation"),
                                               title=f"CKA after ablating {k} heads")


def faithfulness_curves(frame: pd.DataFrame, image: str | None = None):
    """Deletion and insertion curves of one image: probability of the target class vs fraction of cells.
    ``image``: the image in a person's words for the title ("image 0 (Ankle boot)"); default: its id."""
    dashed = alt.condition(alt.datum.method == "random order", alt.value([4, 3]), alt.value([1, 0]))
    first = frame.iloc[0]
    return alt.Chart(frame).mark_line(point=alt.OverlayMarkDef(size=18)).encode(
        x=alt.X("fraction:Q", title="fraction of cells deleted / inserted"),
        y=alt.Y("probability:Q", title="probability of the target class", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("method:N", title="map"), strokeDash=dashed,
        tooltip=["method", "curve", "step", alt.Tooltip("fraction:Q", format=".3f"),
                 alt.Tooltip("probability:Q", format=".4f")],
    ).properties(width=260, height=220).facet(column=alt.Column("curve:N", title=None),
                                               title=f"{first['model']} · {image or first['image']}")


def faithfulness_summary_chart(summary: pd.DataFrame):
    """Per method: AUC minus the random order's, with its 95 % bootstrap interval over images (deletion: lower is
    better; insertion: higher is better)."""
    base = alt.Chart().encode(y=alt.Y("method:N", title=None, sort=list(dict.fromkeys(summary["method"]))),
                              color=alt.Color("method:N", legend=None))
    tooltip = ["method", "curve", alt.Tooltip("auc:Q", format=".4f"), alt.Tooltip("auc_random_order:Q", format=".4f"),
               alt.Tooltip("minus_random:Q", format=".4f"), alt.Tooltip("lo:Q", format=".4f"),
               alt.Tooltip("hi:Q", format=".4f"), "images"]
    dots = base.mark_point(filled=True, size=70).encode(x=alt.X("minus_random:Q", title="AUC − random order's"),
                                                        tooltip=tooltip)
    bars = base.mark_errorbar(ticks=True).encode(x=alt.X("lo:Q", title="AUC − random order's"), x2="hi:Q",
                                                 tooltip=tooltip)
    zero = alt.Chart().mark_rule(color="grey", strokeDash=[4, 3]).encode(x=alt.datum(0))
    return alt.layer(zero, bars, dots, data=summary).properties(width=260, height=28 * summary["method"].nunique()
                                                                ).facet(column=alt.Column("curve:N", title=None),
                                                                        title=f"{summary['model'].iloc[0]}: "
                                                                              "faithfulness vs a random order")


def norm_histogram(hist: pd.DataFrame, tap: str):
    """Token norms at one tap: spatial tokens and each named prefix token (log axis); the rule is the threshold."""
    part = hist[hist["tap"] == tap]
    bars = alt.Chart().mark_rect(opacity=0.75).encode(
        x=alt.X("lo:Q", scale=alt.Scale(type="log"), title="token norm"), x2="hi:Q",
        y=alt.Y("count:Q", stack=None, title="tokens (images × positions)"),
        color=alt.Color("token:N", title="tokens"),
        tooltip=["token", alt.Tooltip("lo:Q", format=".3g"), alt.Tooltip("hi:Q", format=".3g"), "count"])
    rule = alt.Chart().mark_rule(color="red", strokeDash=[4, 3]).encode(
        x="mean(threshold):Q", tooltip=[alt.Tooltip("mean(threshold):Q", format=".4g", title="threshold")])
    return alt.layer(bars, rule, data=part).properties(width=420, height=200,
                                                       title=f"Token norms at {layer_in_words(tap)}")


def no_flags_words(frame: pd.DataFrame) -> str | None:
    """What the flagged-tokens chart would show when no token is flagged at any tap, in words (its bars would all
    be 0 on an axis with one tick, "0.000000": issue 51); None when some token is flagged."""
    if frame.empty:
        return "no token norms were computed, so no token is flagged"
    if (frame["flagged_tokens"] > 0).any():
        return None
    k, images = frame["k"].iloc[0], int(frame["images"].iloc[0])
    return (f"no token flagged: at none of {frame['model'].iloc[0]}'s {len(frame)} layers, over {images} images, does "
            f"a spatial token's norm exceed median + {k:g} · 1.4826 · MAD, so there is no flagged share to draw")


def flag_summary_chart(frame: pd.DataFrame):
    """Per tap: flagged share of spatial tokens and the flagged tokens' share of the centred Gram's energy; with no
    token flagged, that in words (``no_flags_words``), not an empty chart."""
    title = f"{frame['model'].iloc[0]}: flagged tokens" if len(frame) else "flagged tokens"
    words = no_flags_words(frame)
    if words is not None:
        return words_chart(words, title)
    long = frame.melt(id_vars=["model", "tap"], value_vars=["flagged_share", "energy_share"], var_name="share",
                      value_name="value")
    long["share"] = long["share"].map({"flagged_share": "of spatial tokens", "energy_share": "of the Gram's energy"})
    return alt.Chart(long).mark_bar().encode(
        x=alt.X("tap:N", sort=list(frame["tap"]), title=None,
                axis=alt.Axis(labelAngle=-60, labelExpr=labels_in_words(frame["tap"]))),
        xOffset="share:N", y=alt.Y("value:Q", title="flagged share", axis=alt.Axis(format="~%")),
        color=alt.Color("share:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0)),
        tooltip=["tap", "share", alt.Tooltip("value:Q", format=".4f")],
    ).properties(width=min(_PLOT_MAX, max(260, 22 * len(frame))), height=200, title=title)


def words_chart(words: str, title: str, width: int = 60):
    """A chart that says ``words`` (wrapped at ``width`` characters) in place of an empty plot, for the exports."""
    return alt.Chart(pd.DataFrame({"text": [textwrap.wrap(words, width)]})).mark_text(
        align="left", baseline="top", fontSize=13, lineHeight=18, color="#333").encode(
        text="text:N", x=alt.value(0), y=alt.value(0)).properties(width=min(_PLOT_MAX, 8 * width), height=80,
                                                                  title=title, view=alt.ViewConfig(stroke=None))


def distance_compare_chart(frame: pd.DataFrame):
    """Mean attention distance per head with all tokens and with flagged tokens left out."""
    return alt.Chart(frame).mark_point(filled=True, size=45, opacity=0.8).encode(
        x=alt.X("layer:O", title="block"), xOffset="tokens:N",
        y=alt.Y("distance_px:Q", title="mean attention distance (pixels)", scale=alt.Scale(zero=True)),
        color=alt.Color("tokens:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0)),
        tooltip=["layer", "head", "tokens", alt.Tooltip("distance_px:Q", format=".3f")],
    ).properties(width=min(_PLOT_MAX, max(240, 36 * frame["layer"].nunique())), height=220,
                 title="Attention distance with and without flagged tokens")
