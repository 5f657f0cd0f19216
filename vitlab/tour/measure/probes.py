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


def _probe_margins(m: LoadedModel, source, opts, run) -> tuple[np.ndarray, list[str], pd.DataFrame]:
    """Per few-shot draw: min(GAP − CLS at the first layer, CLS gain first → last); features extracted once.
    Also the probe curves: accuracy per block and representation, mean over the draws with its t interval."""
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
    rows = []
    for (rep, i) in accs[0]:
        e = ev.mean_estimate(np.array([a[rep, i] for a in accs]), "draws")
        rows.append({"model": m.label, "layer": layers[i], "index": i, "depth": (i + 1) / len(layers),
                     "representation": rep, "accuracy": e.value, "accuracy_lo": e.lo, "accuracy_hi": e.hi,
                     "draws": len(accs)})
    return margins, texts, pd.DataFrame(rows)


def draw_margins(x: dict[str, np.ndarray], y: np.ndarray, layers, classes: int, draws: int, shots: int, test: int,
                 seed: int) -> tuple[np.ndarray, list[str], list[dict]]:
    """Fig 11's margin per few-shot draw d (``draw_split`` seeded ``seed + d``) from the pool's features ``x``
    ('cls|TAP', 'gap|TAP': (n, D)) and labels ``y`` (n,): min(GAP − CLS at the first layer, CLS gain first → last);
    with each draw's words and accuracies."""
    from ...analyses import probes

    margins, texts, accs = [], [], []
    for d in range(draws):
        parts = dict(zip(("train", "val", "test"), draw_split(y, shots, test, seed + d)))
        acc = {(rep, i): probes._probe_one({p: x[f"{rep}|{tap}"][ix] for p, ix in parts.items()},
                                           {p: y[ix] for p, ix in parts.items()}, classes)[0]
               for rep in ("cls", "gap") for i, tap in enumerate(layers)}
        last = len(layers) - 1
        margins.append(min(acc["gap", 0] - acc["cls", 0], acc["cls", last] - acc["cls", 0]))
        texts.append(f"CLS {acc['cls', 0]:.0%}→{acc['cls', last]:.0%}, GAP {acc['gap', 0]:.0%}→"
                     f"{acc['gap', last]:.0%} ({layers[0]} → {layers[-1]})")
        accs.append(acc)
    return np.array(margins), texts, accs


def margin_estimate(margins: np.ndarray, test: int, draws: int) -> Estimate:
    """Fig 11's statistic: the mean margin over the draws with its t interval; a difference of accuracies lies in
    [−1, 1] and an accuracy moves in steps of one test image per draw."""
    return ev.mean_estimate(margins, "draws", bounds=(-1.0, 1.0), resolution=1.0 / (test * max(1, draws)))


def measure_probes(ms: Models, source, opts, run):
    ms.need("vit")
    models = _vit_and_twin(ms)
    ests, first_text, curves = [], "", []
    for m in models:
        margins, texts, curve = _probe_margins(m, source, opts, run)
        ests.append(margin_estimate(margins, opts.probe_test, opts.probe_draws))
        first_text = first_text or f"{m.label}, first draw: {texts[0]}"
        curves.append(curve)
    detail = (f"margin min(GAP − CLS at the first layer, CLS gain first → last) over {opts.probe_draws} few-shot "
              f"draws ({opts.probe_shots} shots): {ests[0].text()}; {first_text}")
    twin = ests[1] if len(ests) > 1 else None
    rows = _rows(("margin", "statistic", ests[0]), ("no margin", "control", Estimate.exact(0.0)),
                 *([("untrained twin", "twin", twin)] if twin else []))
    return T.check_probes(ests[0], twin, detail), rows, {"probes": pd.concat(curves, ignore_index=True)}
