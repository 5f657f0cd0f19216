"""Paper tour: each claim of Raghu et al. 2021 checked on the current models with 95 % intervals, as two answers:
pattern (shown only when the statistic's interval clears the claim's own null) and learned (more than the untrained
twins) (vitlab.tour); each figure drawn as the paper draws it, from the same run. The table is the one
`vitlab tour` writes; Previous / Next walk through the figures for presentations."""

from dataclasses import replace

import lab
import streamlit as st

import vitlab
from vitlab import table, tour

# The slides' layout rules (app/views/present.py), for this page's figure column: each figure an SVG scaled to its
# column (never wider: at 1280 px a 650-px figure ran into the claim's text) and to the screen's height; the
# interval chart at most a quarter of it (tests/test_browser_slides.py measures figure and text boxes).
STYLE = """<style>
.st-key-tour-figure [data-testid="stVegaLiteChart"] svg.marks {width: 100% !important; height: auto !important;
    max-height: 78vh !important}
.st-key-tour-figure .st-key-tour-intervals [data-testid="stVegaLiteChart"] svg.marks {max-height: 32vh !important}
.st-key-tour-figure [data-testid="stFullScreenFrame"] > div,
.st-key-tour-figure [data-testid="stVegaLiteChart"] {width: 100% !important}
</style>"""
SVG = {"embedOptions": {"renderer": "svg"}}  # scales with its box (a canvas would blur or keep its pixel size)
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


def draw(chart, key: str) -> None:
    """A figure at its column's width (its height follows, bounded by the style above), drawn as SVG."""
    st.altair_chart(chart.properties(usermeta=SVG), key=key, width="stretch", theme=None)


def move(delta: int) -> None:
    i = STEPS.index(st.session_state.get("tour.step", STEPS[0]))
    st.session_state["tour.step"] = STEPS[(i + delta) % len(STEPS)]


def options_ui() -> tuple[tour.TourOptions, int]:
    """The tour's own images and batches, seeded from the tour default (vitlab.tour.TOUR_IMAGES in batches of
    TOUR_BATCH), not the sidebar's: the page, the slides and `vitlab report` then measure the same rows."""
    kept = st.session_state.get(lab.TOUR_SETTINGS, {})  # this page's last choices (its widget keys do not survive)
    for key, default in (("tour.images", tour.TOUR_IMAGES), ("tour.batch_size", tour.TOUR_BATCH),
                         ("tour.twins", True), ("tour.bootstrap", tour.TOUR_BOOTSTRAP)):
        st.session_state.setdefault(key, kept.get(key, default))
    c1, c2, c3, c4 = st.columns([1, 1, 1.5, 1.3])  # the toggle's label whole at 1280 px
    images = c1.number_input("Tour images", min_value=8, max_value=10000, step=32, key="tour.images",
                             help=f"default {tour.TOUR_IMAGES}, as `vitlab tour` and `vitlab report`")
    batch = c2.number_input("Images per batch", min_value=4, max_value=512, step=4, key="tour.batch_size",
                            help=f"default {tour.TOUR_BATCH}: the intervals resample batches, and need 4 or more")
    twins = c3.toggle("Untrained twins as controls", key="tour.twins",
                      help="NAME@random: the same architecture untrained, for claims that depend on training")
    boot = c4.select_slider("Bootstrap resamples", [50, 100, 200, 500], key="tour.bootstrap")
    # "Present the tour" runs what this page runs (plain keys: they outlive this page's widgets)
    st.session_state[lab.TOUR_SETTINGS] = {"tour.images": int(images), "tour.batch_size": int(batch),
                                           "tour.twins": bool(twins), "tour.bootstrap": boot}
    return tour.TourOptions(images=int(images), batch_size=int(batch), control="random" if twins else "none"), boot


st.html(STYLE)
st.title("Paper tour")
s = lab.settings()
opts, boot = options_ui()
report = None
with lab.guard():
    a, b = lab.models(s)
    vit, cnn = roles(a, b)
    src = lab.source(s)
    report = lab.compute(("tour", s.key, opts, boot), lambda run: tour.run_tour(
        [vit, cnn], src, opts, replace(run, bootstrap=boot, seed=tour.TOUR_SEED)), "Paper tour")
if report is not None:
    frame = report.to_frame()
    # every number in words with its interval, no "None" cell (issue 37); tour.csv keeps the numbers' columns
    st.dataframe(report.table(), hide_index=True, key="tour.table",
                 column_config={k: st.column_config.TextColumn(width="large")
                                for k in ("on these models", "trained vs untrained")})
    st.download_button("tour.csv", frame.to_csv(index=False).encode(), "tour.csv", "text/csv", key="tour.csv",
                       on_click="ignore")
    st.caption(lab.run_caption(report.info, opts.images) + "; intervals: jackknife t over batches (or images; Fig "
               "11: t over the few-shot draws plus the probe pool's own variance), "
               f"percentile bootstrap ({boot} resamples, seed {tour.TOUR_SEED}) for rank correlations and radii, "
               "kept inside each statistic's range; pattern: against the claim's own null; learned: against the "
               "untrained twins")
    nav = st.columns([1.7, 7, 1.3], vertical_alignment="top")  # "◀ Previous" whole at 1280 px
    nav[0].button("◀ Previous", key="tour.prev", on_click=move, args=(-1,))
    nav[2].button("Next ▶", key="tour.next", on_click=move, args=(1,))
    step = nav[1].radio("Figure", STEPS, horizontal=True, key="tour.step", label_visibility="collapsed",
                        format_func=lambda k: tour.CLAIMS[k].figure)
    row = report.rows[list(tour.CLAIMS).index(step)]  # the report keeps the checks in CLAIMS order
    words = lab.check_lines(row)
    st.subheader(f"{row.figure}: {row.title}")
    left, right = st.columns([3, 2])
    with right:
        st.markdown("**The paper**")
        st.markdown(f"> {words['paper']}")
        st.markdown("**These models**")
        st.markdown(f"Statistic: {words['statistic']}.")
        VERDICT_BOX[row.pattern](f"**Pattern: {row.pattern}.** {words['pattern_numbers']}")
        LEARNED_BOX[row.learned](f"**Learned: {row.learned}.** {words['learned_numbers']}")
        st.markdown(words["control_note"])
        st.caption(f"{words['interval_text']}. Models: {words['models'] or 'none'}. Data: {words['data']}. "
                   f"{lab.md_plain(row.evidence)}")
    with left.container(key="tour-figure"):
        paper = report.paper_charts.get(row.figure)
        if paper is not None:
            draw(paper, key=f"tour.{step}.paper")
            lab.export(paper, report.paper_frame(row.figure), f"tour_{step}_paper", f"tour.{step}.paper")
        frame = report.frames[row.figure]
        if len(frame):
            chart = report.charts[row.figure]
            with st.container(key="tour-intervals"):
                draw(chart, key=f"tour.{step}.chart")
            lab.export(chart, frame, f"tour_{step}", f"tour.{step}")
