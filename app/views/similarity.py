"""Representation similarity: CKA within model A, within model B and between them (Raghu et al. 2021, Figs 1-2).

Click a cell of a heatmap (or pick the layers below it) to see that layer pair and how its CKA moves under the
sensitivity checks. Another measure (Procrustes, SVCCA, PWCCA, mutual k-NN) can replace CKA, and the agreement
view puts every measure side by side.
"""

import claim
import lab
import streamlit as st

import vitlab
from vitlab import charts
from vitlab.analyses import findings
from vitlab.charts import similarity as sim_charts
from vitlab.charts.cka import cka_profile
from vitlab.charts.words import layer_in_words

VIEWS = {"A vs B": (0, 1), "within A": (0, 0), "within B": (1, 1)}
VIEW_IDS = {"A vs B": "ab", "within A": "aa", "within B": "bb"}
# the heatmap's plot side: with its axis labels and legend it fits the page's wider column at 1280 px (issue 34)
HEATMAP = 290


def options_ui() -> tuple[str, str, str]:
    c1, c2, c3, _ = st.columns([1, 1, 1.4, 1.6])
    tokens = c1.selectbox("Representation", vitlab.taps.TOKEN_MODES, key="sim.tokens",
                          format_func={"all": "all tokens", "cls": "CLS token", "gap": "mean of tokens (GAP)"}.get,
                          help="What a layer's representation of an image is: every token flattened (the paper), "
                               "the CLS token, or the mean over spatial tokens")
    kernel = c2.selectbox("Kernel", ("linear", "rbf"), key="sim.kernel")
    measure = c3.selectbox("Measure", list(vitlab.measures.MEASURES), key="sim.measure",
                           format_func=lambda m: vitlab.measures.MEASURES[m].title,
                           help="CKA (the paper's; kernel as chosen) or another measure: " + "; ".join(
                               f"{i.title}: {i.definition}" for i in vitlab.measures.MEASURES.values()))
    return tokens, kernel, measure


def check_representation(tokens: str, models) -> None:
    """The CLS token asked of a model without one, in the words of this page's control (the engine's error names the
    CLI's option)."""
    if tokens != "cls":
        return
    for m in models:
        if not m.has_cls:
            why = "it is a CNN" if m.family in ("resnet", "resnetv2") else "it pools its tokens"
            raise vitlab.VitlabError(f"{m.label} has no CLS token ({why}): choose 'all tokens' or 'mean of tokens "
                                     "(GAP)' in the Representation picker above")


def in_words(families: dict[str, str], model: str):
    """A picker's ``format_func`` and a caption's words for the layers of ``model``: "block 0 after attention",
    "stage 2 block 1" (the tap's own name stays in the tooltip, the CSV and the link)."""
    return lambda tap: layer_in_words(tap, families.get(model))


def pair_ui(frame, view: str, clicked: dict | None, families: dict[str, str]) -> tuple[str, str]:
    """Layer pair pickers, moved to the clicked cell when a new cell is clicked; one above the other, so a layer's
    words are never cut at 1280 px."""
    layers_a = list(dict.fromkeys(frame["layer_a"]))
    layers_b = list(dict.fromkeys(frame["layer_b"]))
    ka, kb, last = f"sim.{view}.la", f"sim.{view}.lb", f"sim.{view}.clicked"
    if clicked and clicked != st.session_state.get(last):
        st.session_state[ka], st.session_state[kb] = clicked["layer_a"], clicked["layer_b"]
    st.session_state[last] = clicked
    ma, mb = frame["model_a"].iloc[0], frame["model_b"].iloc[0]
    la = st.selectbox(f"Layer of {lab.md_plain(ma)}", layers_a, key=ka, format_func=in_words(families, ma))
    lb = st.selectbox(f"Layer of {lab.md_plain(mb)}", layers_b, key=kb, format_func=in_words(families, mb))
    return la, lb


def clicked_cell(event) -> dict | None:
    points = (event or {}).get("selection", {}).get("cell") or []
    return {"layer_a": points[0]["layer_a"], "layer_b": points[0]["layer_b"]} if points else None


def detail(result, frame, la: str, lb: str, batch_size: int, families: dict[str, str]) -> None:
    row = frame[(frame["layer_a"] == la) & (frame["layer_b"] == lb)].iloc[0]
    ma, mb = row["model_a"], row["model_b"]
    wa, wb = in_words(families, ma)(la), in_words(families, mb)(lb)
    cell = vitlab.similarity.cell_estimate(result, result.layers_a.index(la), result.layers_b.index(lb))
    # words that wrap, not st.metric: its label and value are cut at a column's edge (issue 34)
    st.markdown(lab.md_plain(f"CKA of {ma} {wa} and {mb} {wb}: ") + f"**{findings.say(cell, '.4f')}**",
                help=f"layers `{la}` and `{lb}` in the CSV and the CLI")
    st.caption(findings.interval_caption("batches", cell.units, cell.method, batch_size=batch_size,
                                         what="interval"))
    across_b = frame[frame["layer_a"] == la].reset_index(drop=True)
    across_a = frame[frame["layer_b"] == lb].reset_index(drop=True)
    for part, along, what, key in ((across_b, "layer_b", f"{ma} {wa} against every layer of {mb}", "b"),
                                   (across_a, "layer_a", f"{mb} {wb} against every layer of {ma}", "a")):
        st.caption(lab.md_plain(what))
        bars = cka_profile(part, along=along, width=230, height=120, families=families)
        lab.chart(bars, key=f"sim.profile.{key}")
        fixed = la if along == "layer_b" else lb
        lab.export(bars, part, f"cka_profile_{ma if along == 'layer_b' else mb}_{fixed}", f"sim.profile.{key}")

def early_heatmap(rep, key: str, batch_size: int, families: dict[str, str]) -> None:
    """A running estimate of the CKA heatmap of the chosen view (the tooltip holds each cell's interval, once there
    are enough batches for one)."""
    frame = rep.pair(*VIEWS[st.session_state.get("sim.view", "A vs B")]).to_frame()
    lab.chart(charts.cka_heatmap(frame, size=HEATMAP, families=families), key=f"sim.{key}")
    batches = next(iter(rep.results.values())).batches
    st.caption(findings.interval_caption("batches", batches, batch_size=batch_size, what="cells' intervals"))


def sensitivity_ui(a, b, src, s, tokens: str, la: str, lb: str, families: dict[str, str]) -> None:
    """How the clicked cell's linear CKA moves: top PCs removed, a batch or an image left out, Gram energy."""
    st.markdown(lab.md_plain(f"Sensitivity of the CKA of {a.label} {in_words(families, a.label)(la)} and {b.label} "
                             f"{in_words(families, b.label)(lb)}").join(("**", "**")))
    opts = vitlab.sensitivity.SensitivityOptions(images=s.images, batch_size=s.batch_size, layer_a=la, layer_b=lb,
                                                 tokens=tokens)
    res = lab.compute(("sens", s.key, tokens, la, lb), lambda run: vitlab.sensitivity.sensitivity(
        a, b, src, opts, run), "Sensitivity")
    if res is None:
        return
    frame = res.to_frame()
    # a check that was not run shows "not run" (its detail says why), not a bare None
    shown = frame[["check", "side", "k", "value", "change", "detail"]].assign(
        value=[f"{v:.4f}" if ok else "not run" for v, ok in zip(frame["value"], frame["value"].notna())],
        change=[f"{v:+.4f}" if ok else "not run" for v, ok in zip(frame["change"], frame["change"].notna())])
    st.dataframe(shown, hide_index=True, column_config={"detail": st.column_config.TextColumn(width="large")})
    chart = sim_charts.sensitivity_chart(frame, width=300, height=200)
    lab.chart(chart, key="sim.sensitivity")
    lab.export(chart, frame, f"cka_sensitivity_{la}_{lb}", "sim.sensitivity")
    st.caption(res.summary() + ". PCs are each batch's; the energy share is λ1²/Σλ² of the centred Gram.")


def other_measure(a, b, src, s, tokens: str, measure: str, families: dict[str, str]) -> None:
    """One non-CKA measure's maps, with the clicked cell's value."""
    opts = vitlab.similarity.SimilarityOptions(measures=(measure,), images=s.images, batch_size=s.batch_size,
                                               tokens=tokens)
    rep = lab.compute(("simm", s.key, tokens, measure), lambda run: vitlab.similarity.similarity(
        [a, b], src, opts, run), measure)
    if rep is None:
        return
    info = vitlab.measures.MEASURES[measure]
    st.caption(f"{info.title} ({info.reference}): {info.definition}; {opts.settings(measure)}. "
               f"{rep.images} images in {rep.batches} batches.")
    for w in rep.warnings:
        st.warning(lab.md_plain(w, lines=True))
    view = st.radio("Heatmap", list(VIEWS), horizontal=True, key="sim.view")
    frame = rep.pair_frame(measure, *VIEWS[view])
    vid = VIEW_IDS[view]
    chart = sim_charts.measure_heatmap(frame, select="cell", size=HEATMAP, families=families)
    left, right = st.columns([3, 2])
    with left:
        event = lab.chart(chart, on_select="rerun", key=f"sim.mchart.{vid}")
        lab.export(chart, frame, f"{measure}_{frame['model_a'].iloc[0]}_vs_{frame['model_b'].iloc[0]}", f"simm.{vid}")
    with right, lab.guard():
        la, lb = pair_ui(frame, vid, clicked_cell(event), families)
        row = frame[(frame["layer_a"] == la) & (frame["layer_b"] == lb)].iloc[0]
        ma, mb = row["model_a"], row["model_b"]
        # words that wrap, not st.metric: its label is cut at the column's edge (issue 34)
        st.markdown(lab.md_plain(f"{info.title} of {ma} {in_words(families, ma)(la)} and {mb} "
                                 f"{in_words(families, mb)(lb)}: ") + f"**{row['value']:.4f}**",
                    help=f"layers `{la}` and `{lb}` in the CSV and the CLI")


def agreement_ui(a, b, src, s, tokens: str, families: dict[str, str]) -> None:
    """Every measure side by side, their rank correlations, and the paper's Figs 1-2 under each."""
    opts = vitlab.similarity.SimilarityOptions(images=s.images, batch_size=s.batch_size, tokens=tokens)
    rep = lab.compute(("agree", s.key, tokens), lambda run: vitlab.similarity.similarity(
        [a, b], src, opts, run), "Agreement")
    if rep is None:
        return
    ag = vitlab.agreement.agreement(rep, 0, 1)
    view = st.radio("Layer pairs", list(vitlab.agreement.VIEWS), horizontal=True, key="sim.agree.view")
    vid = vitlab.agreement.VIEWS[view]
    for line in ag.summary(vid):
        st.markdown(f"- {line}")
    st.caption(f"Spearman ρ over the layer pairs of '{view}' (a layer with itself left out): ρ ≥ "
               f"{vitlab.agreement.AGREE} agree, ≥ {vitlab.agreement.PARTLY} partly agree, below that disagree. "
               "Procrustes enters as cos θ.")
    grid = sim_charts.measure_grid([ag.maps[(m, vid)] for m in ag.measures], size=150, columns=2, families=families)
    lab.chart(grid, key="sim.agree.grid")
    maps = rep.to_frame()
    lab.export(grid, maps, f"measures_{ag.model_a}_vs_{ag.model_b}_{vid}", "sim.agree.grid")
    corr = ag.correlation_frame(vid)
    heat = sim_charts.correlation_heatmap(corr)
    c1, c2 = st.columns([2, 3])
    with c1:
        lab.chart(heat, key="sim.agree.corr")
        lab.export(heat, corr, f"measure_agreement_{vid}", "sim.agree.corr")
    with c2:
        st.dataframe(ag.claims_frame(), hide_index=True)


st.title("Representation similarity")
lead = st.container()
st.caption("Centered kernel alignment (Kornblith et al. 2019) between every pair of layers, by minibatch CKA "
           "(Nguyen et al. 2021), as in Figs 1-2 of Raghu et al. 2021.")
s = lab.settings()
tokens, kernel, measure = options_ui()
report = row = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    families = {a.label: a.family, b.label: b.family}  # a Mixer's mid-block tap is after token mixing
    check_representation(tokens, (a, b))
    if measure not in ("cka", "cka-rbf"):
        other_measure(a, b, src, s, tokens, measure, families)
    else:
        kernel = "rbf" if measure == "cka-rbf" else kernel
        opts = vitlab.run.CKAOptions(images=s.images, batch_size=s.batch_size, tokens=tokens, kernel=kernel)
        early = lab.running(lambda rep, key: early_heatmap(rep, key, s.batch_size, families),
                                       lab.so_far(lambda rep: rep.images, s.images))
        report = lab.compute(("cka", s.key, tokens, kernel), lambda run: vitlab.run.cka([a, b], src, opts, run),
                             "CKA", expect=vitlab.run.CKAReport, early=early)

if report is not None:
    st.caption(lab.run_caption(report.info, report.images))
    for w in report.warnings:
        st.warning(lab.md_plain(w, lines=True))
    view = st.radio("Heatmap", list(VIEWS), horizontal=True, key="sim.view")
    result = report.pair(*VIEWS[view])
    frame = result.to_frame()
    vid = VIEW_IDS[view]
    chart = charts.cka_heatmap(frame, select="cell", size=HEATMAP, families=families)
    left, right = st.columns([3, 2])
    with left:
        event = lab.chart(chart, on_select="rerun", key=f"sim.chart.{vid}")
        lab.export(chart, frame, f"cka_{frame['model_a'].iloc[0]}_vs_{frame['model_b'].iloc[0]}", f"sim.{vid}")
    with right:
        st.markdown("**Layer pair** (click a cell)")
        with lab.guard():
            la, lb = pair_ui(frame, vid, clicked_cell(event), families)
            detail(result, frame, la, lb, s.batch_size, families)
    lab.links.box("cka", [s.model_a, s.model_b], opts, "cka", s,
                  rows={"model_a": frame["model_a"].iloc[0], "model_b": frame["model_b"].iloc[0]})
    if kernel == "linear":
        pa, pb = {"ab": (a, b), "aa": (a, a), "bb": (b, b)}[vid]
        with lab.guard():
            sensitivity_ui(pa, pb, src, s, tokens, la, lb, families)

# the tour's check after the page's own chart: its lead is drawn at the top, but the chart does not wait for it
with lead, lab.guard():
    row = claim.check("cka", list(lab.models(s)), lab.source(s), s)
with lead:
    claim.lead(row, "Figs 1-2")

st.divider()
if st.toggle("Agreement between measures (every measure side by side; SVCCA/PWCCA need one more pass)",
             key="sim.agree"):
    with lab.guard():
        a, b = lab.models(s)
        check_representation(tokens, (a, b))
        agreement_ui(a, b, lab.source(s), s, tokens, {a.label: a.family, b.label: b.family})
