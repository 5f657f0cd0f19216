"""Measuring the tour's checks on models (``vitlab.tour.run_tour`` calls one ``measure_*`` per claim): streams
of cached per-batch statistics, kept per batch (or per image) so that every statistic is resampled with the same
units as its control (paired intervals). Smooth statistics (CKA means, mean distances, ratios of sums, mean probe
margins) and Fig 5's rank correlation (issue 50: the percentile bootstrap undercovered at few batches) get the
jackknife-t interval over their units; a receptive-field radius (a quantile on the pixel grid) keeps the percentile
bootstrap (``vitlab.stats.evidence``).

Every measurement returns ``(Check, rows, figure)``: the check, the estimates drawn in the interval chart, and the
data of the paper-style figure (``vitlab.charts.tour``), all from the one run. A user error (a missing model, data
the model cannot read) turns into a "can't tell" row that says why, so one check never stops the tour.

Under torchrun every stream takes this rank's batches (``run.shard``); CKA terms come back in batch order through
``run.reduce_accumulators`` (``evidence.BootstrapCKA`` keyed by batch number) and per-batch or per-image values
through ``run.gather_ordered``, so every rank resamples exactly what a single process would.

The measurements live by claim family: ``similarity`` (Figs 1-2, 8, 12), ``attention`` (Figs 3-5), ``receptive``
(Fig 6), ``skips`` (Fig 7), ``localization`` (Figs 9-10), ``probes`` (Fig 11); ``common`` holds what they share.
"""

from __future__ import annotations

from ...analyses.probes import draw_split
from .attention import measure_head_rank, measure_locality, needs_head_rank, needs_locality
from .common import IMAGE_SETS, RF_BATCH, Models, Need, _jk, data_used, image_set
from .localization import measure_gap, measure_localization, needs_gap, needs_localization
from .probes import measure_probes, needs_probes
from .receptive import measure_growth
from .similarity import measure_removal, measure_scale, measure_uniformity, needs_removal, needs_scale, needs_uniformity
from .skips import measure_skips, needs_skips

# claim key -> the per-batch statistics its measurement streams (vitlab.tour.plan gathers them into one pass per model
# and image set); Fig 6 has none: its receptive fields need a backward pass per image, which no inference pass shares
NEEDS = {"cka": needs_uniformity, "distance": needs_locality, "heads": needs_head_rank, "skips": needs_skips,
         "removal": needs_removal, "localization": needs_localization, "gap": needs_gap, "probes": needs_probes,
         "scale": needs_scale}

__all__ = [
         "IMAGE_SETS",
         "NEEDS",
         "RF_BATCH",
         "Models",
         "Need",
         "_jk",
         "data_used",
         "draw_split",
         "image_set",
         "measure_gap",
         "measure_growth",
         "measure_head_rank",
         "measure_locality",
         "measure_localization",
         "measure_probes",
         "measure_removal",
         "measure_scale",
         "measure_skips",
         "measure_uniformity",
]
