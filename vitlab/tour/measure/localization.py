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
from .common import Models, Need, _indices, _jack, _jk, _needs, _point, _rows, _stream, _vit_minus_cnn, pair_and_twins


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
    """Per model: (chance-corrected rate, raw rate, positions, loo corrected) of its last default localization
    layer, and the token-by-position CKA maps of a spread of tokens (Figs 9-10)."""
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
    idx = _jk(accs[0])
    out, maps = [], []
    for m, acc, s in zip(models, accs, stats):
        prefix, positions = taps_mod.num_prefix_tokens(m.model), len(acc.layers_b)
        point = _point(acc)
        rate, loo = ev.localized_rate(point, prefix), ev.localized_rate(acc.replicates(idx), prefix)
        corr_loo = ev.chance_corrected(loo, positions)
        low = float(ev.chance_corrected(0.0, positions))  # every token misplaced
        # a rate counts tokens: it moves in steps of 1/positions (1/(positions − 1) once chance-corrected)
        step = 1.0 / max(1, positions - 1)
        cells = point[prefix:]  # (G, G) spatial tokens by positions: (defined cells, all cells) for the words
        out.append((_jack(ev.chance_corrected(rate, positions), corr_loo, bounds=(low, 1.0), resolution=step),
                    _jack(rate, loo, bounds=(0.0, 1.0), resolution=1.0 / positions), positions, corr_loo,
                    (int(np.isfinite(cells).sum()), int(cells.size))))
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
    return (f"{m.label} last layer: {raw.value:.0%} of tokens best matched at their own patch (chance "
            f"{ev.chance_level(g):.0%} on {g} positions), chance-corrected {corr.text('.2f')}")


def measure_localization(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    models = pair_and_twins(ms)
    r, maps = _localization(models, source, opts, run)
    # ViT − CNN of two chance-corrected rates, each in [−1/(positions − 1), 1]
    lows = [float(ev.chance_corrected(0.0, x[2])) for x in r[:2]]
    effect, twin, detail, rows = _vit_minus_cnn(r, 3, (("ViT", "statistic", r[0][0]), ("CNN", "control", r[1][0])),
                                                f"{_loc_text(ms.vit, r[0])}; {_loc_text(ms.cnn, r[1])}",
                                                bounds=(lows[0] - 1.0, 1.0 - lows[1]),
                                                resolution=1.0 / max(1, r[0][2] - 1))
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
