"""CLI commands for the skip, localization, probe and checkpoint analyses (Raghu et al. 2021, Figs 7-13).

Each ``add_*`` function registers one sub-command; each writes CSV, PNG/SVG charts and run.json into ``--out``.
Under ``torchrun`` (``vitlab.dist``) every command here splits the batches across ranks, combines the ranks'
accumulators (probe: gathers the features) and leaves the outputs to rank 0.
"""

from __future__ import annotations

import time
from pathlib import Path

from . import dist
from .cli import (
    add_data_options,
    add_model_options,
    add_out_option,
    load_models,
    open_store,
    relabel,
    write_run_json,
)
from .errors import VitlabError


def _finish(out: Path, command: str, models: list, args, info, extra: dict, t0: float, warnings=()) -> None:
    write_run_json(out, command, models, args, info, t0, warnings, **extra)


def _run_with_progress(ctx: dist.Context, desc: str, fn, *args, **kwargs):
    """``fn(..., progress=...)`` with a bar on rank 0 (silent on the other ranks)."""
    progress = ctx.progress(desc)
    try:
        return fn(*args, progress=progress, **kwargs)
    finally:
        progress.close()


# ---------------------------------------------------------------- skip-ratio (Fig 7)


def add_skip_ratio(sub) -> None:
    p = sub.add_parser("skip-ratio", help="skip vs long-branch norm ratio ‖z‖/‖f(z)‖ per block and token (Fig 7)")
    add_model_options(p)
    add_data_options(p, images=128, batch_size=32)
    add_out_option(p, "results/skip-ratio")
    p.set_defaults(func=run_skip_ratio)


def run_skip_ratio(args) -> int:
    from .charts import save_all
    from .charts.skips import skip_charts
    from .data import open_source
    from .skips import skip_ratios

    t0 = time.perf_counter()
    ctx = dist.context(args)  # torchrun: this rank's device, shard, reductions
    store, source = open_store(args), open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    report = _run_with_progress(ctx, "skip-ratio", skip_ratios, models, source, images=args.images,
                                batch_size=args.batch_size, shuffle=args.shuffle, store=store, shard=ctx.shard,
                                reduce=ctx.reduce)
    ctx.reduce_info(report.info)
    if not ctx.is_main:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = report.to_frame()
    frame.to_csv(out / "skip_ratio.csv", index=False)
    summary = frame.groupby(["model", "layer", "block", "sublayer", "depth", "kind"], sort=False,
                            as_index=False)[["ratio", "cosine"]].mean()
    summary.to_csv(out / "skip_ratio_summary.csv", index=False)
    written = save_all(skip_charts(frame), out)
    ident = {r.model: float(max(r.identity_err.tolist(), default=0.0)) for r in report.results
             if r.family not in ("resnet", "resnetv2")}
    _finish(out, "skip-ratio", models, args, report.info, {"images_used": report.results[0].images,
                                                           "max_identity_error": ident}, t0, report.warnings)
    print(f"skip ratios over {report.results[0].images} images: {out / 'skip_ratio.csv'}, {len(written)} chart files")
    return 0


# ---------------------------------------------------------------- remove-skip (Fig 8)


def add_remove_skip(sub) -> None:
    p = sub.add_parser("remove-skip", help="post-hoc ablation: remove block i's skip connection(s); CKA maps and "
                                           "accuracy before and after (Fig 8)")
    add_model_options(p, multiple=False)
    add_data_options(p, images=256, batch_size=64)
    p.add_argument("--block", type=int, required=True, help="block index (0-based)")
    p.add_argument("--which", choices=("attn", "mlp", "both"), default="both",
                   help="attention (token-mixing) skip, MLP (channel-mixing) skip, or both")
    p.add_argument("--retrained", default=None, metavar="SPEC",
                   help="also compare with a model retrained without the skip, e.g. zoo:vit-cls-noskip")
    add_out_option(p, "results/remove-skip")
    p.set_defaults(func=run_remove_skip)


def run_remove_skip(args) -> int:
    from .charts import cka_heatmap, cka_pair_charts, save, save_all
    from .charts.skips import metrics_chart
    from .data import open_source
    from .interventions import SkipRemoval, retrained_comparison, skip_removal
    from .models import load

    t0 = time.perf_counter()
    ctx = dist.context(args)
    store, source = open_store(args), open_source(args.data)
    loaded = load(args.model, args.device)
    loaded.display = args.model
    res = _run_with_progress(ctx, "remove-skip", skip_removal, loaded, source, SkipRemoval(args.block, args.which),
                             images=args.images, batch_size=args.batch_size, shuffle=args.shuffle, store=store,
                             shard=ctx.shard, reduce=ctx.reduce)
    ctx.reduce_info(res.info)
    comp = retrained = None
    if args.retrained:
        retrained = load(args.retrained, args.device)
        retrained.display = args.retrained
        comp = _run_with_progress(ctx, "retrained", retrained_comparison, loaded, retrained, source,
                                  images=args.images, batch_size=args.batch_size, shuffle=args.shuffle, store=store,
                                  shard=ctx.shard, reduce=ctx.reduce)
    if not ctx.is_main:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = res.to_frame()
    frame.to_csv(out / "cka.csv", index=False)
    metrics = res.metrics_frame()
    metrics.to_csv(out / "metrics.csv", index=False)
    charts = {f"cka_{k}": cka_heatmap(part.drop(columns="map").reset_index(drop=True), title=f"CKA {k}")
              for k, part in frame.groupby("map", sort=False)}
    written = save_all(charts, out) + save(metrics_chart(metrics), out, "metrics")
    extra = {"block": args.block, "which": args.which, "kind": res.kind, "metrics": metrics.to_dict("records")}
    models = [loaded]
    if comp is not None:
        comp.to_frame().to_csv(out / "retrained_cka.csv", index=False)
        comp.metrics_frame().to_csv(out / "retrained_metrics.csv", index=False)
        written += save_all({f"retrained_{k}": c for k, c in cka_pair_charts(comp.to_frame()).items()}, out)
        extra["retrained"] = {"spec": args.retrained, "accuracy": comp.accuracy}
        models.append(retrained)
    _finish(out, "remove-skip", models, args, res.info, extra, t0)
    print(metrics[["metric", "before", "after"]].to_string(index=False))
    print(f"{res.kind}; {len(written)} files in {out}")
    return 0


# ---------------------------------------------------------------- localization (Figs 9-10)


def add_localization(sub) -> None:
    p = sub.add_parser("localization", help="CKA of each token of a layer with the input patch at every grid "
                                            "position (Figs 9-10)")
    add_model_options(p)
    add_data_options(p, images=256, batch_size=64)
    p.add_argument("--layers", default=None,
                   help="comma-separated taps (default: first, middle and last block outputs)")
    p.add_argument("--tokens", default=None, help="comma-separated token indices to draw (default: a spread)")
    add_out_option(p, "results/localization")
    p.set_defaults(func=run_localization)


def _ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise VitlabError(f"{what} must be comma-separated integers, not '{text}'") from None


def run_localization(args) -> int:
    from .charts import save, save_all
    from .charts.localization import localization_maps, localization_rate_chart, localization_summary_chart
    from .data import open_source
    from .localization import localization

    t0 = time.perf_counter()
    ctx = dist.context(args)
    store, source = open_store(args), open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    layers = [t.strip() for t in args.layers.split(",")] if args.layers else None
    tokens = _ints(args.tokens, "--tokens")
    report = _run_with_progress(ctx, "localization", localization, models, source, layers=[layers] * len(models),
                                images=args.images, batch_size=args.batch_size, shuffle=args.shuffle, store=store,
                                shard=ctx.shard, reduce=ctx.reduce)
    ctx.reduce_info(report.info)
    if not ctx.is_main:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.to_frame().to_csv(out / "localization.csv", index=False)
    summary = report.summary()
    summary.to_csv(out / "localization_summary.csv", index=False)
    charts = {f"maps_{r.model}_{r.layer}": localization_maps(r.to_frame(), tokens) for r in report.results}
    written = save_all(charts, out) + save(localization_summary_chart(summary), out, "localization_summary")
    written += save(localization_rate_chart(summary), out, "localization_rate")
    rate = summary[summary["kind"] == "spatial"].groupby(["model", "layer"], sort=False)["localized"].mean()
    _finish(out, "localization", models, args, report.info, {
        "layers": {r.model: [x.layer for x in report.results if x.model == r.model] for r in report.results},
        "images_used": report.results[0].images,
        "localized_fraction": {f"{m} {layer}": float(v) for (m, layer), v in rate.items()}}, t0, report.warnings[:20])
    for (m, layer), v in rate.items():
        print(f"{m} {layer}: {v:.0%} of spatial tokens best match their own input patch")
    print(f"localization over {report.results[0].images} images: {len(written)} files in {out}")
    return 0


# ---------------------------------------------------------------- probe (Figs 11, 13)


def add_probe(sub) -> None:
    p = sub.add_parser("probe", help="few-shot linear probes per layer and representation (Figs 11, 13)")
    add_model_options(p)
    p.add_argument("--data", "-d", default="fashion-mnist:test",
                   help="labelled data: fashion-mnist[:train|test] | cifar10[:split] | cifar100[:split] | FOLDER "
                        "with one sub-folder per class")
    p.add_argument("--shots", type=int, default=10, help="training images per class")
    p.add_argument("--val-shots", type=int, default=None, help="held-out images per class for choosing λ "
                                                               "(default: --shots)")
    p.add_argument("--test", type=int, default=500, help="test images")
    p.add_argument("--seed", type=int, default=0, help="seed of the split")
    p.add_argument("--layers", default=None, help="comma-separated taps (default: every block output)")
    p.add_argument("--reps", default=None, help="comma-separated representations: cls, gap, gap_cls, first, token "
                                                "(default: all that the model has)")
    p.add_argument("--tokens", type=int, default=8, help="individual tokens probed per layer for 'token'")
    p.add_argument("--batch-size", "-b", type=int, default=64)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    p.add_argument("--cache-dir", default=None)
    add_out_option(p, "results/probe")
    p.set_defaults(func=run_probe, images=None, shuffle=None)


def run_probe(args) -> int:
    from .charts import save
    from .charts.probes import probe_lines
    from .data import open_source
    from .probes import probes

    t0 = time.perf_counter()
    ctx = dist.context(args)
    store, source = open_store(args), open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    layers = [t.strip() for t in args.layers.split(",")] if args.layers else None
    reps = [t.strip() for t in args.reps.split(",")] if args.reps else None
    report = _run_with_progress(ctx, "probe", probes, models, source, shots=args.shots, val_shots=args.val_shots,
                                test=args.test, seed=args.seed, layers=[layers] * len(models), reps=reps,
                                tokens=args.tokens, batch_size=args.batch_size, store=store, shard=ctx.shard,
                                gather=ctx.gather)
    ctx.reduce_info(report.info)
    if not ctx.is_main:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = report.to_frame()
    frame.to_csv(out / "probe.csv", index=False)
    written = save(probe_lines(frame), out, "probe_accuracy")
    split = report.split
    _finish(out, "probe", models, args, report.info, {
        "shots": args.shots, "val_shots": args.val_shots or args.shots, "seed": args.seed,
        "split": {"train": len(split.train), "val": len(split.val), "test": len(split.test), "classes": split.classes},
        "best": frame.loc[frame.groupby(["model", "representation"])["accuracy"].idxmax()].to_dict("records")}, t0)
    best = frame.loc[frame.groupby("model")["accuracy"].idxmax()]
    for _, r in best.iterrows():
        print(f"{r['model']}: best {r['accuracy']:.3f} at {r['layer']} ({r['representation']})")
    print(f"{args.shots}-shot probes on {len(split.test)} test images: {out / 'probe.csv'}, {len(written)} chart files")
    return 0


# ---------------------------------------------------------------- compare-checkpoints (Fig 12)


def add_compare_checkpoints(sub) -> None:
    p = sub.add_parser("compare-checkpoints", help="block-by-block CKA between two checkpoints of one architecture "
                                                   "(Fig 12)")
    p.add_argument("--pair", nargs=2, action="append", required=True, metavar=("A", "B"),
                   help="two model specs of the same architecture (repeat for several pairs), e.g. "
                        "zoo:vit-cls-3pct zoo:vit-cls")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    add_data_options(p)
    p.add_argument("--tokens", choices=("all", "cls", "gap"), default="all",
                   help="representation: all tokens flattened, CLS token, or mean of spatial tokens")
    p.add_argument("--amp", action="store_true", help="bf16 autocast on GPU")
    add_out_option(p, "results/compare-checkpoints")
    p.set_defaults(func=run_compare_checkpoints)


def run_compare_checkpoints(args) -> int:
    from .charts import cka_heatmap, save, save_all
    from .charts.checkpoints import checkpoint_lines
    from .checkpoints import compare_checkpoints
    from .data import open_source
    from .models import load

    t0 = time.perf_counter()
    ctx = dist.context(args)
    store, source = open_store(args), open_source(args.data)
    loaded: dict[str, object] = {}
    for spec in (s for pair in args.pair for s in pair):
        if spec not in loaded:
            loaded[spec] = load(spec, args.device)
            loaded[spec].display = spec
    pairs = [(loaded[a], loaded[b]) for a, b in args.pair]
    res = _run_with_progress(ctx, "compare-checkpoints", compare_checkpoints, pairs, source, images=args.images,
                             batch_size=args.batch_size, shuffle=args.shuffle, tokens=args.tokens, store=store,
                             amp=args.amp, shard=ctx.shard, reduce=ctx.reduce)
    ctx.reduce_info(res.info)
    if not ctx.is_main:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = res.to_frame()
    frame.to_csv(out / "checkpoints.csv", index=False)
    written = save(checkpoint_lines(frame), out, "checkpoint_cka")
    written += save_all({f"cka_{a}__vs__{b}": cka_heatmap(m.to_frame()) for (a, b), m in
                         zip(res.pairs, res.matrices)}, out)
    _finish(out, "compare-checkpoints", list(loaded.values()), args, res.info,
            {"pairs": [list(p) for p in res.pairs], "tokens": args.tokens, "images_used": res.images}, t0,
            res.warnings)
    for (a, b), curve in zip(res.pairs, res.curves):
        print(f"{a} vs {b}: CKA {curve[0]:.3f} (first layer) ... {curve[-1]:.3f} (last layer)")
    print(f"over {res.images} images: {out / 'checkpoints.csv'}, {len(written)} chart files")
    return 0


ANALYSIS_COMMANDS = [add_skip_ratio, add_remove_skip, add_localization, add_probe,
                     add_compare_checkpoints]
