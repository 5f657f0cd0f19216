"""CLI commands for the similarity measures: ``vitlab similarity`` (every measure, layer x layer, with the
agreement view), ``vitlab compare-models`` (models x models per relative depth, with an MDS map) and
``vitlab cka-sensitivity`` (how one CKA value moves). One process; outputs CSV, PNG/SVG and run.json in --out.
"""

from __future__ import annotations

import time
from pathlib import Path

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
from .measures import MEASURES


def _measures(text: list[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    from .measures import check_measures

    if not text:
        return default
    return tuple(check_measures([m.strip() for t in text for m in t.split(",") if m.strip()]))


def _add_measure_options(p) -> None:
    p.add_argument("--tokens", choices=("all", "cls", "gap"), default="all",
                   help="representation: all tokens flattened, CLS token, or mean of spatial tokens")
    p.add_argument("--rbf-threshold", type=float, default=1.0, help="RBF CKA width, fraction of the median distance")
    p.add_argument("--pca-dims", type=int, default=256, help="Procrustes: PCA to k = min(batch - 1, this)")
    p.add_argument("--svd-dims", type=int, default=20, help="SVCCA/PWCCA: top SVD directions kept per side")
    p.add_argument("--sketch-dims", type=int, default=256, help="SVCCA/PWCCA: CountSketch width of cached features")
    p.add_argument("--knn-k", type=int, default=10, help="mutual k-NN: neighbours per image within its batch")


def _options(args, measures: tuple[str, ...]):
    from .similarity import SimilarityOptions

    return SimilarityOptions(measures=measures, images=args.images, batch_size=args.batch_size,
                             shuffle=args.shuffle, tokens=args.tokens, rbf_threshold=args.rbf_threshold,
                             pca_dims=args.pca_dims, svd_dims=args.svd_dims, sketch_dims=args.sketch_dims,
                             knn_k=args.knn_k)


def _run(args, desc: str, fn):
    from .context import Run

    progress = tqdm_progress(desc)
    try:
        run = Run(store=open_store(args), progress=progress)
        return fn(run), run
    finally:
        progress.close()


# ---------------------------------------------------------------- similarity


def add_similarity(sub) -> None:
    p = sub.add_parser("similarity", help="every similarity measure between every layer pair of the models "
                                          "(CKA, RBF CKA, Procrustes, SVCCA, PWCCA, mutual k-NN) and their agreement")
    add_model_options(p)
    add_data_options(p)
    p.add_argument("--measure", action="append", default=None,
                   help=f"one or more of {', '.join(MEASURES)} (repeat or comma-separate; default: all)")
    _add_measure_options(p)
    add_out_option(p, "results/similarity")
    p.set_defaults(func=run_similarity)


def run_similarity(args) -> int:
    from . import charts
    from .agreement import agreement
    from .charts.similarity import correlation_heatmap, measure_grid, measure_heatmap
    from .data import open_source
    from .similarity import similarity

    t0 = time.perf_counter()
    opts = _options(args, _measures(args.measure, tuple(MEASURES)))
    source = open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    report, run = _run(args, "similarity", lambda run: similarity(models, source, opts, run))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.to_frame().to_csv(out / "similarity.csv", index=False)
    written = []
    for (m, i, j) in report.maps:
        if i <= j or m == "pwcca":
            written += charts.save(measure_heatmap(report.pair_frame(m, i, j)), out,
                                   f"{m}_{report.labels[i]}__vs__{report.labels[j]}")
    extra = {}
    if len(models) >= 2 and len(report.measures) >= 2:
        ag = agreement(report, 0, 1)
        ag.to_frame().to_csv(out / "agreement.csv", index=False)
        ag.claims_frame().to_csv(out / "claims.csv", index=False)
        written += charts.save(correlation_heatmap(ag.correlation_frame("ab")), out, "agreement_rank_correlation")
        written += charts.save(measure_grid([ag.maps[(m, "ab")] for m in ag.measures]), out, "agreement_maps")
        (out / "agreement.txt").write_text("\n".join(ag.summary()) + "\n")
        extra["agreement"] = ag.summary()
        print("\n".join(ag.summary()))
    write_run_json(out, "similarity", models, args, run.info, t0, report.warnings, taps=report.layers,
                   images=report.images, measures={m: opts.settings(m) for m in report.measures},
                   tokens=args.tokens, **extra)
    print(f"{len(report.measures)} measure(s) over {report.images} images ({run.info.batches_computed} batches "
          f"computed, {run.info.batches_from_cache} from cache): {out / 'similarity.csv'}, {len(written)} chart files")
    return 0


# ---------------------------------------------------------------- compare-models


def add_compare_models(sub) -> None:
    p = sub.add_parser("compare-models", help="a models x models similarity matrix per relative depth and a 2-D "
                                              "map of the models (classical MDS)")
    add_model_options(p)
    add_data_options(p)
    p.add_argument("--depth", default="0.25,0.5,0.75,1.0",
                   help="relative depths in (0, 1], comma-separated; t picks tap ceil(t L) - 1 of L")
    p.add_argument("--measure", default="cka", choices=list(MEASURES))
    _add_measure_options(p)
    add_out_option(p, "results/compare-models")
    p.set_defaults(func=run_compare_models)


def run_compare_models(args) -> int:
    from . import charts
    from .charts.similarity import compare_models_charts
    from .data import open_source
    from .manymodels import CompareOptions, compare_models, parse_depths

    t0 = time.perf_counter()
    opts = CompareOptions(parse_depths(args.depth), _options(args, (args.measure,)))
    if len(args.model) < 2:
        raise VitlabError("compare-models needs at least two models: repeat -m")
    source = open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    result, run = _run(args, "compare-models", lambda run: compare_models(models, source, opts, run))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result.to_frame().to_csv(out / "compare_models.csv", index=False)
    result.coords_frame().to_csv(out / "mds.csv", index=False)
    written = charts.save_all(compare_models_charts(result), out)
    write_run_json(out, "compare-models", models, args, run.info, t0, taps=result.taps, images=result.images,
                   measure=args.measure, measure_settings=opts.similarity.settings(args.measure),
                   depths=list(result.depths), summary=result.summary())
    print("\n".join(result.summary()))
    print(f"{len(models)} models x {len(result.depths)} depths over {result.images} images "
          f"({run.info.batches_computed} batches computed, {run.info.batches_from_cache} from cache; forward passes "
          f"{run.info.forward_passes}): {out / 'compare_models.csv'}, {len(written)} chart files")
    return 0


# ---------------------------------------------------------------- cka-sensitivity


def add_cka_sensitivity(sub) -> None:
    p = sub.add_parser("cka-sensitivity", help="how one CKA value moves: top PCs removed, a batch or an image left "
                                               "out, the Gram's top-direction energy")
    add_model_options(p)
    add_data_options(p)
    p.add_argument("--layer-a", required=True, help="tap of the first model (see `vitlab taps`)")
    p.add_argument("--layer-b", required=True, help="tap of the second model")
    p.add_argument("--tokens", choices=("all", "cls", "gap"), default="all")
    add_out_option(p, "results/cka-sensitivity")
    p.set_defaults(func=run_cka_sensitivity)


def run_cka_sensitivity(args) -> int:
    from . import charts
    from .charts.similarity import sensitivity_chart
    from .data import open_source
    from .sensitivity import SensitivityOptions, sensitivity

    t0 = time.perf_counter()
    if len(args.model) != 2:
        raise VitlabError(f"cka-sensitivity takes two models (-m A -m B), not {len(args.model)}")
    opts = SensitivityOptions(args.images, args.batch_size, args.shuffle, args.tokens)
    source = open_source(args.data)
    models = load_models(args.model, args.device)
    relabel(models, args.model)
    result, run = _run(args, "cka-sensitivity",
                       lambda run: sensitivity(models, source, args.layer_a, args.layer_b, opts, run))
    out = Path(args.out)
    frame = result.to_frame()
    out.mkdir(parents=True, exist_ok=True)
    written = charts.save(sensitivity_chart(frame), out, "cka_sensitivity", frame)
    write_run_json(out, "cka-sensitivity", models, args, run.info, t0, images=result.images,
                   layers=[args.layer_a, args.layer_b], summary=result.summary())
    print(frame[["check", "side", "k", "value", "change", "detail"]].to_string(index=False))
    print(f"{result.summary()}: {len(written)} files in {out}")
    return 0


MEASURE_COMMANDS = [add_similarity, add_compare_models, add_cka_sensitivity]
