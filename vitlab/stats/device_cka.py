"""U-centring and all-pairs HSIC on the model's device, in torch: the per-batch CKA arithmetic of :mod:`vitlab.cka`
without copying Grams to the host. Only the small (La, Lb) and (L,) HSIC estimates come back, in float64.

Two arithmetic modes (:func:`mode_for`):

- ``"float64"`` (CPU, CUDA): the same float64 U-centring and inner products as ``cka.u_center`` and
  ``cka.hsic_all_pairs``; results equal those to round-off (~1e-16 relative).
- ``"float32c"`` (devices without float64, e.g. Apple MPS): compensated float32. The sums that cancel are carried
  as unevaluated pairs hi + lo of float32 values (double-float arithmetic: Knuth's TwoSum, Dekker 1971), which
  keeps ~48 significant bits where cancellation happens:
    * row sums and the grand total of U-centring: pairwise TwoSum reduction;
    * each U-centred entry k - r_i/(n-2) - r_j/(n-2) + t/((n-1)(n-2)): every subtraction by TwoSum, the error
      terms and the lo parts added back once, so the entry is correct to float32 rounding of the *result*;
    * <U(K), U(L)>: one float32 product per row i (a batched GEMM over n terms), the n row partials summed by
      pairwise TwoSum, hi + lo added on the host in float64.
  On the bias-dominated cases of tests/test_cka.py this stays within 1e-6 of the float64 reference
  (tests/test_device_cka.py); a plain float32 U-centring of raw Grams does not.

Shapes: L taps, n images in a batch.
"""

from __future__ import annotations

import numpy as np

from ..errors import VitlabError

MODES = ("float64", "float32c")


def mode_for(device) -> str:
    """'float64' where the device has float64 (CPU, CUDA), else 'float32c' (compensated float32; MPS)."""
    import torch

    kind = torch.device(device).type
    return "float32c" if kind == "mps" else "float64"


def _norm(n: int, estimator: str) -> int:
    if estimator == "unbiased":
        if n < 4:
            raise VitlabError(f"a batch of {n} images cannot be used by the unbiased HSIC estimator: "
                              "it needs at least 4")
        return n * (n - 3)
    if estimator == "biased":
        return (n - 1) ** 2
    raise VitlabError(f"estimator must be 'unbiased' or 'biased', not '{estimator}'")


def _two_sum(a, b):
    """a + b = s + e exactly (Knuth), elementwise."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _df_sum(hi, lo, dim: int):
    """Double-float sum of (hi, lo) pairs along ``dim`` by pairwise TwoSum: (hi, lo) with that dim removed."""
    import torch

    hi, lo = hi.movedim(dim, -1), lo.movedim(dim, -1)
    while hi.shape[-1] > 1:
        if hi.shape[-1] % 2:
            pad = [0, 1]
            hi, lo = torch.nn.functional.pad(hi, pad), torch.nn.functional.pad(lo, pad)
        h = hi.shape[-1] // 2
        s, e = _two_sum(hi[..., :h], hi[..., h:])
        hi, lo = _two_sum(s, e + lo[..., :h] + lo[..., h:])
    return hi[..., 0], lo[..., 0]


def _split(a):
    """a = hi + lo with 12-bit halves, so products of halves are exact in float32 (Dekker 1971)."""
    t = 4097.0 * a
    hi = t - (t - a)
    return hi, a - hi


def _two_prod(a, b):
    """a * b = p + e exactly, elementwise, without FMA (Dekker 1971)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _df_scale(hi, lo, c: float):
    """(hi + lo) / c as a double-float pair: the quotient's residual hi - q c is formed exactly and divided again.

    ``c`` is an integer below 2^24 (n - 2, (n - 1)(n - 2) for n < 4096), so it is exact in float32.
    """
    import torch

    q = hi / c
    p, pe = _two_prod(q, torch.full_like(q, c))
    r = (hi - p) - pe  # hi - p is exact (Sterbenz: p is within a rounding of hi)
    return q, (r + lo) / c


def _u_center_c(k):
    """Compensated float32 U-centring of symmetric (L, n, n) Grams (module docstring)."""
    import torch

    n = k.shape[-1]
    k = k.to(torch.float32).clone()
    idx = torch.arange(n, device=k.device)
    k[..., idx, idx] = 0.0
    zero = torch.zeros_like(k)
    rh, rl = _df_sum(k, zero, -1)  # (L, n) row sums
    th, tl = _df_sum(rh, rl, -1)  # (L,)
    ah, al = _df_scale(rh, rl, float(n - 2))
    ch, cl = _df_scale(th, tl, float((n - 1) * (n - 2)))
    s, e1 = _two_sum(k, -ah[..., :, None])
    s, e2 = _two_sum(s, -ah[..., None, :])
    s, e3 = _two_sum(s, ch[..., None, None].expand_as(s))
    u = s + ((e1 + e2 + e3) - al[..., :, None] - al[..., None, :] + cl[..., None, None])
    u[..., idx, idx] = 0.0
    return u


def _double_center_c(k):
    """Compensated float32 H K H of symmetric (L, n, n) Grams."""
    import torch

    n = k.shape[-1]
    k = k.to(torch.float32)
    zero = torch.zeros_like(k)
    rh, rl = _df_sum(k, zero, -1)
    th, tl = _df_sum(rh, rl, -1)
    mh, ml = _df_scale(rh, rl, float(n))
    gh, gl = _df_scale(th, tl, float(n * n))
    s, e1 = _two_sum(k, -mh[..., :, None])
    s, e2 = _two_sum(s, -mh[..., None, :])
    s, e3 = _two_sum(s, gh[..., None, None].expand_as(s))
    return s + ((e1 + e2 + e3) - ml[..., :, None] - ml[..., None, :] + gl[..., None, None])


def centred(grams, estimator: str = "unbiased", mode: str = "float64"):
    """(L, n, n) Grams (a tensor on the device, or an array) -> centred Grams on the same device, in the mode's
    dtype: U-centred (unbiased HSIC_1) or H K H (biased HSIC_0), as :func:`vitlab.cka.centred`."""
    import torch

    k = torch.as_tensor(grams)
    n = k.shape[-1]
    _norm(n, estimator)
    if mode == "float32c":
        return _u_center_c(k) if estimator == "unbiased" else _double_center_c(k)
    if mode != "float64":
        raise VitlabError(f"device CKA mode must be one of {', '.join(MODES)}, not '{mode}'")
    k = k.to(torch.float64)
    if estimator == "biased":
        k = k - k.mean(dim=-1, keepdim=True)
        return k - k.mean(dim=-2, keepdim=True)
    k = k.clone()
    idx = torch.arange(n, device=k.device)
    k[..., idx, idx] = 0.0
    row = k.sum(dim=-1)
    total = row.sum(dim=-1)
    u = k - row[..., :, None] / (n - 2) - row[..., None, :] / (n - 2)
    u += (total / ((n - 1) * (n - 2)))[..., None, None]
    u[..., idx, idx] = 0.0
    return u


def _inner_c(ca, cb) -> np.ndarray:
    """Compensated float32 <ca[a], cb[b]> for all a, b: per-row GEMMs, rows summed by TwoSum; float64 on the host."""
    import torch

    rows_a = ca.permute(1, 0, 2)  # (n, La, n)
    rows_b = cb.permute(1, 2, 0)  # (n, n, Lb)
    partial = torch.bmm(rows_a, rows_b)  # (n, La, Lb): row i's n products
    hi, lo = _df_sum(partial, torch.zeros_like(partial), 0)
    return hi.cpu().numpy().astype(np.float64) + lo.cpu().numpy().astype(np.float64)


def hsic_all_pairs(ca, cb, estimator: str = "unbiased", mode: str = "float64") -> np.ndarray:
    """(La, n, n), (Lb, n, n) centred Grams on the device -> (La, Lb) HSIC estimates, float64 on the host."""
    n = ca.shape[-1]
    if cb.shape[-1] != n:
        raise VitlabError(f"Grams of different batch sizes ({n} and {cb.shape[-1]}) cannot be paired")
    norm = _norm(n, estimator)
    if mode == "float32c":
        return _inner_c(ca, cb) / norm
    out = ca.reshape(ca.shape[0], -1) @ cb.reshape(cb.shape[0], -1).T
    return out.cpu().numpy() / norm


def hsic_self(c, estimator: str = "unbiased", mode: str = "float64") -> np.ndarray:
    """(L, n, n) centred Grams -> (L,) HSIC(K, K), float64 on the host."""
    import torch

    norm = _norm(c.shape[-1], estimator)
    if mode == "float32c":
        sq = (c * c).reshape(c.shape[0], c.shape[1], -1)  # (L, n, n): squares of float32 values, rounded once
        hi, lo = _df_sum(*_df_sum(sq, torch.zeros_like(sq), -1), -1)
        return (hi.cpu().numpy().astype(np.float64) + lo.cpu().numpy().astype(np.float64)) / norm
    flat = c.reshape(c.shape[0], -1)
    return (flat * flat).sum(dim=-1).cpu().numpy() / norm
