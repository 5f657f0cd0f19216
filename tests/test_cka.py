"""CKA against a plain float64 implementation of the published formulas, invariances, accumulator contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitlab import VitlabError, cka

from .reference import hsic1_song, linear_gram64


# ---------------------------------------------------------------- independent float64 references
def hsic0(K: np.ndarray, L: np.ndarray) -> float:
    """Gretton et al. 2005: tr(KHLH) / (n-1)^2."""
    n = K.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    return np.trace(K @ H @ L @ H) / (n - 1) ** 2


def rbf_gram64(X: np.ndarray, threshold: float = 1.0) -> np.ndarray:
    """Kornblith et al. 2019's gram_rbf, float64."""
    X = X.astype(np.float64)
    dot = X @ X.T
    sq = np.diag(dot)
    d2 = -2 * dot + sq[:, None] + sq[None, :]
    return np.exp(-d2 / (2 * threshold**2 * np.median(d2)))


def minibatch_cka64(xs: list[np.ndarray], ys: list[np.ndarray], gram=linear_gram64, hsic=hsic1_song) -> float:
    """Nguyen et al. 2021 eq. 3: sums of per-batch HSIC estimates, then the CKA ratio."""
    kl = kk = ll = 0.0
    for x, y in zip(xs, ys):
        K, L = gram(x), gram(y)
        kl += hsic(K, L)
        kk += hsic(K, K)
        ll += hsic(L, L)
    return kl / np.sqrt(kk * ll)


def vitlab_cka(xs, ys, kernel="linear", estimator="unbiased", dtype=torch.float32) -> float:
    acc = cka.MinibatchCKA(["x"], ["y"], estimator)
    for x, y in zip(xs, ys):
        gx = cka.gram(torch.as_tensor(x), kernel, dtype=dtype).numpy()[None]
        gy = cka.gram(torch.as_tensor(y), kernel, dtype=dtype).numpy()[None]
        acc.update(cka.centred(gx, estimator), cka.centred(gy, estimator))
    return float(acc.compute().cka[0, 0])


def _batches(rng, sizes, d1=20, d2=30, mean=0.0):
    xs = [rng.normal(size=(n, d1)).astype(np.float32) + mean for n in sizes]
    ys = [(x @ rng.normal(size=(d1, d2)) + 0.5 * rng.normal(size=(len(x), d2))).astype(np.float32) + mean
          for x in xs]
    return xs, ys


# ---------------------------------------------------------------- the formulas
def test_u_centred_hsic_equals_song_three_term_formula():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(12, 5)), rng.normal(size=(12, 8))
    K, L = linear_gram64(X), linear_gram64(Y)
    got = cka.hsic_all_pairs(cka.u_center(K[None]), cka.u_center(L[None]))[0, 0]
    assert got == pytest.approx(hsic1_song(K, L), rel=1e-12)
    # also for a non-centred kernel, where the centring inside the estimator does all the work
    K2 = rbf_gram64(X)
    assert cka.hsic_all_pairs(cka.u_center(K2[None]), cka.u_center(L[None]))[0, 0] == pytest.approx(
        hsic1_song(K2, L), rel=1e-10)


def test_biased_hsic_equals_gretton():
    rng = np.random.default_rng(1)
    K, L = rbf_gram64(rng.normal(size=(9, 4))), linear_gram64(rng.normal(size=(9, 3)))
    got = cka.hsic_all_pairs(cka.double_center(K[None]), cka.double_center(L[None]), "biased")[0, 0]
    assert got == pytest.approx(hsic0(K, L), rel=1e-12)


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_minibatch_cka_matches_reference_with_unequal_batches(kernel):
    rng = np.random.default_rng(2)
    xs, ys = _batches(rng, [16, 9, 23, 5])
    gram = linear_gram64 if kernel == "linear" else rbf_gram64
    ref = minibatch_cka64(xs, ys, gram=gram)
    assert vitlab_cka(xs, ys, kernel) == pytest.approx(ref, abs=1e-6)


def test_full_batch_biased_cka_matches_kornblith():
    rng = np.random.default_rng(3)
    xs, ys = _batches(rng, [40])
    K, L = linear_gram64(xs[0]), linear_gram64(ys[0])
    ref = hsic0(K, L) / np.sqrt(hsic0(K, K) * hsic0(L, L))
    # linear CKA with HSIC_0 is also ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) on centred features
    X, Y = xs[0].astype(np.float64), ys[0].astype(np.float64)
    X, Y = X - X.mean(0), Y - Y.mean(0)
    feature_space = np.linalg.norm(Y.T @ X) ** 2 / (np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y))
    assert ref == pytest.approx(feature_space, rel=1e-10)
    assert vitlab_cka(xs, ys, estimator="biased") == pytest.approx(ref, abs=1e-6)


def test_bias_dominated_features_stay_accurate():
    """A common mean 1e4 times the spread: the raw three-term formula in float32 fails, vitlab does not."""
    rng = np.random.default_rng(4)
    xs, ys = _batches(rng, [32, 32, 32], mean=0.0)
    xs = [x * 0.01 + 100.0 for x in xs]
    ys = [y * 0.01 + 100.0 for y in ys]
    ref = minibatch_cka64(xs, ys)
    assert vitlab_cka(xs, ys) == pytest.approx(ref, abs=1e-6)
    # the naive float32 route (raw Gram, three-term formula) is far off or not even finite
    naive = []
    for x, y in zip(xs, ys):
        K = torch.as_tensor(x) @ torch.as_tensor(x).T
        L = torch.as_tensor(y) @ torch.as_tensor(y).T
        naive.append((K.numpy(), L.numpy()))

    def hsic32(K, L):
        n = K.shape[0]
        K, L = K.copy(), L.copy()
        np.fill_diagonal(K, 0)
        np.fill_diagonal(L, 0)
        one = np.ones(n, np.float32)
        return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
                - 2 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3))

    with np.errstate(all="ignore"):
        kl = sum(hsic32(K, L) for K, L in naive)
        val = kl / np.sqrt(sum(hsic32(K, K) for K, _ in naive) * sum(hsic32(L, L) for _, L in naive))
    assert not (abs(val - ref) < 1e-3)


def test_invariances_orthogonal_and_isotropic_scaling():
    rng = np.random.default_rng(5)
    xs, ys = _batches(rng, [20, 20], d1=12, d2=12)
    base = vitlab_cka(xs, ys)
    Q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    rotated = [(x @ Q).astype(np.float32) for x in xs]
    scaled = [(x * 37.5).astype(np.float32) for x in xs]
    assert vitlab_cka(rotated, ys) == pytest.approx(base, abs=1e-5)
    assert vitlab_cka(scaled, ys) == pytest.approx(base, abs=1e-5)
    assert vitlab_cka(xs, xs) == pytest.approx(1.0, abs=1e-6)


def test_constant_features_give_nan_with_a_warning():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(10, 4)).astype(np.float32)
    const = np.ones((10, 3), np.float32)
    acc = cka.MinibatchCKA(["ok", "flat"], ["ok"])
    ga = np.stack([cka.gram(torch.as_tensor(x)).numpy(), cka.gram(torch.as_tensor(const)).numpy()])
    acc.update(cka.centred(ga), cka.centred(ga[:1]))
    res = acc.compute("M", "M")
    assert np.isfinite(res.cka[0, 0]) and np.isnan(res.cka[1, 0])
    assert any("flat" in w and "self-HSIC" in w for w in res.warnings)


def test_too_small_batch_is_refused_with_a_message():
    with pytest.raises(VitlabError, match="at least 4"):
        cka.u_center(np.ones((1, 3, 3)))


# ---------------------------------------------------------------- accumulator (its contract: test_accumulators.py)


def test_merge_refuses_different_layers():
    a = cka.MinibatchCKA(["x"], ["y"])
    with pytest.raises(VitlabError):
        a.merge(cka.MinibatchCKA(["x", "z"], ["y"]))


@pytest.mark.parametrize("mean", [0.0, 100.0])
def test_chunked_gram_equals_float64_centred_gram(mean):
    """Centring block by block is exact per feature; only float32 round-off separates it from float64, also
    when the common mean is 1e4 times the spread. The CKA it gives stays within 1e-6 of the reference."""
    rng = np.random.default_rng(8)
    xs, ys = _batches(rng, [32, 17], d1=20, d2=1000)
    xs = [x * 0.01 + mean for x in xs]
    ys = [y * 0.01 + mean for y in ys]
    def hkh(k):  # double centring: blind to the per-feature shift that float32 rounding of the mean leaves
        h = np.eye(len(k)) - 1 / len(k)
        return h @ k.astype(np.float64) @ h

    for y in ys:
        got = cka.chunked_gram(torch.as_tensor(y), chunk=96).numpy()  # 1000 = 10 blocks of 96 and one of 40
        ref = linear_gram64(y)
        assert np.abs(hkh(got) - ref).max() <= 1e-5 * np.abs(ref).max()
        g64 = cka.chunked_gram(torch.as_tensor(y), chunk=96, dtype=torch.float64).numpy()
        np.testing.assert_allclose(g64, ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())
        # bf16 activations are cast up block by block, as the one-pass form casts them
        yb = torch.as_tensor(y).bfloat16()
        np.testing.assert_allclose(cka.chunked_gram(yb, chunk=96).numpy(), cka.gram(yb).numpy(),
                                   rtol=0, atol=1e-5 * np.abs(ref).max())

    def chunked_cka(xs, ys):
        acc = cka.MinibatchCKA(["x"], ["y"], "unbiased")
        for x, y in zip(xs, ys):
            gx = cka.gram(torch.as_tensor(x), chunk=7).numpy()[None]
            gy = cka.gram(torch.as_tensor(y), chunk=96).numpy()[None]
            acc.update(cka.centred(gx, "unbiased"), cka.centred(gy, "unbiased"))
        return float(acc.compute().cka[0, 0])

    assert chunked_cka(xs, ys) == pytest.approx(minibatch_cka64(xs, ys), abs=1e-6)


def test_gram_chunks_only_wider_features_on_the_cpu():
    x = torch.randn(9, 50)
    one_pass = (x - x.mean(0, keepdim=True)) @ (x - x.mean(0, keepdim=True)).T
    assert torch.equal(cka.gram(x, chunk=50), one_pass)  # not wider than a chunk: the one-pass form, bit for bit
    assert torch.equal(cka.gram(x), one_pass)
    assert not torch.equal(cka.gram(x, chunk=8), one_pass)  # chunked: the same Gram up to round-off
    torch.testing.assert_close(cka.gram(x, chunk=8), one_pass, rtol=1e-5, atol=1e-5)


def test_features_flat_to_roundoff_give_no_gram_and_undefined_cka():
    """Identical images give identical rows; float32 centring leaves a few ulps of noise, whose Gram would give a
    CKA of ±1 or ±1/3 from round-off alone (issue 39). Such a Gram is zero, and its CKA undefined with a warning;
    a real spread of 1e-4 of the common mean (test_chunked_gram_equals_float64_centred_gram) is kept."""
    rng = np.random.default_rng(11)
    row = (rng.normal(size=(1, 700)) * 3 + 10).astype(np.float32)
    flat = torch.as_tensor(np.repeat(row, 16, axis=0))
    # without the rule: the same centring in float32 leaves noise that is not zero
    noisy = flat - flat.mean(dim=0, keepdim=True)
    assert torch.linalg.vector_norm(noisy) > 0
    for g in (cka.gram(flat), cka.chunked_gram(flat, chunk=96), cka.gram(flat, dtype=torch.float64)):
        assert not g.any()
    real = torch.as_tensor(row + rng.normal(size=(16, 700)).astype(np.float32) * 1e-3)
    assert cka.gram(real).trace() > 0 and cka.chunked_gram(real, chunk=96).trace() > 0
    x = torch.as_tensor(rng.normal(size=(16, 50)).astype(np.float32))
    acc = cka.MinibatchCKA(["flat", "real"], ["x"])
    acc.update(cka.centred(torch.stack([cka.gram(flat), cka.gram(real)]).numpy()), cka.centred(cka.gram(x).numpy()[None]))
    res = acc.compute("M", "N")
    assert np.isnan(res.cka[0, 0]) and np.isfinite(res.cka[1, 0])
    assert any("flat" in w and "self-HSIC is 0" in w for w in res.warnings), res.warnings
