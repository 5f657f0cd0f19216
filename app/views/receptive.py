"""Receptive fields (Raghu et al. 2021, Sec. 4.2, Fig 6): the effective receptive field of the centre position of
every block, the mean |gradient| of its output with respect to the input image."""

import claim
import lab
import streamlit as st

from vitlab import receptive
from vitlab.analyses import findings
from vitlab.charts import attention as charts

st.title("Receptive fields")
lead = st.container()
st.caption("The effective receptive field of the centre position of every block: the mean |gradient| of its output "
           "with respect to the input image.")
s = lab.settings()
spec = lab.model_slot("rf.model", s)
c1, c2 = st.columns([1, 3])
residual = c1.radio("Measured", receptive.RESIDUALS, horizontal=True, key="rf.residual",
                    format_func=receptive.RESIDUAL_LABELS.get)
def early_chart(res, key: str) -> None:
    """A running estimate of the fields (their radii's interval comes with the full run)."""
    lab.chart(charts.receptive_field_chart(res.to_frame()), key=f"rf.{key}")
    st.caption("The radii's interval comes with the full run.")


# gradients cost a forward and a backward per layer: a few images give a stable picture
images = min(s.images, 32)
result = None
with lab.guard():
    m = lab.model(spec, s.device)
    src = lab.source(s)
    opts = receptive.ReceptiveOptions(images=images, batch_size=min(s.batch_size, 8), residual=residual)
    early = lab.running(early_chart, lab.so_far(lambda res: res.images, images))
    result = lab.compute(("rf", s.key, spec, residual), lambda run: receptive.receptive_fields(m, src, opts, run),
                         "Receptive fields", expect=receptive.ReceptiveFieldResult, early=early)

if result is not None:
    for w in result.warnings:
        st.warning(lab.md_plain(w, lines=True))
    frame = result.to_frame()
    chart = charts.receptive_field_chart(frame)  # tiles large enough to see a shape, as many a row as fit
    lab.chart(chart, key="rf.chart")
    lab.export(chart, frame, f"receptive_fields_{result.model}_{residual}", "rf.chart")
    lab.links.box("receptive-field", [spec], opts, "receptive_field", s)
    st.caption(f"{result.images} images. Radius of the disc around the centre holding 50 % / 90 % of the gradient ("
               + findings.interval_caption("batches", result.radius_units, "percentile bootstrap", opts.batch_size)
               + "):")
    summary = result.summary_frame()
    radius = charts.receptive_radius_chart(summary)
    lab.chart(radius, key="rf.radius")
    lab.export(radius, summary, f"receptive_radius_{result.model}_{residual}", "rf.radius")
    st.dataframe(summary, hide_index=True, height=240)

# the tour's check after the page's own charts: its lead is drawn at the top, but the charts do not wait for it
row = None
with lead, lab.guard():
    # the tour's Fig 6: the first tour.rf_images images in batches of 8, after the residual in both models
    row = claim.check("receptive", [lab.model(spec, s.device), *lab.models(s)], lab.source(s), s)
with lead:
    claim.lead(row, "Fig 6")
