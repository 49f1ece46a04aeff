"""Convolution kernels of linear time-invariant SSMs: K_j = C Ā^j B̄, j < L (Ulbaek 2024 thesis, 6.5).

Conventions shared by S4D and S4. A state of size N is stored as N/2 complex modes whose
conjugate partners are implicit, so every system here is real: its output is 2 Re(C h) in the
diagonal case, and in the DPLR case the low-rank term couples each mode with its partner
(see `dplr_dense`). Channels H are independent (SISO).

- `discretize_diag` / `discretize_dense`: ZOH and bilinear discretisation (Ulbaek 2024 thesis, 6.3).
- `vandermonde_product` + `s4d_kernel`: the diagonal kernel as a Vandermonde product (7.2).
- `cauchy_bilinear` + `dplr_kernel`: the S4 kernel from its truncated generating function at
  the roots of unity, via Woodbury and Cauchy sums, then an inverse FFT (7.4).
- `dplr_dense` + `dense_kernel`: the same systems as dense matrices, the plain reference.
"""

from __future__ import annotations

import math

import torch

from seqssm.ops.checks import check_floating, check_length

DISCRETIZATIONS = ("zoh", "bilinear")
_COMPILED_SPLIT = 32  # the c of `_split` in a compiled graph


def _check_method(method: str) -> None:
    if method not in DISCRETIZATIONS:
        raise ValueError(f"unknown discretization {method!r}; choose one of {DISCRETIZATIONS}")


def discretize_diag(A: torch.Tensor, B: torch.Tensor, dt: torch.Tensor, method: str = "zoh"):
    """Diagonal A, B (..., N) complex, dt (...) -> (log Ā, B̄), each (..., N); Ā = exp(log Ā)."""
    _check_method(method)
    dtA = dt.unsqueeze(-1) * A
    if method == "zoh":
        # B̄ = (exp(ΔA) - 1) / A · B; expm1 keeps the small-ΔA regime accurate in fp32.
        return dtA, torch.expm1(dtA) / A * B
    log_dA = torch.log1p(dtA / 2) - torch.log1p(-dtA / 2)
    return log_dA, dt.unsqueeze(-1) * B / (1 - dtA / 2)


def discretize_dense(A: torch.Tensor, B: torch.Tensor, dt: torch.Tensor, method: str = "zoh"):
    """Dense A (..., N, N), B (..., N), dt (...) -> (Ā (..., N, N), B̄ (..., N))."""
    _check_method(method)
    n = A.shape[-1]
    dt = dt[..., None, None]
    if method == "zoh":
        # exp([[ΔA, ΔB], [0, 0]]) = [[Ā, B̄], [0, 1]]: no inverse of A needed.
        M = torch.zeros(*A.shape[:-2], n + 1, n + 1, dtype=A.dtype, device=A.device)
        M[..., :n, :n] = dt * A
        M[..., :n, n] = dt[..., 0] * B
        E = torch.linalg.matrix_exp(M)
        return E[..., :n, :n], E[..., :n, n]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    lhs = eye - dt / 2 * A
    dA = torch.linalg.solve(lhs, eye + dt / 2 * A)
    dB = torch.linalg.solve(lhs, (dt[..., 0] * B).unsqueeze(-1)).squeeze(-1)
    return dA, dB


def vandermonde_matrix(log_a: torch.Tensor, L: int) -> torch.Tensor:
    """log_a (..., N) complex -> (..., N, L) with entries a_n^j = exp(j log a_n)."""
    j = torch.arange(L, device=log_a.device, dtype=log_a.real.dtype)
    return torch.exp(log_a.unsqueeze(-1) * j)


def _split(L: int) -> tuple[int, int]:
    # j = j_lo + c j_hi with j_lo < c, j_hi < m, c ~ sqrt(L): a^j = a^j_lo a^(c j_hi) turns the
    # (N, L) Vandermonde product into two small exponentials and one batched matmul.
    if torch.compiler.is_compiling():
        # One graph for every L under dynamic shapes: a square root of a symbolic L, or c m = L exactly for some L
        # only, would each fix the graph to a set of lengths. A fixed c costs only exponentials (c + L / c per mode).
        return _COMPILED_SPLIT, L // _COMPILED_SPLIT + 2  # m > 1: a size of 1 would be a graph of its own
    c = math.isqrt(max(L, 1) - 1) + 1
    return c, -(-L // c)


def vandermonde_product(v: torch.Tensor, log_a: torch.Tensor, L: int) -> torch.Tensor:
    """v (..., N), log_a (..., N) complex, broadcastable -> (..., L): Σ_n v_n a_n^j for j < L."""
    c, m = _split(L)
    lo, hi = vandermonde_matrix(log_a, c), vandermonde_matrix(log_a * c, m)
    out = (v.unsqueeze(-1) * lo).transpose(-1, -2) @ hi  # (..., c, m)
    return out.transpose(-1, -2).reshape(*out.shape[:-2], c * m)[..., :L]


def vandermonde_transpose_product(u: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    """u (..., L), log_a (..., N) complex, broadcastable -> (..., N): Σ_j u_j a_n^j."""
    L = u.shape[-1]
    c, m = _split(L)
    lo, hi = vandermonde_matrix(log_a, c), vandermonde_matrix(log_a * c, m)
    u = torch.nn.functional.pad(u, (0, c * m - L)).reshape(*u.shape[:-1], m, c)
    return ((u @ lo.transpose(-1, -2)) * hi.transpose(-1, -2)).sum(-2)


def s4d_kernel(C: torch.Tensor, dB: torch.Tensor, log_dA: torch.Tensor, L: int) -> torch.Tensor:
    """Diagonal SSM kernel: C, B̄, log Ā (H, N/2) complex -> K (H, L) real, K_j = 2 Re Σ_n C_n Ā_n^j B̄_n."""
    check_floating("s4d_kernel", allow_complex=True, C=C, dB=dB, log_dA=log_dA)
    L = check_length("s4d_kernel", L)
    return 2 * vandermonde_product(C * dB, log_dA, L).real


def roots_of_unity(L: int, dtype: torch.dtype = torch.complex128, device=None) -> torch.Tensor:
    """ω_k = exp(-2πi k / L) for k = 0 .. L // 2: the points where `irfft(·, n=L)` samples a spectrum."""
    k = torch.arange(L // 2 + 1, device=device, dtype=torch.float64)
    return torch.polar(torch.ones_like(k), -2 * math.pi * k / L).to(dtype)


def cauchy_bilinear(v: torch.Tensor, w: torch.Tensor, dt: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """Cauchy sums of the bilinear resolvent: v (..., H, N/2), w (H, N/2), dt (H), ω (F) -> (..., H, F).

    Returns Σ_n v_n / d_n(ω) + conj(v_n) / d̄_n(ω), d_n(ω) = (1 - ω) - Δ/2 (1 + ω) w_n. This is
    2/(Δ(1+ω)) times the Cauchy product Σ v_n / (z - w_n) at z = (2/Δ)(1 - ω)/(1 + ω), written
    without the pole of z at ω = -1 (the Nyquist bin of an even L).
    """
    w, v = torch.cat([w, w.conj()], -1), torch.cat([v, v.conj()], -1)
    half_dt_one_plus = (dt / 2).unsqueeze(-1) * (1 + omega)  # (H, F)
    d = (1 - omega) - half_dt_one_plus.unsqueeze(1) * w.unsqueeze(-1)  # (H, N, F)
    return torch.einsum("...hn,hnf->...hf", v, d.reciprocal())


def dplr_kernel(
    Lambda: torch.Tensor, P: torch.Tensor, B: torch.Tensor, C_tilde: torch.Tensor, dt: torch.Tensor, L: int
) -> torch.Tensor:
    """Bilinear S4 kernel of A = Λ - p p^* (see `dplr_dense`): Λ, P, B, C~ (H, N/2) complex, dt (H) -> K (H, L) real.

    C~ = C (I - Ā^L) is the output vector of the truncated generating function
    Σ_{j<L} C Ā^j B̄ ω^j = C~ (I - Ā ω)^{-1} B̄; at the L-th roots of unity the bilinear resolvent
    equals Δ [(1-ω) I - Δ/2 (1+ω) A]^{-1}, inverted by Woodbury over the rank-1 term.
    """
    check_floating("dplr_kernel", allow_complex=True, Lambda=Lambda, P=P, B=B, C_tilde=C_tilde, dt=dt)
    if check_length("dplr_kernel", L) == 0:
        return dt.new_zeros(dt.shape[0], 0, dtype=Lambda.real.dtype)
    omega = roots_of_unity(L, dtype=Lambda.dtype, device=Lambda.device)
    # Sums of C~ B, C~ p, p^* B, p^* p over all N modes (conjugate partners included).
    v = torch.stack([C_tilde * B, C_tilde * P, P.conj() * B, P.conj() * P])
    r_cb, r_cp, r_pb, r_pp = cauchy_bilinear(v, Lambda, dt, omega)
    s = (dt / 2).unsqueeze(-1) * (1 + omega)
    spectrum = dt.unsqueeze(-1) * (r_cb - s * r_cp * r_pb / (1 + s * r_pp))
    return torch.fft.irfft(spectrum, n=L)


def dplr_dense(Lambda: torch.Tensor, P: torch.Tensor, B: torch.Tensor, C: torch.Tensor):
    """Real N x N form of the DPLR system: Λ, P, B, C (..., N/2) complex -> A (..., N, N), B (..., N), C (..., N) real.

    The complex system of N modes (Λ, conj Λ) with A = diag(Λ, conj Λ) - p p^*, p = (P, conj P),
    B = (B, conj B), C = (C, conj C) maps its conjugate-symmetric states h = (h, conj h) to the
    real state x = (Re h, Im h). There A = [[Re Λ, -Im Λ], [Im Λ, Re Λ]] - 2 q q^T with
    q = (Re P, Im P), B = (Re B, Im B), C = 2 (Re C, -Im C). P = 0 gives the S4D system.
    Since Re Λ < 0, A + A^T = 2 diag(Re Λ) - 4 q q^T is negative definite: the system is stable.
    """
    re, im = torch.diag_embed(Lambda.real), torch.diag_embed(Lambda.imag)
    A = torch.cat([torch.cat([re, -im], -1), torch.cat([im, re], -1)], -2)
    q = torch.cat([P.real, P.imag], -1)
    A = A - 2 * q.unsqueeze(-1) * q.unsqueeze(-2)
    return A, torch.cat([B.real, B.imag], -1), 2 * torch.cat([C.real, -C.imag], -1)


def real_to_half(c: torch.Tensor) -> torch.Tensor:
    """Inverse of the C map of `dplr_dense`: real row c (..., N) -> C (..., N/2) complex with 2 Re(C h) = c x."""
    n = c.shape[-1] // 2
    return torch.complex(c[..., :n], -c[..., n:]) / 2


def dense_kernel(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, dt: torch.Tensor, L: int, method: str = "zoh"):
    """Reference kernel by the plain power loop: A (H, N, N), B, C (H, N), dt (H) -> K (H, L), K_j = C Ā^j B̄."""
    check_floating("dense_kernel", allow_complex=True, A=A, B=B, C=C, dt=dt)
    if check_length("dense_kernel", L) == 0:
        return C.new_zeros(C.shape[0], 0, dtype=torch.promote_types(C.dtype, B.dtype))
    dA, dB = discretize_dense(A, B, dt, method)
    out = []
    for _ in range(L):
        out.append((C * dB).sum(-1))
        dB = (dA @ dB.unsqueeze(-1)).squeeze(-1)
    return torch.stack(out, -1)
