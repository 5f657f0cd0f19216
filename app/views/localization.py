"""Localization (Raghu et al. 2021, Sec. 5, Figs 9-10): how well each token of a layer keeps the information of
its own input patch (linear CKA over images between the token and the patch at every position), CLS vs GAP
models, and, for one token, its localization map beside its attention on an image of your own."""

import lab
import streamlit as st

import vitlab
from vitlab import activations, attention, localization
from vitlab.charts import attention as att_charts
from vitlab.charts import localization as charts

st.title("Localization")
st.caption("ViT tokens, especially in higher layers, keep much more of their own position's input than ResNet "
           "positions do; a ViT trained with global average pooling (GAP) localizes worse in its last layers than "
           "one trained with a CLS token (Figs 9-10).")
s = lab.settings()
st.button("Compare CLS vs GAP: zoo:vit-cls and zoo:vit-gap", key="loc.clsgap", on_click=lab.set_models,
          args=("zoo:vit-cls", "zoo:vit-gap"))
st.caption(f"CLS vs GAP in the zoo: {vitlab.tour.GAP_CAVEAT}. Chance level of a token's best match is 1/positions: "
           "compare grids of different sizes by the chance-corrected rate (Paper tour, Figs 9-10).")
report = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    opts = localization.LocalizationOptions(images=s.images, batch_size=s.batch_size)
    report = lab.compute(("loc", s.key), lambda run: localization.localization([a, b], src, opts, run),
                         "Localization")

if report is not None:
    for w in report.warnings:
        st.warning(w)
    summary = report.summary()
    rates = report.rates()  # per layer: rate, its 95 % interval, chance level, chance-corrected rate
    rate = charts.localization_rate_chart(rates)
    lab.chart(rate, key="loc.rate")
    lab.export(rate, rates, "localization_rate", "loc.rate")

    st.subheader("One token")
    c1, c2 = st.columns([1, 1])
    slot = c1.radio("Model", ["A", "B"], horizontal=True, key="loc.slot",
                    format_func=lambda k: f"{k}: {a.label if k == 'A' else b.label}")
    m = a if slot == "A" else b
    results = [r for r in report.results if r.model == m.label]
    layer = c2.selectbox("Layer", [r.layer for r in results], key="loc.layer")
    result = next(r for r in results if r.layer == layer)
    gh, gw = result.grid
    part = summary[(summary["model"] == m.label) & (summary["layer"] == layer)]
    grid_chart = lab.clickable(charts.localization_summary_chart(part, cell=220, title="click a token"), "tok",
                               ["token_row", "token_col"])
    left, right = st.columns([1, 2])
    with left:
        event = lab.chart(grid_chart, on_select="rerun", key=f"loc.grid.{slot}")
        lab.export(grid_chart, part, f"localization_{m.label}_{layer}_summary", "loc.grid")
        lab.follow_click("loc", lab.clicked(event, "tok", ["token_row", "token_col"]),
                         {"token_row": "loc.row", "token_col": "loc.col"})
        p1, p2 = st.columns(2)
        row = int(p1.number_input("Token row", 0, gh - 1, key="loc.row"))
        col = int(p2.number_input("Token column", 0, gw - 1, key="loc.col"))
    token = result.prefix + row * gw + col
    frame = result.to_frame()
    shown = ([0] if result.prefix else []) + [token]
    with right, lab.guard():
        maps = charts.localization_maps(frame, tokens=shown, columns=2, cell=200)
        lab.chart(maps, key="loc.maps")
        lab.export(maps, frame[frame["token"].isin(shown)], f"localization_{m.label}_{layer}_token{token}", "loc.maps")

    st.subheader("Its attention on an image")
    upload = st.file_uploader("Your image (or the first of the sidebar's images)", key="loc.upload",
                              type=[x.lstrip(".") for x in vitlab.data.IMAGE_SUFFIXES])
    with lab.guard():
        images = [(upload.name, upload.getvalue())] if upload else src
        block = int(layer.split(".")[1])  # "blocks.{i}.resid_post"
        attention.require_vit(m, "attention maps")
        picture = activations.as_source(images).load(0)
        view = activations.model_view(m, picture)
        cols = st.columns(3)
        with cols[0]:
            lab.image(view, None, f"model_view_{m.label}", "loc.view", caption=f"what {m.label} sees")
        for c, head in zip(cols[1:], ("mean", "rollout")):
            amap = attention.attention_map(m, images, 0, block, head, (row, col), store=lab.store())
            with c:
                lab.image(att_charts.overlay(view, amap.grid, min_side=224), amap.to_frame(),
                          f"attention_{m.label}_block{block}_{head}_token{row}_{col}", f"loc.overlay.{head}",
                          caption=f"block {block}, token ({row},{col}): "
                                  f"{'mean over heads' if head == 'mean' else head}")
