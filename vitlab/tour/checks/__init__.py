"""The paper's claims as checks that can fail (the pure part of ``vitlab.tour``): claims, checks, options, report.

Every claim gets two answers (issue 28). **pattern**: do these models show what the paper describes, against the
claim's own null (chance, uniform attention, zero, the other model)? "shown", "not shown" or "can't tell"
(:func:`vitlab.stats.evidence.verdict`: shown only when the statistic's interval clears the null's). **learned**: is it
more than the same architectures show untrained (the twins, ``NAME@random``)? "yes", "no", "can't tell", or "n.a."
where the comparison is between two trained models (Figs 8, 10, 12). The pure check functions below take estimates
(value and interval) and plain arrays; :func:`run_tour` measures them on models (``vitlab/tour/measure/``).

    report = tour.run_tour([vit, cnn], source, TourOptions(), Run(store=Store(), bootstrap=200, seed=0))
    report.to_frame()      # tour.csv: figure, claim, pattern, statistic, lo, hi, control, learned, twin, ...
    report.charts[figure]  # Altair: statistic and control with their 95 % intervals

Shapes: B resamples, L layers, H heads.

Split by claim family (``similarity``, ``attention``, ``receptive``, ``skips``, ``localization``, ``probes``), beside
the claims' words (``words``), the check core (``base``) and the report (``report``); every name is re-exported here.
"""

from .attention import check_locality, head_locality
from .base import Check, Learned, cant_tell, difference, make_check, too_few
from .localization import check_gap, check_localization
from .probes import check_probes
from .receptive import check_growth
from .report import GAP_PAIR, POOLING_TWINS, TOUR_BATCH, TOUR_BOOTSTRAP, TOUR_IMAGES, TOUR_SEED
from .report import TourOptions, TourReport
from .similarity import check_head_rank, check_removal, check_scale, check_uniformity
from .similarity import cross_block_mean, depth_drop, off_diagonal_mean
from .skips import check_skips, finite_median
from .words import CLAIMS, CONTROL_NOTES, GAP_CAVEAT, LEARNED, NOT_LEARNED, STATISTICS, Claim

__all__ = ["CLAIMS", "CONTROL_NOTES", "GAP_CAVEAT", "GAP_PAIR", "LEARNED", "NOT_LEARNED", "POOLING_TWINS", "STATISTICS",
           "TOUR_BATCH", "TOUR_BOOTSTRAP", "TOUR_IMAGES", "TOUR_SEED", "Check", "Claim", "Learned", "TourOptions",
           "TourReport", "cant_tell", "check_gap", "check_growth", "check_head_rank", "check_locality",
           "check_localization", "check_probes", "check_removal", "check_scale", "check_skips", "check_uniformity",
           "cross_block_mean", "depth_drop", "difference", "finite_median", "head_locality", "make_check",
           "off_diagonal_mean", "too_few"]
