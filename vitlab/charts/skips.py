"""Skip-connection charts (Raghu et al. 2021, Fig 7 and Fig E.2); input: ``SkipResult.to_frame()``."""

from __future__ import annotations

import textwrap

import altair as alt
import numpy as np
import pandas as pd

from ..errors import VitlabError
from .common import interval_tooltips
from .words import labels_in_words

VALUES = {"ratio": "‖z‖ / ‖f(z)‖", "cosine": "cos(z, f(z))"}


def _interval(frame: pd.DataFrame) -> list:
    """Tooltips of the ratio's 95 % interval, where the frame has one (a run with ``--bootstrap``)."""
    if {"ratio_lo", "ratio_hi"} <= set(frame) and frame["ratio_lo"].notna().any():
        return [alt.Tooltip("ratio_lo:Q", format=".3f", title="ratio 95 % lo"),
                alt.Tooltip("ratio_hi:Q", format=".3f", title="ratio 95 % hi"), *interval_tooltips(frame)]
    return []


def _check(frame: pd.DataFrame, value: str) -> None:
    if value not in VALUES:
        raise VitlabError(f"skip chart value must be one of {', '.join(VALUES)}, not '{value}'")
    if frame.empty:
        raise VitlabError("no skip statistics to draw")


def skip_heatmap(frame: pd.DataFrame, value: str = "ratio", title: str | None = None, width: int = 420):
    """Sublayer (down) x token (across) heatmap of one model, as Fig 7 (left); ratios on a log colour scale."""
    _check(frame, value)
    part = frame[frame["token"] >= 0]
    if part.empty:
        raise VitlabError("a CNN has no per-token skip ratios (its positions differ per stage): draw the lines chart")
    model = part["model"].iloc[0]
    order = list(dict.fromkeys(part["layer"]))
    scale = alt.Scale(type="log", scheme="viridis") if value == "ratio" else alt.Scale(scheme="redblue", domain=[-1, 1])
    return alt.Chart(part).mark_rect().encode(
        x=alt.X("token:O", title="token (0 = CLS when present)", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("layer:N", sort=order, title="sublayer", axis=alt.Axis(labelExpr=labels_in_words(order))),
        color=alt.Color(f"{value}:Q", scale=scale, title=VALUES[value], legend=alt.Legend(format=".3~g")),
        tooltip=["model", "layer", "token", "kind", alt.Tooltip("ratio:Q", format=".3f"), *_interval(part),
                 alt.Tooltip("cosine:Q", format=".3f")],
    ).properties(width=width, height=max(160, 12 * len(order)), title=title or f"{VALUES[value]} per token: {model}")


def not_drawn(summary: pd.DataFrame, value: str = "ratio") -> list[str]:
    """The lines of :func:`skip_lines` with points it cannot draw, each with why, in words: a ratio is infinite
    where the long branch f(z) is zero (every block of an untrained ResNet: its last norm starts at zero), and a
    cosine of a zero vector is undefined; a log axis has no place for either (issue 51: the legend listed them)."""
    _check(summary, value)
    out = []
    for series, part in _series(summary).groupby("series", sort=False):
        v = part[value].to_numpy(dtype=float)
        bad = ~np.isfinite(v) | ((v <= 0) if value == "ratio" else False)
        if not bad.any():
            continue
        unit = "blocks" if (part["sublayer"] == "block").all() else "sublayers"
        if value == "ratio" and np.isposinf(v[bad]).all():
            what, why = "‖z‖/‖f(z)‖ is infinite", "the long branch f(z) is zero"
        elif value == "ratio":
            what, why = "‖z‖/‖f(z)‖ is undefined or not positive", "a norm is zero or not a number"
        else:
            what, why = "cos(z, f(z)) is undefined", "f(z) or z is zero"
        if bad.all():
            out.append(f"{series} not drawn: {what} in all {len(v)} {unit} ({why})")
        else:
            out.append(f"{series} drawn without {int(bad.sum())} of its {len(v)} {unit}: {what} there ({why})")
    return out


def _series(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.assign(series=summary["model"] + " · " + summary["kind"] + " · " + summary["sublayer"])


def skip_lines(summary: pd.DataFrame, value: str = "ratio", title: str | None = None, width: int = 420):
    """Mean over CLS tokens and over spatial tokens per sublayer (``SkipReport.summary()``), against depth: one line
    per model/kind (Fig 7); the ratio's 95 % intervals (``ratio_lo``/``ratio_hi``), where present, as error bars.
    Points that cannot be drawn (:func:`not_drawn`) are left out, a line with none left out of the legend too, and
    the subtitle says which and why."""
    _check(summary, value)
    missing = not_drawn(summary, value)
    summary = _series(summary)
    finite = np.isfinite(summary[value].to_numpy(dtype=float))
    summary = summary[finite & ((summary[value] > 0) if value == "ratio" else True)]
    if summary.empty:
        raise VitlabError("no skip statistic can be drawn: " + "; ".join(missing))
    y_scale = alt.Scale(type="log") if value == "ratio" else alt.Scale(domain=[-1, 1])
    interval = _interval(summary)
    base = alt.Chart(summary).encode(
        x=alt.X("depth:Q", title="block (normalised depth)", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y(f"{value}:Q", scale=y_scale, title=VALUES[value]),
        color=alt.Color("series:N", title="model · token · sublayer", legend=alt.Legend(labelLimit=320)),
        tooltip=["model", "layer", "kind", alt.Tooltip("ratio:Q", format=".3f"), *interval,
                 alt.Tooltip("cosine:Q", format=".3f")],
    )
    chart = base.mark_line(point=True)
    if interval and value == "ratio":
        chart = chart + base.mark_rule(strokeWidth=1.5, opacity=0.6).encode(y="ratio_lo:Q", y2="ratio_hi:Q")
    text = title or f"{VALUES[value]}: CLS vs spatial tokens"
    heading = alt.TitleParams(text, subtitle=[line for m in missing for line in textwrap.wrap(m, 100)]) \
        if missing else text
    return chart.properties(width=width, height=260, title=heading)


def skip_charts(report) -> dict[str, alt.Chart]:
    """Every skip chart of a ``SkipReport``, keyed by file stem (heatmaps only for token models)."""
    frame, summary = report.to_frame(), report.summary()
    charts = {"skip_ratio_lines": skip_lines(summary, "ratio"), "skip_cosine_lines": skip_lines(summary, "cosine")}
    for model, part in frame.groupby("model", sort=False):
        if (part["token"] >= 0).any():
            charts[f"skip_ratio_{model}"] = skip_heatmap(part, "ratio")
            charts[f"skip_cosine_{model}"] = skip_heatmap(part, "cosine")
    return charts


def metrics_chart(frame: pd.DataFrame, title: str | None = None, width: int = 300):
    """Before/after bars of a skip ablation's ``metrics_frame()`` (accuracy, agreement); with ``before_lo`` ...
    ``after_hi`` columns, each bar's 95 % interval over the images as a rule."""
    if frame.empty:
        raise VitlabError("no metrics to draw")
    long = frame.melt(id_vars=["intervention", "metric"], value_vars=["before", "after"], var_name="when")
    if "before_lo" in frame:
        for end in ("lo", "hi"):
            part = frame.melt(id_vars=["metric"], value_vars=[f"before_{end}", f"after_{end}"], var_name="when",
                              value_name=end)
            part["when"] = part["when"].str.replace(f"_{end}", "", regex=False)
            long = long.merge(part, on=["metric", "when"])
    base = alt.Chart().encode(x=alt.X("when:N", sort=["before", "after"], title=None))
    bars = base.mark_bar().encode(
        y=alt.Y("value:Q", scale=alt.Scale(domain=[0, 1]), title="fraction of images"),
        color=alt.Color("when:N", sort=["before", "after"], legend=None),
        tooltip=["metric", "when", alt.Tooltip("value:Q", format=".4f"),
                 *([alt.Tooltip("lo:Q", format=".4f", title="95 % lo"), alt.Tooltip("hi:Q", format=".4f",
                                                                                  title="95 % hi")]
                   if "lo" in long else [])],
    )
    layers = [bars] + ([base.mark_rule(color="black").encode(y="lo:Q", y2="hi:Q")] if "lo" in long else [])
    return alt.layer(*layers, data=long).properties(width=width // 2, height=200).facet(
        # a header breaks before " with ": "top-1 agreement with the unmodified model" overlapped its neighbour
        column=alt.Column("metric:N", title=None,
                          header=alt.Header(labelExpr="split(replace(datum.label, / with /, '|with '), '|')")
                          )).properties(
        title=title or frame["intervention"].iloc[0].split(":")[0])
