"""Paper tour: each figure of Raghu et al. 2021 regenerated with the current models, the paper's claim beside it,
and whether these models show it (vitlab.tour). For presentations: Previous / Next walk through the figures."""

import lab
import streamlit as st

import vitlab
from vitlab import attention, charts, checkpoints, heads, interventions, localization, probes, receptive, skips, tour
from vitlab.charts import attention as att_charts
from vitlab.charts import checkpoints as ckpt_charts
from vitlab.charts import localization as loc_charts
from vitlab.charts import probes as probe_charts
from vitlab.charts import skips as skip_charts

STEPS = list(tour.CLAIMS)
SCALE_PAIRS = [("zoo:vit-cls-3pct", "zoo:vit-cls"), ("zoo:vit-cls-10pct", "zoo:vit-cls")]


def roles(a, b):
    """(ViT, CNN) among models A and B; a VitlabError in words when the pair lacks one."""
    fam = {m.label: m.family for m in (a, b)}
    vit = next((m for m in (a, b) if fam[m.label] == "vit"), None)
    cnn = next((m for m in (a, b) if fam[m.label] in ("resnet", "resnetv2")), None)
    if vit is None or cnn is None:
        raise vitlab.VitlabError("the tour compares a ViT with a ResNet: choose one of each as models A and B "
                                 "(the defaults zoo:vit-cls and zoo:resnet, or e.g. ViT-B/32 and BiT R50x1)")
    return vit, cnn


def run(key: str, fn, label: str):
    s = lab.settings()
    return lab.compute(("tour", key, s.key), fn, label)


def step_cka(vit, cnn, src, s):
    opts = vitlab.run.CKAOptions(images=s.images, batch_size=s.batch_size)
    report = run("cka", lambda r: vitlab.run.cka([vit, cnn], src, opts, r), "CKA")
    shown = [(charts.cka_heatmap(report.pair(i, j).to_frame(), size=220), report.pair(i, j).to_frame(), f"cka_{i}{j}")
             for i, j in ((0, 0), (1, 1), (0, 1))]
    return shown, tour.check_cka(report, 0, 1)


def step_distance(vit, cnn, src, s):
    opts = attention.AttentionDistanceOptions(images=s.images, batch_size=s.batch_size)
    r = run("distance", lambda run_: attention.attention_distance(vit, src, opts, run_), "Attention distance")
    return [(att_charts.attention_distance_chart(r.to_frame()), r.to_frame(), "attention_distance")], \
        tour.check_distance(r)


def step_heads(vit, cnn, src, s):
    opts = heads.HeadSubsetOptions(images=s.images, batch_size=s.batch_size)
    r = run("heads", lambda run_: heads.head_subsets(vit, cnn, src, opts, run_), "Head subsets")
    return [(att_charts.head_subset_chart(r.to_frame()), r.to_frame(), "head_subsets")], tour.check_heads(r)


def step_receptive(vit, cnn, src, s):
    opts = receptive.ReceptiveOptions(images=min(s.images, 16), batch_size=min(s.batch_size, 8))
    rv, rc = (run(f"rf-{m.label}", lambda run_, m=m: receptive.receptive_fields(m, src, opts, run_),
                  f"Receptive fields of {m.label}") for m in (vit, cnn))
    return [(att_charts.receptive_field_chart(r.to_frame(), columns=6, size=90), r.to_frame(), f"rf_{r.model}")
            for r in (rv, rc)], tour.check_receptive(rv, rc)


def step_skips(vit, cnn, src, s):
    opts = skips.SkipOptions(images=s.images, batch_size=s.batch_size)
    r = run("skips", lambda run_: skips.skip_ratios([vit, cnn], src, opts, run_), "Skip ratios")
    summary = r.summary()
    return [(skip_charts.skip_lines(summary), summary, "skip_ratio")], tour.check_skips(r, vit.label, cnn.label)


def step_removal(vit, cnn, src, s):
    opts = interventions.RemoveSkipOptions(block=vit.depth // 2, which="both", images=s.images,
                                           batch_size=s.batch_size)
    r = run("removal", lambda run_: interventions.skip_removal(vit, src, opts, run_), "Skip removal")
    cross = r.cross.to_frame()
    shown = [(charts.cka_heatmap(cross, title=f"unmodified vs without {opts.removal.label}", size=300), cross,
              "skip_removal"), (skip_charts.metrics_chart(r.metrics_frame()), r.metrics_frame(), "skip_removal_acc")]
    return shown, tour.check_removal(r)


def step_localization(vit, cnn, src, s):
    opts = localization.LocalizationOptions(images=s.images, batch_size=s.batch_size)
    r = run("localization", lambda run_: localization.localization([vit, cnn], src, opts, run_), "Localization")
    rates = r.rates()
    return [(loc_charts.localization_rate_chart(rates), rates, "localization")], \
        tour.check_localization(r, vit.label, cnn.label)


def step_probes(vit, cnn, src, s):
    opts = probes.ProbeOptions(shots=5, test=max(50, s.images), reps=("cls", "gap"), batch_size=s.batch_size)
    r = run("probes", lambda run_: probes.probes([vit, cnn], src, opts, run_), "Linear probes")
    frame = r.to_frame()
    return [(probe_charts.probe_lines(frame), frame, "probes")], tour.check_probes(r, vit.label)


def step_scale(vit, cnn, src, s):
    pairs = [(lab.model(x, s.device), lab.model(y, s.device)) for x, y in SCALE_PAIRS]
    opts = checkpoints.CheckpointOptions(images=s.images, batch_size=s.batch_size)
    r = run("scale", lambda run_: checkpoints.compare_checkpoints(pairs, src, opts, run_), "Data scale")
    return [(ckpt_charts.checkpoint_lines(r.to_frame()), r.to_frame(), "data_scale")], tour.check_scale(r)


STEP_FUNCTIONS = {"cka": step_cka, "distance": step_distance, "heads": step_heads, "receptive": step_receptive,
                  "skips": step_skips, "removal": step_removal, "localization": step_localization,
                  "probes": step_probes, "scale": step_scale}


def move(delta: int) -> None:
    i = STEPS.index(st.session_state.get("tour.step", STEPS[0]))
    st.session_state["tour.step"] = STEPS[(i + delta) % len(STEPS)]


def verdict_ui(v: tour.Verdict) -> None:
    if v.shown is True:
        st.success(f"**These models show it.** {v.evidence}")
    elif v.shown is False:
        st.warning(f"**These models do not show it.** {v.evidence}")
    else:
        st.info(f"**These models cannot tell.** {v.evidence}")


st.title("Paper tour")
s = lab.settings()
nav = st.columns([1, 8, 1])
nav[0].button("◀ Previous", key="tour.prev", on_click=move, args=(-1,))
nav[2].button("Next ▶", key="tour.next", on_click=move, args=(1,))
step = nav[1].radio("Figure", STEPS, horizontal=True, key="tour.step", label_visibility="collapsed",
                    format_func=lambda k: tour.CLAIMS[k].figure)
claim = tour.CLAIMS[step]
st.subheader(f"{claim.figure}: {claim.title}")
left, right = st.columns([3, 2])
with right:
    st.markdown("**The paper**")
    st.markdown(f"> {claim.claim}")
    st.caption(f"Models: A `{s.model_a}`, B `{s.model_b}`; {s.images} images of `{s.source}`")
result = None
with left, lab.guard():
    a, b = lab.models(s)
    vit, cnn = roles(a, b)
    result = STEP_FUNCTIONS[step](vit, cnn, lab.source(s), s)
if result is not None:
    shown, verdict = result
    with right:
        st.markdown("**These models**")
        verdict_ui(verdict)
    with left:
        for k, (chart, frame, stem) in enumerate(shown):
            lab.chart(chart, key=f"tour.{step}.{k}")
            lab.export(chart, frame, f"tour_{step}_{stem}", f"tour.{step}.{k}")
