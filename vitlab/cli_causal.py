"""CLI commands of the causal analyses: head-ablation, attribution, token-norms. Each writes CSV, PNG/SVG charts
and run.json into ``--out`` (single process; the engine functions take a :class:`vitlab.context.Run`)."""

from __future__ import annotations

import time
from pathlib import Path

from .cli import add_data_options, add_model_options, add_out_option, open_store, tqdm_progress, write_run_json
from .cli_attention import _ints


def _run(args, desc: str):
    from .context import Run

    return Run(store=open_store(args), progress=tqdm_progress(desc), seed=args.seed, bootstrap=args.bootstrap)


def _evidence_options(p) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of random draws, random orders and the bootstrap")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples over images for intervals")


def _load(spec: str, device: str):
    from .models import load

    m = load(spec, device)
    m.display = spec
    return m


# ---------------------------------------------------------------- head-ablation


def add_head_ablation(sub) -> None:
    p = sub.add_parser("head-ablation", help="ablate the k most local / most global / random heads of the lower "
                                             "blocks: Δaccuracy, KL and CKA with intervals")
    p.add_argument("--model", "-m", required=True, help="the ViT whose heads are ablated (spec as elsewhere)")
    p.add_argument("--other", required=True, help="the model whose lower layers the CKA compares with")
    p.add_argument("--device", default="auto")
    add_data_options(p, images=256, batch_size=64)
    p.add_argument("--blocks", default=None, help="comma-separated blocks (default: the lower half)")
    p.add_argument("--k", default=None, help="comma-separated numbers of heads (default: 1 .. half the candidates)")
    p.add_argument("--scope", choices=("pooled", "per-block"), default="pooled")
    p.add_argument("--modes", default="zero,mean", help="zero, mean or zero,mean")
    p.add_argument("--draws", type=int, default=10, help="random head sets per k")
    _evidence_options(p)
    add_out_option(p, "results/head-ablation")
    p.set_defaults(func=run_head_ablation)


def run_head_ablation(args) -> int:
    from .ablation import AblationOptions, head_ablation
    from .charts import save
    from .charts.causal import ablation_cka_chart, ablation_curves
    from .data import open_source

    t0 = time.perf_counter()
    source = open_source(args.data)
    vit, other = _load(args.model, args.device), _load(args.other, args.device)
    blocks, ks = _ints(args.blocks, "--blocks"), _ints(args.k, "--k")
    opts = AblationOptions(images=args.images, batch_size=args.batch_size, shuffle=args.shuffle,
                           blocks=tuple(blocks) if blocks else None, ks=tuple(ks) if ks else None, scope=args.scope,
                           modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()), draws=args.draws)
    run = _run(args, "head-ablation")
    try:
        res = head_ablation(vit, other, source, opts, run)
    finally:
        run.progress.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary, verdicts, cka = res.summary(), res.verdicts(), res.cka_frame()
    res.to_frame().to_csv(out / "ablation.csv", index=False)
    verdicts.to_csv(out / "verdicts.csv", index=False)
    written = (save(ablation_curves(summary, "delta_accuracy"), out, "delta_accuracy", summary)
               + save(ablation_curves(summary, "kl"), out, "kl", summary)
               + save(ablation_cka_chart(cka), out, "cka", cka))
    write_run_json(out, "head-ablation", [vit, other], args, run.info, t0, res.warnings, blocks=res.blocks,
                   scope=res.scope, accuracy_kind=res.accuracy_kind, intact=float(res.intact_correct.mean()),
                   heads_by_distance=res.heads_by_distance, verdicts=verdicts.to_dict("records"))
    print(verdicts.to_string(index=False))
    print(f"{res.accuracy_kind} of the intact model {res.intact_correct.mean():.4f} over {res.images} images; "
          f"{len(written)} files in {out}")
    return 0


# ---------------------------------------------------------------- attribution


def add_attribution(sub) -> None:
    p = sub.add_parser("attribution", help="rollout / gradient-weighted rollout / Grad-CAM maps scored by deletion "
                                           "and insertion curves against random orders, averaged over images")
    add_model_options(p, multiple=False)
    add_data_options(p, images=64, batch_size=16)
    p.add_argument("--methods", default=None, help="comma-separated: rollout[:FUSION:DISCARD], grad-rollout, "
                                                   "gradcam[:TAP], random (default: all for the model's family)")
    p.add_argument("--target", choices=("pred", "label"), default="pred")
    p.add_argument("--cell-px", type=int, default=None, help="cell side in input pixels (default: patch size)")
    p.add_argument("--baseline", choices=("mean", "black"), default="mean",
                   help="fill of deleted cells: the data set's mean pixel (0 after normalisation) or black")
    p.add_argument("--random-orders", type=int, default=8)
    p.add_argument("--image", type=int, default=0, help="the image whose maps and curves are drawn")
    _evidence_options(p)
    add_out_option(p, "results/attribution")
    p.set_defaults(func=run_attribution)


def run_attribution(args) -> int:
    from .attribution import FaithfulnessOptions, attribution, faithfulness
    from .charts import save
    from .charts.attention import overlay
    from .charts.causal import faithfulness_curves, faithfulness_summary_chart
    from .charts.common import image_png
    from .activations import model_view
    from .data import open_source

    t0 = time.perf_counter()
    source = open_source(args.data)
    model = _load(args.model, args.device)
    methods = tuple(m.strip() for m in args.methods.split(",")) if args.methods else None
    opts = FaithfulnessOptions(methods=methods, target=args.target, cell_px=args.cell_px, baseline=args.baseline,
                               random_orders=args.random_orders, images=args.images, batch_size=args.batch_size,
                               shuffle=args.shuffle)
    run = _run(args, "attribution")
    try:
        res = faithfulness(model, source, opts, run)
    finally:
        run.progress.close()
    one = attribution(model, source, args.image, opts, run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary, curves = res.summary(), one.to_frame()
    res.to_frame().to_csv(out / "faithfulness.csv", index=False)
    written = (save(faithfulness_summary_chart(summary), out, "faithfulness", summary)
               + save(faithfulness_curves(curves), out, "curves", curves))
    view = model_view(model, source.load(args.image))
    for method, grid in one.maps.items():
        (out / f"map_{method.replace(':', '_')}.png").write_bytes(image_png(overlay(view, grid, min_side=224)))
        one.map_frame(method).to_csv(out / f"map_{method.replace(':', '_')}.csv", index=False)
    write_run_json(out, "attribution", [model], args, run.info, t0, cell_px=res.cell_px, cells=res.cells,
                   baseline=res.baseline, methods=res.methods, summary=summary.to_dict("records"),
                   skipped=[s[0] for s in res.skipped])
    print(summary[["method", "curve", "auc", "auc_random_order", "minus_random", "lo", "hi"]].to_string(index=False))
    print(f"{res.images} images, {res.cells} cells of {res.cell_px} px, baseline {res.baseline}; "
          f"{len(written) + 2 * len(one.maps)} files in {out}")
    return 0


# ---------------------------------------------------------------- token-norms


def add_token_norms(sub) -> None:
    p = sub.add_parser("token-norms", help="token norm distribution per block, high-norm tokens flagged "
                                           "(median + k·1.4826·MAD), CKA and attention distance without them")
    add_model_options(p, multiple=False)
    add_data_options(p, images=256, batch_size=64)
    p.add_argument("--k", type=float, default=5.0, help="threshold = median + k · 1.4826 · MAD per tap")
    p.add_argument("--no-attention", action="store_true", help="skip the attention distance comparison")
    add_out_option(p, "results/token-norms")
    p.set_defaults(func=run_token_norms)


def run_token_norms(args) -> int:
    from .charts import cka_heatmap, save
    from .charts.causal import distance_compare_chart, flag_summary_chart, norm_histogram
    from .context import Run
    from .data import open_source
    from .token_norms import TokenNormOptions, token_norms

    t0 = time.perf_counter()
    source = open_source(args.data)
    model = _load(args.model, args.device)
    run = Run(store=open_store(args), progress=tqdm_progress("token-norms"))
    try:
        res = token_norms(model, source, TokenNormOptions(images=args.images, batch_size=args.batch_size,
                                                          shuffle=args.shuffle, k=args.k,
                                                          attention=not args.no_attention), run)
    finally:
        run.progress.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame, hist, cka = res.to_frame(), res.histogram_frame(), res.cka_frame()
    res.flagged_frame().to_csv(out / "flagged_tokens.csv", index=False)
    written = save(flag_summary_chart(frame), out, "flags", frame) + save(norm_histogram(hist, res.taps[-1]), out,
                                                                          "norms_last_tap", hist)
    for tokens, part in cka.groupby("tokens", sort=False):
        part = part.drop(columns="tokens").reset_index(drop=True)
        written += save(cka_heatmap(part, title=f"CKA, tokens: {tokens}"), out, f"cka_{tokens}", part)
    dist = res.distance_frame()
    if not dist.empty:
        written += save(distance_compare_chart(dist), out, "attention_distance", dist)
    write_run_json(out, "token-norms", [model], args, run.info, t0, k=res.k, prefix_tokens=res.prefix,
                   taps=[res.taps], per_tap=frame.to_dict("records"))
    print(frame[["tap", "threshold", "flagged_tokens", "flagged_share", "energy_share"]].to_string(index=False))
    print(f"{len(res.ids)} images; {len(written)} files in {out}")
    return 0


CAUSAL_COMMANDS = [add_head_ablation, add_attribution, add_token_norms]
