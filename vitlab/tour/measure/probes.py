"""Fig 11 (linear probes): few-shot probes on the CLS token and the mean of the spatial tokens, first and last
block, over a probe pool of their own."""

from __future__ import annotations

import numpy as np
import pandas as pd

import vitlab.tour.checks as T  # vitlab.tour.checks, not vitlab.tour: vitlab.tour imports this one

from ...analyses.probes import draw_split
from ...errors import VitlabError
from ...inputs.models import LoadedModel
from ...stats import evidence as ev
from ...stats.evidence import Estimate
from .common import Models, Need, _probe_pool, _rows, _stream


def _labelled(source) -> None:
    if not source.has_labels:
        raise VitlabError(f"data source '{source.name}' has no labels: the probe check needs Fashion-MNIST, CIFAR "
                          "or a folder with one sub-folder per class")


def _probe_stat(m: LoadedModel):
    from ...analyses import probes

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
    and representation, mean over the draws with its t interval."""
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
    margins, texts, accs = draw_margins(x, y, layers, len(source.classes), opts.probe_draws, opts.probe_shots,
                                        opts.probe_test, run.seed)
    replicates = pool_jackknife(x, y, layers, len(source.classes), opts.probe_draws, opts.probe_shots,
                                opts.probe_test, run.seed)
    rows = []
    for (rep, i) in accs[0]:
        e = ev.mean_estimate(np.array([a[rep, i] for a in accs]), "draws")
        rows.append({"model": m.label, "layer": layers[i], "index": i, "depth": (i + 1) / len(layers),
                     "representation": rep, "accuracy": e.value, "accuracy_lo": e.lo, "accuracy_hi": e.hi,
                     "draws": len(accs)})
    return margins, replicates, texts, pd.DataFrame(rows)


POOL_T = "t"  # Fig 11's interval: a t interval over the draws plus the pool's variance (margin_variance)
POOL_GROUPS = 10  # groups of the probe pool's images, each left out in turn by Fig 11's interval (pool_jackknife)


def draw_parts(y: np.ndarray, draws: int, shots: int, test: int, seed: int) -> list[dict[str, np.ndarray]]:
    """The few-shot draws' index sets into the pool: draw d is ``draw_split(y, shots, test, seed + d)``."""
    return [dict(zip(("train", "val", "test"), draw_split(y, shots, test, seed + d))) for d in range(draws)]


def _accuracies(x: dict[str, np.ndarray], y: np.ndarray, parts: dict[str, np.ndarray], layers, classes: int,
                blocks) -> dict[tuple[str, int], float]:
    """Test accuracy of the CLS and GAP probes of one draw ``parts`` at the blocks ``blocks`` (indices into
    ``layers``)."""
    from ...analyses import probes

    return {(rep, i): probes._probe_one({p: x[f"{rep}|{layers[i]}"][ix] for p, ix in parts.items()},
                                        {p: y[ix] for p, ix in parts.items()}, classes)[0]
            for rep in ("cls", "gap") for i in blocks}


def _margin(acc: dict[tuple[str, int], float], last: int) -> float:
    return min(acc["gap", 0] - acc["cls", 0], acc["cls", last] - acc["cls", 0])


def draw_margins(x: dict[str, np.ndarray], y: np.ndarray, layers, classes: int, draws: int, shots: int, test: int,
                 seed: int) -> tuple[np.ndarray, list[str], list[dict]]:
    """Fig 11's margin per few-shot draw d (``draw_split`` seeded ``seed + d``) from the pool's features ``x``
    ('cls|TAP', 'gap|TAP': (n, D)) and labels ``y`` (n,): min(GAP − CLS at the first layer, CLS gain first → last);
    with each draw's words and accuracies."""
    margins, texts, accs = [], [], []
    last = len(layers) - 1
    for parts in draw_parts(y, draws, shots, test, seed):
        acc = _accuracies(x, y, parts, layers, classes, range(len(layers)))
        margins.append(_margin(acc, last))
        texts.append(f"CLS {acc['cls', 0]:.0%}→{acc['cls', last]:.0%}, GAP {acc['gap', 0]:.0%}→"
                     f"{acc['gap', last]:.0%} ({layers[0]} → {layers[-1]})")
        accs.append(acc)
    return np.array(margins), texts, accs


def pool_groups(n: int, groups: int, seed: int) -> np.ndarray:
    """(n,) group of each pool image: a ``default_rng(seed)`` permutation of 0 .. n − 1 modulo ``groups``, so the
    groups differ in size by at most one image."""
    if not 2 <= groups <= n:
        raise VitlabError(f"the pool jackknife needs between 2 and {n} groups of images, not {groups}")
    return np.random.default_rng(seed).permutation(n) % groups


def _test_hits(x: dict[str, np.ndarray], y: np.ndarray, parts: dict[str, np.ndarray], layers, classes: int,
               blocks) -> dict[tuple[str, int], np.ndarray]:
    """Per test image of one draw ``parts``: whether the CLS and GAP probes at the blocks ``blocks`` (indices into
    ``layers``) classify it right (their mean is ``_probe_one``'s test accuracy)."""
    from ...analyses import probes

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
    g = pool_groups(len(y), groups, seed)
    last = len(layers) - 1
    out = np.empty((groups, draws))
    for d, parts in enumerate(draw_parts(y, draws, shots, test, seed)):
        hits = _test_hits(x, y, parts, layers, classes, (0, last))
        for j in range(groups):
            keep = g[parts["test"]] != j
            out[j, d] = _margin({k: float(h[keep].mean()) if keep.any() else np.nan for k, h in hits.items()},
                                last)
    return out


def margin_variance(margins: np.ndarray, replicates: np.ndarray) -> tuple[float, float, float]:
    """(within, shared, df) of Fig 11's mean margin over D draws, whose variance is estimated as within + shared:

    - within = s² / D, s² the draws' sample variance: what the t interval over the draws alone had;
    - shared = C, the covariance of two draws' margins through the pool's images they both test on: the mean over
      pairs of draws d ≠ d' of the delete-a-group jackknife covariance (G − 1) / G · Σ_g (r_gd − r̄_d)(r_gd' − r̄_d')
      of :func:`pool_jackknife`'s (G, D) ``replicates``, floored at 0 (a covariance of two draws from one pool is a
      variance: Var(E[margin | pool]));
    - df = min(D − 1, G − 1), the conservative degrees of freedom of a sum of two variance estimates (the
      Behrens-Fisher problem's; Welch-Satterthwaite's would be larger).

    Why: given the pool the draws are independent, so Var(mean) = Var(E[margin | pool]) + E[Var(margin | pool)] / D.
    s² / D estimates the second part and misses the first, the covariance of two draws from one pool, because the
    draws share the pool's images (each takes 400 of the tour's 500): on real activations the t interval over 5
    draws covered 90 % (docs/evidence.md). With each draw's probes and split held fixed, the covariance through the
    test images two draws share is a covariance of means over the pool's images, which the jackknife over groups of
    them estimates. It is the larger part but not all of it: draws also share training and held-out images, whose
    effect on a refitted probe is far from additive, and a jackknife that refits the probes overstates it (the
    Efron-Stein bias; deleting training images also breaks the draws' shots per class). On the zoo the test part was
    60 % of the shared covariance, so the Welch-Satterthwaite t (df ≈ 7) covered 93.0 % and the conservative df
    95 % (bench/coverage_real_rf.py)."""
    margins = np.asarray(margins, dtype=np.float64)
    replicates = np.asarray(replicates, dtype=np.float64)
    d, g = len(margins), replicates.shape[0]
    if replicates.ndim != 2 or replicates.shape[1] != d or g < 2 or d < 2:
        raise VitlabError(f"Fig 11's interval needs (groups ≥ 2, {d}) pool-jackknife replicates of at least 2 draws, "
                          f"not {replicates.shape}")
    centred = replicates - replicates.mean(0)
    cov = (g - 1) / g * centred.T @ centred
    shared = max(0.0, float((cov.sum() - np.trace(cov)) / (d * (d - 1))))
    return float(margins.var(ddof=1)) / d, shared, float(min(d, g) - 1)


def margin_estimate(margins: np.ndarray, replicates: np.ndarray, test: int, draws: int) -> Estimate:
    """Fig 11's statistic: the mean margin over the draws, with the t interval of :func:`margin_variance` (the
    draws' spread plus the pool's own variance, from :func:`pool_jackknife`'s replicates). A difference of
    accuracies lies in [−1, 1] (the interval is cut to it) and an accuracy moves in steps of one test image per
    draw (an interval narrower than that is widened to it). Fewer than :data:`vitlab.stats.evidence.MIN_UNITS`
    draws: no interval."""
    margins = np.asarray(margins, dtype=np.float64)
    value = float(margins.mean())
    if len(margins) < ev.MIN_UNITS:
        return Estimate(value, np.nan, np.nan, "draws", len(margins), POOL_T)
    within, shared, df = margin_variance(margins, replicates)
    half = ev.t_quantile(0.5 + ev.LEVEL / 2, int(df)) * np.sqrt(within + shared)
    note = f"with the pool's own variance from a jackknife over {len(replicates)} groups of its images"
    e = Estimate(value, value - half, value + half, "draws", len(margins), POOL_T, note).clipped(-1.0, 1.0)
    return e.widened(1.0 / (test * max(1, draws)), (-1.0, 1.0))


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
