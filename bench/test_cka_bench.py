"""Checks of the benchmark itself (run explicitly: ``pytest bench/test_cka_bench.py``, ~30 s on 2 cores).

The float64 reference is checked against Song et al.'s definition of HSIC_1 as a U-statistic, and each peer's call
(wrapping, layer names, batches) against the reference on tiny models: a mis-mapped layer would be off by O(0.1).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cka_bench


def test_song_formula_equals_the_u_statistic():
    """Song et al. 2012, eq. 4: HSIC_1 = 1/(n)_4 sum over distinct (i, j, q, r) of
    K_ij L_ij + K_ij L_qr - 2 K_ij L_iq."""
    rng = np.random.default_rng(0)
    n = 6
    xs = [rng.normal(size=(n, 3)) + 5.0 for _ in range(3)]  # a large common mean, as real activations have
    grams = np.stack([x @ x.T for x in xs])
    got = cka_bench.song_hsic1(grams, grams)
    for a, b in itertools.product(range(3), range(3)):
        k, l_ = grams[a], grams[b]
        total = sum(k[i, j] * l_[i, j] + k[i, j] * l_[q, r] - 2 * k[i, j] * l_[i, q]
                    for i, j, q, r in itertools.permutations(range(n), 4))
        assert got[a, b] == pytest.approx(total / (n * (n - 1) * (n - 2) * (n - 3)), rel=1e-10)


def test_pair_dataset_gives_each_model_its_own_input():
    import torch

    args = argparse.Namespace(models="test_vit@random,resnet10t@random", device="cpu", data="fashion-mnist:test",
                              images=4, batch_size=4)
    models, source, indices, _ = cka_bench.setup(args)
    assert models[0].data_config["input_size"] != models[1].data_config["input_size"]  # padding is exercised
    x = next(iter(cka_bench.loader(cka_bench.PairDataset(source, indices, models), 4)))[0]
    for k, m in enumerate(models):
        seen = {}
        wrapped = cka_bench.pick(torch.nn.Identity(), k, m.data_config["input_size"])
        wrapped.m.register_forward_hook(lambda mod, a, out, seen=seen: seen.setdefault("x", out))
        wrapped(x)
        assert torch.equal(seen["x"], cka_bench.model_input(source, indices, m))


def _setup(models: str):
    args = argparse.Namespace(models=models, device="cpu", data="fashion-mnist:test", images=16, batch_size=8)
    return (*cka_bench.setup(args), args)


@pytest.fixture(scope="module")
def resnet_vit():
    return _setup("test_resnet@random,test_vit@random")


@pytest.fixture(scope="module")
def two_resnets():
    """Two default-init ResNets: bias-dominated, and every layer's CKA row and column differs (order is checked)."""
    return _setup("test_resnet@random:0,test_resnet@random:1")


def test_reference_equals_vitlab_in_float64(resnet_vit):
    import vitlab

    models, source, indices, taps, args = resnet_vit
    ref = cka_bench.run_float64(models, source, indices, taps, args, None)
    stats = [vitlab.GramStatistic(taps_=tuple(t for t, _ in tp), precision="float64") for tp in taps]
    got = vitlab.run.cka(models, source, vitlab.CKAOptions(images=16, batch_size=8), vitlab.Run(), statistic=stats)
    np.testing.assert_allclose(got.pair(0, 1).cka, ref, rtol=0, atol=1e-10)
    assert 0.05 < ref.min() and ref.max() < 1  # not a degenerate case


@pytest.mark.parametrize("method", ["pytorch-cka", "torch-cka", "vitlab"])
def test_every_method_matches_the_reference(two_resnets, method):
    pytest.importorskip({"pytorch-cka": "cka", "torch-cka": "torch_cka", "vitlab": "vitlab"}[method])
    import copy
    import dataclasses

    models, source, indices, taps, args = two_resnets
    ref = cka_bench.run_float64(models, source, indices, taps, args, None)
    atol = 1e-3
    # swapped or misnamed layers would show: any two rows (columns) differ somewhere by more than 2 atol
    for m in (ref, ref.T):
        gaps = np.abs(m[:, None, :] - m[None, :, :]).max(axis=-1) + np.eye(len(m))
        assert gaps.min() > 2 * atol
    fresh = [dataclasses.replace(m, model=copy.deepcopy(m.model)) for m in models]  # torch-cka keeps its hooks
    got = cka_bench.RUNNERS[method](fresh, source, indices, taps, args, None)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=atol)
