"""What a chart writes is whole and true to what it draws (issue 38): a legend lists only the roles drawn, a panel's
title is never cut."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import vl_convert as vlc

from vitlab.charts import tour as CT
from vitlab.charts.evidence import estimate_chart


def test_interval_legend_lists_only_the_roles_drawn():
    """Fig 7 listed "twin" when the twins' estimate could not be formed (a row of NaN, drawn as nothing)."""
    frame = pd.DataFrame({"label": ["ViT", "CNN", "ViT − CNN", "twins"], "role": ["statistic", "control", "effect",
                                                                               "twin"],
                          "value": [4.1, 4.8, -0.7, np.nan], "lo": [4.0, 4.7, -0.9, np.nan],
                          "hi": [4.3, 4.9, -0.5, np.nan]})
    assert legend(estimate_chart(frame)) == {("statistic", "control", "effect")}
    frame.loc[3, ["value", "lo", "hi"]] = [0.5, 0.4, 0.6]
    assert legend(estimate_chart(frame)) == {("statistic", "control", "effect", "twin")}


def legend(chart) -> set[tuple]:
    """The colour domains of every layer of a (nested) layer chart."""
    out, todo = set(), [chart.to_dict()]
    while todo:
        spec = todo.pop()
        todo += spec.get("layer", [])
        if "color" in spec.get("encoding", {}):
            out.add(tuple(spec["encoding"]["color"]["scale"]["domain"]))
    return out


def test_panel_titles_are_whole_on_two_lines():
    """The receptive-field and localization grids cut long panel names at the panel's width
    ("zoo:resnet@random:0: t…"): each is now written whole, a long one on two lines (the model, then the token)."""
    panels = ["zoo:vit-cls@random:0: token 10", "zoo:resnet@random:0: token 3", "zoo:resnet: token 1"]
    frame = pd.DataFrame([{"panel": p, "row": r, "col": c, "value": r + c} for p in panels for r in range(2)
                          for c in range(2)])
    svg = vlc.vegalite_to_svg(CT.styled(CT.image_grid(frame, "t", size=110, aspect=1.1)).to_json())
    texts = re.findall(r"<text[^>]*>(.*?)</text>", svg)
    assert not [t for t in texts if "…" in t]
    heads = [re.findall(r"<tspan[^>]*>([^<]*)</tspan>", t) for t in texts if "<tspan" in t]
    assert heads == [p.split(": ") for p in panels[:2]]  # the long names on two lines; the short one on one
    assert "zoo:resnet: token 1" in texts
