"""vitlab: the analyses of Raghu et al. 2021 ("Do Vision Transformers See Like CNNs?") on any timm model.

The public surface; the app imports only from here (and the analysis modules). The package is in layers, lowest
first (tests/test_import_direction.py): ``stats`` (kernels and float64 folds) < ``charts`` < ``inputs`` (models, taps,
images, data sources, cache) and ``zoo`` < ``engine`` (the one cached pass) < ``analyses`` (one module each) <
``tour`` < ``table`` (the table of analyses) < ``cli``.

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

Every name below is imported on first use (``vitlab.cka``, ``vitlab.load``, ``vitlab.run.cka``, ...), so that
``import vitlab`` and ``vitlab --help`` load neither torch nor timm.
"""

from __future__ import annotations

import importlib

# name -> (module, attribute in it; None: the module itself)
_PUBLIC: dict[str, tuple[str, str | None]] = {
    **{m: (f"vitlab.analyses.{m}", None) for m in (
        "ablation", "attention", "attention_views", "attribution", "checkpoints", "heads", "interventions",
        "localization", "logit_lens", "manymodels", "probes", "receptive", "sensitivity", "similarity", "skips",
        "token_gradient", "token_localization", "token_norms")},
    **{m: (f"vitlab.engine.{m}", None) for m in ("activations", "pipeline", "run")},
    **{m: (f"vitlab.inputs.{m}", None) for m in ("data", "folders", "hub", "models", "taps")},
    **{m: (f"vitlab.stats.{m}", None) for m in ("agreement", "cka", "evidence", "measures")},
    **{m: (f"vitlab.{m}", None) for m in ("options", "table", "tour", "zoo")},
    "report": ("vitlab.tour.report", None),
    **{n: ("vitlab.table", n) for n in ("ANALYSES", "Analysis")},
    "Store": ("vitlab.inputs.cache", "Store"),
    **{n: ("vitlab.stats.cka", n) for n in ("CKAResult", "MinibatchCKA")},
    **{n: ("vitlab.engine.context", n) for n in ("Run", "RunInfo")},
    **{n: ("vitlab.inputs.data", n) for n in ("DataSpec", "ImageSource", "open_source", "select", "uploads_source")},
    "VitlabError": ("vitlab.errors", "VitlabError"),
    **{n: ("vitlab.inputs.models", n) for n in ("PAPER_MODELS", "LoadedModel", "ModelSpec", "load", "parse_spec")},
    **{n: ("vitlab.engine.run", n) for n in ("CKAOptions", "CKAReport", "GramStatistic", "Statistic", "stream")},
}

__all__ = [*_PUBLIC]  # noqa: PLE0604 - the names above, listed once


def __getattr__(name: str):
    """A public name, imported on first use (PEP 562)."""
    if name == "__version__":  # the installed distribution's, else the checkout's pyproject.toml (vitlab.resources)
        from .resources import version

        globals()[name] = version()
        return globals()[name]
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'vitlab' has no attribute '{name}'") from None
    value = importlib.import_module(module)
    value = getattr(value, attr) if attr else value
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
