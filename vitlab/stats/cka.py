"""Centered kernel alignment (CKA) between layers, streamed over minibatches.

Kornblith et al. 2019 define CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)). Nguyen et al. 2021 (Do Wide and
Deep Networks Learn the Same Things?, eq. 2-3) estimate it over minibatches: for each batch, the unbiased
HSIC_1 of Song et al. 2012 (eq. 5) of every pair of layers, summed over batches; CKA is the ratio of the sums.

Numerics (why this module looks the way it does):

- Linear Grams are formed from batch-centred features. Linear HSIC_1 is exactly invariant to adding a constant
  vector to every feature row, and centring removes the large common mean of real activations that otherwise
  makes K's entries huge next to their differences.
- HSIC_1 is computed in the U-centred form of Székely & Rizzo 2014: HSIC_1(K, L) = <U(K), U(L)> / (n (n - 3)),
  where U zeroes the diagonal and subtracts row and column means with the U-statistic weights. This equals Song's
  three-term formula algebraically but never forms its large, nearly cancelling terms. U-centring and the sums
  run in float64; the Gram itself is float32 (float64 in verify mode).
- Nothing is clamped and no epsilon is added: a NaN (constant features) or a non-positive self-HSIC is reported
  by layer name in ``CKAResult.warnings``. One exception, which reports rather than hides: a batch whose centred
  features are at the size of the centring's own round-off (``ROUNDOFF`` units of the dtype's epsilon relative to
  the features, e.g. identical images) has no spread to measure, so its Gram is exactly zero and the layer's CKA
  comes out undefined with that warning, instead of a value formed from round-off (issue 39: ±1 and ±1/3 on a
  folder of black images). Real spread 1e-4 of the common mean (test_cka) is 13 times above the bound.

Shapes: L taps, n images in a batch, F features per image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import VitlabError

if TYPE_CHECKING:  # torch is imported where a Gram is formed, so that `vitlab --help` does not load it
    import torch

KERNELS = ("linear", "rbf")
ESTIMATORS = ("unbiased", "biased")
MIN_UNBIASED_BATCH = 4  # n (n - 3) > 0


# the centring's round-off: x − mean(x) of identical rows is off by a few ulps of |x| per entry (the float32 mean of
# n equal numbers is off by up to log2(n) ulps); a centred norm under ROUNDOFF·eps·‖x‖ is that noise, not spread
ROUNDOFF = 64
GRAM_CHUNK = 8192  # features per block of chunked_gram: an (n, 8192) float32 block is 1 MiB at n = 32


def gram(x: torch.Tensor, kernel: str = "linear", threshold: float = 1.0, dtype: torch.dtype | None = None,
         chunk: int | None = None) -> torch.Tensor:
    """(n, F) features -> (n, n) Gram matrix of the batch-centred features (linear) or an RBF kernel.

    RBF follows Kornblith et al. 2019: K = exp(-d^2 / (2 threshold^2 median(d^2))), median over all entries.
    ``chunk``: on the CPU, centre and multiply ``chunk`` features at a time (:func:`chunked_gram`) when F is
    larger; the result differs from the one-pass form by float32 round-off. ``dtype``: float32 unless given.
    """
    import torch

    dtype = dtype or torch.float32
    if chunk is not None and x.device.type == "cpu" and x.shape[1] > chunk:
        g = chunked_gram(x, chunk, dtype)
    else:
        x = x.to(dtype)
        total = torch.linalg.vector_norm(x) ** 2
        x = x - x.mean(dim=0, keepdim=True)
        g = drop_roundoff(x @ x.T, total)
    if kernel == "linear":
        return g
    if kernel != "rbf":
        raise VitlabError(f"kernel must be one of {', '.join(KERNELS)}, not '{kernel}'")
    return rbf_from_linear(g, threshold)


def chunked_gram(x: torch.Tensor, chunk: int = GRAM_CHUNK, dtype: torch.dtype | None = None) -> torch.Tensor:
    """(n, F) -> (n, n) Gram of the batch-centred features, formed ``chunk`` features at a time.

    Centring is per feature, so each block of columns is centred on its own and its Gram added: one read of
    ``x`` from memory, with the centred block still in cache for the product, where the one-pass form reads
    ``x`` twice, writes a centred copy as large as ``x`` and reads that again. For a ResNet-50 stage-1 tap (32
    images, 103 MB) that is 73 ms against 51 ms on 2 CPU cores; at 64 images 178 ms against 77 ms.
    """
    import torch

    dtype = dtype or torch.float32
    n, width = x.shape
    g = torch.zeros(n, n, dtype=dtype, device=x.device)
    total = torch.zeros((), dtype=dtype, device=x.device)
    block = torch.empty(n, min(chunk, width), dtype=dtype, device=x.device)
    for j in range(0, width, chunk):
        cols = x[:, j:j + chunk]
        b = block[:, :cols.shape[1]]
        if cols.dtype == dtype:
            torch.sub(cols, cols.mean(dim=0, keepdim=True), out=b)
        else:  # bf16/fp16 activations: cast up first, as the one-pass form does
            b.copy_(cols)
            b.sub_(b.mean(dim=0, keepdim=True))
        g.addmm_(b, b.T)
        total += torch.linalg.vector_norm(cols.to(dtype)) ** 2
    return drop_roundoff(g, total)


def drop_roundoff(g: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """Zero the (..., n, n) Grams of centred features whose trace (their squared norm) is within the centring's
    round-off of the uncentred features' squared norm ``total`` (...,): no spread, so no Gram (see ROUNDOFF)."""
    import torch

    bound = (ROUNDOFF * torch.finfo(g.dtype).eps) ** 2 * total
    flat = torch.diagonal(g, dim1=-2, dim2=-1).sum(-1) <= bound
    return torch.where(flat[..., None, None], torch.zeros_like(g), g)


def rbf_from_linear(g: torch.Tensor, threshold: float = 1.0) -> torch.Tensor:
    """(..., n, n) linear Gram (of centred or raw features) -> the RBF kernel of :func:`gram` on the same features.

    Squared distances d2_ij = g_ii + g_jj - 2 g_ij do not change when every feature row moves by one vector, so a
    cached centred linear Gram gives the RBF kernel without the features (vitlab.analyses.similarity relies on this).
    """
    import torch

    sq = torch.diagonal(g, dim1=-2, dim2=-1)
    # squared distances: exact zeros can round to tiny negatives; distances are non-negative by definition
    d2 = (sq[..., :, None] + sq[..., None, :] - 2 * g).clamp_min(0)
    # numpy's median (mean of the middle two), as Kornblith's code
    med = torch.quantile(d2.flatten(start_dim=-2), 0.5, dim=-1)[..., None, None]
    return torch.exp(-d2 / (2 * threshold**2 * med))


def u_center(k: np.ndarray) -> np.ndarray:
    """U-centre Gram matrices (..., n, n) in float64 (Székely & Rizzo 2014, eq. 3); diagonal is zero."""
    k = np.array(k, dtype=np.float64, copy=True)
    n = k.shape[-1]
    if n < MIN_UNBIASED_BATCH:
        raise VitlabError(f"a batch of {n} images cannot be used by the unbiased HSIC estimator: it needs at least 4")
    idx = np.arange(n)
    k[..., idx, idx] = 0.0
    row = k.sum(axis=-1)
    total = row.sum(axis=-1)
    u = k - row[..., :, None] / (n - 2) - row[..., None, :] / (n - 2)
    u += (total / ((n - 1) * (n - 2)))[..., None, None]
    u[..., idx, idx] = 0.0
    return u


def double_center(k: np.ndarray) -> np.ndarray:
    """H K H in float64 (for the biased HSIC_0)."""
    k = np.asarray(k, dtype=np.float64)
    k = k - k.mean(axis=-1, keepdims=True)
    return k - k.mean(axis=-2, keepdims=True)


def centred(grams: np.ndarray, estimator: str = "unbiased") -> np.ndarray:
    """Centre (L, n, n) Grams for the chosen estimator; the result feeds :func:`hsic_all_pairs`."""
    if estimator == "unbiased":
        return u_center(grams)
    if estimator == "biased":
        return double_center(grams)
    raise VitlabError(f"estimator must be one of {', '.join(ESTIMATORS)}, not '{estimator}'")


def hsic_all_pairs(ca: np.ndarray, cb: np.ndarray, estimator: str = "unbiased") -> np.ndarray:
    """(La, n, n), (Lb, n, n) centred Grams -> (La, Lb) HSIC of every layer pair, one matrix product.

    unbiased: HSIC_1 = <U(K), U(L)> / (n (n - 3)); biased: HSIC_0 = <HKH, HLH> / (n - 1)^2.
    """
    n = ca.shape[-1]
    if cb.shape[-1] != n:
        raise VitlabError(f"Grams of different batch sizes ({n} and {cb.shape[-1]}) cannot be paired")
    norm = n * (n - 3) if estimator == "unbiased" else (n - 1) ** 2
    return ca.reshape(ca.shape[0], -1) @ cb.reshape(cb.shape[0], -1).T / norm


def hsic_self(c: np.ndarray, estimator: str = "unbiased") -> np.ndarray:
    """(L, n, n) centred Grams -> (L,) HSIC(K, K)."""
    n = c.shape[-1]
    norm = n * (n - 3) if estimator == "unbiased" else (n - 1) ** 2
    flat = c.reshape(c.shape[0], -1)
    return np.einsum("lf,lf->l", flat, flat) / norm


@dataclass
class CKAResult:
    """CKA between the taps of two models (or one model with itself)."""

    model_a: str
    model_b: str
    layers_a: list[str]
    layers_b: list[str]
    cka: np.ndarray  # (La, Lb)
    std: np.ndarray | None = None  # over repeats
    images: int = 0
    batches: int = 0
    warnings: list[str] = field(default_factory=list)
    evidence: object | None = None  # vitlab.evidence.CKAEvidence: 95 % interval over batches and permutation null
    loo: np.ndarray | None = None  # (T, La, Lb) CKA with each batch left out (jackknife), beside ``evidence``

    def to_frame(self):
        import pandas as pd

        rows = []
        for i, la in enumerate(self.layers_a):
            for j, lb in enumerate(self.layers_b):
                row = {"model_a": self.model_a, "layer_a": la, "model_b": self.model_b, "layer_b": lb,
                       "cka": float(self.cka[i, j])}
                if self.std is not None:
                    row["cka_std"] = float(self.std[i, j])
                if self.evidence is not None:
                    row.update(self.evidence.columns(i, j))
                rows.append(row)
        return pd.DataFrame(rows)


class MinibatchCKA:
    """Streaming minibatch CKA between layers of A and layers of B (Nguyen et al. 2021, eq. 3).

    State: float64 sums of per-batch HSIC estimates. Each batch's estimate carries its own normalisation, so
    batches of different sizes combine correctly (Google's reference adds raw inner products instead, exact
    only for equal batch sizes).
    """

    def __init__(self, layers_a: list[str], layers_b: list[str], estimator: str = "unbiased"):
        if estimator not in ESTIMATORS:
            raise VitlabError(f"estimator must be one of {', '.join(ESTIMATORS)}, not '{estimator}'")
        self.layers_a, self.layers_b, self.estimator = list(layers_a), list(layers_b), estimator
        self.xy = np.zeros((len(layers_a), len(layers_b)))
        self.xx = np.zeros(len(layers_a))
        self.yy = np.zeros(len(layers_b))
        self.batches = 0
        self.images = 0

    def update(self, ca: np.ndarray, cb: np.ndarray | None = None) -> None:
        """Add one batch: centred Grams of A (La, n, n) and of B (Lb, n, n); ``cb=None`` means B is A."""
        same = cb is None
        cb = ca if same else cb
        if ca.shape[0] != len(self.layers_a) or cb.shape[0] != len(self.layers_b):
            raise VitlabError(f"Grams for {ca.shape[0]}/{cb.shape[0]} layers given to an accumulator of "
                              f"{len(self.layers_a)}/{len(self.layers_b)} layers")
        sa = hsic_self(ca, self.estimator)
        sb = sa if same else hsic_self(cb, self.estimator)
        self.add(hsic_all_pairs(ca, cb, self.estimator), sa, sb, ca.shape[-1])

    def add(self, xy: np.ndarray, xx: np.ndarray, yy: np.ndarray, n: int) -> None:
        """Add one batch's HSIC estimates (La, Lb), (La,), (Lb,) of ``n`` images, computed elsewhere (on the
        model's device: :mod:`vitlab.device_cka`)."""
        if np.shape(xy) != self.xy.shape:
            raise VitlabError(f"HSIC estimates of shape {np.shape(xy)} given to an accumulator of {self.xy.shape}")
        self.xy += xy
        self.xx += xx
        self.yy += yy
        self.batches += 1
        self.images += n

    def merge(self, other: "MinibatchCKA") -> "MinibatchCKA":
        """Add another accumulator's state (other shards, other batches)."""
        if (other.layers_a, other.layers_b, other.estimator) != (self.layers_a, self.layers_b, self.estimator):
            raise VitlabError("cannot merge CKA accumulators over different layers or estimators")
        self.xy += other.xy
        self.xx += other.xx
        self.yy += other.yy
        self.batches += other.batches
        self.images += other.images
        return self

    def state(self) -> dict[str, np.ndarray]:
        return {"xy": self.xy, "xx": self.xx, "yy": self.yy, "counts": np.array([self.batches, self.images])}

    def load_state(self, state: dict[str, np.ndarray]) -> "MinibatchCKA":
        self.xy, self.xx, self.yy = (np.array(state[k], dtype=np.float64) for k in ("xy", "xx", "yy"))
        self.batches, self.images = (int(v) for v in state["counts"])
        return self

    def compute(self, model_a: str = "A", model_b: str = "B") -> CKAResult:
        if self.batches == 0:
            raise VitlabError("no batch was accumulated: CKA needs at least one batch of 4 or more images")
        warnings = []
        for name, side, vals in (("A", self.layers_a, self.xx), ("B", self.layers_b, self.yy)):
            for layer, v in zip(side, vals):
                if not np.isfinite(v) or v <= 0:
                    what = "undefined" if not np.isfinite(v) else f"{v:.3g}"
                    warnings.append(f"{model_a if name == 'A' else model_b} {layer}: self-HSIC is {what} "
                                    "(constant or degenerate features); its CKA is undefined")
        with np.errstate(invalid="ignore", divide="ignore"):
            denom = np.sqrt(np.outer(self.xx, self.yy))
            cka = np.where((self.xx[:, None] > 0) & (self.yy[None, :] > 0), self.xy / denom, np.nan)
        return CKAResult(model_a, model_b, self.layers_a, self.layers_b, cka, images=self.images,
                         batches=self.batches, warnings=warnings)
