"""Token-norm artefacts: the distribution of token norms per block, high-norm tokens flagged by a robust threshold
and drawn on the image, their share of each Gram's energy, and CKA / attention distance with and without them."""

import lab
import streamlit as st

import vitlab.activations
from vitlab import token_norms
from vitlab.charts import causal as charts
from vitlab.charts import cka_heatmap
from vitlab.charts.attention import overlay

st.title("Token-norm artefacts")
st.caption("Some ViTs store global information in a few high-norm tokens of uninformative patches (Darcet et al. "
           "2024). A token is flagged when its norm exceeds median + k · 1.4826 · MAD of the spatial tokens' norms "
           "at that layer (over all images); prefix tokens (CLS, registers) are named and never flagged.")
s = lab.settings()
spec = lab.model_slot("tn.model", s)
k = st.number_input("k (robust threshold: median + k · 1.4826 · MAD)", 0.5, 50.0, 5.0, step=0.5, key="tn.k")
result = None
with lab.guard():
    m = lab.model(spec, s.device)
    src = lab.source(s)
    opts = token_norms.TokenNormOptions(images=s.images, batch_size=s.batch_size, k=float(k))
    result = lab.compute(("token-norms", s.key, spec, opts), lambda run: token_norms.token_norms(
        m, src, opts, run), "Token norms")

if result is not None:
    frame = result.to_frame()
    chart = charts.flag_summary_chart(frame)
    lab.chart(chart, key="tn.flags")
    lab.export(chart, frame, f"token_flags_{result.model}", "tn.flags")
    c1, c2 = st.columns(2)
    tap = c1.selectbox("Layer", result.layers, index=len(result.layers) - 1, key="tn.tap")
    image = c2.selectbox("Image", list(range(len(result.ids))), key="tn.image", format_func=lambda i: result.ids[i])
    hist = result.histogram_frame()
    chart = charts.norm_histogram(hist, tap)
    lab.chart(chart, key="tn.hist")
    lab.export(chart, hist[hist["tap"] == tap], f"token_norms_{result.model}_{tap}", "tn.hist")
    with lab.guard():
        view = vitlab.activations.model_view(m, src.load(image))
        flagged = result.flagged_frame()
        here = flagged[(flagged["tap"] == tap) & (flagged["image"] == result.ids[image])]
        lab.image(overlay(view, result.flag_grid(image, tap), min_side=224), here,
                  f"flagged_{result.model}_{tap}_{result.ids[image]}", "tn.overlay",
                  caption=f"flagged tokens at {tap} (bright): {len(here)}")
    st.subheader("With and without flagged tokens")
    cka = result.cka_frame()
    cols = st.columns(2)
    for col, (tokens, part) in zip(cols, cka.groupby("tokens", sort=False)):
        part = part.drop(columns="tokens").reset_index(drop=True)
        with col:
            chart = cka_heatmap(part, title=f"CKA, tokens: {tokens}", size=260)
            lab.chart(chart, key=f"tn.cka.{tokens}")
            lab.export(chart, part, f"token_norms_cka_{tokens}_{result.model}", f"tn.cka.{tokens}")
    dist = result.distance_frame()
    if not dist.empty:
        chart = charts.distance_compare_chart(dist)
        lab.chart(chart, key="tn.dist")
        lab.export(chart, dist, f"token_norms_distance_{result.model}", "tn.dist")
    st.dataframe(frame, hide_index=True)
