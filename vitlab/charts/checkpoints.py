"""Checkpoint comparison chart (Raghu et al. 2021, Fig 12); input: ``CheckpointComparison.to_frame()``."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ..errors import VitlabError


def checkpoint_lines(frame: pd.DataFrame, title: str | None = None, width: int = 420):
    """CKA between matching layers of two checkpoints against normalised depth: one line per pair (Fig 12)."""
    if frame.empty:
        raise VitlabError("no checkpoint comparison to draw")
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("depth:Q", title="layer (normalised depth)", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("cka:Q", title="CKA between the checkpoints", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("pair:N", legend=alt.Legend(labelLimit=400, orient="bottom", direction="vertical")),
        tooltip=["pair", "layer", alt.Tooltip("cka:Q", format=".4f")],
    ).properties(width=width, height=260, title=title or "CKA of matching layers, checkpoint A vs B")
