"""Figs 9-10 (localization): how often a token best matches its own patch; CLS against GAP pooling."""

from __future__ import annotations

import numpy as np
import pandas as pd

import vitlab.tour.checks as T  # vitlab.tour.checks, not vitlab.tour: vitlab.tour imports this one

from ...analyses.localization import LocalizationStatistic, default_layers
from ...errors import VitlabError
from ...inputs import taps as taps_mod
from ...inputs.models import LoadedModel
from ...stats import cka as cka_mod
from ...stats import evidence as ev
from ...stats import leads
from .common import Models, Need, _indices, _jk, _needs, _point, _rows, _stream, pair_and_twins


def _loc_stat(m: LoadedModel) -> LocalizationStatistic:
    return LocalizationStatistic((default_layers(m.model)[-1],))  # the last default localization layer


def needs_localization(ms: Models, source, opts) -> list[Need]:
    ms.need("vit", "cnn")
    return _needs(pair_and_twins(ms), _loc_stat)


def _gap_pair(ms: Models, opts) -> tuple[list[LoadedModel], bool]:
    """Fig 10's [CLS model, GAP model] and whether they follow the tour's ViT."""
    (cls_spec, gap_spec), follows = opts.gap_models(ms._vit.label if ms._vit is not None else None)
    return [ms.get(cls_spec), ms.get(gap_spec)], follows


def needs_gap(ms: Models, source, opts) -> list[Need]:
    return _needs(_gap_pair(ms, opts)[0], _loc_stat)


def _localization(models: list[LoadedModel], source, opts, run):
    """Per model: (chance-corrected rate, raw rate, positions, :class:`~vitlab.stats.leads.LocalizationEvidence`,
    (defined cells, cells)) of its last default localization layer, and the token-by-position CKA maps of a spread
    of tokens (Figs 9-10)."""
    stats = [_loc_stat(m) for m in models]
    accs: list = [None] * len(models)
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        for k, (s, f) in enumerate(zip(stats, found)):
            a = f[s.name]
            if accs[k] is None:
                accs[k] = ev.BootstrapCKA([str(t) for t in range(a["tokens_0"].shape[0])],
                                          [str(g) for g in range(a["patches_0"].shape[0])])
            accs[k].update(cka_mod.centred(a["tokens_0"]), cka_mod.centred(a["patches_0"]), key=batch.index)
    if accs[0] is None:
        raise VitlabError("no batch of 4 or more readable images: localization needs at least 4 images"
                          + (" (on this rank: use fewer processes than batches)" if run.shard[1] > 1 else ""))
    run.reduce_accumulators(accs)
    _jk(accs[0])  # says so when no batch had enough images
    out, maps = [], []
    for m, acc, s in zip(models, accs, stats):
        prefix, positions = taps_mod.num_prefix_tokens(m.model), len(acc.layers_b)
        point = _point(acc)
        # each token's lead of its own position over the best other, with its interval over batches: the count and
        # its interval follow (near-ties widen it), no fixed half-step widening (vitlab.stats.leads, issue 50)
        loc = leads.from_terms(*acc.terms(), prefix)
        cells = point[prefix:]  # (G, G) spatial tokens by positions: (defined cells, all cells) for the words
        out.append((loc.corrected, loc.rate, positions, loc, (int(np.isfinite(cells).sum()), int(cells.size))))
        maps.append(_token_maps(m, s.layers[0], point, prefix, positions))
    return out, pd.concat(maps, ignore_index=True)


def _token_maps(m: LoadedModel, layer: str, cka: np.ndarray, prefix: int, positions: int,
                count: int = 4) -> pd.DataFrame:
    """CKA of ``count`` spatial tokens (a spread over the grid) with every input position (Figs 9-10's maps)."""
    side = round(np.sqrt(positions))
    tokens = sorted({int(t) for t in np.linspace(0, positions - 1, count)})
    rows = []
    for t in tokens:
        for g in range(positions):
            rows.append({"model": m.label, "layer": layer, "token": t, "panel": f"{m.label}: token {t}",
                         "row": g // side, "col": g % side, "value": float(cka[prefix + t, g]), "own": g == t})
    return pd.DataFrame(rows)


def _loc_text(m: LoadedModel, r) -> str:
    corr, raw, g = r[:3]
    if not np.isfinite(raw.value):  # no token has a defined cell: the rate is undefined, not chance (issue 39)
        defined, cells = r[4]
        return (f"{m.label} last layer: no token has a best-matching patch, {cells - defined} of its {cells} "
                f"token-by-position CKA cells are undefined (features constant over the images, e.g. identical "
                f"images)")
    loc = r[3]
    ties = loc.tie_words()
    return (f"{m.label} last layer: {loc.localized} of {loc.counted} tokens ({raw.value:.0%}) best matched at their "
            f"own patch (chance {ev.chance_level(g):.0%} on {g} positions), chance-corrected {corr.text('.2f')}"
            + (f"; {ties}" if ties else "")
            # a mean of maxima is biased low at few images (its jackknife t covered 92 % at 64/16, bench/coverage_real.py)
            + f"; mean lead of a token's own position over its best other {loc.lead.value:.3f} CKA (descriptive: no "
              f"interval)")


def measure_localization(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    models = pair_and_twins(ms)
    r, maps = _localization(models, source, opts, run)
    # ViT − CNN of two chance-corrected rates: every difference their intervals allow (each a set of counts)
    effect = leads.interval_difference(r[0][0], r[1][0])
    twin = leads.interval_difference(r[2][0], r[3][0]) if len(r) > 2 else None
    detail = f"{_loc_text(ms.vit, r[0])}; {_loc_text(ms.cnn, r[1])}"
    rows = [("ViT", "statistic", r[0][0]), ("CNN", "control", r[1][0])]
    if twin is not None:
        detail += f"; ViT − CNN {effect.text('.2f')}, untrained twins {twin.text('.2f')}"
        rows += [("ViT − CNN", "effect", effect), ("untrained twins: ViT − CNN", "twin", twin)]
    rows = _rows(*rows)
    return T.check_localization(r[0][0], r[1][0], detail, effect, twin), rows, {"maps": maps}


def measure_gap(ms: Models, source, opts, run):
    (cls, gap), follows = _gap_pair(ms, opts)
    r, maps = _localization([cls, gap], source, opts, run)
    detail = f"{_loc_text(cls, r[0])}; {_loc_text(gap, r[1])}"
    # timm's avg pooling moves the final LayerNorm into fc_norm, after pooling, unless built with fc_norm=False
    norm_moved = type(getattr(gap.model, "fc_norm", None)).__name__ not in ("NoneType", "Identity")
    note = (f"Control: {gap.label}, the same ViT trained with global average pooling; both are trained, so untrained "
            f"twins do not apply." + ("" if follows or ms._vit is None else
                                       f" {ms._vit.label} has no pooling-only zoo twin: this check uses the zoo pair "
                                       f"{cls.label} and {gap.label}, not the tour's ViT."))
    return T.check_gap(r[0][0], r[1][0], detail, norm_moved, note), _rows(("CLS model", "statistic", r[0][0]),
                                                                    ("GAP model", "control", r[1][0])), {"maps": maps}
