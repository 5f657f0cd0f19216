"""CLI commands for the attention analyses (Raghu et al. 2021, Figs 3-6): attention-distance, attention-map,
head-subsets, receptive-field, attention-parity. Each writes CSV, PNG/SVG charts and run.json into ``--out``.
attention-distance and head-subsets run under ``torchrun`` (``vitlab.dist``): batches split across ranks,
accumulators combined, outputs written by rank 0.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from . import dist
from .cli import (
    add_data_options,
    add_model_options,
    add_out_option,
    load_models,
    open_store,
    relabel,
    tqdm_progress,
    write_run_json,
)
from .errors import VitlabError


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise VitlabError(f"{what} must be comma-separated integers, e.g. 0,1,2, not '{text}'") from None


def _run_json(out: Path, command: str, models: list, args, t0: float, info=None, **extra) -> None:
    write_run_json(out, command, models, args, info, t0, **extra)


# ---------------------------------------------------------------- attention-distance


def add_attention_distance(sub) -> None:
    p = sub.add_parser("attention-distance", help="mean attention distance of every head of every block (Figs 3-4)")
    add_model_options(p)
    add_data_options(p, images=256, batch_size=32)
    p.add_argument("--blocks", default=None, help="comma-separated block indices (default: all)")
    p.add_argument("--renormalise", action="store_true",
                   help="renormalise each query's attention over spatial keys after dropping prefix tokens")
    p.add_argument("--units", choices=("px", "frac"), default="px", help="chart in pixels or fraction of image side")
    p.add_argument("--amp", action="store_true", help="bf16 autocast on GPU")
    add_out_option(p, "results/attention_distance")
    p.set_defaults(func=run_attention_distance)


def run_attention_distance(args) -> int:
    import pandas as pd

    from .attention import attention_distance
    from .charts import attention as ch
    from .charts.common import save
    from .data import open_source
    from .run import RunInfo

    t0, ctx = time.perf_counter(), dist.context(args)  # torchrun: this rank's device, shard, reductions
    store, source = open_store(args), open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    info, frames = RunInfo(), []
    for m in models:
        progress = ctx.progress(f"attention distance {m.label}")
        try:
            res = attention_distance(m, source, images=args.images, batch_size=args.batch_size, shuffle=args.shuffle,
                                     blocks=_ints(args.blocks, "--blocks"), renormalise=args.renormalise,
                                     store=store, progress=progress, amp=args.amp, info=info, shard=ctx.shard,
                                     reduce=ctx.reduce)
        finally:
            progress.close()
        frames.append(res.to_frame())
    ctx.reduce_info(info)
    if not ctx.is_main:
        return 0
    frame = pd.concat(frames, ignore_index=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "attention_distance.csv", index=False)
    save(ch.attention_distance_chart(frame, args.units), out, "attention_distance")
    layers = sorted(frame["layer"].unique())
    save(ch.sorted_heads_chart(frame, None, args.units), out, "attention_distance_sorted")
    _run_json(out, "attention-distance", models, args, t0, info, renormalised=args.renormalise, blocks=layers,
              definition="mean over spatial queries of sum_k A[q,k] * pixel distance(q,k), prefix tokens dropped")
    print(f"mean attention distance over {int(frame['images'].iloc[0])} images, {len(layers)} blocks: "
          f"{out / 'attention_distance.csv'}")
    return 0


# ---------------------------------------------------------------- attention-map


def _query(text: str):
    if text.lower() == "cls":
        return "cls"
    if "," in text:
        return tuple(_ints(text, "--query"))
    return _ints(text, "--query")[0]


def add_attention_map(sub) -> None:
    p = sub.add_parser("attention-map", help="one image's attention map: a head, the head mean, or rollout")
    add_model_options(p, multiple=False)
    p.add_argument("--data", "-d", default="samples", help="image source (see `vitlab cka --help`)")
    p.add_argument("--image", type=int, default=0, help="index of the image in the source")
    p.add_argument("--layer", type=int, default=0, help="block index")
    p.add_argument("--head", default="all", help="head index, 'mean', 'rollout' (blocks 0..layer), or 'all'")
    p.add_argument("--query", default="cls", help="'cls', a patch index, or ROW,COL of the query patch")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--cache-dir", default=None)
    add_out_option(p, "results/attention_map")
    p.set_defaults(func=run_attention_map)


def run_attention_map(args) -> int:
    from PIL import Image

    from .activations import model_view
    from .attention import attention_map, head_maps, image_attention
    from .charts import attention as ch
    from .charts.common import save
    from .data import open_source

    t0, store, source = time.perf_counter(), open_store(args), open_source(args.data)
    m = load_models([args.model], args.device)[0]
    relabel([m], [args.model])
    if not 0 <= args.image < len(source):
        raise VitlabError(f"--image {args.image} is outside 0..{len(source) - 1} for '{source.name}'")
    query = _query(args.query)
    acts = image_attention(m, source, args.image, store)
    if args.head == "all":
        frame = head_maps(m, source, args.image, args.layer, query, store)
        grid = attention_map(m, source, args.image, args.layer, "mean", query, acts=acts).grid
    else:
        head = args.head if args.head in ("mean", "rollout") else int(_ints(args.head, "--head")[0])
        amap = attention_map(m, source, args.image, args.layer, head, query, acts=acts)
        frame, grid = amap.to_frame(), amap.grid
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "attention_map.csv", index=False)
    save(ch.attention_map_chart(frame), out, "attention_map")
    Image.fromarray(ch.overlay(model_view(m, source.load(args.image)), grid, min_side=224)).save(out / "attention_overlay.png")
    _run_json(out, "attention-map", [m], args, t0, image=acts.ids[0], layer=args.layer, head=args.head,
              query=args.query, forward_passes=acts.computed)
    print(f"attention map of '{acts.ids[0]}', block {args.layer}, head {args.head}, query {args.query}: "
          f"{out / 'attention_map.csv'}, attention_map.png, attention_overlay.png")
    return 0


# ---------------------------------------------------------------- head-subsets


def add_head_subsets(sub) -> None:
    p = sub.add_parser("head-subsets", help="CKA of local-to-global head subsets with another model (Fig 5)")
    add_model_options(p, multiple=False)
    p.add_argument("--other", required=True, help="the model to compare with, e.g. a ResNet spec")
    add_data_options(p, images=256, batch_size=64)
    p.add_argument("--blocks", default="0", help="comma-separated ViT blocks whose heads are pooled (default 0)")
    p.add_argument("--size", type=int, default=None, help="heads per subset (default: a quarter of the heads)")
    p.add_argument("--other-taps", default=None, help="comma-separated taps of --other (default: its lower half)")
    p.add_argument("--tokens", choices=("spatial", "gap"), default="spatial",
                   help="head features: spatial tokens flattened, or their mean")
    p.add_argument("--amp", action="store_true")
    add_out_option(p, "results/head_subsets")
    p.set_defaults(func=run_head_subsets)


def run_head_subsets(args) -> int:
    from .charts import attention as ch
    from .charts.common import save
    from .data import open_source
    from .heads import head_subsets
    from .run import RunInfo

    t0, ctx = time.perf_counter(), dist.context(args)
    store, source = open_store(args), open_source(args.data)
    models = load_models([args.model, args.other], args.device)
    relabel(models, [args.model, args.other])
    other_taps = [t.strip() for t in args.other_taps.split(",")] if args.other_taps else None
    info, progress = RunInfo(), ctx.progress("head subsets")
    try:
        res = head_subsets(models[0], models[1], source, images=args.images, batch_size=args.batch_size,
                           shuffle=args.shuffle, blocks=_ints(args.blocks, "--blocks"), size=args.size,
                           other_taps=other_taps, tokens=args.tokens, store=store, progress=progress,
                           amp=args.amp, info=info, shard=ctx.shard, reduce=ctx.reduce)
    finally:
        progress.close()
    ctx.reduce_info(info)
    if not ctx.is_main:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = res.to_frame()
    frame.to_csv(out / "head_subsets.csv", index=False)
    res.heads_frame().to_csv(out / "heads_by_distance.csv", index=False)
    save(ch.head_subset_chart(frame), out, "head_subsets")
    _run_json(out, "head-subsets", models, args, t0, info, blocks=args.blocks, size=res.size, tokens=args.tokens,
              other_taps=res.layers_b, warnings=res.warnings)
    print(f"{len(res.subsets) - 1} subsets of {res.size} head(s) vs {len(res.layers_b)} layers of {models[1].label} "
          f"over {res.images} images: {out / 'head_subsets.csv'}")
    return 0


# ---------------------------------------------------------------- receptive-field


def add_receptive_field(sub) -> None:
    p = sub.add_parser("receptive-field", help="effective receptive fields of blocks (Fig 6, App. C)")
    add_model_options(p, multiple=False)
    add_data_options(p, images=32, batch_size=8)
    p.add_argument("--layers", default=None, help="comma-separated blocks or taps (default: every block)")
    p.add_argument("--residual", choices=("post", "pre", "both"), default="post",
                   help="block output after the residual sum, the branch alone before it, or both")
    add_out_option(p, "results/receptive_field")
    p.set_defaults(func=run_receptive_field)


def run_receptive_field(args) -> int:
    import pandas as pd

    from .charts import attention as ch
    from .charts.common import save
    from .data import open_source
    from .receptive import receptive_fields
    from .run import RunInfo

    t0, store, source = time.perf_counter(), open_store(args), open_source(args.data)
    m = load_models([args.model], args.device)[0]
    relabel([m], [args.model])
    layers = [t.strip() for t in args.layers.split(",")] if args.layers else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info, frames, summaries = RunInfo(), [], []
    for residual in (("post", "pre") if args.residual == "both" else (args.residual,)):
        progress = tqdm_progress(f"receptive field ({residual})")
        try:
            res = receptive_fields(m, source, layers, images=args.images, batch_size=args.batch_size,
                                   shuffle=args.shuffle, residual=residual, store=store, progress=progress, info=info)
        finally:
            progress.close()
        frames.append(res.to_frame())
        summaries.append(res.summary_frame())
        for w in res.warnings:
            print(f"warning: {w}", file=sys.stderr)
        np.savez_compressed(out / f"receptive_field_{residual}.npz", maps=res.maps, layers=np.array(res.layers))
        save(ch.receptive_field_chart(frames[-1]), out, f"receptive_field_{residual}")
    pd.concat(frames, ignore_index=True).to_csv(out / "receptive_field.csv", index=False)
    pd.concat(summaries, ignore_index=True).to_csv(out / "receptive_field_summary.csv", index=False)
    _run_json(out, "receptive-field", [m], args, t0, info, residual=args.residual, layers=res.layers,
              images_used=res.images)
    print(f"receptive fields of {len(res.layers)} layers over {res.images} images: {out / 'receptive_field.csv'}")
    return 0


# ---------------------------------------------------------------- attention-parity


def add_attention_parity(sub) -> None:
    p = sub.add_parser("attention-parity",
                       help="check attention capture: block outputs with capture on vs the fused forward")
    add_model_options(p, multiple=False)
    p.add_argument("--data", "-d", default="samples")
    p.add_argument("--images", "-n", type=int, default=4)
    p.add_argument("--tolerance", type=float, default=1e-4, help="allowed max difference relative to the output scale")
    add_out_option(p, "results/attention_parity")
    p.set_defaults(func=run_attention_parity)


def run_attention_parity(args) -> int:
    from .attention import capture_parity
    from .charts import attention as ch
    from .charts.common import save
    from .data import iter_images, open_source, select

    t0, source = time.perf_counter(), open_source(args.data)
    m = load_models([args.model], args.device)[0]
    relabel([m], [args.model])
    images = [img for _, img in iter_images(source, select(source, args.images))]
    res = capture_parity(m, images)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = res.to_frame()
    frame.to_csv(out / "attention_parity.csv", index=False)
    save(ch.parity_chart(frame), out, "attention_parity")
    ok = res.ok(args.tolerance)
    _run_json(out, "attention-parity", [m], args, t0, ok=ok, logits_max_abs_diff=res.logits_diff)
    worst = float(np.max(res.output_diff))
    print(f"{'OK' if ok else 'MISMATCH'}: max |block output difference| {worst:.3g}, logits {res.logits_diff:.3g}, "
          f"max |hook - recomputed probs| {np.nanmax(res.probs_diff) if np.isfinite(res.probs_diff).any() else 'n/a'}"
          f": {out / 'attention_parity.csv'}")
    return 0 if ok else 1


ATTENTION_COMMANDS = [add_attention_distance, add_attention_map, add_head_subsets, add_receptive_field,
                      add_attention_parity]
