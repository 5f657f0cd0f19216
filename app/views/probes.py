"""Linear probes (Raghu et al. 2021, Sec. 6, Figs 11, 13): few-shot linear classifiers on every layer's
representation (CLS token, mean of tokens, single tokens): how linearly the classes can be read at each depth."""

import claim
import lab
import streamlit as st

from vitlab import probes
from vitlab.charts import probes as charts

REP_NAMES = {"cls": "CLS token", "gap": "mean of tokens (GAP)", "gap_cls": "GAP incl. CLS", "first": "first token",
             "token": "single tokens"}

st.title("Linear probes")
lead = st.container()
st.caption("Closed-form few-shot linear probes (big_vision recipe) on each layer. Needs a labelled image set "
           "(Fashion-MNIST, CIFAR, a folder with one sub-folder per class).")
s = lab.settings()


def options_ui() -> tuple[int, int, int, list[str]]:
    c1, c2, c4, c3 = st.columns([1, 1, 1, 3])
    shots = c1.number_input("Shots per class", 1, 100, 5, key="probe.shots")
    test = c2.number_input("Test images", 10, 10_000, max(50, s.images), step=50, key="probe.test")
    draws = c4.number_input("Few-shot draws", 1, 20, 5, key="probe.draws",
                            help="re-draws of the split's images: the mean accuracy with its 95 % interval")
    reps = c3.multiselect("Representations", list(REP_NAMES), default=["cls", "gap"], key="probe.reps",
                          format_func=REP_NAMES.get)
    return int(shots), int(test), int(draws), reps


shots, test, draws, reps = options_ui()
report = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    opts = probes.ProbeOptions(shots=shots, test=test, reps=tuple(reps) or None, draws=draws,
                                batch_size=s.batch_size)
    early = lab.running(lambda rep, key: lab.chart(charts.probe_lines(rep.to_frame()), key=f"probe.{key}"),
                                   lambda rep, done, total: f"First answer: {rep.results[0].model} (model {done} of "
                                                            f"{total}), its probes fitted; the next model's follow")
    report = lab.compute(("probes", s.key, shots, test, draws, tuple(reps)),
                         lambda run: probes.probes([a, b], src, opts, run), "Linear probes",
                         expect=probes.ProbeReport, early=early)

if report is not None:
    st.caption(lab.run_caption(report.info, len(report.split.train) + len(report.split.val) + len(report.split.test)))
    for r in report.results:
        for w in r.warnings:
            st.warning(lab.md_plain(w, lines=True))
    frame = report.to_frame()
    chart = charts.probe_lines(frame)
    lab.chart(chart, key="probe.chart")
    lab.export(chart, frame, f"probes_{shots}shot", "probe.chart")
    lab.links.box("probe", [s.model_a, s.model_b], opts, "probe", s)
    sp = report.split
    st.caption(f"{len(sp.train)} training, {len(sp.val)} held-out (to choose λ) and {len(sp.test)} test images, "
               f"{sp.classes} classes; accuracies are means over {draws} few-shot draws of these images; "
               + report.interval_caption()
               + "; dashed: chance, the most common test class's share (what a guess that ignores the image "
               "scores at best)" + ("; above_chance: yes when the whole interval is above it" if draws > 1 else ""))
    st.dataframe(frame, hide_index=True, height=240)

# the tour's check after the page's own charts: its lead is drawn at the top, but the charts do not wait for it
row = None
with lead, lab.guard():
    # the tour's Fig 11: its own few-shot draws from a probe pool, on this page's models and batch size
    row = claim.check("probes", list(lab.models(s)), lab.source(s), s)
with lead:
    claim.lead(row, "Fig 11")
