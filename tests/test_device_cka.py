"""U-centring and all-pairs HSIC on the device (torch) against the float64 references; the CUDA path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitlab import cka
from vitlab.stats import device_cka
from vitlab.engine.run import fold_cka

from .reference import hsic1_song, linear_gram64
from .test_cka import _batches, minibatch_cka64, rbf_gram64

MODES = device_cka.MODES
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _device_cka(xs, ys, kernel="linear", estimator="unbiased", mode="float64", device="cpu"):
    """Minibatch CKA from float32 Grams (as vitlab caches them), centred and paired on ``device``."""
    xy = xx = yy = 0.0
    for x, y in zip(xs, ys):
        k = cka.gram(torch.as_tensor(x, device=device), kernel)[None]
        l_ = cka.gram(torch.as_tensor(y, device=device), kernel)[None]
        ck, cl = device_cka.centred(k, estimator, mode), device_cka.centred(l_, estimator, mode)
        xy += device_cka.hsic_all_pairs(ck, cl, estimator, mode)[0, 0]
        xx += device_cka.hsic_self(ck, estimator, mode)[0]
        yy += device_cka.hsic_self(cl, estimator, mode)[0]
    return xy / np.sqrt(xx * yy)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_bias_dominated_minibatch_cka_within_1e6_of_float64_reference(mode, kernel):
    """tests/test_cka.py's bias-dominated case (common mean 1e4 x the spread) and its unequal batches."""
    rng = np.random.default_rng(4)
    xs, ys = _batches(rng, [32, 32, 32])
    xs, ys = [x * 0.01 + 100.0 for x in xs], [y * 0.01 + 100.0 for y in ys]
    gram = linear_gram64 if kernel == "linear" else rbf_gram64
    assert _device_cka(xs, ys, kernel, mode=mode) == pytest.approx(minibatch_cka64(xs, ys, gram=gram), abs=1e-6)
    xs, ys = _batches(np.random.default_rng(2), [16, 9, 23, 5])
    assert _device_cka(xs, ys, kernel, mode=mode) == pytest.approx(minibatch_cka64(xs, ys, gram=gram), abs=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_uncentred_kernel_hsic_within_1e6(mode):
    """A kernel the estimator must centre itself (RBF, entries ~1 around a large mean): per-batch HSIC_1 against
    Song's three-term formula in float64 on the same float32 Gram."""
    rng = np.random.default_rng(9)
    for n in (6, 31, 64):
        x = (rng.normal(size=(n, 12)) * 0.1 + 1).astype(np.float32)
        y = (x @ rng.normal(size=(12, 9)) * 0.3 + 0.1 * rng.normal(size=(n, 9))).astype(np.float32)
        k, l_ = cka.gram(torch.as_tensor(x), "rbf"), cka.gram(torch.as_tensor(y), "rbf")
        ref = hsic1_song(k.double().numpy(), l_.double().numpy())
        ck, cl = device_cka.centred(k[None], "unbiased", mode), device_cka.centred(l_[None], "unbiased", mode)
        got = device_cka.hsic_all_pairs(ck, cl, "unbiased", mode)[0, 0]
        assert got == pytest.approx(ref, rel=1e-6)
        self_ref = hsic1_song(k.double().numpy(), k.double().numpy())
        assert device_cka.hsic_self(ck, "unbiased", mode)[0] == pytest.approx(self_ref, rel=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_biased_estimator_on_device(mode):
    rng = np.random.default_rng(3)
    xs, ys = _batches(rng, [40])
    acc = cka.MinibatchCKA(["x"], ["y"], "biased")
    gx = cka.gram(torch.as_tensor(xs[0])).numpy()[None]
    gy = cka.gram(torch.as_tensor(ys[0])).numpy()[None]
    acc.update(cka.centred(gx, "biased"), cka.centred(gy, "biased"))
    host = acc.compute().cka[0, 0]
    assert _device_cka(xs, ys, estimator="biased", mode=mode) == pytest.approx(host, abs=1e-6)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_fold_cka_on_device_equals_the_host_float64_path(device):
    """The runner's device-side fold and the numpy float64 accumulator agree to round-off (cache unchanged)."""
    rng = np.random.default_rng(11)
    layers_a, layers_b = ["a0", "a1", "a2"], ["b0", "b1"]
    dev = {(0, 0): cka.MinibatchCKA(layers_a, layers_a), (0, 1): cka.MinibatchCKA(layers_a, layers_b),
           (1, 1): cka.MinibatchCKA(layers_b, layers_b)}
    host = {p: cka.MinibatchCKA(a.layers_a, a.layers_b) for p, a in dev.items()}
    for n in (8, 13, 6):
        ga = np.stack([cka.gram(torch.as_tensor(rng.normal(size=(n, 5)).astype(np.float32) + 50)).numpy()
                       for _ in layers_a])
        gb = np.stack([cka.gram(torch.as_tensor(rng.normal(size=(n, 7)).astype(np.float32))).numpy()
                       for _ in layers_b])
        found = [{"gram": {"grams": ga}}, {"gram": {"grams": gb}}]
        fold_cka(dev, found, "unbiased", device)
        c = [cka.centred(ga), cka.centred(gb)]
        for (i, j), acc in host.items():
            acc.update(c[i], None if i == j else c[j])
    for p in dev:
        np.testing.assert_allclose(dev[p].xy, host[p].xy, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(dev[p].compute().cka, host[p].compute().cka, rtol=1e-12)
        assert dev[p].images == host[p].images == 27 and dev[p].batches == 3


def test_modes_and_errors():
    assert device_cka.mode_for("cpu") == "float64"
    assert device_cka.mode_for("cuda:0") == "float64"
    assert device_cka.mode_for("mps") == "float32c"
    from vitlab import VitlabError

    with pytest.raises(VitlabError, match="at least 4"):
        device_cka.centred(torch.ones(1, 3, 3))
    with pytest.raises(VitlabError, match="mode"):
        device_cka.centred(torch.ones(1, 5, 5), mode="float16")
    with pytest.raises(VitlabError, match="different batch sizes"):
        device_cka.hsic_all_pairs(torch.ones(1, 5, 5), torch.ones(1, 6, 6))


@cuda
def test_cuda_path_pinned_non_blocking_and_float64(tiny_vit, fmnist_source):
    """On CUDA: inputs pinned and copied non_blocking, Grams and HSIC on the GPU in float64; the CKA matches the
    CPU run's (to 1e-3 only: cuDNN convolutions default to TF32, so the activations themselves differ; the
    arithmetic on equal Grams is checked to 1e-12 by test_fold_cka_on_device_equals_the_host_float64_path)."""
    import vitlab
    from vitlab import pipeline

    gpu = vitlab.load("test_vit@random:0", "cuda")
    src = fmnist_source
    idx = vitlab.select(src, 24)
    batch = vitlab.data.plan_batches(src, idx, 8)[0]
    with pipeline.Prefetcher(src, 2, pin=True) as pf:
        prepared = pf.submit(batch, pipeline.groups_of([gpu])).result()
    x = prepared.inputs[pipeline.input_key(gpu)]
    assert x.is_pinned() and x.device.type == "cpu"
    on_gpu = pipeline.to_device(x, "cuda")
    assert on_gpu.device.type == "cuda"
    c = device_cka.centred(torch.ones(2, 6, 6, device="cuda") + torch.eye(6, device="cuda"), mode="float64")
    assert c.device.type == "cuda" and c.dtype == torch.float64
    opts = vitlab.CKAOptions(images=24, batch_size=8)
    rep_gpu = vitlab.run.cka([gpu], src, opts)
    rep_cpu = vitlab.run.cka([tiny_vit], src, opts)
    np.testing.assert_allclose(rep_gpu.pair(0, 0).cka, rep_cpu.pair(0, 0).cka, atol=1e-3)
    rep_amp = vitlab.run.cka([gpu], src, opts, vitlab.Run(amp=True))
    assert np.all(np.isfinite(rep_amp.pair(0, 0).cka))
