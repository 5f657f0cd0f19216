"""Checkpoint comparison chart (Raghu et al. 2021, Fig 12); input: ``CheckpointComparison.to_frame()``."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ..errors import VitlabError


def checkpoint_lines(frame: pd.DataFrame, title: str | None = None, width: int = 420):
    """CKA between matching layers of two checkpoints against normalised depth: one line per pair (Fig 12); with
    ``cka_lo``/``cka_hi`` columns, each point's 95 % interval as a rule."""
    if frame.empty:
        raise VitlabError("no checkpoint comparison to draw")
    has_ci = "cka_lo" in frame
    color = alt.Color("pair:N", legend=alt.Legend(labelLimit=400, orient="bottom", direction="vertical"))
    base = alt.Chart().encode(x=alt.X("depth:Q", title="layer (normalised depth)", scale=alt.Scale(domain=[0, 1])))
    lines = base.mark_line(point=True).encode(
        y=alt.Y("cka:Q", title="CKA between the checkpoints", scale=alt.Scale(domain=[0, 1])),
        color=color,
        tooltip=["pair", "layer", alt.Tooltip("cka:Q", format=".4f"),
                 *([alt.Tooltip("cka_lo:Q", format=".4f", title="95 % lo"),
                    alt.Tooltip("cka_hi:Q", format=".4f", title="95 % hi")] if has_ci else [])],
    )
    layers = [lines] + ([base.mark_rule().encode(y="cka_lo:Q", y2="cka_hi:Q", color=alt.Color("pair:N", legend=None))]
                        if has_ci else [])
    return alt.layer(*layers, data=frame).properties(width=width, height=260,
                                                     title=title or "CKA of matching layers, checkpoint A vs B")
