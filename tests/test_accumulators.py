"""One accumulator contract, checked on every accumulator of the engine:

- streaming equals an independent one-shot computation over all batches (written here, in float64);
- batch order does not matter;
- ``merge(a, b)`` equals updating over both (shards, cached batches);
- the state survives a round trip through the cache's serialisation, exactly;
- where the state is declared a sum (``vitlab.dist`` then adds ranks' states with one all-reduce), the merged
  state is the elementwise sum of the parts' states.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from vitlab import attention, cka, interventions, receptive, skips
from vitlab.engine import dist
from vitlab.inputs.cache import pack, unpack

from .reference import hsic1_song


@dataclass
class Case:
    make: Callable[[], object]  # a fresh accumulator
    batches: Callable[[np.random.Generator], list[tuple]]  # the arguments of each update
    value: Callable[[object], dict]  # what the accumulator reports (compared across orders and merges)
    one_shot: Callable[[list[tuple]], dict]  # the same, computed directly from all batches


def _update(acc, batches: list[tuple]):
    for args in batches:
        acc.update(*args)
    return acc


# ---------------------------------------------------------------- MinibatchCKA: Song's unbiased HSIC per batch


def _grams(rng, n: int, layers: int = 3) -> np.ndarray:
    feats = [rng.normal(size=(n, 7)) + 3.0 for _ in range(layers)]  # a large common mean, as real activations
    return np.stack([cka.gram(torch.as_tensor(f), dtype=torch.float64).numpy() for f in feats])


def _cka_reference(batches) -> dict:
    ga = [a for a, _ in batches]
    gb = [b for _, b in batches]
    la, lb = ga[0].shape[0], gb[0].shape[0]
    xy = np.array([[sum(hsic1_song(a[i].astype(np.float64), b[j].astype(np.float64)) for a, b in zip(ga, gb))
                    for j in range(lb)] for i in range(la)])
    xx = np.array([sum(hsic1_song(a[i].astype(np.float64), a[i].astype(np.float64)) for a in ga) for i in range(la)])
    yy = np.array([sum(hsic1_song(b[j].astype(np.float64), b[j].astype(np.float64)) for b in gb) for j in range(lb)])
    return {"cka": xy / np.sqrt(np.outer(xx, yy)), "batches": len(batches),
            "images": sum(a.shape[-1] for a in ga)}


class _CKA(cka.MinibatchCKA):
    def __init__(self):
        super().__init__(["a0", "a1", "a2"], ["b0", "b1"])

    def update(self, ga, gb):  # the runner's fold: each batch's Grams centred, then added
        super().update(cka.centred(ga), cka.centred(gb))


CKA = Case(
    make=_CKA,
    batches=lambda rng: [(_grams(rng, n), _grams(rng, n, 2)) for n in (8, 11, 6, 9)],
    value=lambda acc: (lambda r: {"cka": r.cka, "batches": acc.batches, "images": acc.images})(acc.compute()),
    one_shot=_cka_reference,
)


# ---------------------------------------------------------------- skip ratios: sums per image, max identity error


def _skip_stat(rng, s=3, n=5, count=4) -> dict:
    return {"ratio_sum": rng.random((s, n)) * count, "cos_sum": rng.random((s, n)), "identity_err": rng.random(s),
            "count": np.array([count])}


SKIPS = Case(
    make=lambda: skips.SkipAccumulator(["a", "b", "c"]),
    batches=lambda rng: [(_skip_stat(rng, count=c),) for c in (4, 2, 5, 3)],
    value=lambda acc: (lambda r: {"ratio": r.ratio, "cosine": r.cosine, "identity_err": r.identity_err,
                                  "images": r.images})(acc.compute("m", 1, "vit")),
    one_shot=lambda bs: {"ratio": sum(b[0]["ratio_sum"] for b in bs) / 14, "cosine": sum(b[0]["cos_sum"] for b in bs)
                         / 14, "identity_err": np.max([b[0]["identity_err"] for b in bs], axis=0), "images": 14},
)


# ---------------------------------------------------------------- attention distance: mean and spread over images


def _distances(rng, b: int) -> dict:
    return {"raw": rng.random((3, 4, b)) * 50, "renorm": rng.random((3, 4, b)) * 60}


def _distance_value(acc) -> dict:
    out = {}
    for renorm in (False, True):
        r = acc.compute("m", 160.0, renorm)
        out[f"mean{renorm}"], out[f"std{renorm}"] = r.distance_px, r.std_px
    return out


def _distance_reference(bs) -> dict:
    out = {}
    for renorm, kind in ((False, "raw"), (True, "renorm")):
        allv = np.concatenate([b[0][kind] for b in bs], -1)
        out[f"mean{renorm}"], out[f"std{renorm}"] = allv.mean(-1), allv.std(-1)
    return out


DISTANCE = Case(
    make=lambda: attention.AttentionDistanceAccumulator([0, 1, 2], 4),
    batches=lambda rng: [(_distances(rng, b),) for b in (5, 3, 7, 1)],
    value=_distance_value,
    one_shot=_distance_reference,
)


# ---------------------------------------------------------------- prediction counts: accuracy and agreement


def _counts(bs) -> dict:
    before, after, y = (np.concatenate([b[i] for b in bs]) for i in range(3))
    return {"counts": np.array([len(y), (before == y).sum(), (after == y).sum(), (before == after).sum()])}


COUNTS = Case(
    make=interventions.PredictionCounts,
    batches=lambda rng: [tuple(rng.integers(0, 3, n) for _ in range(3)) for n in (5, 4, 7)],
    value=lambda acc: {"counts": np.array([acc.images, acc.right_before, acc.right_after, acc.agree])},
    one_shot=_counts,
)


# ---------------------------------------------------------------- receptive fields: |gradient| sums per image


GRADIENTS = Case(
    make=lambda: receptive.GradientSums(2, (4, 5)),
    batches=lambda rng: [(rng.random((2, 4, 5)) * n, n) for n in (3, 1, 4)],
    value=lambda acc: {"mean": acc.sum / acc.images, "images": acc.images},
    one_shot=lambda bs: {"mean": sum(s for s, _ in bs) / sum(n for _, n in bs), "images": sum(n for _, n in bs)},
)

CASES = {"cka": CKA, "skips": SKIPS, "attention_distance": DISTANCE, "prediction_counts": COUNTS,
         "receptive_gradients": GRADIENTS}


def _same(got: dict, want: dict, rtol: float = 1e-10) -> None:
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k], dtype=np.float64), np.asarray(want[k], dtype=np.float64),
                                   rtol=rtol, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("name", list(CASES))
def test_accumulator_contract(name):
    case = CASES[name]
    batches = case.batches(np.random.default_rng(7))
    streamed = _update(case.make(), batches)
    value = case.value(streamed)
    _same(value, case.one_shot(batches), rtol=1e-9)  # streaming == one shot, independently computed
    _same(case.value(_update(case.make(), batches[::-1])), value)  # order does not matter
    half = len(batches) // 2
    left, right = _update(case.make(), batches[:half]), _update(case.make(), batches[half:])
    left_state = {k: np.array(v, dtype=np.float64) for k, v in left.state().items()}
    right_state = {k: np.array(v, dtype=np.float64) for k, v in right.state().items()}
    left.merge(right)
    _same(case.value(left), value)  # merge == update over both
    restored = case.make()
    restored.load_state(unpack(pack(streamed.state())))
    _same(case.value(restored), value, rtol=0)  # exact round trip through the cache's serialisation
    if dist._state_is_sum(streamed):  # what the distributed all-reduce assumes
        for k, v in left.state().items():
            np.testing.assert_allclose(np.asarray(v, dtype=np.float64), left_state[k] + right_state[k], rtol=1e-12,
                                       err_msg=k)


def test_prediction_counts_without_labels_count_no_right_answers():
    before = np.array([0, 1, 2])
    acc = interventions.PredictionCounts().update(before, labels=None)
    assert (acc.images, acc.right_before) == (3, 0)


def test_every_engine_accumulator_is_checked():
    """A new accumulator class (anything with update/merge/state/load_state in vitlab) must join CASES."""
    import inspect

    import vitlab

    found = {cls for mod in (vitlab.attention, vitlab.cka, vitlab.interventions, vitlab.receptive, vitlab.skips,
                             vitlab.localization, vitlab.probes, vitlab.heads, vitlab.checkpoints, vitlab.run)
             for _, cls in inspect.getmembers(mod, inspect.isclass)
             if cls.__module__ == mod.__name__ and all(hasattr(cls, m) for m in ("update", "merge", "state",
                                                                               "load_state"))}
    checked = {type(c.make()) for c in CASES.values()} | {cka.MinibatchCKA}
    assert found <= checked, found - checked
