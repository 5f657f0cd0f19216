"""Skip connections (Raghu et al. 2021, Sec. 5, Figs 7-8): how strongly each sublayer's skip dominates its branch,
and what happens to the representations and the accuracy when one skip is removed."""

import claim
import lab
import streamlit as st

import vitlab
from vitlab import charts, interventions, skips
from vitlab.analyses import findings
from vitlab.charts import skips as skip_charts
from vitlab.charts.words import group_warnings

RETRAINED = ("zoo:vit-cls-noskip", "zoo:vit-cls-noskip0")
VALUES = {"ratio": "norm ratio ‖z‖ / ‖f(z)‖", "cosine": "cosine(z, f(z))"}


def early_lines(rep, key: str, value: str, batch_size: int) -> None:
    """A running estimate of the norm-ratio lines, with their intervals once there are enough batches for one."""
    summary = rep.summary()
    lab.chart(skip_charts.skip_lines(summary, value), key=f"skips.{key}")
    st.caption(findings.interval_caption("batches", rep.results[0].interval_units, batch_size=batch_size))


st.title("Skip connections")
lead = st.container()
st.caption("‖z‖/‖f(z)‖ of the skip z and the branch f(z) of every sublayer (the norm ratio), and what happens "
           "when one skip is removed.")
s = lab.settings()

st.subheader("Norm ratios")
value = st.radio("Show", list(VALUES), horizontal=True, key="skips.value", format_func=VALUES.get)
report = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    opts = skips.SkipOptions(images=s.images, batch_size=s.batch_size)
    early = lab.running(lambda rep, key: early_lines(rep, key, value, s.batch_size),
                                   lab.so_far(lambda rep: rep.results[0].images, s.images))
    report = lab.compute(("skips", s.key), lambda run: skips.skip_ratios([a, b], src, opts, run), "Skip ratios",
                         expect=skips.SkipReport, early=early)
if report is not None:
    st.caption(lab.run_caption(report.info, report.results[0].images))
    # one line per model and kind of warning: one a ResNet-50 block pushed the charts screens down (issue 51)
    for w in group_warnings(report.warnings, {r.model: r.layers for r in report.results}):
        st.warning(lab.md_plain(w, lines=True))
    frame = report.to_frame()
    with lab.guard():
        summary = report.summary()
        lines = skip_charts.skip_lines(summary, value)  # its subtitle says which lines it cannot draw, and why
        lab.chart(lines, key="skips.lines")
        lab.export(lines, summary, f"skip_{value}_lines", "skips.lines")
        lab.links.box("skip-ratio", [s.model_a, s.model_b], opts, "skip_ratio_summary", s)
        st.caption(findings.interval_caption("batches", report.results[0].interval_units, batch_size=s.batch_size)
                   + "; spatial: mean over the spatial tokens, cls: the CLS token")
    token_models = [m for m in dict.fromkeys(frame["model"]) if (frame[frame["model"] == m]["token"] >= 0).any()]
    cols = st.columns(max(1, len(token_models)))
    for col, name in zip(cols, token_models):
        with col, lab.guard():
            part = frame[frame["model"] == name]
            heat = skip_charts.skip_heatmap(part, value, width=360)
            lab.chart(heat, key=f"skips.heat.{name}")
            lab.export(heat, part, f"skip_{value}_{name}", f"skips.heat.{name}")

# the tour's check after the page's own charts: its lead is drawn at the top, but the charts do not wait for it
row = None
with lead, lab.guard():
    row = claim.check("skips", list(lab.models(s)), lab.source(s), s)
with lead:
    claim.lead(row, "Fig 7")

st.subheader("Remove a skip connection")
c1, c2, c3, c4 = st.columns([2, 1, 1.8, 1])  # the sublayer's words whole at 1280 px (issue 38)
slot = c1.radio("Model", ["A", "B"], horizontal=True, key="skips.slot",
                format_func=lambda k: f"{k}: {lab.md_plain(s.model_a if k == 'A' else s.model_b)}")
# its default as session state, not as the widget's value: a link's block is session state too, and a widget given
# both logs a warning with a stack trace on the server (issue 47)
block = c2.number_input("Block", 0, 200, key=lab._seed("skips.block", 1), help="counted from 0, as the model's own layer names, "
                        "the charts and the CLI's --block count them")
which = c3.selectbox("Sublayer", interventions.WHICH, key="skips.which",
                     format_func={"attn": "attention (token mixing)", "mlp": "MLP (channel mixing)",
                                  "both": "both"}.get)
c4.write("")
if c4.button("Remove it", key="skips.go", type="primary"):
    st.session_state["skips.removal"] = (slot, int(block), which)
chosen = st.session_state.get("skips.removal")
if chosen:
    slot_c, block_c, which_c = chosen
    spec = s.model_a if slot_c == "A" else s.model_b
    result = None
    with lab.guard():
        m = lab.model(spec, s.device)
        opts = interventions.RemoveSkipOptions(block=block_c, which=which_c, images=s.images, batch_size=s.batch_size)
        removal = opts.removal
        result = lab.compute(("skip-removal", s.key, spec, removal), lambda run: interventions.skip_removal(
            m, lab.source(s), opts, run), "Skip removal")
    if result is not None:
        # a skip removed at inference, not the paper's Fig 8 (retrained without it: the zoo comparison below)
        st.markdown("**Removed at inference** (not retrained, so not the paper's Fig 8): "
                    + lab.md_plain(result.finding().ours, lines=True))
        st.caption(f"{result.kind}; {result.images} images")
        frame = result.to_frame()
        # two a row: three heatmaps with their layer names do not fit one row at 1280 px (issue 34)
        cells = st.columns(2) + st.columns(2)
        for col, name, what in zip(cells, ("before", "after", "before_vs_after"),
                                   ("unmodified", f"without {removal.words}", "unmodified vs ablated")):
            part = frame[frame["map"] == name].drop(columns="map").reset_index(drop=True)
            # the axis titles name the ablated model in words (the title says which skip); the CSV keeps its label
            # ("zoo:vit-cls no-skip[1.attn]")
            gone = "skips removed" if removal.which == "both" else "skip removed"
            shown = part.replace({c: {f"{m.label} {removal.label}": f"{m.label}, {gone}"} for c in ("model_a", "model_b")})
            heat = charts.cka_heatmap(shown, title=what, size=200)
            with col:
                lab.chart(heat, key=f"skips.rm.{name}")
                lab.export(heat, part, f"skip_removal_{name}", f"skips.rm.{name}")
        with cells[3]:
            metrics = result.metrics_frame()
            bars = skip_charts.metrics_chart(metrics, width=240)
            lab.chart(bars, key="skips.metrics")
            lab.export(bars, metrics, "skip_removal_metrics", "skips.metrics")
            st.caption(findings.interval_caption("images", result.images) + " (each image right or wrong)")

st.subheader("Retrained without a skip (zoo)")
st.caption("The paper's Fig 8 retrains a ViT without one skip; the zoo has such models, trained with the same "
           "recipe as zoo:vit-cls.")
retrained = st.selectbox("Retrained model", RETRAINED, key="skips.retrained")
if st.button("Compare with zoo:vit-cls", key="skips.cmp"):
    st.session_state["skips.compare"] = retrained
if st.session_state.get("skips.compare"):
    spec = st.session_state["skips.compare"]
    comparison = None
    with lab.guard():
        normal, other = lab.model("zoo:vit-cls", s.device), lab.model(spec, s.device)
        data = vitlab.options.DataOptions(images=s.images, batch_size=s.batch_size)
        comparison = lab.compute(("retrained", s.key, spec), lambda run: interventions.retrained_comparison(
            normal, other, lab.source(s), data, run), "Retrained comparison")
    with lab.guard():
        # the tour's Fig 8 on this page's images: zoo:vit-cls against the zoo model retrained without block 3's skip
        claim.lead(claim.check("removal", [normal], lab.source(s), s), "Fig 8")
    if comparison is not None:
        frame = comparison.to_frame()
        cols = st.columns(2)
        for col, (name, part) in zip(cols, frame.groupby("model_a", sort=False)):
            heat = charts.cka_heatmap(part.reset_index(drop=True), size=280)
            with col:
                lab.chart(heat, key=f"skips.rt.{name}")
                lab.export(heat, part, f"retrained_{name}", f"skips.rt.{name}")
        st.dataframe(comparison.metrics_frame(), hide_index=True)
        st.caption("lo, hi: " + findings.interval_basis("images", comparison.report.images))
