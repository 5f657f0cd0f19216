"""Fig 11 (linear probes): few-shot probes on the CLS token and the mean of the spatial tokens, first and last
block, over a probe pool of their own."""

from __future__ import annotations

import numpy as np
import pandas as pd

import vitlab.tour.checks as T  # vitlab.tour.checks, not vitlab.tour: vitlab.tour imports this one

from ...analyses import probes
from ...analyses.probes import draw_split
from ...errors import VitlabError
from ...inputs.models import LoadedModel
from ...stats.evidence import Estimate
from ...stats.pool import POOL_GROUPS, pool_estimate, pool_groups, pool_variance
from .common import Models, Need, _probe_pool, _rows, _stream


def _labelled(source) -> None:
    if not source.has_labels:
        raise VitlabError(f"data source '{source.name}' has no labels: the probe check needs Fashion-MNIST, CIFAR "
                          "or a folder with one sub-folder per class")


def _probe_stat(m: LoadedModel):
    # the claim compares the first and the last block
    return probes.ProbeFeatures(tuple(probes.default_layers(m.model)), ("cls", "gap"))


def _vit_and_twin(ms: Models) -> list[LoadedModel]:
    return [ms.vit] + ([ms.twin(ms.vit)] if ms.control == "random" else [])


def needs_probes(ms: Models, source, opts) -> list[Need]:
    ms.need("vit")
    _labelled(source)
    return [Need(m, "probes", _probe_stat(m)) for m in _vit_and_twin(ms)]


def _probe_margins(m: LoadedModel, source, opts, run) -> tuple[np.ndarray, np.ndarray, list[str], pd.DataFrame]:
    """Per few-shot draw: min(GAP − CLS at the first layer, CLS gain first → last); features extracted once. Also
    the pool jackknife's replicates of their mean (:func:`pool_jackknife`) and the probe curves: accuracy per block
    and representation, mean over the draws with the same pool-aware t interval as the Linear probes page's."""
    _labelled(source)
    stat = _probe_stat(m)
    layers = stat.layers
    feats: dict[str, list] = {}
    labels: list = []
    pool = _probe_pool(source, opts)
    kept = [(batch.index, (f[0][stat.name], list(batch.labels)))
            for batch, f in _stream([m], source, pool, opts.batch_size, [[stat]], run)]
    for values, batch_labels in run.gather_ordered(kept, "probe features"):  # every rank's, in batch order
        for key, v in values.items():
            feats.setdefault(key, []).append(v)
        labels += batch_labels
    x = {k: np.concatenate(v) for k, v in feats.items()}
    y = np.array(labels)
    hits = draw_hits(x, y, layers, len(source.classes), opts.probe_draws, opts.probe_shots, opts.probe_test,
                     run.seed)
    margins, texts, _ = _margins_of(hits, layers)
    replicates = margin_replicates(hits, y, layers, opts.probe_draws, opts.probe_shots, opts.probe_test, run.seed)
    curves = probe_curves(m.label, layers, hits, y, opts.probe_draws, opts.probe_shots, opts.probe_test, run.seed)
    return margins, replicates, texts, curves


def probe_curves(label: str, layers, hits: list[dict[tuple[str, int], np.ndarray]], y: np.ndarray, draws: int,
                 shots: int, test: int, seed: int) -> pd.DataFrame:
    """Fig 11's curves from :func:`draw_hits`'s ``hits``: accuracy per block and representation, the mean over the
    draws with the Linear probes page's interval (``probes.accuracy_estimate``: the pool's own variance too, from
    :data:`POOL_GROUPS` groups of the pool's images seeded ``seed``)."""
    groups = pool_groups(len(y), POOL_GROUPS, seed)
    test_groups = [groups[p["test"]] for p in draw_parts(y, draws, shots, test, seed)]
    rows = []
    for (rep, i) in hits[0]:
        e = probes.accuracy_estimate([h[rep, i] for h in hits], test_groups, POOL_GROUPS)
        rows.append({"model": label, "layer": layers[i], "index": i, "depth": (i + 1) / len(layers),
                     "representation": rep, "accuracy": e.value, "accuracy_lo": e.lo, "accuracy_hi": e.hi,
                     "draws": len(hits)})
    return pd.DataFrame(rows)


def draw_parts(y: np.ndarray, draws: int, shots: int, test: int, seed: int) -> list[dict[str, np.ndarray]]:
    """The few-shot draws' index sets into the pool: draw d is ``draw_split(y, shots, test, seed + d)``."""
    return [dict(zip(("train", "val", "test"), draw_split(y, shots, test, seed + d))) for d in range(draws)]


def _margin(acc: dict[tuple[str, int], float], last: int) -> float:
    return min(acc["gap", 0] - acc["cls", 0], acc["cls", last] - acc["cls", 0])


def draw_hits(x: dict[str, np.ndarray], y: np.ndarray, layers, classes: int, draws: int, shots: int, test: int,
              seed: int) -> list[dict[tuple[str, int], np.ndarray]]:
    """Per few-shot draw d (``draw_split`` seeded ``seed + d``) from the pool's features ``x`` ('cls|TAP',
    'gap|TAP': (n, D)) and labels ``y`` (n,): each block's CLS and GAP probe's hits on the draw's test images."""
    return [_test_hits(x, y, parts, layers, classes, range(len(layers)))
            for parts in draw_parts(y, draws, shots, test, seed)]


def _margins_of(hits: list[dict[tuple[str, int], np.ndarray]], layers) -> tuple[np.ndarray, list[str], list[dict]]:
    margins, texts, accs = [], [], []
    last = len(layers) - 1
    for h in hits:
        acc = {k: float(v.mean()) for k, v in h.items()}
        margins.append(_margin(acc, last))
        texts.append(f"CLS {acc['cls', 0]:.0%}→{acc['cls', last]:.0%}, GAP {acc['gap', 0]:.0%}→"
                     f"{acc['gap', last]:.0%} ({layers[0]} → {layers[-1]})")
        accs.append(acc)
    return np.array(margins), texts, accs


def draw_margins(x: dict[str, np.ndarray], y: np.ndarray, layers, classes: int, draws: int, shots: int, test: int,
                 seed: int) -> tuple[np.ndarray, list[str], list[dict]]:
    """Fig 11's margin per few-shot draw (:func:`draw_hits`): min(GAP − CLS at the first layer, CLS gain first →
    last); with each draw's words and accuracies."""
    return _margins_of(draw_hits(x, y, layers, classes, draws, shots, test, seed), layers)


def _test_hits(x: dict[str, np.ndarray], y: np.ndarray, parts: dict[str, np.ndarray], layers, classes: int,
               blocks) -> dict[tuple[str, int], np.ndarray]:
    """Per test image of one draw ``parts``: whether the CLS and GAP probes at the blocks ``blocks`` (indices into
    ``layers``) classify it right (their mean is ``_probe_one``'s test accuracy)."""
    out = {}
    for rep in ("cls", "gap"):
        for i in blocks:
            xs = {p: x[f"{rep}|{layers[i]}"][ix] for p, ix in parts.items()}
            probe = probes.fit(xs["train"], y[parts["train"]], classes)
            l2, _ = probes.select_l2(probe, xs["val"], y[parts["val"]])
            out[rep, i] = np.argmax(probe.design(xs["test"]) @ probe.weights(l2), axis=1) == y[parts["test"]]
    return out


def pool_jackknife(x: dict[str, np.ndarray], y: np.ndarray, layers, classes: int, draws: int, shots: int, test: int,
                   seed: int, groups: int = POOL_GROUPS) -> np.ndarray:
    """(groups, draws) delete-a-group jackknife replicates of Fig 11's margins over the pool's images: replicate
    (g, d) is draw d's margin with the images of group g (:func:`pool_groups`) left out of its test images, the
    probes as fitted on the whole draw (first and last block only: the margin reads no other)."""
    last = len(layers) - 1
    hits = [_test_hits(x, y, parts, layers, classes, (0, last)) for parts in draw_parts(y, draws, shots, test, seed)]
    return margin_replicates(hits, y, layers, draws, shots, test, seed, groups)


def margin_replicates(hits: list[dict[tuple[str, int], np.ndarray]], y: np.ndarray, layers, draws: int, shots: int,
                      test: int, seed: int, groups: int = POOL_GROUPS) -> np.ndarray:
    """:func:`pool_jackknife`'s replicates from probes already fitted (:func:`draw_hits`: each draw's hits on its
    test images), so that the tour fits each draw's probes once."""
    g = pool_groups(len(y), groups, seed)
    last = len(layers) - 1
    out = np.empty((groups, draws))
    for d, parts in enumerate(draw_parts(y, draws, shots, test, seed)):
        ends = {k: hits[d][k] for k in (("cls", 0), ("gap", 0), ("cls", last), ("gap", last))}
        for j in range(groups):
            keep = g[parts["test"]] != j
            out[j, d] = _margin({k: float(h[keep].mean()) if keep.any() else np.nan for k, h in ends.items()},
                                last)
    return out


margin_variance = pool_variance  # Fig 11's name for it: (within, shared, df) of the mean margin over the draws
"""Fig 11's (within, shared, df): :func:`vitlab.stats.pool.pool_variance` of the margins and :func:`pool_jackknife`'s
replicates. The shared part here is the covariance through the test images two draws share; on the zoo it was 60 %
of the draws' whole shared covariance (the rest comes through their training and held-out images), so the
Welch-Satterthwaite t (df ≈ 7) covered 93.0 % and the conservative df 95 % (bench/coverage_real_rf.py)."""


def margin_estimate(margins: np.ndarray, replicates: np.ndarray, test: int, draws: int) -> Estimate:
    """Fig 11's statistic: the mean margin over the draws, with the t interval of :func:`margin_variance` (the
    draws' spread plus the pool's own variance, from :func:`pool_jackknife`'s replicates;
    :func:`vitlab.stats.pool.pool_estimate`). A difference of accuracies lies in [−1, 1] (the interval is cut to it)
    and an accuracy moves in steps of one test image per draw (an interval narrower than that is widened to it).
    Fewer than :data:`vitlab.stats.evidence.MIN_UNITS` draws: no interval."""
    return pool_estimate(margins, replicates, (-1.0, 1.0), 1.0 / (test * max(1, draws)))


def measure_probes(ms: Models, source, opts, run):
    ms.need("vit")
    models = _vit_and_twin(ms)
    ests, first_text, curves = [], "", []
    for m in models:
        margins, replicates, texts, curve = _probe_margins(m, source, opts, run)
        ests.append(margin_estimate(margins, replicates, opts.probe_test, opts.probe_draws))
        first_text = first_text or f"{m.label}, first draw: {texts[0]}"
        curves.append(curve)
    detail = (f"margin min(GAP − CLS at the first layer, CLS gain first → last) over {opts.probe_draws} few-shot "
              f"draws ({opts.probe_shots} shots): {ests[0].text()}; {first_text}")
    twin = ests[1] if len(ests) > 1 else None
    rows = _rows(("margin", "statistic", ests[0]), ("no margin", "control", Estimate.exact(0.0)),
                 *([("untrained twin", "twin", twin)] if twin else []))
    return T.check_probes(ests[0], twin, detail), rows, {"probes": pd.concat(curves, ignore_index=True)}
