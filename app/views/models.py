"""Many models: a models x models similarity matrix at each relative depth and a 2-D map of the models (MDS).

Each model runs once over the images (its per-batch statistics are the cached ones the other pages use).
"""

import lab
import streamlit as st

import vitlab
from vitlab.charts import similarity as sim_charts

DEPTHS = (0.25, 0.5, 0.75, 1.0)


def options_ui(s) -> tuple[list[str], tuple[float, ...], str, str]:
    zoo = lab.zoo_specs()
    default = [m for m in (s.model_a, s.model_b) if m] + [m for m in zoo if m not in (s.model_a, s.model_b)][:3]
    specs = st.multiselect("Models", list(dict.fromkeys(zoo + default)), default=default, key="mm.models",
                           accept_new_options=True,
                           help="Zoo models, or type any timm name (NAME@random[:SEED] for random weights)")
    c1, c2, c3 = st.columns([2, 1.2, 1])
    depths = c1.multiselect("Relative depths", DEPTHS, default=list(DEPTHS), key="mm.depths",
                            help="t picks tap ceil(t L) - 1 of a model's L CKA taps (1 = the last)")
    measure = c2.selectbox("Measure", list(vitlab.measures.MEASURES), key="mm.measure",
                           format_func=lambda m: vitlab.measures.MEASURES[m].title)
    tokens = c3.selectbox("Representation", vitlab.taps.TOKEN_MODES, key="mm.tokens")
    return specs, tuple(sorted(depths)), measure, tokens


st.title("Many models")
st.caption("Which models are alike at which depth: every pair of models compared at the same relative depth, "
           "and the models placed in a plane by classical MDS of the distances (Procrustes' angle, or "
           "sqrt(2 - 2 s) for a similarity s).")
s = lab.settings()
specs, depths, measure, tokens = options_ui(s)
result = None
with lab.guard():
    if len(specs) < 2 or not depths:
        raise vitlab.VitlabError("choose at least two models and one depth")
    models = [lab.model(m, s.device) for m in specs]
    src = lab.source(s)
    opts = vitlab.manymodels.CompareOptions(images=s.images, batch_size=s.batch_size, tokens=tokens, depths=depths,
                                            measure=measure)
    result = lab.compute(("mm", s.key, tuple(specs), depths, measure, tokens),
                         lambda run: (vitlab.manymodels.compare_models(models, src, opts, run), run.info),
                         "Many models")

if result is not None:
    res, info = result
    st.caption(lab.run_caption(info, res.images) + "; forward passes: " +
               (lab.md_plain(", ".join(f"{k} {v}" for k, v in info.forward_passes.items()))
                or "none (all from the cache)"))
    for line in res.summary():
        st.markdown(f"- {lab.md_plain(line)}")
    depth = st.radio("Depth", list(res.depths), horizontal=True, key="mm.depth", format_func=lambda d: f"{d:g}")
    frame, coords = res.to_frame(), res.coords_frame()
    part, xy = frame[frame["depth"] == depth], coords[coords["depth"] == depth]
    c1, c2 = st.columns(2)
    with c1:
        # with each name whole on lines of 20 characters it fits half of 1280 px beside the map (issues 34, 51)
        heat = sim_charts.models_heatmap(part, size=200)
        lab.chart(heat, key="mm.heat")
        lab.export(heat, part, f"models_{measure}_depth{depth:g}", "mm.heat")
    with c2:
        scatter = sim_charts.mds_scatter(xy, size=280)
        lab.chart(scatter, key="mm.mds")
        lab.export(scatter, xy, f"mds_{measure}_depth{depth:g}", "mm.mds")
    lab.links.box("compare-models", specs, opts, "compare_models", s, rows={"depth": f"{depth:g}"})
