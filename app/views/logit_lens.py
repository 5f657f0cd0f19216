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

ZOO_SET = ("zoo:vit-cls", "zoo:vit-gap-14", "zoo:mixer", "zoo:resnet")  # CLS ViT, GAP ViT, Mixer, ResNet side by side
# not a claim of the paper (the tour's Fig 11 check, on the Linear probes page, is the one voice for that): the
# question both pages answer, and how this one does
QUESTION = ("**Where does the class appear?** Linear probes (Fig 11) answer it with a classifier trained for each "
            "layer. The logit lens trains nothing. It reads each block's output through the model's own final layers, "
            "the ones that turn the last block into the model's answer. The paper's claim on this question, with the "
            "tour's answer for these models, is on the Linear probes page.")
# how to read the chart (issue 47: "normalised block depth" was not explained)
READING = ("How to read it: each line is one model. Left to right is depth in the model: block k of its L blocks sits "
           "at k / L, so its last block is at 1, and models of different depths line up. Up is the share of images "
           "whose readout names the right class (left) or the model's own final answer (right).")
# what is read out, in short sentences (the model's parts in words; the CSV and the code name them exactly)
WHAT = ("What is read out at every block is what the model applies after its last block. That is its final "
        "normalisation, then its own pooling (the CLS token; the mean of the tokens for a GAP ViT or a Mixer; a "
        "ResNet's pooled map), then its classifier head. So the last block's readout is the model's own output. A "
        "ResNet's head takes only the last stage's width. Its narrower blocks have no readout, and the lens does not "
        "invent one. Accuracy needs labelled images whose classes are the head's (the zoo on Fashion-MNIST). Beside "
        "**Linear probes** (Fig 11), which train a classifier per layer, this gives two answers to where the class "
        "appears.")


def add_zoo_set() -> None:
    """A button callback: add the zoo's CLS ViT, GAP ViT, Mixer and ResNet to the models read out."""
    have = [m for m in st.session_state.get("lens.models", []) if m]
    st.session_state["lens.models"] = list(dict.fromkeys(have + [m for m in ZOO_SET if m in lab.zoo_specs()]))


def options_ui(s) -> list[str]:
    """The models read out: the sidebar's A and B (as every analysis page), then any added here."""
    sidebar = [m for m in dict.fromkeys((s.model_a, s.model_b)) if m]
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    typed = [m for m in st.session_state.get("lens.models", []) if isinstance(m, str)]  # a link's or typed names
    more = c1.multiselect("More models, beside the sidebar's A and B", list(dict.fromkeys(lab.zoo_specs() + typed)),
                          key="lens.models",
                          accept_new_options=True, placeholder="zoo models, or type a timm name",
                          help="Zoo models, or type any timm name (NAME@random[:SEED] for random weights)")
    c2.button("Add the zoo's four", key="lens.zoo", on_click=add_zoo_set,
              help="The zoo's CLS ViT, GAP ViT, Mixer and ResNet, trained on Fashion-MNIST: heads whose classes are "
                   "the data's, so each block has an accuracy")
    specs = list(dict.fromkeys(sidebar + list(more)))
    added = [m for m in specs if m not in sidebar]
    named = " and ".join(f"{slot} ({lab.md_plain(m)})" for slot, m in zip(("A", "B"), (s.model_a, s.model_b)) if m)
    st.caption(f"Read out: the sidebar's models {named}" + (f", and {', '.join(lab.md_plain(m) for m in added)} "
                                                            "added here" if added else "") + ".")
    return specs


st.title("Logit lens")
lead = st.container()
s = lab.settings()
specs = options_ui(s)
report = None
with lab.guard():
    if not specs:
        raise vitlab.VitlabError("choose a model in the sidebar or add one here")
    models = [lab.model(m, s.device) for m in specs]
    for note in filter(None, map(logit_lens.untrained_note, models)):  # said before the run, not after
        st.info(lab.md_plain(note, lines=True))
    src = lab.source(s)
    opts = logit_lens.LensOptions(images=s.images, batch_size=s.batch_size)
    early = lab.running(lambda rep, key: lab.chart(charts.lens_lines(rep.to_frame()), key=f"lens.{key}"),
                                   lab.so_far(lambda rep: rep.images, s.images))
    report = lab.compute(("lens", s.key, tuple(specs)), lambda run: logit_lens.logit_lens(models, src, opts, run),
                         "Logit lens", expect=logit_lens.LensReport, early=early)

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
    st.caption(READING)
    bands = findings.interval_caption("batches", report.results[0].batches, batch_size=s.batch_size, what="bands")
    st.caption(f"{bands[0].upper()}{bands[1:]}. Dashed line: chance, the most common class's share of these images.")
    st.caption("The last block's readout is the model's own output. Its largest difference from the model's logits: "
               + ", ".join(f"{lab.md_plain(m)} {d:.1e}" for m, d in report.exactness().items()) + ".")
    # a line of its own: the browser's clock ("shown 0.8 s after your click") ends it, never a line of model names
    st.caption(lab.run_caption(report.info, report.images))
st.caption(WHAT)
st.page_link(lab.page("probes", "Linear probes", ":material/linear_scale:"),
             label="The same question by linear probes (Fig 11)", icon=":material/linear_scale:")
if report is not None:
    # every column whole at 1280 px (the main column is ~818 px there: tests/test_browser_lens.py measures it)
    widths = {"model": 115, "block": 150, "depth": 55, "accuracy [95 %]": 145, "agreement [95 %]": 145,
              "no readout because": 200}
    st.dataframe(report.words_frame(), hide_index=True, height=320,
                 column_config={c: st.column_config.Column(width=w) for c, w in widths.items()})
