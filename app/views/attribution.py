"""Attribution maps of one image (attention rollout, rollout with head fusion and discard, gradient-weighted
rollout, Grad-CAM for CNNs), each scored by deletion and insertion curves against a random order."""

import lab
import streamlit as st

import vitlab
from vitlab import attribution
from vitlab.charts import causal as charts
from vitlab.charts.attention import overlay

st.title("Attribution maps and their faithfulness")
st.caption("Raghu et al. 2021 make no claim about attribution maps; this page measures, for one image, how "
           "faithful each map is. Where does the model look for this image and class? Each map orders the image's "
           "cells; deleting them in that order should make the class probability fall fast (low deletion AUC), "
           "inserting them into a blank image should make it rise fast (high insertion AUC), compared with a random "
           "order. Deleted cells are filled with the data set's mean pixel (or black).")
s = lab.settings()
spec = lab.model_slot("attr.model", s)


def options_ui(family: str, n_images: int, item_id) -> tuple[int, attribution.FaithfulnessOptions]:
    c1, c2, c3, c4, c5 = st.columns([2, 3, 1, 1, 1])
    index = c1.selectbox("Image", list(range(n_images)), key="attr.image", format_func=item_id)
    choices = list(attribution.VIT_METHODS) + ["rollout:mean:0.9", "random"] if family == "vit" else \
        list(attribution.CNN_METHODS) + ["random"]
    default = list(attribution.VIT_METHODS if family == "vit" else attribution.CNN_METHODS)
    methods = c2.multiselect("Maps", choices, default=default, key=f"attr.methods.{family}",
                             help="rollout:FUSION:DISCARD = head fusion (mean, max, min) and discard ratio")
    target = c3.radio("Class", attribution.TARGETS, key="attr.target", help="the model's top-1, or the label")
    baseline = c4.radio("Fill", attribution.BASELINES, key="attr.baseline")
    orders = c5.number_input("Random orders", 1, 64, 8, key="attr.orders")
    if not methods:
        raise vitlab.VitlabError("choose at least one map")
    return int(index), attribution.FaithfulnessOptions(methods=tuple(methods), target=target, baseline=baseline,
                                                       random_orders=int(orders))


def early_maps(res: attribution.AttributionResult, key: str) -> None:
    """A running estimate: every map (final from the start) and the curves measured so far."""
    cols = st.columns(1 + len(res.maps))
    cols[0].image(view, caption="what the model sees", width="stretch")
    for col, (method, grid) in zip(cols[1:], res.maps.items()):
        d, i = res.scores.get(method, (None, None))
        col.image(overlay(view, grid, min_side=224), width="stretch", caption=f"{method}: " + (
            "curves to come" if d is None else f"deletion {d:.3f}, insertion {i:.3f} so far"))
    if res.curves:
        lab.chart(charts.faithfulness_curves(res.to_frame(), image=lab.image_name(src)(index)), key=f"attr.{key}")


def so_far(res: attribution.AttributionResult, done: int, total: int) -> str:
    """"Running estimate from 80 of 4,728 masked images (rollout: 16 of 394, ...)": per curve, the masked images
    measured of those it needs; the lines run straight between the steps measured."""
    if done == 1:
        return f"Running estimate: the maps, before any of the {total - 1:,} masked images of their curves"
    parts = [f"{m}: " + ("done" if got == of else f"{got:,} of {of:,}" if got else "to come")
             for m, (got, of) in res.measured.items()]
    return (f"Running estimate from {done - 1:,} of {total - 1:,} masked images ({'; '.join(parts)}), the curves "
            "straight between the steps measured so far")


result = None
with lab.guard():
    m = lab.model(spec, s.device)
    src = lab.source(s)
    index, opts = options_ui(m.family, min(s.images, len(src)), lab.image_name(src))
    view = vitlab.activations.model_view(m, src.load(index))
    early = lab.running(early_maps, so_far)
    result = lab.compute(("attribution", s.key, spec, index, opts), lambda run: attribution.attribution(
        m, src, index, opts, run), "Attribution", expect=attribution.AttributionResult, early=early)

if result is not None:
    cols = st.columns(1 + len(result.maps))
    with cols[0]:
        lab.image(view, None, f"model_view_{result.model}_{index}", "attr.view", caption="what the model sees")
    for col, (method, grid) in zip(cols[1:], result.maps.items()):
        with col:
            d, i = result.scores[method]
            lab.image(overlay(view, grid, min_side=224), result.map_frame(method),
                      f"attribution_{result.model}_{index}_{method}", f"attr.map.{method}",
                      caption=f"{method}: deletion {d:.3f}, insertion {i:.3f}")
    frame = result.to_frame()
    chart = charts.faithfulness_curves(frame, image=lab.image_name(src)(index))
    lab.chart(chart, key="attr.curves")
    lab.export(chart, frame, f"faithfulness_curves_{result.model}_{index}", "attr.curves")
    lab.links.box("attribution", [spec], opts, "curves", s, image=index)
    st.caption(f"target: {result.target_words}; cells of {result.cell_px} px; random order: mean of "
               f"{opts.random_orders} orders. The CLI command `vitlab attribution` averages the scores over images.")
    st.dataframe(result.summary(), hide_index=True)
