"""Logit lens (beside Fig 11): every block of every model read out by the model's own final norm and head, with no
classifier trained; accuracy and agreement with the final prediction per block, with 95 % intervals over batches.
The linear probes page answers "where does the class appear?" with a classifier trained per layer; this one with
the model's own head."""

import lab
import streamlit as st

import vitlab
from vitlab import logit_lens
from vitlab.analyses import findings
from vitlab.charts import logit_lens as charts

PREFERRED = ("zoo:vit-cls", "zoo:vit-gap-14", "zoo:mixer", "zoo:resnet")
# not a claim of the paper (the tour's Fig 11 check, on the Linear probes page, is the one voice for that): the
# question both pages answer, and how this one does
QUESTION = ("**Where does the class appear?** Linear probes (Fig 11) answer with a classifier trained per layer; the "
            "logit lens trains nothing: each block is read by the model's own final norm and head. The paper's claim "
            "on this question, with the tour's answer for these models, is on the Linear probes page.")


def options_ui(s) -> list[str]:
    zoo = lab.zoo_specs()
    default = [m for m in PREFERRED if m in zoo] or [m for m in (s.model_a, s.model_b) if m]
    return st.multiselect("Models", list(dict.fromkeys(zoo + default)), default=default, key="lens.models",
                          accept_new_options=True,
                          help="Zoo models, or type any timm name (NAME@random[:SEED] for random weights)")


st.title("Logit lens")
lead = st.container()
s = lab.settings()
specs = options_ui(s)
report = None
with lab.guard():
    if not specs:
        raise vitlab.VitlabError("choose at least one model")
    models = [lab.model(m, s.device) for m in specs]
    src = lab.source(s)
    opts = logit_lens.LensOptions(images=s.images, batch_size=s.batch_size)
    report = lab.compute(("lens", s.key, tuple(specs)), lambda run: logit_lens.logit_lens(models, src, opts, run),
                         "Logit lens")

with lead:
    st.markdown(QUESTION)
    if report is None:
        st.info(f"**{lab.OURS_LEAD}** nothing was read out (see below).")
    else:
        # it names the models and, where there is no accuracy, the data's classes (a folder's sub-folders)
        st.markdown(f"**{lab.OURS_LEAD}** {lab.md_plain(report.finding(s.batch_size).ours, lines=True)}")

if report is not None:
    for w in report.warnings:
        st.warning(lab.md_plain(w, lines=True))
    frame = report.to_frame()
    chart = charts.lens_lines(frame)
    lab.chart(chart, key="lens.chart")
    lab.export(chart, frame, "logit_lens", "lens.chart")
    lab.links.box("logit-lens", specs, opts, "logit_lens", s)
    st.caption(findings.interval_caption("batches", report.results[0].batches, batch_size=s.batch_size,
                                         what="bands")
               + "; dashed: chance, the most common class's share of these images; the last block's readout against "
               "the model's logits, max |difference|: "
               + ", ".join(f"{m} {d:.1e}" for m, d in report.exactness().items()) + "; "
               + lab.run_caption(report.info, report.images))
st.caption("What the model applies after its last block (final norm, its own pooling: the CLS token, or the mean of "
           "the tokens for a GAP ViT or a Mixer, a ResNet's pooled map; then fc_norm and head) read out at every "
           "block, so the last block's readout is the model's own logits. A ResNet's head takes only the last "
           "stage's width: narrower blocks have no readout. Beside **Linear probes** (Fig 11), which train a "
           "classifier per layer: two answers to where the class appears. Accuracy needs labelled images whose "
           "classes are the head's (the zoo on Fashion-MNIST).")
st.page_link(lab.page("probes", "Linear probes", ":material/linear_scale:"),
             label="The same question by linear probes (Fig 11)", icon=":material/linear_scale:")
if report is not None:
    st.dataframe(report.words_frame(), hide_index=True, height=320)
