"""Charts of estimates with their intervals: the tour's statistic beside its control, each with a 95 % error bar."""

from __future__ import annotations

import altair as alt
import numpy as np

ROLE_ORDER = ["statistic", "control", "reference", "effect", "twin", "detail"]
ROLE_COLOURS = ["#1f77b4", "#d62728", "#7f7f7f", "#9467bd", "#ff7f0e", "#bcbd22"]


def estimate_chart(frame, title: str = "", width: int = 360):
    """Points (value) with error bars (lo to hi) per label, coloured by role; tooltips give the three numbers.

    ``frame``: columns label, role ('statistic' | 'control' | 'reference' | 'effect' | 'twin' | 'detail'), value,
    lo, hi, and (when present) interval: what each interval rests on ("jackknife t over 8 batches").
    """
    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=220))
    # the legend lists the roles drawn, each in its fixed colour (a chart of three roles names three)
    # (a role whose values are all missing, e.g. twins that could not be formed, is not drawn: not listed either)
    finite = np.isfinite(frame["value"].astype(float)) if "value" in frame else np.ones(len(frame), bool)
    drawn = set(frame.loc[finite, "role"]) if "role" in frame else set()
    roles = [r for r in ROLE_ORDER if r in drawn] or ROLE_ORDER
    colour = alt.Color("role:N", scale=alt.Scale(domain=roles, range=[ROLE_COLOURS[ROLE_ORDER.index(r)]
                                                                       for r in roles]), title=None)
    tooltip = [alt.Tooltip("label:N"), alt.Tooltip("role:N"), alt.Tooltip("value:Q", format=".4f"),
               alt.Tooltip("lo:Q", title="95 % lo", format=".4f"), alt.Tooltip("hi:Q", title="95 % hi", format=".4f")]
    if "interval" in frame:
        tooltip.append(alt.Tooltip("interval:N", title="interval"))
    base = alt.Chart(frame)
    bars = base.mark_rule(strokeWidth=3).encode(x=alt.X("lo:Q", title="value (95 % interval)",
                                                        scale=alt.Scale(zero=False)), x2="hi:Q", y=y, color=colour,
                                                 tooltip=tooltip)
    ticks = base.mark_tick(thickness=2, size=14).encode(x="lo:Q", y=y, color=colour, tooltip=tooltip) + \
        base.mark_tick(thickness=2, size=14).encode(x="hi:Q", y=y, color=colour, tooltip=tooltip)
    points = base.mark_point(filled=True, size=80).encode(x="value:Q", y=y, color=colour, tooltip=tooltip)
    return (bars + ticks + points).properties(title=title, width=width)
