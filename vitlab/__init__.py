"""vitlab: the analyses of Raghu et al. 2021 ("Do Vision Transformers See Like CNNs?") on any timm model.

The public surface; the app imports only from here (and the analysis modules).

    spec ─parse_spec─► ModelSpec ─load─► LoadedModel ─taps.capture─► {tap: tensor}
    text ─open_source─► ImageSource ─select/plan_batches─► Batch
    run.stream(models, source, stats, Run(...)) ─► per-batch statistics (cached) ─► accumulators ─► results

Every analysis is one row of ``vitlab.table.ANALYSES``: its engine function
``fn(models, source, opts, run: Run) -> result`` (``result.to_frame()``; ``vitlab.charts`` draws it), its options
dataclass, paper figure, charts and headline; the CLI, the app and the docs index are generated from that table
(``python -m vitlab.table --markdown`` prints it). ``tour`` checks the paper's claims against their controls;
``evidence`` gives every number its interval, null and reference (docs/evidence.md).
Beyond CKA: ``similarity`` (more measures, ``measures.MEASURES``), ``agreement`` (do they agree?),
``sensitivity`` (how one CKA value moves) and ``manymodels`` (models x models per depth).

Beyond the table: ``token_gradient`` (|dh_t/dx| of one token on one image, its own-patch share),
``token_localization`` (a token on your image: reference-set CKA map with its interval, gradient, attention) and
``report`` (the tour as one self-contained HTML file, ``vitlab report``); docs/uploads.md, docs/presenting.md.
"""

from .analyses import (ablation, attention, attribution, checkpoints, heads, interventions, localization, manymodels,
                       probes, receptive, sensitivity, similarity, skips, token_gradient, token_localization,
                       token_norms)
from .engine import activations, pipeline, run
from .inputs import data, hub, models, taps
from .stats import agreement, cka, evidence, measures
from . import options, table, tour, zoo
from .tour import report
from .table import ANALYSES, Analysis
from .inputs.cache import Store
from .stats.cka import CKAResult, MinibatchCKA
from .engine.context import Run, RunInfo
from .inputs.data import DataSpec, ImageSource, open_source, select, uploads_source
from .errors import VitlabError
from .inputs.models import PAPER_MODELS, LoadedModel, ModelSpec, load, parse_spec
from .engine.run import CKAOptions, CKAReport, GramStatistic, Statistic, stream

__version__ = "0.1.0"

__all__ = [
    "ANALYSES", "Analysis", "CKAOptions", "CKAReport", "CKAResult", "DataSpec", "GramStatistic", "ImageSource",
    "LoadedModel", "MinibatchCKA", "ModelSpec", "PAPER_MODELS", "Run", "RunInfo", "Statistic", "Store",
    "VitlabError", "ablation", "activations", "agreement", "attention", "attribution", "checkpoints",
    "cka", "data", "evidence", "heads", "hub", "interventions", "load", "localization", "manymodels", "measures",
    "models", "open_source", "options", "parse_spec", "pipeline", "probes", "receptive", "report", "run", "select",
    "sensitivity", "similarity", "skips", "stream", "table", "taps", "token_gradient", "token_localization", "token_norms",
    "tour", "uploads_source", "zoo",
]
