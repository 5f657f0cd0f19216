"""Figs 1-2, 8 and 12 (CKA): uniformity of a ViT's layers, removing a skip, data scale against another seed."""

from __future__ import annotations

import numpy as np
import pandas as pd

import vitlab.tour.checks as T  # vitlab.tour.checks, not vitlab.tour: vitlab.tour imports this one

from ...engine.run import GramStatistic
from ...errors import VitlabError
from ...stats import cka as cka_mod
from ...stats import evidence as ev
from ...stats.evidence import Estimate
from .common import (CKA_DIFF, CKA_RANGE, Models, Need, _cka_frame, _indices, _jack, _jk, _needs, _point, _rows,
                     _self_cka, _stream, _zoo_control_note, pair_and_twins)


def _gram(m) -> GramStatistic:
    return GramStatistic()  # the default taps' Grams: self-CKA (Figs 1-2, 8) and cross-model CKA (Fig 12)


def needs_uniformity(ms: Models, source, opts) -> list[Need]:
    ms.need("vit", "cnn")
    return _needs(pair_and_twins(ms), _gram)


def measure_uniformity(ms: Models, source, opts, run):
    ms.need("vit", "cnn")
    pair = [ms.vit, ms.cnn]
    twins = [ms.twin(m) for m in pair] if ms.control == "random" else []
    accs = _self_cka(pair + twins, source, opts, run)
    idx = _jk(accs[0])
    point = [float(T.off_diagonal_mean(_point(a))) for a in accs]
    loo = [T.off_diagonal_mean(a.replicates(idx)) for a in accs]
    unif = [uniformity_estimate(p, r) for p, r in zip(point, loo)]
    g = uniformity_estimate(point[0] - point[1], loo[0] - loo[1], gap=True)
    tg = uniformity_estimate(point[2] - point[3], loo[2] - loo[3], gap=True) if twins else None
    detail = (f"mean CKA between different layers: {ms.vit.label} {unif[0].text()}, {ms.cnn.label} {unif[1].text()}"
              + (f"; untrained: {twins[0].label} {unif[2].text()}, {twins[1].label} {unif[3].text()}" if twins else ""))
    rows = _rows(("ViT − ResNet", "statistic", g), ("no gap", "control", Estimate.exact(0.0)),
                 *([("twins: ViT − ResNet", "twin", tg)] if tg else []),
                 *[(m.label, "detail", u) for m, u in zip(pair + twins, unif)])
    figure = {"cka": pd.concat([_cka_frame(m, a) for m, a in zip(pair + twins, accs)], ignore_index=True)}
    note = None
    if twins:
        note = (f"Control, the app's own and not the paper's: the untrained twins. An untrained ViT's layers are "
                f"nearly all alike, mean CKA {unif[2].text()} against {unif[0].text()} trained, so uniformity alone "
                f"is not learned: the learned answer asks whether the trained gap, {g.text()}, exceeds the untrained "
                f"twins' gap, {tg.text()}.")
    return T.check_uniformity(g, tg, detail, note), rows, figure


def uniformity_estimate(value: float, loo: np.ndarray, gap: bool = False) -> Estimate:
    """Figs 1-2's interval of a mean off-diagonal self-CKA (``gap``: a difference of two, ViT − ResNet) from its
    (T,) leave-one-batch-out values: Tukey's jackknife t on the logit scale of [0, 1] ([−1, 1] for a gap), centred on
    the mean of the pseudo-values, the jackknife's bias-corrected estimate; the value shown stays the plain one. Each
    layer pair's CKA is a ratio of sums, biased at few batches: centred on the plain value, the untrained twins' gap
    covered 92.9 % at 4 batches of 16 images, its misses leaning below (bench/coverage_real.py, docs/evidence.md)."""
    return _jack(value, loo, bounds=CKA_DIFF if gap else CKA_RANGE, bias_corrected=True)


def _removal_models(ms: Models, opts) -> list:
    """Fig 8's [retrained without the skip, with it]."""
    if len(opts.noskip) != 2:
        raise VitlabError(f"--noskip takes two models (with the skip, retrained without it), not {len(opts.noskip)}")
    normal, noskip = ms.get(opts.noskip[0]), ms.get(opts.noskip[1])  # in this order: Check.models names them so
    return [noskip, normal]


def needs_removal(ms: Models, source, opts) -> list[Need]:
    return _needs(_removal_models(ms, opts), _gram)


def measure_removal(ms: Models, source, opts, run):
    noskip, normal = _removal_models(ms, opts)
    accs = _self_cka([noskip, normal], source, opts, run)
    idx = _jk(accs[0])
    est = [removal_estimate(_point(a), a.replicates(idx), a.layers_a, opts.noskip_block) for a in accs]
    blocks = [int(t.split(".")[1]) for t in accs[0].layers_a]
    detail = (f"mean self-CKA between layers before and after block {opts.noskip_block}: {noskip.label} (retrained "
              f"without its skips) {est[0].text()}, {normal.label} {est[1].text()}")
    figure = {"cka": pd.concat([_cka_frame(m, a) for m, a in zip([noskip, normal], accs)], ignore_index=True),
              "block": opts.noskip_block, "blocks": len(set(blocks))}
    note = (f"Control: {normal.label}, the same recipe trained with its skips; both are trained, so untrained twins "
            f"do not apply." + _zoo_control_note(ms, [normal, noskip]))
    return T.check_removal(est[0], est[1], opts.noskip_block, detail, note), \
        _rows(("retrained without skips", "statistic", est[0]), ("with skips", "control", est[1])), figure


def removal_estimate(point: np.ndarray, loo: np.ndarray, layers: list[str], block: int) -> Estimate:
    """Fig 8's statistic of one model: its mean self-CKA between the layers ``layers`` ('blocks.B....') before and
    after ``block``, from its self-CKA map (L, L) and leave-one-batch-out maps (T, L, L), jackknife t in [0, 1]."""
    blocks = [int(t.split(".")[1]) for t in layers]
    return _jack(T.cross_block_mean(point, blocks, block), T.cross_block_mean(loo, blocks, block), bounds=CKA_RANGE)


def scale_excess(drop: dict, scale_pairs: list, seed_pair) -> tuple[Estimate, list, int]:
    """Fig 12's statistic from each pair's depth drop (value, leave-one-batch-out values): the smallest excess of a
    less-data pair's drop over the other-seed pair's (paired, the same leave-one-out sets), jackknife t in [−2, 2];
    with every pair's excess and the index of the smallest."""
    sd, sd_loo = drop[seed_pair]
    excess = [(drop[p][0] - sd, drop[p][1] - sd_loo) for p in scale_pairs]
    k = int(np.argmin([e[0] for e in excess]))
    # the smallest excess and its leave-one-out values; drops lie in [−1, 1], so their differences in [−2, 2]
    stat = _jack(min(e[0] for e in excess), np.min(np.stack([e[1] for e in excess]), axis=0), bounds=(-2.0, 2.0))
    return stat, excess, k


def pair_curve(point: np.ndarray, loo: np.ndarray) -> tuple[np.ndarray, tuple, tuple]:
    """Fig 12's block-by-block curve of one pair from its CKA map (L, L) and leave-one-out maps (T, L, L): (the
    diagonal, (drop, its leave-one-out values), (upper-half mean, its leave-one-out values))."""
    diag = np.diagonal(point)
    reps = np.diagonal(loo, axis1=-2, axis2=-1)
    return diag, (float(T.depth_drop(diag)), T.depth_drop(reps)), (float(_upper_mean(diag)), _upper_mean(reps))


def _upper_mean(curve: np.ndarray) -> np.ndarray:
    """(..., L) block-by-block CKA -> (...) mean over the upper half of the layers."""
    c = np.asarray(curve, dtype=np.float64)
    return np.nanmean(c[..., max(1, c.shape[-1] // 2):], -1)


def _scale_specs(opts) -> list[str]:
    """Fig 12's models: every model of the less-data pairs and of the other-seed pair, each once."""
    pairs = list(dict.fromkeys(opts.pairs() + [opts.seed_control()]))
    return list(dict.fromkeys(s for pair in pairs for s in pair))


def needs_scale(ms: Models, source, opts) -> list[Need]:
    return _needs([ms.get(s) for s in _scale_specs(opts)], _gram)


def measure_scale(ms: Models, source, opts, run):
    """Fig 12 against another seed (issue 33): for each less-data pair, its depth drop (lower-half minus upper-half
    block-by-block CKA with the full-data model) minus the drop of the other-seed pair (same recipe and data,
    seed 1), all over the same batches (paired jackknife); the smallest excess over the less-data pairs is the
    statistic. Two separately trained ViTs diverge at the top anyway: a drop alone cannot isolate data scale."""
    scale_pairs = opts.pairs()
    seed_pair = opts.seed_control()
    all_pairs = list(dict.fromkeys(scale_pairs + [seed_pair]))
    specs = _scale_specs(opts)
    models = [ms.get(s) for s in specs]
    stats = [_gram(m) for m in models]
    accs = {(a, b): ev.BootstrapCKA(stats[specs.index(a)].taps(ms.get(a)), stats[specs.index(b)].taps(ms.get(b)))
            for a, b in all_pairs}
    for batch, found in _stream(models, source, _indices(source, opts), opts.batch_size, [[s] for s in stats], run):
        c = [cka_mod.centred(f["gram"]["grams"]) for f in found]
        for (a, b), acc in accs.items():
            acc.update(c[specs.index(a)], c[specs.index(b)], key=batch.index)
    run.reduce_accumulators(accs)
    idx = _jk(next(iter(accs.values())))
    drop, upper, curves = {}, {}, []
    for (a, b), acc in accs.items():
        diag, drop[a, b], upper[a, b] = pair_curve(_point(acc), acc.replicates(idx))
        curves.append(pd.DataFrame({"pair": f"{a} vs {b}", "layer": acc.layers_a, "index": np.arange(len(diag)),
                                    "depth": (np.arange(len(diag)) + 1) / len(diag), "cka": diag}))
    # excess drop of each less-data pair over the seed pair: paired, the same leave-one-batch-out sets
    stat, excess, k = scale_excess(drop, scale_pairs, seed_pair)
    ests = {p: _jack(v, r, bounds=CKA_DIFF) for p, (v, r) in drop.items()}
    ups = {p: _jack(v, r, bounds=CKA_RANGE) for p, (v, r) in upper.items()}
    seed_label = f"{seed_pair[0]} vs {seed_pair[1]}"
    texts = [f"{a} vs {b}: drop {ests[a, b].text()}, upper-half CKA {ups[a, b].text()}" for a, b in scale_pairs]
    detail = ("block-by-block CKA with the full-data model, lower-half mean minus upper-half mean (the drop): "
              + "; ".join(texts) + f"; other seed, {seed_label}: drop {ests[seed_pair].text()}, upper-half CKA "
              f"{ups[seed_pair].text()}; statistic: the smallest less-data drop minus the other seed's, "
              f"{stat.text()}")
    note = (f"Control, the app's own and not the paper's: {seed_pair[0]}, the same recipe and data with another seed. "
            f"Any two separately trained ViTs drift apart in their upper layers: its drop is {ests[seed_pair].text()} "
            f"and its upper-half CKA {ups[seed_pair].text()}, so less data must differ more than that."
            + _zoo_control_note(ms, models))
    rows = _rows(*[(f"{a} vs {b} minus other seed", "statistic" if i == k else "detail",
                    _jack(excess[i][0], excess[i][1], bounds=(-2.0, 2.0))) for i, (a, b) in enumerate(scale_pairs)],
                 ("no more than another seed", "control", Estimate.exact(0.0)),
                 *[(f"{a} vs {b}: drop", "detail", ests[a, b]) for a, b in all_pairs])
    return T.check_scale(stat, detail, note), rows, {"scale": pd.concat(curves, ignore_index=True)}
