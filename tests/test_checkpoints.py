"""Checkpoint comparison: the per-layer curve against a float64 minibatch CKA reference; errors; CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, checkpoints, taps
from vitlab.charts.checkpoints import checkpoint_lines
from vitlab.inputs.data import decode, plan_batches, to_tensor

from .reference import hsic1_song, linear_gram64


@pytest.fixture(scope="module")
def pair():
    a = vitlab.load("test_vit@random:0", "cpu")
    b = vitlab.load("test_vit@random:1", "cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # make B differ more than by its seed: scale its MLPs
        for blk in b.model.blocks:
            blk.mlp.fc2.weight.mul_(1 + torch.rand(blk.mlp.fc2.weight.shape, generator=g) * 20)
    b.fingerprint += "-scaled"
    return a, b


def test_curve_against_reference(pair, store):
    a, b = pair
    source = vitlab.open_source("samples")
    opts = checkpoints.CheckpointOptions(images=10, batch_size=5)
    res = checkpoints.compare_checkpoints([(a, b), (a, a)], source, opts, vitlab.Run(store=store))
    frame = res.to_frame()
    layers = taps.default_taps(a.model)
    assert res.layers[0] == layers and len(frame) == 2 * len(layers)
    np.testing.assert_allclose(res.curves[1], 1.0, atol=1e-9)  # a model with itself
    sums = np.zeros((len(layers), 3))
    for batch in plan_batches(source, list(range(10)), 5):
        decode(source, batch)
        acts = []
        for m in (a, b):
            with taps.capture(m.model, layers) as got, torch.no_grad():
                m.model(to_tensor(batch.images, m))
            acts.append({k: v.numpy() for k, v in got.items()})
        for i, t in enumerate(layers):
            K, L = linear_gram64(acts[0][t]), linear_gram64(acts[1][t])
            sums[i] += hsic1_song(K, L), hsic1_song(K, K), hsic1_song(L, L)
    want = sums[:, 0] / np.sqrt(sums[:, 1] * sums[:, 2])
    np.testing.assert_allclose(res.curves[0], want, rtol=1e-4)
    assert res.curves[0].min() < 0.99  # the scaled MLPs really changed the representations
    again = checkpoints.compare_checkpoints([(a, b)], source, opts, vitlab.Run(store=store))
    assert again.info.batches_computed == 0  # Grams come from the cache
    spec = checkpoint_lines(frame).to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks[0] == "line" and "rule" in marks  # the curve and its 95 % interval per layer
    assert {"cka_lo", "cka_hi"} <= set(frame.columns)


def test_architecture_mismatch(tiny_vit, tiny_resnet):
    with pytest.raises(VitlabError, match="not the same architecture"):
        checkpoints.compare_checkpoints([(tiny_vit, tiny_resnet)], vitlab.open_source("samples"),
                                        checkpoints.CheckpointOptions(images=4))
    with pytest.raises(VitlabError, match="at least one pair"):
        checkpoints.compare_checkpoints([], vitlab.open_source("samples"))


def test_cli(tmp_path):
    from vitlab.cli import main

    out = tmp_path / "cc"
    assert main(["compare-checkpoints", "--pair", "test_vit@random:0", "test_vit@random:1", "-n", "4", "-b", "4",
                 "--tokens", "gap", "-o", str(out), "--no-cache"]) == 0
    for name in ("checkpoints.csv", "checkpoint_cka.png", "checkpoint_cka.svg", "run.json"):
        assert (out / name).is_file(), name
