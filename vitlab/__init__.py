"""vitlab: the analyses of Raghu et al. 2021 ("Do Vision Transformers See Like CNNs?") on any timm model.

The public surface; the app imports only from here (and the analysis modules listed below).

    spec ─parse_spec─► ModelSpec ─load─► LoadedModel ─taps.capture─► {tap: tensor}
    text ─open_source─► ImageSource ─select/plan_batches─► Batch
    run.stream(models, source, ...) ─► per-batch statistics (cached) ─► accumulators ─► results ─► charts

Analyses, one module each (every result has ``to_frame()``; ``vitlab.charts`` draws it):

    run.cka                       CKA between all layers of several models            Figs 1-2
    attention.attention_distance  per-head mean attention distance                    Figs 3-4
    attention.attention_map       per-head / per-token maps, rollout                  App. C
    heads.head_subsets            local vs global head subsets vs another model       Fig 5
    receptive.receptive_fields    effective receptive fields                          Fig 6
    skips.skip_ratios             skip-connection norm ratios, CLS vs spatial         Fig 7
    interventions.skip_removal    removing one block's skip (post-hoc ablation)        Fig 8
    localization.localization     token vs input-patch CKA, CLS vs GAP                Figs 9-10
    probes.probes                 few-shot linear probes per layer and token          Figs 11, 13
    checkpoints.compare_checkpoints  block-by-block CKA of two checkpoints             Fig 12
    tour                          the paper's claims checked on the results
    token_gradient.token_gradient  |dh_t/dx| of one token on one image, own-patch share
    token_localization.token_view  a token on your image: reference-set CKA, gradient, attention
    report.report                 the tour as one self-contained HTML file (vitlab report)
"""

from . import (activations, attention, checkpoints, cka, data, heads, interventions, localization, models, probes,
               receptive, report, run, skips, taps, token_gradient, token_localization, tour, zoo)
from .cache import Store
from .cka import CKAResult, MinibatchCKA
from .data import DataSpec, ImageSource, open_source, select, uploads_source
from .errors import VitlabError
from .models import PAPER_MODELS, LoadedModel, ModelSpec, load, parse_spec
from .run import CKAReport, GramStatistic, RunInfo, Statistic, stream

__version__ = "0.1.0"

__all__ = [
    "CKAReport", "CKAResult", "DataSpec", "GramStatistic", "ImageSource", "LoadedModel", "MinibatchCKA",
    "ModelSpec", "PAPER_MODELS", "RunInfo", "Statistic", "Store", "VitlabError", "activations", "attention",
    "checkpoints", "cka", "data", "heads", "interventions", "load", "localization", "models", "open_source",
    "parse_spec", "probes", "receptive", "report", "run", "select", "skips", "stream", "taps", "token_gradient",
    "token_localization", "tour", "uploads_source", "zoo",
]
