"""The paper tour: each claim of Raghu et al. 2021 checked on models against the control it needs, with 95 %
intervals: two answers per claim, pattern (shown / not shown / can't tell against the claim's own null) and learned
(yes / no / can't tell / n.a. against the untrained twins) (docs/evidence.md).

    report = tour.run_tour([vit, cnn], source, TourOptions(), Run(store=Store(), bootstrap=200, seed=0))
    report.to_frame()      # tour.csv: figure, claim, pattern, statistic, lo, hi, control, learned, twin, ...
    report.rows            # Check records (pattern and learned answers, statistic, interval, control, twin, ...)
    report.charts[figure]  # Altair: statistic, control and twins with their 95 % intervals
    report.paper_charts[figure]  # Altair: the paper-style figure (heatmaps, curves, maps) from the same run

The claims, checks, options and report live in ``checks`` (pure); the measurements in ``measure``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import VitlabError
from .checks import (
    CLAIMS,
    CONTROL_NOTES,
    GAP_CAVEAT,
    GAP_PAIR,
    LEARNED,
    NOT_LEARNED,
    POOLING_TWINS,
    STATISTICS,
    TOUR_BATCH,
    TOUR_BOOTSTRAP,
    TOUR_IMAGES,
    TOUR_SEED,
    Check,
    Claim,
    Learned,
    TourOptions,
    TourReport,
    cant_tell,
    check_gap,
    check_growth,
    check_head_rank,
    check_locality,
    check_localization,
    check_probes,
    check_removal,
    check_scale,
    check_skips,
    check_uniformity,
    cross_block_mean,
    depth_drop,
    difference,
    finite_median,
    head_locality,
    make_check,
    off_diagonal_mean,
)

__all__ = [
    "CLAIMS",
    "CONTROL_NOTES",
    "GAP_CAVEAT",
    "GAP_PAIR",
    "LEARNED",
    "NOT_LEARNED",
    "POOLING_TWINS",
    "STATISTICS",
    "TOUR_BATCH",
    "TOUR_BOOTSTRAP",
    "TOUR_IMAGES",
    "TOUR_SEED",
    "Check",
    "Claim",
    "Learned",
    "TourOptions",
    "TourReport",
    "cant_tell",
    "check_gap",
    "check_growth",
    "check_head_rank",
    "check_locality",
    "check_localization",
    "check_probes",
    "check_removal",
    "check_scale",
    "check_skips",
    "check_uniformity",
    "cross_block_mean",
    "depth_drop",
    "difference",
    "finite_median",
    "head_locality",
    "make_check",
    "off_diagonal_mean",
    "run_tour",
]

if TYPE_CHECKING:  # the measurements need torch and pandas: imported when a tour runs, not for `report --help`
    from ..engine.context import Run
    from ..inputs.data import ImageSource
    from ..inputs.models import LoadedModel


def measures() -> dict:
    """Claim key -> its measurement in :mod:`vitlab.tour.measure` (imported here, on first use)."""
    from . import measure as M

    return {"cka": M.measure_uniformity, "distance": M.measure_locality, "heads": M.measure_head_rank,
            "receptive": M.measure_growth, "skips": M.measure_skips, "removal": M.measure_removal,
            "localization": M.measure_localization, "gap": M.measure_gap, "probes": M.measure_probes,
            "scale": M.measure_scale}


def run_tour(models: list[LoadedModel], source: ImageSource, opts: TourOptions, run: Run, *,
             planned: bool = True) -> TourReport:
    """Measure every claim on ``models`` (a ViT with a CLS token and a CNN among them) and ``source``; each
    check's user error (a missing model, data a model cannot read) becomes a "can't tell" row that says why.
    Each claim gets its interval chart and its paper-style figure, both from this one run. Under torchrun every
    check runs over the sharded runner (``run.shard``; ``vitlab.tour.measure``).

    ``planned``: first stream each model once over each image set with every statistic the checks need
    (``vitlab.tour.plan``; ``report.passes`` says what ran), so that the checks find them; ``False``: each check
    streams on its own, as before issue 48 (the benchmark's baseline and the equality test's reference)."""
    import pandas as pd

    from ..charts.evidence import estimate_chart
    from ..charts.tour import paper_chart

    keys = list(opts.only or ()) or list(CLAIMS)
    bad = [k for k in keys if k not in CLAIMS]
    if bad:
        raise VitlabError(f"unknown tour check(s) {', '.join(bad)}: choose from {', '.join(CLAIMS)}")
    from . import measure as M

    ms, measure = M.Models(models, opts.control), measures()
    passes = []
    if planned:
        from ..engine.memo import MemoStore
        from .plan import plan, run_passes

        run = replace(run, store=MemoStore(run.store))  # same info and shard; keeps the passes' entries (--no-cache)
        if run.progress:
            run.progress(0, len(keys), "one pass over each image set")
        todo, _ = plan(keys, ms, source, opts)
        passes = run_passes(todo, source, run)
    rows, charts, frames, figures, papers = [], {}, {}, {}, {}
    for k, key in enumerate(keys):
        claim = CLAIMS[key]
        if run.progress:
            run.progress(k, len(keys), claim.figure)
        error = None
        ms.used.clear()
        try:
            check, data, figure = measure[key](ms, source, opts, run.with_progress(_within(run.progress, k, len(keys),
                                                                                             claim.figure)))
        except VitlabError as e:
            error = str(e)
        error = _first_error(run, key, error)
        if error is not None:
            check, data, figure = cant_tell(key, error), [], {}
        # every row names its models and the images its statistic used, so a slide or a handout says what it
        # rests on (issue 37: Fig 6 reads its first rf_images, Fig 11 a probe pool, not the tour's images)
        untrained = ms.untrained_note(list(ms.used))
        if untrained and check.learned != "n.a.":  # NAME@random given: the learned question does not apply to it
            nan = float("nan")
            check = replace(check, learned="n.a.", learned_label=untrained, effect=nan, effect_lo=nan, effect_hi=nan,
                            twin=nan, twin_lo=nan, twin_hi=nan, effect_note="")
        images, batch_size, note = M.data_used(key, source, opts)
        check = replace(check, models="; ".join(ms.used), images=images, batches=-(-images // batch_size),
                        batch_size=batch_size, data_note=note)
        rows.append(check)
        frame = pd.DataFrame(data, columns=["label", "role", "value", "lo", "hi", "unit", "units", "interval"])
        frame.insert(0, "figure", claim.figure)
        frames[claim.figure] = frame
        figures[claim.figure] = figure
        charts[claim.figure] = estimate_chart(frame, f"{claim.figure}: pattern {check.pattern}, learned "
                                                     f"{check.learned}")
        paper = paper_chart(key, figure, claim.figure)
        if paper is not None:
            papers[claim.figure] = paper
    if run.progress:
        run.progress(len(keys), len(keys), "done")
    return TourReport(rows, charts, [m.label for m in models], run.info, frames, figures, papers, passes)


def _within(progress, k: int, n: int, figure: str):
    """The progress of check ``k`` of ``n``: the bar stays at the check, the words follow its steps ("Fig 5 (check 3
    of 10): zoo:vit-cls, batch 2 of 8"). None without a progress."""
    if progress is None:
        return None
    return lambda done, total, text: progress(k, n, f"{figure} (check {k + 1} of {n}): {text}")


def _first_error(run: Run, key: str, error: str | None) -> str | None:
    """Under torchrun a check that failed on any rank is "can't tell" on every rank, with the first rank's reason,
    so that all ranks go on to the next check together (one process: ``error`` itself)."""
    if run.shard[1] == 1:
        return error
    errors = run.gather_ordered([(run.shard[0], error)], f"outcome of tour check '{key}'")
    return next((e for e in errors if e is not None), None)
