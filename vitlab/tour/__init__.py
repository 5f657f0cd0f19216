"""The paper tour: each claim of Raghu et al. 2021 checked on models against the control it needs, with 95 %
intervals, as "shown", "not shown" or "can't tell" (docs/evidence.md).

    report = tour.run_tour([vit, cnn], source, TourOptions(), Run(store=Store(), bootstrap=200, seed=0))
    report.to_frame()      # tour.csv: figure, claim, verdict, statistic, lo, hi, control, evidence
    report.rows            # Check records (figure, title, claim, verdict, statistic, lo, hi, control, ...)
    report.charts[figure]  # Altair: statistic and control with their 95 % intervals

The claims, checks, options and report live in ``tour_checks`` (pure); the measurements in ``tour_measure``.
"""

from __future__ import annotations

from . import measure as M
from ..engine.context import Run
from ..inputs.data import ImageSource
from ..errors import VitlabError
from ..inputs.models import LoadedModel
from .checks import (CLAIMS, GAP_CAVEAT, Check, Claim, TourOptions, TourReport, cant_tell, check_gap, check_growth,
                     check_head_rank, check_localization, check_locality, check_probes, check_removal, check_scale,
                     check_skips, check_uniformity, cross_block_mean, depth_drop, finite_median, head_locality,
                     make_check, off_diagonal_mean)

__all__ = ["CLAIMS", "GAP_CAVEAT", "Check", "Claim", "TourOptions", "TourReport", "cant_tell", "check_gap",
           "check_growth", "check_head_rank", "check_localization", "check_locality", "check_probes",
           "check_removal", "check_scale", "check_skips", "check_uniformity", "cross_block_mean", "depth_drop",
           "finite_median", "head_locality", "make_check", "off_diagonal_mean", "run_tour"]

MEASURES = {"cka": M.measure_uniformity, "distance": M.measure_locality, "heads": M.measure_head_rank,
            "receptive": M.measure_growth, "skips": M.measure_skips, "removal": M.measure_removal,
            "localization": M.measure_localization, "gap": M.measure_gap, "probes": M.measure_probes,
            "scale": M.measure_scale}


def run_tour(models: list[LoadedModel], source: ImageSource, opts: TourOptions, run: Run) -> TourReport:
    """Measure every claim on ``models`` (a ViT with a CLS token and a CNN among them) and ``source``; each
    check's user error (a missing model, data a model cannot read) becomes a "can't tell" row that says why.
    Under torchrun every check runs over the sharded runner (``run.shard``; ``vitlab.tour.measure``)."""
    import pandas as pd

    from ..charts.evidence import estimate_chart

    keys = list(opts.only or ()) or list(CLAIMS)
    bad = [k for k in keys if k not in CLAIMS]
    if bad:
        raise VitlabError(f"unknown tour check(s) {', '.join(bad)}: choose from {', '.join(CLAIMS)}")
    ms = M.Models(models, opts.control)
    rows, charts, frames = [], {}, {}
    for k, key in enumerate(keys):
        claim = CLAIMS[key]
        if run.progress:
            run.progress(k, len(keys), claim.figure)
        error = None
        try:
            check, data = MEASURES[key](ms, source, opts, run)
        except VitlabError as e:
            error = str(e)
        error = _first_error(run, key, error)
        if error is not None:
            check, data = cant_tell(key, error), []
        rows.append(check)
        frame = pd.DataFrame(data, columns=["label", "role", "value", "lo", "hi"])
        frame.insert(0, "figure", claim.figure)
        frames[claim.figure] = frame
        charts[claim.figure] = estimate_chart(frame, f"{claim.figure}: {claim.title} ({check.verdict})")
    if run.progress:
        run.progress(len(keys), len(keys), "done")
    return TourReport(rows, charts, [m.label for m in models], run.info, frames)


def _first_error(run: Run, key: str, error: str | None) -> str | None:
    """Under torchrun a check that failed on any rank is "can't tell" on every rank, with the first rank's reason,
    so that all ranks go on to the next check together (one process: ``error`` itself)."""
    if run.shard[1] == 1:
        return error
    errors = run.gather_ordered([(run.shard[0], error)], f"outcome of tour check '{key}'")
    return next((e for e in errors if e is not None), None)
