"""Attention (Raghu et al. 2021, Sec. 4, Figs 3-4): mean attention distance per head per block; click a head to
see its maps on a chosen image for a chosen query token, every head and their mean, and the attention rollout."""

import claim
import lab
import streamlit as st

import vitlab
from vitlab import attention
from vitlab.analyses import findings
from vitlab.charts import attention as charts

st.title("Attention")
lead = st.container()
st.caption("Mean attention distance (Dosovitskiy et al. 2021, App. D.7) of every head. Click a dot to see that "
           "head's attention on an image.")
s = lab.settings()
spec = lab.model_slot("att.model", s)
dist = None
with lab.guard():
    m = lab.model(spec, s.device)
    src = lab.source(s)
    opts = attention.AttentionDistanceOptions(images=s.images, batch_size=s.batch_size)
    dist = lab.compute(("attn-dist", s.key, spec), lambda run: attention.attention_distance(m, src, opts, run),
                       "Attention distance")

if dist is not None:
    frame = dist.to_frame()
    st.caption(lab.run_caption(dist, dist.images) + f"; image side {dist.image_side_px:.0f} px; dashed: uniform attention over all "
               f"keys ({dist.uniform_px:.1f} px); " + findings.interval_caption("images", dist.images))
    chart = lab.clickable(charts.attention_distance_chart(frame), "head", ["layer", "head"], nearest=True)
    event = lab.chart(chart, on_select="rerun", key="att.dist")
    lab.export(chart, frame, f"attention_distance_{m.label}", "att.dist")
    lab.links.box("attention-distance", [spec], opts, "attention_distance", s)

    st.subheader("Maps of one image")
    lab.follow_click("att", lab.clicked(event, "head", ["layer", "head"]), {"layer": "att.layer", "head": "att.head"})
    layers = sorted(frame["layer"].unique().tolist())
    heads = sorted(frame["head"].unique().tolist())
    n_images = min(s.images, len(src))
    c1, c2, c3, c4 = st.columns([1, 1, 2, 2])
    layer = c1.selectbox("Block", layers, key="att.layer")
    head = c2.selectbox("Head", heads, key="att.head")
    index = c3.selectbox("Image", list(range(n_images)), key="att.image", format_func=lab.image_name(src))
    gh, gw = m.grid
    has_cls = m.has_cls
    kind = c4.radio("Query token", ["CLS", "patch"] if has_cls else ["patch"], horizontal=True, key="att.qkind")
    query = "cls"
    if kind == "patch":
        p1, p2, _ = st.columns([1, 1, 4])
        row = p1.number_input("Patch row", 0, gh - 1, key="att.qrow")
        col = p2.number_input("Patch column", 0, gw - 1, key="att.qcol")
        query = (int(row), int(col))
    with lab.guard():
        maps = attention.head_maps(m, src, index, int(layer), query, store=lab.store())
        grid = charts.attention_map_chart(maps, size=120, columns=5,  # five a row fit 1280 px (issue 34)
                                          image=lab.image_name(src)(index))
        lab.chart(grid, key="att.maps")
        lab.export(grid, maps, f"attention_maps_{m.label}_block{layer}", "att.maps")
        view = vitlab.activations.model_view(m, src.load(index))
        one = attention.attention_map(m, src, index, int(layer), int(head), query, store=lab.store())
        mean = attention.attention_map(m, src, index, int(layer), "mean", query, store=lab.store())
        roll = attention.attention_map(m, src, index, int(layer), "rollout", query, store=lab.store())
        cols = st.columns(4)
        with cols[0]:
            lab.image(view, None, f"model_view_{m.label}_{src.item_id(index)}", "att.view",
                      caption="what the model sees")
        shown = ((one, f"head {head}", f"head{head}", "head"), (mean, "mean over heads", "mean", "mean"),
                 (roll, f"rollout, blocks 0-{layer}", "rollout", "rollout"))
        for c, (amap, what, tag, key) in zip(cols[1:], shown):
            with c:
                lab.image(charts.overlay(view, amap.grid, min_side=224), amap.to_frame(),
                          f"attention_{m.label}_block{layer}_{tag}_query{amap.query}", f"att.overlay.{key}",
                          caption=f"block {layer}, {what}, query {amap.query}")

# the tour's check after the page's own charts: its lead is drawn at the top, but the charts do not wait for it
row = None
with lead, lab.guard():
    # the check on this page's model first (its ViT), the sidebar's pair after it
    row = claim.check("distance", [lab.model(spec, s.device), *lab.models(s)], lab.source(s), s)
with lead:
    claim.lead(row, "Figs 3-4")
