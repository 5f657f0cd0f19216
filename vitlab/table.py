"""The table of analyses: one record per analysis, read by the CLI (one sub-command per row, one generic runner),
the app (navigation, home page links), the tour and the docs index (``python -m vitlab.table --markdown``).

Adding an analysis is one engine module and one row here:

    engine   fn(models, source, opts: XOptions, run: Run) -> Result   (``models`` shaped by the arity)
    options  a frozen dataclass (``vitlab.options.option`` fields): CLI flags and page widget defaults
    result   ``to_frame()``; ``headline()`` -> the lines the CLI prints; ``warnings`` when it has any
    row      Analysis(name, title, figure, arity, options, engine, help, tables=..., charts=..., ...), the module
             named by ``Lazy("vitlab.analyses.x")`` so that reading the table imports no analysis (vitlab.row)

Arity says what the engine's first argument is: 'one' a ``LoadedModel`` (``--model``), 'pair' two
(``--model``, ``--other``: ``engine(a, b, source, ...)``), 'many' a list (``--model`` repeated), 'pairs' a list of
(A, B) tuples (``--pair A B`` repeated). Drill-down views (click a head, a token, a cell) stay in their pages.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

from .row import ARITIES, Analysis, Lazy, Ref

__all__ = ["ANALYSES", "ARITIES", "GENERIC_PAGE", "Analysis", "Page", "Ref", "markdown", "pages", "register",
           "tour_steps"]

ablation = Lazy("vitlab.analyses.ablation")
attention = Lazy("vitlab.analyses.attention")
attention_views = Lazy("vitlab.analyses.attention_views")
attribution = Lazy("vitlab.analyses.attribution")
checkpoints = Lazy("vitlab.analyses.checkpoints")
heads = Lazy("vitlab.analyses.heads")
interventions = Lazy("vitlab.analyses.interventions")
localization = Lazy("vitlab.analyses.localization")
logit_lens = Lazy("vitlab.analyses.logit_lens")
manymodels = Lazy("vitlab.analyses.manymodels")
probes = Lazy("vitlab.analyses.probes")
receptive = Lazy("vitlab.analyses.receptive")
sensitivity = Lazy("vitlab.analyses.sensitivity")
similarity = Lazy("vitlab.analyses.similarity")
skips = Lazy("vitlab.analyses.skips")
token_gradient = Lazy("vitlab.analyses.token_gradient")
token_norms = Lazy("vitlab.analyses.token_norms")
run = Lazy("vitlab.engine.run")
tour = Lazy("vitlab.tour")


# ---------------------------------------------------------------- what each analysis writes


def _charts():
    from . import charts

    return charts


def _cka_charts(report, opts) -> dict:
    return _charts().cka_pair_charts(report.to_frame())


def _skip_record(report, opts) -> dict:
    return {"images_used": report.images, "max_identity_error": report.identity_errors()}


def _removal_tables(ab) -> dict:
    tables = {"cka": ab.removal.to_frame(), "metrics": ab.removal.metrics_frame()}
    if ab.retrained is not None:
        tables.update(retrained_cka=ab.retrained.to_frame(), retrained_metrics=ab.retrained.metrics_frame())
    return tables


def _removal_charts(ab, opts) -> dict:
    from .charts.skips import metrics_chart

    ch, frame = _charts(), ab.removal.to_frame()
    out = {f"cka_{k}": ch.cka_heatmap(part.drop(columns="map").reset_index(drop=True), title=f"CKA {k}")
           for k, part in frame.groupby("map", sort=False)}
    out["metrics"] = metrics_chart(ab.removal.metrics_frame())
    if ab.retrained is not None:
        out.update({f"retrained_{k}": c for k, c in ch.cka_pair_charts(ab.retrained.to_frame()).items()})
    return out


def _removal_record(ab, opts) -> dict:
    extra = {"block": opts.block, "which": opts.which, "kind": ab.removal.kind,
             "metrics": ab.removal.metrics_frame().to_dict("records")}
    if ab.retrained is not None:
        extra["retrained"] = {"spec": opts.retrained, "accuracy": ab.retrained.accuracy}
    return extra


def _localization_charts(report, opts) -> dict:
    from .charts import localization as ch

    tokens = list(opts.tokens) if opts.tokens else None
    out = {f"maps_{r.model}_{r.layer}": ch.localization_maps(r.to_frame(), tokens) for r in report.results}
    out["localization_summary"] = ch.localization_summary_chart(report.summary())
    out["localization_rate"] = ch.localization_rate_chart(report.rates(), bars=report.interval_caption(opts.batch_size))
    return out


def _localization_record(report, opts) -> dict:
    return {"layers": {r.model: [x.layer for x in report.results if x.model == r.model] for r in report.results},
            "images_used": report.images,
            "localized_fraction": {f"{r.model} {r.layer}": float(r.localized) for r in report.rates().itertuples()}}


def _probe_record(report, opts) -> dict:
    split = report.split
    return {"shots": opts.shots, "val_shots": opts.val_shots or opts.shots, "seed": opts.seed, "draws": opts.draws,
            "split": {"train": len(split.train), "val": len(split.val), "test": len(split.test),
                      "classes": split.classes},
            "best": report.best(("model", "representation")).to_dict("records")}


def _checkpoint_charts(res, opts) -> dict:
    from .charts.checkpoints import checkpoint_lines

    out = {"checkpoint_cka": checkpoint_lines(res.to_frame())}
    out.update({f"cka_{a}__vs__{b}": _charts().cka_heatmap(m.to_frame()) for (a, b), m in zip(res.pairs, res.matrices)})
    return out


def _distance_charts(report, opts) -> dict:
    from .charts import attention as ch

    frame = report.to_frame()
    return {"attention_distance": ch.attention_distance_chart(frame, opts.units),
            "attention_distance_sorted": ch.sorted_heads_chart(frame, None, opts.units)}


def _distance_record(report, opts) -> dict:
    return {"renormalised": opts.renormalise, "blocks": sorted({b for r in report.results for b in r.layers}),
            "definition": "mean over spatial queries of sum_k A[q,k] * pixel distance(q,k), prefix tokens dropped"}


def _map_overlay(view, names) -> list:
    from .charts import attention as ch
    from .charts.common import image_png
    from .inputs.outdir import write_file

    return [write_file(names.path("attention_overlay", "png"),
                       image_png(ch.overlay(view.view, view.grid, min_side=224)))]


def _map_record(view, opts) -> dict:
    return {"image": view.image_id, "layer": opts.layer, "head": opts.head, "query": opts.query,
            "forward_passes": view.computed}


def _receptive_charts(report, opts) -> dict:
    from .charts import attention as ch

    out = {f"receptive_field_{r.residual}": ch.receptive_field_chart(r.to_frame()) for r in report.results}
    out["receptive_field_radius"] = ch.receptive_radius_chart(report.summary_frame())
    return out


def _receptive_files(report, names) -> list:
    import numpy as np

    from .inputs.outdir import write_file

    paths = []
    for r in report.results:
        buf = io.BytesIO()
        np.savez_compressed(buf, maps=r.maps, layers=np.array(r.layers))
        paths.append(write_file(names.path(f"receptive_field_{r.residual}", "npz"), buf.getvalue()))
    return paths


def _attention_chart(builder: str, stem: str) -> Callable:
    def draw(result, opts) -> dict:
        from .charts import attention as ch

        return {stem: getattr(ch, builder)(result.to_frame())}

    return draw


# ---------------------------------------------------------------- the table

ANALYSES: dict[str, Analysis] = {a.name: a for a in [
    Analysis(
        "cka", "Representation similarity", "Figs 1-2", "many", run.CKAOptions, run.cka,
        "CKA between every layer of every model and every other (and itself)",
        tables=lambda r: {"cka": r.to_frame()}, charts=_cka_charts, amp=True,
        record=lambda r, o: {"images": r.images, "repeats": r.repeats, "tokens": o.tokens, "kernel": o.kernel,
                             "estimator": o.estimator, "interval": r.interval_info()},
        page="similarity", icon=":material/grid_on:", docs="similarity", claims=("cka",)),
    Analysis(
        "attention-distance", "Attention distance", "Figs 3-4", "many", attention.AttentionDistanceOptions,
        attention.attention_distances, "mean attention distance of every head of every block (Figs 3-4)",
        tables=lambda r: {"attention_distance": r.to_frame()}, charts=_distance_charts, record=_distance_record,
        amp=True, page="attention", page_title="Attention", icon=":material/visibility:", docs="attention",
        out="results/attention_distance", claims=("distance",)),
    Analysis(
        "attention-map", "Attention maps", "App. C", "one", attention_views.AttentionMapOptions,
        attention_views.attention_map_view, "one image's attention map: a head, the head mean, or rollout",
        tables=lambda r: {"attention_map": r.to_frame()}, charts=_attention_chart("attention_map_chart",
                                                                                  "attention_map"),
        files=_map_overlay, record=_map_record, shards=False, page="attention", docs="attention",
        out="results/attention_map"),
    Analysis(
        "head-subsets", "Head subsets", "Fig 5", "pair", heads.HeadSubsetOptions, heads.head_subsets,
        "CKA of local-to-global head subsets with another model (Fig 5)",
        tables=lambda r: {"head_subsets": r.to_frame(), "heads_by_distance": r.heads_frame()},
        charts=_attention_chart("head_subset_chart", "head_subsets"), amp=True,
        other_help="the model to compare with, e.g. a ResNet spec",
        record=lambda r, o: {"blocks": ",".join(map(str, o.blocks)), "size": r.size, "tokens": o.tokens,
                             "other_taps": r.layers_b},
        page="heads", icon=":material/call_split:", docs="attention", out="results/head_subsets",
        claims=("heads",)),
    Analysis(
        "receptive-field", "Receptive fields", "Fig 6", "one", receptive.ReceptiveOptions,
        receptive.receptive_report, "effective receptive fields of blocks (Fig 6, App. C)",
        tables=lambda r: {"receptive_field": r.to_frame(), "receptive_field_summary": r.summary_frame()},
        charts=_receptive_charts, files=_receptive_files,
        record=lambda r, o: {"residual": o.residual, "layers": r.results[-1].layers,
                             "images_used": r.results[-1].images},
        page="receptive", icon=":material/filter_center_focus:", docs="attention",
        out="results/receptive_field", claims=("receptive",)),
    Analysis(
        "skip-ratio", "Skip connections", "Fig 7", "many", skips.SkipOptions, skips.skip_ratios,
        "skip vs long-branch norm ratio ‖z‖/‖f(z)‖ per block and token (Fig 7)",
        tables=lambda r: {"skip_ratio": r.to_frame(), "skip_ratio_summary": r.summary()},
        charts=lambda r, o: _skip_charts(r), record=_skip_record,
        page="skips", icon=":material/alt_route:", docs="skips", claims=("skips",)),
    Analysis(
        "remove-skip", "Skip removal", "Fig 8", "one", interventions.RemoveSkipOptions, interventions.skip_ablation,
        "post-hoc ablation: remove block i's skip connection(s); CKA maps and accuracy before and after (Fig 8)",
        tables=_removal_tables, charts=_removal_charts, record=_removal_record, page="skips", docs="skips",
        claims=("removal",)),
    Analysis(
        "localization", "Localization", "Figs 9-10", "many", localization.LocalizationOptions,
        localization.localization, "CKA of each token of a layer with the input patch at every grid position "
        "(Figs 9-10)",
        tables=lambda r: {"localization": r.to_frame(), "localization_summary": r.summary(),
                          "localization_rates": r.rates()},
        charts=_localization_charts, record=_localization_record,
        page="localization", icon=":material/my_location:", docs="localization",
        claims=("localization", "gap")),
    Analysis(
        "probe", "Linear probes", "Figs 11, 13", "many", probes.ProbeOptions, probes.probes,
        "few-shot linear probes per layer and representation (Figs 11, 13)",
        tables=lambda r: {"probe": r.to_frame()},
        charts=lambda r, o: {"probe_accuracy": _probe_lines(r.to_frame())}, record=_probe_record,
        data="fashion-mnist:test",
        data_help="labelled data: fashion-mnist[:train|test] | cifar10[:split] | cifar100[:split] | FOLDER with one "
                  "sub-folder per class",
        page="probes", icon=":material/linear_scale:", docs="localization", claims=("probes",)),
    Analysis(
        "logit-lens", "Logit lens", "beside Fig 11", "many", logit_lens.LensOptions, logit_lens.logit_lens,
        "every block read out by the model's own final norm and head: accuracy and agreement with the final "
        "prediction per block, with intervals", tables=lambda r: {"logit_lens": r.to_frame()},
        charts=lambda r, o: {"logit_lens": _lens_lines(r.to_frame())},
        record=lambda r, o: {"last_block_max_abs_diff": r.exactness(), "images_used": r.images},
        data="fashion-mnist:test", page="logit_lens", icon=":material/manage_search:", docs="localization"),
    Analysis(
        "compare-checkpoints", "Checkpoints", "Fig 12", "pairs", checkpoints.CheckpointOptions,
        checkpoints.compare_checkpoints, "block-by-block CKA between two checkpoints of one architecture (Fig 12)",
        tables=lambda r: {"checkpoints": r.to_frame()}, charts=_checkpoint_charts, amp=True,
        record=lambda r, o: {"pairs": [list(p) for p in r.pairs], "tokens": o.tokens, "images_used": r.images},
        page="checkpoints", icon=":material/compare_arrows:", docs="similarity", claims=("scale",)),
    Analysis(
        "attention-parity", "Attention capture check", "-", "one", attention_views.ParityOptions,
        attention_views.parity, "check attention capture: block outputs with capture on vs the fused forward",
        tables=lambda r: {"attention_parity": r.to_frame()},
        charts=_attention_chart("parity_chart", "attention_parity"),
        record=lambda r, o: {"ok": r.ok(), "logits_max_abs_diff": r.logits_diff},
        status=lambda r: 0 if r.ok() else 1, shards=False, cache=False, docs="attention", icon=":material/rule:",
        section="Checks",
        out="results/attention_parity"),
    Analysis(
        "tour", "Paper tour", "Figs 1-12", "many", tour.TourOptions, tour.run_tour,
        "check the paper's claims on models with 95 % intervals, two answers each: is the pattern shown against its "
        "null, and is it learned, beyond the untrained twins (Figs 1-12)",
        tables=lambda r: {"tour": r.to_frame(), "tour_intervals": r.intervals_frame(), **r.paper_tables()},
        charts=lambda r, o: r.chart_files(), record=lambda r, o: {"verdicts": r.summary(),
                                                                  "learned": r.learned_summary(),
                                                                  "checks": [c.figure for c in r.rows],
                                                                  "planned_passes": r.passes},
        data="fashion-mnist:test", page="tour", section="Presentation",
        icon=":material/slideshow:", docs="evidence"),
    Analysis(
        "token-gradient", "Token gradient map", "Fig 6, one token", "one", token_gradient.TokenGradientOptions,
        token_gradient.token_gradient, "which input pixels one token carries on one image: the gradient magnitude "
        "of the token w.r.t. the input and its share in the token's own patch and 3x3 neighbourhood",
        tables=lambda r: {"token_gradient": r.to_frame(), "token_gradient_shares": r.shares_frame()},
        headline=lambda r: [r.headline()], record=lambda r, o: {"shares": r.shares}, shards=False,
        data="fashion-mnist:test", page="localization", docs="uploads"),
]}


def _similarity_tables(report) -> dict:
    from .stats.agreement import agreement

    tables = {"similarity": report.to_frame()}
    if len(report.labels) >= 2 and len(report.measures) >= 2:
        ag = agreement(report, 0, 1)
        tables.update(agreement=ag.to_frame(), claims=ag.claims_frame())
    return tables


def _similarity_charts(report, opts) -> dict:
    from .charts import similarity as ch
    from .stats.agreement import agreement

    out = {f"{m}_{report.labels[i]}__vs__{report.labels[j]}": ch.measure_heatmap(report.pair_frame(m, i, j))
           for (m, i, j) in report.maps if i <= j or m.startswith("pwcca")}
    if len(report.labels) >= 2 and len(report.measures) >= 2:
        ag = agreement(report, 0, 1)
        out["agreement_rank_correlation"] = ch.correlation_heatmap(ag.correlation_frame("ab"))
        out["agreement_maps"] = ch.measure_grid([ag.maps[(m, "ab")] for m in ag.measures])
    return out


def _compare_charts(result, opts) -> dict:
    from .charts.similarity import compare_models_charts

    return compare_models_charts(result)


def _sensitivity_charts(result, opts) -> dict:
    from .charts.similarity import sensitivity_chart

    return {"cka_sensitivity": sensitivity_chart(result.to_frame())}


MEASURE_ROWS = [
    Analysis(
        "similarity", "Similarity measures", "Figs 1-2", "many", similarity.SimilarityOptions, similarity.similarity,
        "every similarity measure (CKA, RBF CKA, Procrustes, SVCCA, PWCCA, mutual k-NN) between every layer pair, "
        "and whether they agree",
        tables=_similarity_tables, charts=_similarity_charts, data="fashion-mnist:test",
        record=lambda r, o: {"images": r.images, "taps": r.layers,
                             "measures": {m: similarity.describe(o, m) for m in r.measures}, "cca": r.cca},
        page="similarity", docs="measures"),
    Analysis(
        "compare-models", "Many models", "Figs 1-2", "many", manymodels.CompareOptions, manymodels.compare_models,
        "a models x models similarity matrix per relative depth and a 2-D map of the models (classical MDS)",
        tables=lambda r: {"compare_models": r.to_frame(), "mds": r.coords_frame()}, charts=_compare_charts,
        data="fashion-mnist:test",
        record=lambda r, o: {"measure": o.measure, "depths": list(r.depths), "taps": r.taps, "images": r.images,
                             "cca": r.cca},
        page="models", icon=":material/scatter_plot:", docs="measures"),
    Analysis(
        "cka-sensitivity", "CKA sensitivity", "Figs 1-2", "pair", sensitivity.SensitivityOptions,
        sensitivity.sensitivity, "how one CKA value moves: top PCs removed, a batch or an image left out, the "
        "Gram's top-direction energy", tables=lambda r: {"cka_sensitivity": r.to_frame()},
        charts=_sensitivity_charts, data="fashion-mnist:test",
        record=lambda r, o: {"layers": [o.layer_a, o.layer_b], "images": r.images},
        page="similarity", docs="measures"),
]
for _row in MEASURE_ROWS:
    ANALYSES[_row.name] = _row


def _skip_charts(report) -> dict:
    from .charts.skips import skip_charts

    return skip_charts(report)


def _lens_lines(frame):
    from .charts.logit_lens import lens_lines

    return lens_lines(frame)


def _probe_lines(frame):
    from .charts.probes import probe_lines

    return probe_lines(frame)


# ---------------------------------------------------------------- the causal analyses (docs/causal.md)


def _ablation_tables(res) -> dict:
    return {"ablation": res.to_frame(), "summary": res.summary(), "verdicts": res.verdicts(), "cka": res.cka_frame()}


def _ablation_charts(res, opts) -> dict:
    from .charts import causal as ch

    summary = res.summary()
    return {"delta_accuracy": ch.ablation_curves(summary, "delta_accuracy"), "kl": ch.ablation_curves(summary, "kl"),
            "cka": ch.ablation_cka_chart(res.cka_frame())}


def _ablation_record(res, opts) -> dict:
    return {"blocks_used": res.blocks, "accuracy_kind": res.accuracy_kind, "intact": float(res.intact_correct.mean()),
            "heads_by_distance": res.heads_by_distance, "verdicts": res.verdicts().to_dict("records")}


def _attribution_tables(rep) -> dict:
    return {"faithfulness": rep.scores.to_frame(), "faithfulness_summary": rep.scores.summary(),
            "curves": rep.one.to_frame(), "one_image_scores": rep.one.summary()}


def _attribution_charts(rep, opts) -> dict:
    from .charts import causal as ch

    return {"faithfulness": ch.faithfulness_summary_chart(rep.scores.summary()),
            "curves": ch.faithfulness_curves(rep.one.to_frame())}


def _attribution_files(rep, names) -> list:
    from .charts.attention import overlay
    from .charts.common import image_png
    from .inputs.outdir import write_file

    paths = []
    for method, grid in rep.one.maps.items():
        png, csv = names.paths(f"map_{method}", "png", "csv")  # 'rollout:max:0.9' -> map_rollout_max_0.9.png
        paths += [write_file(png, image_png(overlay(rep.view, grid, min_side=224))),
                  write_file(csv, rep.one.map_frame(method).to_csv(index=False))]
    return paths


def _attribution_record(rep, opts) -> dict:
    r = rep.scores
    return {"cell_px_used": r.cell_px, "cells": r.cells, "methods_used": r.methods, "image_id": rep.one.image,
            "target_class": rep.one.target, "summary": r.summary().to_dict("records"),
            "unreadable": [s[0] for s in r.skipped]}


def _token_tables(res) -> dict:
    return {"token_norms": res.to_frame(), "flagged_tokens": res.flagged_frame(),
            "token_norm_histogram": res.histogram_frame(), "cka": res.cka_frame(),
            "attention_distance": res.distance_frame()}


def _token_charts(res, opts) -> dict:
    from .charts import causal as ch

    out = {"flags": ch.flag_summary_chart(res.to_frame()),
           "norms_last_tap": ch.norm_histogram(res.histogram_frame(), res.layers[-1])}
    for tokens, part in res.cka_frame().groupby("tokens", sort=False):
        out[f"cka_{tokens}"] = _charts().cka_heatmap(part.drop(columns="tokens").reset_index(drop=True),
                                                     title=f"CKA, tokens: {tokens}")
    if res.distance_all is not None:
        out["attention_distance"] = ch.distance_compare_chart(res.distance_frame())
    return out


CAUSAL = [
    Analysis(
        "head-ablation", "Head ablation", "beside Fig 5", "pair", ablation.AblationOptions, ablation.head_ablation,
        "ablate the k most local / most global / random heads of the lower blocks: Δaccuracy, KL and CKA with "
        "intervals", tables=_ablation_tables, charts=_ablation_charts, record=_ablation_record,
        data="fashion-mnist:test", other_help="the model whose lower layers the CKA compares with, e.g. a ResNet",
        page="ablation", icon=":material/content_cut:", docs="causal", section="Cause"),
    Analysis(
        "attribution", "Attribution", "-", "one", attribution.FaithfulnessOptions, attribution.attribution_report,
        "rollout / gradient-weighted rollout / Grad-CAM maps scored by deletion and insertion curves against random "
        "orders, averaged over images", tables=_attribution_tables, charts=_attribution_charts,
        files=_attribution_files, record=_attribution_record, data="fashion-mnist:test",
        page="attribution", icon=":material/ads_click:", docs="causal", section="Cause"),
    Analysis(
        "token-norms", "Token norms", "-", "one", token_norms.TokenNormOptions, token_norms.token_norms,
        "token norm distribution per block, high-norm tokens flagged (median + k·1.4826·MAD), CKA and attention "
        "distance without them", tables=_token_tables, charts=_token_charts,
        record=lambda r, o: {"prefix_tokens": r.prefix, "per_tap": r.to_frame().to_dict("records")},
        page="token_norms", icon=":material/warning:", docs="causal", section="Cause"),
]
ANALYSES.update({a.name: a for a in CAUSAL})


def register(analysis: Analysis) -> Analysis:
    """Add (or replace) a row: the CLI, the app and the docs index pick it up."""
    if analysis.arity not in ARITIES:
        raise ValueError(f"arity must be one of {ARITIES}, not '{analysis.arity}'")
    ANALYSES[analysis.name] = analysis
    return analysis


@dataclass(frozen=True)
class Page:
    """An app page: a handwritten one (``app/views/<file>.py``) or the generic page drawing one row."""

    url: str  # url path; a row without a handwritten page gets its name
    file: str  # app/views/<file>.py
    title: str
    icon: str
    section: str
    rows: tuple[str, ...]  # the analyses it shows


GENERIC_PAGE = "analysis"  # app/views/analysis.py: widgets from the options, the engine call, the row's charts


def pages() -> list[Page]:
    """Every app page that shows an analysis, in table order: one per handwritten page, one per other row."""
    found: dict[str, Page] = {}
    for a in ANALYSES.values():
        url = a.page or a.name
        if url in found:
            p = found[url]
            found[url] = Page(p.url, p.file, p.title, p.icon, p.section, p.rows + (a.name,))
        else:
            found[url] = Page(url, a.page or GENERIC_PAGE, a.page_title or a.title, a.icon, a.section, (a.name,))
    return list(found.values())


def tour_steps() -> list[str]:
    """The paper tour's steps in table order (keys of ``vitlab.tour.CLAIMS``)."""
    return [c for a in ANALYSES.values() for c in a.claims]


def markdown() -> str:
    """The README's table of analyses (one line per row), linking into docs/."""
    lines = ["| command | analysis | paper | app page | docs |", "|---|---|---|---|---|"]
    for a in ANALYSES.values():
        docs = f"[{a.docs}](docs/{a.docs}.md)" if a.docs else ""
        page = next(p.title for p in pages() if a.name in p.rows)
        lines.append(f"| `vitlab {a.name}` | {a.help.split(' (')[0]} | {a.figure} | {page} | {docs} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m vitlab.table --markdown")
    sys.stdout.write(markdown())
