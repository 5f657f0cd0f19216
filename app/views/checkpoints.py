"""Checkpoints (Raghu et al. 2021, Sec. 7, Fig 12, App. G): CKA of matching layers of two checkpoints of one
architecture: models trained on less data, or a model before and after fine-tuning."""

import claim
import lab
import streamlit as st

from vitlab import checkpoints
from vitlab.analyses import findings
from vitlab.charts import checkpoints as charts

PRESETS = {
    "zoo": "Data scale, zoo: 3 % and 10 % vs 100 % of Fashion-MNIST, and another seed (the control)",
    "sidebar": "Model A vs model B (sidebar; two checkpoints of one architecture)",
    "hub-scale": "Data scale, hub: ViT-B/32 ImageNet-1k vs ImageNet-21k",
    "hub-ft": "Fine-tuning, hub: ViT-B/16 ImageNet-21k vs fine-tuned on ImageNet-1k",
}
PAIRS = {
    # the other-seed pair beside the data-scale pairs: two separately trained ViTs drift apart at the top anyway,
    # so less data must differ more than another seed does (the tour's Fig 12 control, issue 37)
    "zoo": [("zoo:vit-cls-3pct", "zoo:vit-cls"), ("zoo:vit-cls-10pct", "zoo:vit-cls"),
            ("zoo:vit-cls-seed1", "zoo:vit-cls"), ("zoo:resnet-3pct", "zoo:resnet")],
    "hub-scale": [("vit_base_patch32_224.augreg_in1k", "vit_base_patch32_224.augreg_in21k")],
    "hub-ft": [("vit_base_patch16_224.augreg_in21k", "vit_base_patch16_224.augreg2_in21k_ft_in1k")],
}

st.title("Checkpoints")
lead = st.container()
st.caption("CKA of matching layers of two checkpoints of one architecture. Whether a checkpoint has local heads "
           "(the paper's Fig 4 and its data-scale section) is measured on the Attention page, not here.")
s = lab.settings()
lab.links.costly("ckpt.preset", {k: [spec for pair in pairs for spec in pair] for k, pairs in PAIRS.items()})
preset = st.radio("Compare", list(PRESETS), key="ckpt.preset", format_func=PRESETS.get)
specs = [(s.model_a, s.model_b)] if preset == "sidebar" else PAIRS[preset]
st.caption("Pairs: " + lab.md_plain("; ".join(f"{x} vs {y}" for x, y in specs)))
result = None
with lab.guard():
    pairs = [(lab.model(x, s.device), lab.model(y, s.device)) for x, y in specs]
    src = lab.source(s)
    opts = checkpoints.CheckpointOptions(images=s.images, batch_size=s.batch_size)
    result = lab.compute(("ckpt", s.key, tuple(specs)), lambda run: checkpoints.compare_checkpoints(
        pairs, src, opts, run), "Checkpoints")

row = None
with lead, lab.guard():
    # the tour's Fig 12 on this page's images: the zoo's 3 % and 10 % models against the full-data model, beyond
    # the other seed (zoo:vit-cls-seed1); it does not depend on the sidebar's models or the preset
    row = claim.check("scale", [], lab.source(s), s)
with lead:
    claim.lead(row, "Fig 12")

if result is not None:
    for w in result.warnings:
        st.warning(lab.md_plain(w, lines=True))
    frame = result.to_frame()
    chart = charts.checkpoint_lines(frame)
    lab.chart(chart, key="ckpt.chart")
    lab.export(chart, frame, f"checkpoints_{preset}", "ckpt.chart")
    lab.links.box("compare-checkpoints", specs, opts, "checkpoints", s)
    st.caption(findings.interval_caption("batches", result.batches, batch_size=s.batch_size))
    st.caption(lab.run_caption(result.info, result.images))
