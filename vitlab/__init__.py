"""vitlab: the analyses of Raghu et al. 2021 ("Do Vision Transformers See Like CNNs?") on any timm model.

The public surface; the app imports only from here.

    spec ─parse_spec─► ModelSpec ─load─► LoadedModel ─taps.capture─► {tap: tensor}
    text ─open_source─► ImageSource ─select/plan_batches─► Batch
    run.stream(models, source, ...) ─► per-batch statistics (cached) ─► accumulators ─► results ─► charts
"""

from . import cka, data, models, run, taps
from .cache import Store
from .cka import CKAResult, MinibatchCKA
from .data import DataSpec, ImageSource, open_source, select, uploads_source
from .errors import VitlabError
from .models import PAPER_MODELS, LoadedModel, ModelSpec, load, parse_spec
from .run import CKAReport, GramStatistic, RunInfo, Statistic, stream

__version__ = "0.1.0"

__all__ = [
    "CKAReport", "CKAResult", "DataSpec", "GramStatistic", "ImageSource", "LoadedModel", "MinibatchCKA",
    "ModelSpec", "PAPER_MODELS", "RunInfo", "Statistic", "Store", "VitlabError", "cka", "data", "load",
    "models", "open_source", "parse_spec", "run", "select", "stream", "taps", "uploads_source",
]
