"""Few-shot probe charts (Raghu et al. 2021, Figs 11 and 13); input: ``ProbeResult.to_frame()``."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ..errors import VitlabError
from .common import interval_tooltips

REP_NAMES = {"cls": "CLS token", "gap": "GAP (spatial mean)", "gap_cls": "GAP incl. CLS", "first": "first token",
             "token": "individual tokens (mean)"}


def probe_lines(frame: pd.DataFrame, title: str | None = None, width: int = 420):
    """Test accuracy against normalised layer depth: one line per model and representation; where the frame has
    intervals (``accuracy_lo``/``accuracy_hi``, several few-shot draws) a 95 % error bar at every layer, and where
    it has ``chance`` (the test images' most common class's share) a dashed grey rule there."""
    if frame.empty:
        raise VitlabError("no probe results to draw")
    data = frame.copy()
    data["representation_name"] = data["representation"].map(REP_NAMES).fillna(data["representation"])
    shots = sorted(set(data["shots"]))
    ranged = {"accuracy_lo", "accuracy_hi"} <= set(data) and data["accuracy_lo"].notna().any()
    interval = [alt.Tooltip("accuracy_lo:Q", format=".3f", title="95 % lo"),
                alt.Tooltip("accuracy_hi:Q", format=".3f", title="95 % hi"), "draws",
                *interval_tooltips(data)] if ranged else []
    base = alt.Chart(data).encode(
        x=alt.X("depth:Q", title="normalised layer depth", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("accuracy:Q", title="few-shot test accuracy", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("model:N", legend=alt.Legend(labelLimit=300)),
        detail="representation_name:N",
        tooltip=["model", "layer", "representation_name", alt.Tooltip("accuracy:Q", format=".3f"),
                 *interval, alt.Tooltip("val_accuracy:Q", format=".3f"), alt.Tooltip("l2:Q", format=".3g"), "tokens"],
    )
    # points in a layer of their own: with mark_line(point=True) the dash legend loses its symbols
    lines = base.mark_line().encode(strokeDash=alt.StrokeDash(
        "representation_name:N", title="representation",
        legend=alt.Legend(symbolType="stroke", symbolStrokeColor="#444", symbolStrokeWidth=2, labelLimit=300)))
    layers = [lines, base.mark_circle(size=28)]
    if ranged:  # 95 % interval of the mean accuracy over the few-shot draws (with the probe pool's own variance)
        layers.append(base.mark_rule(strokeWidth=1.5, opacity=0.7).encode(y="accuracy_lo:Q", y2="accuracy_hi:Q"))
    if "chance" in data and data["chance"].notna().any():
        level = pd.DataFrame({"chance": sorted(data["chance"].dropna().unique())})
        level["label"] = [f"chance {v:.2f}" for v in level["chance"]]
        rule = alt.Chart(level).encode(y="chance:Q", tooltip=[alt.Tooltip("chance:Q", format=".3f", title=(
            "chance: the most common test class's share"))])
        layers += [rule.mark_rule(color="#888", strokeDash=[4, 3]),
                   rule.mark_text(align="left", dx=3, dy=-6, color="#666", fontSize=10).encode(
                       x=alt.value(0), text="label:N")]
    return alt.layer(*layers).properties(
        width=width, height=280, title=title or f"{'/'.join(map(str, shots))}-shot linear probe accuracy by layer")
