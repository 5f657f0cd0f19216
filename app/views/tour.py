"""Paper tour: each claim of Raghu et al. 2021 checked on the current models with 95 % intervals, as two answers:
pattern (shown only when the statistic's interval clears the claim's own null) and learned (more than the untrained
twins) (vitlab.tour); each figure drawn as the paper draws it, from the same run. The table is the one
`vitlab tour` writes; Previous / Next walk through the figures for presentations."""

from dataclasses import replace

import lab
import streamlit as st

import vitlab
from vitlab import table, tour

STEPS = table.tour_steps()  # in table order: each row names the paper's claims its results bear on
VERDICT_BOX = {"shown": st.success, "not shown": st.warning, "can't tell": st.info}
LEARNED_BOX = {"yes": st.success, "no": st.warning, "can't tell": st.info, "n.a.": st.info}


def roles(a, b):
    """(ViT, CNN) among models A and B; a VitlabError in words when the pair lacks one."""
    fam = {m.label: vitlab.taps.family(m.model) for m in (a, b)}
    vit = next((m for m in (a, b) if fam[m.label] == "vit"), None)
    cnn = next((m for m in (a, b) if fam[m.label] in ("resnet", "resnetv2")), None)
    if vit is None or cnn is None:
        raise vitlab.VitlabError("the tour compares a ViT with a ResNet: choose one of each as models A and B "
                                 "(the defaults zoo:vit-cls and zoo:resnet, or e.g. ViT-B/32 and BiT R50x1)")
    return vit, cnn


def move(delta: int) -> None:
    i = STEPS.index(st.session_state.get("tour.step", STEPS[0]))
    st.session_state["tour.step"] = STEPS[(i + delta) % len(STEPS)]


def options_ui(s) -> tuple[tour.TourOptions, int]:
    c1, c2 = st.columns(2)
    twins = c1.toggle("Untrained twins as controls", value=True, key="tour.twins",
                      help="NAME@random: the same architecture untrained, for claims that depend on training")
    boot = c2.select_slider("Bootstrap resamples", [50, 100, 200, 500], value=200, key="tour.bootstrap")
    return tour.TourOptions(images=s.images, batch_size=max(4, s.batch_size),
                            control="random" if twins else "none"), boot


st.title("Paper tour")
s = lab.settings()
opts, boot = options_ui(s)
report = None
with lab.guard():
    a, b = lab.models(s)
    vit, cnn = roles(a, b)
    src = lab.source(s)
    report = lab.compute(("tour", s.key, opts, boot), lambda run: tour.run_tour(
        [vit, cnn], src, opts, replace(run, bootstrap=boot, seed=0)), "Paper tour")
if report is not None:
    frame = report.to_frame()
    st.dataframe(frame[["figure", "pattern", "statistic", "lo", "hi", "control", "learned", "effect", "twin",
                        "interval_unit", "interval_units", "interval_method", "evidence"]], hide_index=True,
                 key="tour.table", column_config={"evidence": st.column_config.TextColumn(width="large")})
    st.download_button("tour.csv", frame.to_csv(index=False).encode(), "tour.csv", "text/csv", key="tour.csv",
                       on_click="ignore")
    st.caption(lab.run_caption(report.info, s.images) + f"; intervals: jackknife t over batches (images, draws), "
               f"percentile bootstrap ({boot} resamples, seed 0) for rank correlations and radii; pattern: against "
               "the claim's own null; learned: against the untrained twins")
    nav = st.columns([1, 8, 1])
    nav[0].button("◀ Previous", key="tour.prev", on_click=move, args=(-1,))
    nav[2].button("Next ▶", key="tour.next", on_click=move, args=(1,))
    step = nav[1].radio("Figure", STEPS, horizontal=True, key="tour.step", label_visibility="collapsed",
                        format_func=lambda k: tour.CLAIMS[k].figure)
    row = report.rows[list(tour.CLAIMS).index(step)]  # the report keeps the checks in CLAIMS order
    st.subheader(f"{row.figure}: {row.title}")
    left, right = st.columns([3, 2])
    with right:
        st.markdown("**The paper**")
        st.markdown(f"> {row.claim}")
        st.markdown("**These models**")
        VERDICT_BOX[row.pattern](f"**Pattern: {row.pattern}.** statistic {row.statistic:.3f} "
                                 f"[{row.lo:.3f}, {row.hi:.3f}] vs {row.control:.3f} ({row.control_label})")
        LEARNED_BOX[row.learned](f"**Learned: {row.learned}.** " + (
            f"{row.effect:.3f} [{row.effect_lo:.3f}, {row.effect_hi:.3f}] vs untrained twins {row.twin:.3f} "
            f"[{row.twin_lo:.3f}, {row.twin_hi:.3f}]" if row.learned != "n.a." else row.learned_label))
        st.caption(f"Interval: {row.interval}. {row.evidence}")
    with left:
        paper = report.paper_charts.get(row.figure)
        if paper is not None:
            lab.chart(paper, key=f"tour.{step}.paper")
            lab.export(paper, report.paper_frame(row.figure), f"tour_{step}_paper", f"tour.{step}.paper")
        frame = report.frames[row.figure]
        if len(frame):
            chart = report.charts[row.figure]
            lab.chart(chart, key=f"tour.{step}.chart")
            lab.export(chart, frame, f"tour_{step}", f"tour.{step}")
