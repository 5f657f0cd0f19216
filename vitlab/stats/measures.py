"""Representational similarity measures beyond linear CKA: pure float64 kernels and their documented properties.

Every kernel here works on per-batch arrays the runner already caches or on features a statistic cached, never on
a model. ``vitlab.similarity`` streams them over batches; ``MEASURES`` documents each one (definition, the
transforms it is invariant to, whether it is a metric) and feeds the CLI help, the app and docs/measures.md.

Why the kernels look the way they do:

- Procrustes and mutual k-NN need no features: a batch's centred linear Gram K = X Xᵀ determines X up to an
  orthogonal map, and both measures are orthogonally invariant. PCA to k is the top-k eigenpairs of K
  (scores Z = U_k Λ_k^½, Z Zᵀ the best rank-k approximation of K), so "PCA to a common dimension" costs one
  (n, n) eigendecomposition per tap and batch, shared by every pair that tap is in.
- CCA needs the features of all images at once (its whitening is not a sum over batches of anything small), so
  SVCCA / PWCCA run on the features of all images, centred over all images (not per batch), which a statistic
  caches per batch. They are the layer's own features whenever they fit in the byte budget
  (``vitlab.analyses.similarity``); beyond it, a fixed random projection (``count_sketch``) whose shift is measured.
- The SVD of the centred features is cut at its numerical rank (singular values above s_1 max(N, P) eps), so the
  number of directions d is min(d, rank): directions of zero variance would give arbitrary canonical correlations.
- Rounding can push a PSD Gram's smallest eigenvalues slightly below zero and a cosine slightly above one; those
  are set to their mathematical bound (0, 1) where a square root or arccos would otherwise give NaN. Nothing else
  is clamped.

Shapes: L taps (or models), n images in a batch, N images in all, k PCA dimensions, d SVD directions, P features.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from ..errors import VitlabError

INVARIANCES = ("orthogonal", "isotropic scale", "invertible linear", "translation")


@dataclass(frozen=True)
class MeasureInfo:
    """What a measure is: its formula in words, its paper, its invariances and whether it is a metric."""

    name: str
    title: str
    kind: str  # 'similarity' (higher = more alike, 1 = same) or 'distance' (0 = same)
    definition: str
    reference: str
    invariant: tuple[str, ...]  # a subset of INVARIANCES
    metric: bool
    source: str  # 'gram': from the cached per-batch Grams; 'features': from the cached features of all images


MEASURES: dict[str, MeasureInfo] = {m.name: m for m in (
    MeasureInfo("cka", "linear CKA", "similarity",
                "HSIC_1(K, L) / sqrt(HSIC_1(K, K) HSIC_1(L, L)) of linear Grams, HSIC summed over batches",
                "Kornblith et al. 2019; minibatch form Nguyen et al. 2021", INVARIANCES[:2] + ("translation",),
                False, "gram"),
    MeasureInfo("cka-rbf", "RBF CKA", "similarity",
                "CKA of RBF kernels exp(-d²/(2 t² median d²)), from the same cached linear Grams",
                "Kornblith et al. 2019", INVARIANCES[:2] + ("translation",), False, "gram"),
    MeasureInfo("procrustes", "angular Procrustes distance", "distance",
                "arccos(‖Z_Aᵀ Z_B‖_* / (‖Z_A‖_F ‖Z_B‖_F)) on centred features PCA'd to k dims per batch, mean over "
                "batches (radians, 0 = same shape, π/2 = orthogonal)",
                "Williams et al. 2021, eq. 4 (α = 1)", INVARIANCES[:2] + ("translation",), True, "gram"),
    MeasureInfo("svcca", "SVCCA", "similarity",
                "mean canonical correlation between the top-d SVD directions of each side's centred features",
                "Raghu et al. 2017", INVARIANCES[:2] + ("translation",), False, "features"),
    MeasureInfo("pwcca", "PWCCA", "similarity",
                "Σ α_i ρ_i / Σ α_i over the CCA of all neurons (every direction up to the numerical rank), α_i = "
                "Σ_j |⟨h_i, x_j⟩| over the feature columns x_j of the side with fewer directions (A on a tie), h_i its "
                "canonical variates (whitened, as Google's cca_core forms them; its compute_pwcca as published leaves the "
                "whitening out)",
                "Morcos et al. 2018, Sec. 2.2", ("isotropic scale", "translation"), False, "features"),
    MeasureInfo("pwcca-svd20", "PWCCA over the top-d SVD directions", "similarity",
                "Σ α_i ρ_i / Σ α_i, ρ_i the canonical correlations of the top-d (--svd-dims, 20) SVD directions "
                "(SVCCA's), α_i = Σ_j |⟨h_i, x_j⟩| over A's feature columns x_j (not symmetric in A and B)",
                "Morcos et al. 2018's weights on Raghu et al. 2017's SVD step", ("isotropic scale", "translation"),
                False, "features"),
    MeasureInfo("mutual-knn", "mutual k-NN alignment", "similarity",
                "mean over images of |N_A(i) ∩ N_B(i)| / k, N(i) the k nearest other images of the batch by cosine "
                "of the batch-centred features",
                "Huh et al. 2024, Sec. 2", INVARIANCES[:2] + ("translation",), False, "gram"),
)}


# the measures a similarity run computes when none are named. PWCCA over all neurons (``pwcca``) is on request: with
# flattened tokens (the default) a layer is wider than the image set, and it is then undefined (see cca_features)
DEFAULT_MEASURES = ("cka", "cka-rbf", "procrustes", "svcca", "pwcca-svd20", "mutual-knn")


def check_measures(names) -> list[str]:
    names = list(names)
    bad = [m for m in names if m not in MEASURES]
    if bad or not names:
        raise VitlabError(f"unknown measure(s) {', '.join(bad) or '(none given)'}: choose from {', '.join(MEASURES)}")
    return names


def as_similarity(measure: str, values: np.ndarray) -> np.ndarray:
    """Orient every measure so that larger means more alike: a distance (Procrustes angle θ) becomes cos θ."""
    return np.cos(values) if MEASURES[measure].kind == "distance" else np.asarray(values, dtype=np.float64)


def as_distance(measure: str, values: np.ndarray) -> np.ndarray:
    """A distance for embeddings: Procrustes' angle itself; for a similarity s in [-1, 1], sqrt(2 - 2 s), the
    chord between unit vectors at cosine s (exact for CKA, which is a cosine of centred Grams)."""
    values = np.asarray(values, dtype=np.float64)
    if MEASURES[measure].kind == "distance":
        return values
    # rounding can put s a hair above 1 on a diagonal; the chord is 0 there
    return np.sqrt(np.maximum(0.0, 2.0 - 2.0 * values))


@contextlib.contextmanager
def blas_single_thread():
    """Run numpy's OpenBLAS on one thread inside the block (restored after).

    The kernels here make many small (<= 256) LAPACK calls that gain nothing from threads, and on a busy machine
    OpenBLAS's thread hand-off made each call ~50x slower (0.03 s -> 1.5 s for one 128 x 256 SVD on 2 loaded
    cores). Best effort: a numpy without the scipy-openblas wheel library is left alone.
    """
    lib = _openblas()
    if lib is None:
        yield
        return
    before = lib.scipy_openblas_get_num_threads64_()
    lib.scipy_openblas_set_num_threads64_(1)
    try:
        yield
    finally:
        lib.scipy_openblas_set_num_threads64_(before)


@functools.cache
def _openblas():
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "scipy_openblas64_" in line})
        lib = ctypes.CDLL(paths[0]) if paths else None
    except OSError:
        return None
    ok = lib is not None and hasattr(lib, "scipy_openblas_set_num_threads64_")
    return lib if ok and hasattr(lib, "scipy_openblas_get_num_threads64_") else None


# ------------------------------------------------------------------------------------ Gram-based kernels


def pca_scores(grams: np.ndarray, k: int) -> np.ndarray:
    """(L, n, n) centred linear Grams -> (L, n, min(k, n)) PC scores Z with Z Zᵀ the best rank-k approximation."""
    g = np.asarray(grams, dtype=np.float64)
    g = (g + np.swapaxes(g, -1, -2)) / 2  # float32 Grams are symmetric only to rounding
    lam, vec = np.linalg.eigh(g)  # ascending
    k = min(k, g.shape[-1])
    lam, vec = lam[..., ::-1][..., :k], vec[..., ::-1][..., :k]
    return vec * np.sqrt(np.maximum(lam, 0.0))[..., None, :]  # a PSD Gram's rounding negatives are zeros


def procrustes_angles(za: np.ndarray, zb: np.ndarray) -> np.ndarray:
    """(La, n, k), (Lb, n, k) centred features -> (La, Lb) angular Procrustes distance (Williams et al. 2021).

    θ = arccos(max_Q ⟨Z_A, Z_B Q⟩ / (‖Z_A‖ ‖Z_B‖)) over orthogonal Q; the maximum is the nuclear norm ‖Z_Aᵀ Z_B‖_*.
    """
    na = np.sqrt(np.einsum("lnk,lnk->l", za, za))
    nb = np.sqrt(np.einsum("lnk,lnk->l", zb, zb))
    out = np.empty((za.shape[0], zb.shape[0]))
    for i in range(za.shape[0]):  # one row at a time keeps memory at Lb k² rather than La Lb k²
        cross = np.einsum("nk,lnm->lkm", za[i], zb)
        out[i] = np.linalg.svd(cross, compute_uv=False).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = out / np.outer(na, nb)
    return np.arccos(np.minimum(cos, 1.0))  # Cauchy-Schwarz bounds it by 1; rounding can exceed that


def knn_membership(grams: np.ndarray, k: int) -> np.ndarray:
    """(L, n, n) linear Grams -> (L, n, n) bool: [l, i, j] is True when j is among i's k nearest other images by
    cosine similarity K_ij / sqrt(K_ii K_jj). Images with zero norm make the row NaN-free but meaningless; the caller
    reports them."""
    g = np.asarray(grams, dtype=np.float64)
    n = g.shape[-1]
    if not 1 <= k <= n - 1:
        raise VitlabError(f"mutual k-NN with k = {k} needs batches of more than k images; this batch has {n}: "
                          f"lower --knn-k or raise --batch-size")
    d = np.sqrt(np.maximum(np.diagonal(g, axis1=-2, axis2=-1), 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = g / (d[..., :, None] * d[..., None, :])
    cos = np.nan_to_num(cos, nan=-np.inf)
    idx = np.arange(n)
    cos[..., idx, idx] = -np.inf  # an image is not its own neighbour
    top = np.argpartition(-cos, k - 1, axis=-1)[..., :k]
    member = np.zeros(g.shape, dtype=bool)
    np.put_along_axis(member, top, True, axis=-1)
    return member


def mutual_knn_counts(ma: np.ndarray, mb: np.ndarray) -> np.ndarray:
    """(La, n, n), (Lb, n, n) neighbour sets -> (La, Lb) shared-neighbour counts summed over the batch's images."""
    fa = ma.reshape(ma.shape[0], -1).astype(np.float64)
    fb = mb.reshape(mb.shape[0], -1).astype(np.float64)
    return fa @ fb.T


def remove_top_pcs(grams: np.ndarray, k: int) -> np.ndarray:
    """(L, n, n) centred linear Grams -> the Grams of the features with their top-k principal components removed
    (Ding et al. 2021's ablation, within the batch): K - Σ_{i<=k} λ_i u_i u_iᵀ."""
    if k <= 0:
        return np.asarray(grams, dtype=np.float64)
    z = pca_scores(grams, k)
    return np.asarray(grams, dtype=np.float64) - z @ np.swapaxes(z, -1, -2)


def top_energy_share(grams: np.ndarray) -> np.ndarray:
    """(L, n, n) Grams -> (L,) share of the double-centred Gram's squared Frobenius norm in its top eigen-direction,
    λ_1² / Σ λ_i²: near 1 means one direction dominates the Gram, and with it CKA (Davari et al. 2023)."""
    g = np.asarray(grams, dtype=np.float64)
    g = g - g.mean(axis=-1, keepdims=True)
    g = g - g.mean(axis=-2, keepdims=True)
    lam = np.linalg.eigvalsh((g + np.swapaxes(g, -1, -2)) / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.max(lam**2, axis=-1) / np.sum(lam**2, axis=-1)


# ------------------------------------------------------------------------------------ feature-based kernels


def count_sketch(x, dims: int, seed: int = 0):
    """(n, F) torch features -> (n, dims) torch: a CountSketch (Charikar et al. 2002), a fixed random linear map
    that sends feature f to column h(f) with sign s(f). ⟨x S, y S⟩ = ⟨x, y⟩ in expectation; it costs O(n F) and
    no (F, dims) matrix, which matters for ViT-B's 151 296 flattened features per tap. h and s depend only on
    (seed, F), so every batch and every model with the same width gets the same map."""
    import torch

    f = x.shape[1]
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + f)
    bucket = torch.randint(0, dims, (f,), generator=gen).to(x.device)
    sign = (torch.randint(0, 2, (f,), generator=gen) * 2 - 1).to(device=x.device, dtype=x.dtype)
    out = torch.zeros(x.shape[0], dims, dtype=x.dtype, device=x.device)
    return out.index_add_(1, bucket, x * sign)


@dataclass(frozen=True)
class SVDBasis:
    """One representation reduced for CCA: U (N, d) orthonormal top-d left singular vectors of the centred
    features, and M = Uᵀ X (d, P), which PWCCA's weights need (⟨h_i, x_j⟩ = (Lᵀ M)_ij for h = U L)."""

    u: np.ndarray
    m: np.ndarray
    rank: int  # numerical rank of the centred features (d is min(d, rank))

    def top(self, d: int) -> SVDBasis:
        """The first d directions (an SVD basis is ordered by singular value)."""
        return SVDBasis(self.u[:, :d], self.m[:d], self.rank)


def svd_basis(x: np.ndarray, d: int | None) -> SVDBasis:
    """(N, P) features -> the top-d SVD directions of the features centred over all N images (Raghu et al. 2017,
    step 1); ``d=None`` keeps every direction up to the numerical rank (CCA over all neurons)."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0)
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    tol = s[0] * max(x.shape) * np.finfo(np.float64).eps if s.size and s[0] > 0 else 0.0
    rank = int(np.sum(s > tol)) if s.size and s[0] > 0 else 0
    d = rank if d is None else min(d, rank)
    return SVDBasis(u[:, :d], s[:d, None] * vt[:d], rank)


def cca_pair(a: SVDBasis, b: SVDBasis) -> tuple[float, float]:
    """SVCCA and PWCCA weighted by A (``pwcca-svd20`` on top-d bases) of two reduced representations.

    With orthonormal bases U_A, U_B of the two subspaces, the canonical correlations are the singular values of
    U_Aᵀ U_B (Björck & Golub 1973) and A's canonical variates are h = U_A L (L its left singular vectors).
    SVCCA = mean ρ_i; PWCCA weights ρ_i by α_i = Σ_j |⟨h_i, x_j⟩| over A's feature columns x_j.
    """
    d = min(a.u.shape[1], b.u.shape[1])
    if d == 0:
        return float("nan"), float("nan")
    left, rho, _ = np.linalg.svd(a.u.T @ b.u, full_matrices=False)
    left, rho = left[:, :d], np.minimum(rho[:d], 1.0)  # cosines of principal angles; rounding can exceed 1
    alpha = np.abs(left.T @ a.m).sum(axis=1)
    return float(rho.mean()), float(alpha @ rho / alpha.sum())


def pwcca_all(a: SVDBasis, b: SVDBasis) -> float:
    """PWCCA over all neurons (Morcos et al. 2018, Sec. 2.2) of two bases that keep every direction up to their
    rank: the weights come from the side with fewer directions (A on a tie), which is Google's "fewer neurons" when
    the features have full column rank. The canonical variates h_i are whitened, as Google's ``cca_core`` forms its
    own (``cca_dirns1 = coef_x · invsqrt_xx · (acts − mean)``): B's are U_B R (R the right singular vectors of
    U_Aᵀ U_B), so their weights are Σ_j |(Rᵀ M_B)_ij|, with centred features as CCA's are.

    Not Google's ``pwcca.compute_pwcca`` as published: it projects with ``coef_x`` alone (the rotation uᵀ, without
    the whitening factor invsqrt_xx), adds the means back and weights by the raw activations. On the
    zoo pair (zoo:vit-cls vs zoo:resnet, GAP features of 512 Fashion-MNIST images, 96 layer pairs) it differs from
    this by up to 0.159 (median 0.110); with the whitening put back, by up to 0.135 (median 0.018: the raw
    activations); with both, by 2e-10 (tests/test_measures.py)."""
    d = min(a.u.shape[1], b.u.shape[1])
    if d == 0:
        return float("nan")
    left, rho, right_t = np.linalg.svd(a.u.T @ b.u, full_matrices=False)
    rho = np.minimum(rho[:d], 1.0)
    side = left[:, :d].T @ a.m if a.u.shape[1] <= b.u.shape[1] else right_t[:d] @ b.m
    alpha = np.abs(side).sum(axis=1)
    return float(alpha @ rho / alpha.sum())


# ------------------------------------------------------------------------------------ comparing measures, models


def rank_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ: Pearson correlation of the ranks (ties get their mean rank); NaN pairs are dropped."""
    x, y = np.ravel(np.asarray(x, dtype=np.float64)), np.ravel(np.asarray(y, dtype=np.float64))
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 3:
        return float("nan")
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = np.sqrt((rx @ rx) * (ry @ ry))
    return float(rx @ ry / den) if den > 0 else float("nan")


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(v.size)
    ranks[order] = np.arange(v.size, dtype=np.float64)
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def classical_mds(dist: np.ndarray, dims: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(M, M) distances -> ((M, dims) coordinates, all eigenvalues of B) by Torgerson's classical MDS:
    B = -½ J D² J, coordinates = top eigenvectors × sqrt(eigenvalue). Negative eigenvalues (a non-Euclidean D)
    are returned so the caller can say how much of B the plane leaves out."""
    d = np.asarray(dist, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or not np.all(np.isfinite(d)):
        raise VitlabError(f"MDS needs a finite square distance matrix, not shape {d.shape} with "
                          f"{int(np.sum(~np.isfinite(d)))} non-finite entries")
    m = d.shape[0]
    j = np.eye(m) - 1.0 / m
    b = -0.5 * j @ (d**2) @ j
    lam, vec = np.linalg.eigh((b + b.T) / 2)
    lam, vec = lam[::-1], vec[:, ::-1]
    coords = vec[:, :dims] * np.sqrt(np.maximum(lam[:dims], 0.0))
    if coords.shape[1] < dims:
        coords = np.pad(coords, ((0, 0), (0, dims - coords.shape[1])))
    return coords, lam
