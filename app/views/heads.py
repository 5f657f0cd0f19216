"""Head subsets vs the other model (Raghu et al. 2021, Sec. 4.1, Fig 5): sort the heads of a lower ViT block by
mean attention distance, and compare windows of heads (local to global) with the other model's lower layers."""

import claim
import lab
import streamlit as st

import vitlab
from vitlab import heads
from vitlab.analyses import findings
from vitlab.analyses.attention import require_vit
from vitlab.charts import attention as charts

st.title("Head subsets vs the other model")
lead = st.container()
st.caption("Heads of model A's chosen blocks sorted by mean attention distance; each subset of consecutive heads "
           "(most local first) compared by CKA with every lower layer of model B.")
s = lab.settings()


def options_ui(depth: int, n_heads: int) -> tuple[list[int], int, str]:
    c1, c2, c3 = st.columns([2, 1, 1])
    blocks = c1.multiselect("Blocks of A whose heads are pooled", list(range(depth)), default=[0], key="heads.blocks")
    size = c2.number_input("Heads per subset", 1, n_heads * max(1, len(blocks)), max(1, n_heads // 4),
                           key="heads.size")
    tokens = c3.selectbox("Head features", heads.HEAD_TOKENS, key="heads.tokens",
                          help="spatial: every spatial token of the head's output; gap: their mean")
    return blocks, int(size), tokens


def early_chart(res, key: str, batch_size: int) -> None:
    """A running estimate of the head-subset chart (heads sorted by their distances over the batches so far)."""
    lab.chart(charts.head_subset_chart(res.to_frame()), key=f"heads.{key}")
    st.caption(findings.interval_caption("batches", res.batches, batch_size=batch_size))


result = None
with lab.guard():
    a, b = lab.models(s)
    src = lab.source(s)
    require_vit(a, "head subsets (model A's heads)")
    blocks, size, tokens = options_ui(a.depth, a.heads)
    if not blocks:
        raise vitlab.VitlabError("choose at least one block whose heads are compared")
    opts = heads.HeadSubsetOptions(images=s.images, batch_size=s.batch_size, blocks=tuple(blocks), size=size,
                                   tokens=tokens)
    early = lab.running(lambda res, key: early_chart(res, key, s.batch_size),
                                   lab.so_far(lambda res: res.images, s.images))
    result = lab.compute(("heads", s.key, tuple(blocks), size, tokens), lambda run: heads.head_subsets(
        a, b, src, opts, run), "Head subsets", expect=heads.HeadSubsetResult, early=early)

if result is not None:
    for w in result.warnings:
        st.warning(lab.md_plain(w, lines=True))
    frame = result.to_frame()
    chart = charts.head_subset_chart(frame)
    lab.chart(chart, key="heads.chart")
    lab.export(chart, frame, f"head_subsets_{result.model_a}_vs_{result.model_b}", "heads.chart")
    lab.links.box("head-subsets", [s.model_a, s.model_b], opts, "head_subsets", s)
    st.caption(f"{result.images} images; dashed: all heads together; "
               + findings.interval_caption("batches", result.batches, batch_size=s.batch_size)
               + ". Heads from most local to most global:")
    st.dataframe(result.heads_frame(), hide_index=True, height=200)

# the tour's check after the page's own chart: its lead is drawn at the top, but the chart does not wait for it
row = None
with lead, lab.guard():
    row = claim.check("heads", list(lab.models(s)), lab.source(s), s)
with lead:
    claim.lead(row, "Fig 5")
