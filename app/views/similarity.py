"""Representation similarity: CKA within model A, within model B and between them (Raghu et al. 2021, Figs 1-2).

Click a cell of a heatmap (or pick the layers below it) to see that layer pair.
"""

import lab
import streamlit as st

import vitlab
from vitlab import charts
from vitlab.charts.cka import cka_profile

VIEWS = {"A vs B": (0, 1), "within A": (0, 0), "within B": (1, 1)}
VIEW_IDS = {"A vs B": "ab", "within A": "aa", "within B": "bb"}


def options_ui() -> tuple[str, str]:
    c1, c2, _ = st.columns([1, 1, 3])
    tokens = c1.selectbox("Representation", vitlab.taps.TOKEN_MODES, key="sim.tokens",
                          format_func={"all": "all tokens", "cls": "CLS token", "gap": "mean of tokens (GAP)"}.get,
                          help="What a layer's representation of an image is: every token flattened (the paper), "
                               "the CLS token, or the mean over spatial tokens")
    kernel = c2.selectbox("Kernel", ("linear", "rbf"), key="sim.kernel")
    return tokens, kernel


def pair_ui(frame, view: str, clicked: dict | None) -> tuple[str, str]:
    """Layer pair pickers, moved to the clicked cell when a new cell is clicked."""
    layers_a = list(dict.fromkeys(frame["layer_a"]))
    layers_b = list(dict.fromkeys(frame["layer_b"]))
    ka, kb, last = f"sim.{view}.la", f"sim.{view}.lb", f"sim.{view}.clicked"
    if clicked and clicked != st.session_state.get(last):
        st.session_state[ka], st.session_state[kb] = clicked["layer_a"], clicked["layer_b"]
    st.session_state[last] = clicked
    c1, c2 = st.columns(2)
    la = c1.selectbox(f"Layer of {frame['model_a'].iloc[0]}", layers_a, key=ka)
    lb = c2.selectbox(f"Layer of {frame['model_b'].iloc[0]}", layers_b, key=kb)
    return la, lb


def clicked_cell(event) -> dict | None:
    points = (event or {}).get("selection", {}).get("cell") or []
    return {"layer_a": points[0]["layer_a"], "layer_b": points[0]["layer_b"]} if points else None


def detail(frame, la: str, lb: str) -> None:
    row = frame[(frame["layer_a"] == la) & (frame["layer_b"] == lb)].iloc[0]
    ma, mb = row["model_a"], row["model_b"]
    st.metric(f"CKA of {ma} `{la}` and {mb} `{lb}`", f"{row['cka']:.4f}")
    across_b = frame[frame["layer_a"] == la].reset_index(drop=True)
    across_a = frame[frame["layer_b"] == lb].reset_index(drop=True)
    for part, along, what, key in ((across_b, "layer_b", f"{ma} `{la}` against every layer of {mb}", "b"),
                                   (across_a, "layer_a", f"{mb} `{lb}` against every layer of {ma}", "a")):
        st.caption(what)
        bars = cka_profile(part, along=along, width=320, height=120)
        lab.chart(bars, key=f"sim.profile.{key}")
        fixed = la if along == "layer_b" else lb
        lab.export(bars, part, f"cka_profile_{ma if along == 'layer_b' else mb}_{fixed}", f"sim.profile.{key}")

st.title("Representation similarity")
st.caption("Centered kernel alignment (Kornblith et al. 2019) between every pair of layers, by minibatch CKA "
           "(Nguyen et al. 2021), as in Figs 1-2 of Raghu et al. 2021: ViTs have more uniform representations "
           "across layers than ResNets, and their lower half resembles a much larger part of the ResNet.")
s = lab.settings()
tokens, kernel = options_ui()
report = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    opts = vitlab.run.CKAOptions(images=s.images, batch_size=s.batch_size, tokens=tokens, kernel=kernel)
    report = lab.compute(("cka", s.key, tokens, kernel), lambda run: vitlab.run.cka([a, b], src, opts, run), "CKA")

if report is not None:
    st.caption(lab.run_caption(report.info, report.images))
    for w in report.warnings:
        st.warning(w)
    view = st.radio("Heatmap", list(VIEWS), horizontal=True, key="sim.view")
    frame = report.pair(*VIEWS[view]).to_frame()
    vid = VIEW_IDS[view]
    chart = charts.cka_heatmap(frame, select="cell", size=420)
    left, right = st.columns([3, 2])
    with left:
        event = lab.chart(chart, on_select="rerun", key=f"sim.chart.{vid}")
        lab.export(chart, frame, f"cka_{frame['model_a'].iloc[0]}_vs_{frame['model_b'].iloc[0]}", f"sim.{vid}")
    with right:
        st.markdown("**Layer pair** (click a cell)")
        with lab.guard():
            la, lb = pair_ui(frame, vid, clicked_cell(event))
            detail(frame, la, lb)
