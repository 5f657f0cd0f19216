"""Token-norm artefacts: the distribution of token norms per block, high-norm tokens flagged by a robust threshold
and drawn on the image, their share of each Gram's energy, and CKA / attention distance with and without them."""

import lab
import streamlit as st

import vitlab
from vitlab import attention, localization, token_norms
from vitlab.charts import causal as charts
from vitlab.charts import cka_heatmap
from vitlab.charts.attention import overlay
from vitlab.charts.localization import localization_rate_chart
from vitlab.charts.words import layer_in_words


def localization_with_and_without(m, src, s, k: float) -> None:
    """Localization rates of the default layers with every token and with flagged positions left out."""
    reports = []
    for tokens, fk in (("all", None), ("flagged left out", k)):
        opts = localization.LocalizationOptions(images=s.images, batch_size=s.batch_size, flagged_k=fk)
        rep = lab.compute(("tn-loc", s.key, m.label, opts), lambda run, o=opts: localization.localization(
            [m], src, o, run), f"Localization, tokens: {tokens}")
        if rep is None:
            return
        reports.append(rep)
    rate = localization.rates_with_and_without(*reports)
    chart = localization_rate_chart(rate, title="Localized tokens, with and without flagged positions")
    lab.chart(chart, key="tn.loc")
    lab.export(chart, rate, f"token_norms_localization_{m.label}", "tn.loc")
    left = ", ".join(f"{layer_in_words(r.layer)} {r.left_out}" for r in reports[1].rates().itertuples())
    st.caption(f"{reports[1].interval_caption(s.batch_size)}. A position flagged in any image is left out whole (a "
               f"token's CKA runs over images); left out per layer: {left}.")


def maps_with_and_without(m, src, result, image: int) -> None:
    """The head-mean attention map of one block for the chosen image, with every key and with flagged keys masked."""
    blocks = [int(t.split(".")[1]) + 1 for t in result.layers if t.endswith(".resid_post")][:-1]
    block = st.selectbox("Attention block (its input's flags: the previous block's output)", blocks,
                         index=len(blocks) // 2, key="tn.block")
    query = "cls" if "cls" in result.prefix else (result.grid[0] // 2, result.grid[1] // 2)
    view = vitlab.activations.model_view(m, src.load(image))
    flags = token_norms.block_input_flags(result, block, image)
    cols = st.columns(2)
    for col, leave in zip(cols, (None, flags)):
        amap = attention.attention_map(m, src, image, block, "mean", query, store=lab.store(), leave_out=leave)
        tokens = "all" if leave is None else "flagged left out"
        with col:
            lab.image(overlay(view, amap.grid, min_side=224), amap.to_frame(),
                      f"attention_{tokens}_{result.model}_block{block}_{result.ids[image]}", f"tn.map.{tokens}",
                      caption=f"block {block}, mean over heads, query {amap.query}, keys: {tokens}"
                      + ("" if leave is None else f" ({int(leave.sum())} masked, row renormalised)"))

def with_and_without(m, src, s, result, image: int, k: float) -> None:
    """CKA, attention distance, localization and attention maps with every token and with flagged ones left out."""
    cka = result.cka_frame()
    cols = st.columns(2)
    for col, (tokens, part) in zip(cols, cka.groupby("tokens", sort=False)):
        part = part.drop(columns="tokens").reset_index(drop=True)
        with col:
            chart = cka_heatmap(part, title=f"CKA, tokens: {tokens}", size=210)  # fits half of 1280 px
            lab.chart(chart, key=f"tn.cka.{tokens}")
            lab.export(chart, part, f"token_norms_cka_{tokens}_{result.model}", f"tn.cka.{tokens}")
    dist = result.distance_frame()
    if not dist.empty:
        chart = charts.distance_compare_chart(dist)
        lab.chart(chart, key="tn.dist")
        lab.export(chart, dist, f"token_norms_distance_{result.model}", "tn.dist")
    with lab.guard():
        localization_with_and_without(m, src, s, k)
    if result.distance_all is not None:
        with lab.guard():
            maps_with_and_without(m, src, result, image)


PAPER = ("(Darcet et al. 2024, not Raghu et al.) that large, well-trained ViTs store global information in a few "
         "high-norm tokens of uninformative background patches.")

st.title("Token-norm artefacts")
lead = st.container()
st.caption("A token is flagged when its norm exceeds median + k · 1.4826 · MAD of the spatial tokens' norms "
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

with lead:
    lab.answer(PAPER, None if result is None else result.finding(), "no token norms were computed (see below).")

if result is not None:
    frame = result.to_frame()
    empty = charts.no_flags_words(frame)
    chart = charts.flag_summary_chart(frame)
    if empty is not None:  # said, not drawn: an empty chart showed one tick, "0.000000" (issue 51); the CSV of its
        st.info(lab.md_plain(empty[0].upper() + empty[1:] + "."))  # zeros and the words' PNG/SVG still export
    else:
        lab.chart(chart, key="tn.flags")
    lab.export(chart, frame, f"token_flags_{result.model}", "tn.flags")
    lab.links.box("token-norms", [spec], opts, "token_norms", s)
    c1, c2 = st.columns(2)
    tap = c1.selectbox("Layer", result.layers, index=len(result.layers) - 1, key="tn.tap", format_func=layer_in_words,
                       help="Blocks counted from 0, as the model names them; the CSV names each layer as vitlab's "
                            "taps do (e.g. 'blocks.0.resid_post')")
    image = c2.selectbox("Image", list(range(len(result.ids))), key="tn.image", format_func=lab.image_name(src))
    hist = result.histogram_frame()
    chart = charts.norm_histogram(hist, tap)
    lab.chart(chart, key="tn.hist")
    lab.export(chart, hist[hist["tap"] == tap], f"token_norms_{result.model}_{tap}", "tn.hist")
    with lab.guard():
        view = vitlab.activations.model_view(m, src.load(image))
        flagged = result.flagged_frame()
        here = flagged[(flagged["tap"] == tap) & (flagged["image"] == result.ids[image])]
        c1, _ = st.columns(2)  # half the page: across the whole of it the image alone was taller than a screen
        with c1:
            lab.image(overlay(view, result.flag_grid(image, tap), min_side=224), here,
                      f"flagged_{result.model}_{tap}_{result.ids[image]}", "tn.overlay",
                      caption=f"flagged tokens at {layer_in_words(tap)} (bright): {len(here)}")
    st.subheader("With and without flagged tokens")
    if result.any_flagged:
        with_and_without(m, src, s, result, image, float(k))
    else:  # nothing left out: every "without" equals its "with"; drawn only on request (it runs ~5000 px tall)
        st.caption("Nothing is flagged at this threshold, so each comparison would show the same picture twice.")
        with st.expander("Show the comparisons anyway", expanded=False):
            with_and_without(m, src, s, result, image, float(k))
    st.dataframe(frame, hide_index=True)
