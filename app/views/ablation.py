"""Head ablation by attention distance: remove model A's k most local, k most global or k random heads of the
chosen blocks (zero or mean ablation) and see accuracy, output distribution and representations change."""

import lab
import streamlit as st

import vitlab
from vitlab import ablation
from vitlab.analyses import findings
from vitlab.analyses.attention import require_vit
from vitlab.charts import causal as charts

st.title("Head ablation by attention distance")
st.caption("Raghu et al. 2021 compare local heads with convolutions by similarity only (Fig 5; see Head subsets); "
           "this page makes no claim of theirs and measures what the heads do. Ablate the k most local, the k most "
           "global or k random heads of the lower blocks: zero (the head's term of the attention branch removed) or "
           "mean (its output replaced by its mean over the images).")
s = lab.settings()


def options_ui(depth: int, n_heads: int) -> ablation.AblationOptions:
    c1, c2, c3, c4, c5 = st.columns([1.6, 1, 1, 1, 1.6])  # both ablation modes whole at 1280 px (issue 38)
    blocks = c1.multiselect("Blocks of A", list(range(depth)), default=list(range(max(1, depth // 2))),
                            key="abl.blocks")
    scope = c2.radio("Rank heads", ablation.SCOPES, key="abl.scope",
                     help="pooled: all heads of the chosen blocks ranked together; per-block: k heads in each block")
    cap = n_heads if scope == "per-block" else n_heads * max(1, len(blocks))
    k_max = c3.number_input("Up to k heads", 1, cap, min(3, cap), key="abl.k")
    draws = c4.number_input("Random draws", 1, 100, 5, key="abl.draws")
    modes = c5.multiselect("Ablation", ablation.MODES, default=list(ablation.MODES), key="abl.modes")
    if not blocks:
        raise vitlab.VitlabError("choose at least one block whose heads are ablated")
    if not modes:
        raise vitlab.VitlabError("choose zero and/or mean ablation")
    return ablation.AblationOptions(images=s.images, batch_size=s.batch_size, blocks=tuple(sorted(blocks)),
                                    ks=tuple(range(1, min(int(k_max), cap) + 1)), scope=scope, modes=tuple(modes),
                                    draws=int(draws))


def early_curves(res: ablation.AblationResult, key: str) -> None:
    """A running estimate: the curves of the head sets ablated so far, with their intervals."""
    summary = res.summary()
    for metric in ("delta_accuracy", "kl"):
        lab.chart(charts.ablation_curves(summary, metric), key=f"abl.{key}.{metric}")
    st.caption(findings.interval_caption("images", res.images, "percentile bootstrap") + " (most local and most "
               "global heads); random heads: the 2.5-97.5 % range over the draws done so far.")


def so_far(res: ablation.AblationResult, done: int, total: int) -> str:
    last = res.conditions[-1]
    draw = f", draw {last['draw'] + 1}" if last["selection"] == "random" else ""
    return (f"Running estimate from {done} of {total} ablated head sets over {res.images} images (the last: "
            f"{last['mode']} ablation of {last['k']} {last['selection']} head{'s' if last['k'] > 1 else ''}{draw})")


result = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    require_vit(a, "head ablation (model A's heads)")
    opts = options_ui(a.depth, a.heads)
    early = lab.running(early_curves, so_far)
    result = lab.compute(("ablation", s.key, opts), lambda run: ablation.head_ablation(
        a, b, src, opts, run), "Head ablation", expect=ablation.AblationResult, early=early)

if result is not None:
    summary = result.summary()
    st.caption(f"{result.images} images; {result.accuracy_kind} of the intact model {result.intact_accuracy}. "
               + (f"No accuracy: {lab.md_plain(result.accuracy_note)}. " if result.accuracy_note else "")
               + "Curves side by side: most local, most global, random heads; "
               + findings.interval_caption("images", result.images, "percentile bootstrap")
               + " (most local and most global heads); random heads: the 2.5-97.5 % range over "
               f"{opts.draws} random draws.")
    for metric in ("delta_accuracy", "kl"):
        chart = charts.ablation_curves(summary, metric)
        lab.chart(chart, key=f"abl.{metric}")
        lab.export(chart, summary[summary["metric"] == metric], f"head_ablation_{metric}_{result.model}",
                   f"abl.{metric}")
    cka = result.cka_frame()
    chart = charts.ablation_cka_chart(cka)
    lab.chart(chart, key="abl.cka")
    lab.export(chart, cka, f"head_ablation_cka_{result.model}", "abl.cka")
    lab.links.box("head-ablation", [s.model_a, s.model_b], opts, "summary", s)
    st.subheader("Does ablating the most local heads hurt more?")
    st.dataframe(result.verdicts(), hide_index=True)
    st.caption("Heads from the most local to the most global (mean attention distance, pixels):")
    st.dataframe([{"head": h, "distance_px": d} for h, d in result.heads_by_distance], hide_index=True, height=200)
