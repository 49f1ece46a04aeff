"""HiPPO-LegS and the initialisations derived from it (Ulbaek 2024 thesis, 9.1, 9.2, 12.2.4).

Sign convention: `hippo_legs` returns the continuous-time transition A = -A_LegS of Ulbaek 2024
thesis, equation (76) (the LegS ODE is dc/dt = -(1/t) A_LegS c + ...), so all its eigenvalues are
negative: -1, -2, ..., -N.
"""

from __future__ import annotations

import math

import torch

S4D_INITS = ("legs", "lin", "inv")
DT_DISTRIBUTIONS = ("log-uniform", "uniform")


def hippo_legs(N: int, dtype: torch.dtype = torch.float64):
    """HiPPO-LegS: -> A (N, N) = -A_LegS (lower triangular), B (N,) with B_n = sqrt(2n + 1)."""
    n = torch.arange(N, dtype=dtype)
    r = torch.sqrt(2 * n + 1)
    A = torch.tril(r.unsqueeze(-1) * r, diagonal=-1) + torch.diag(n + 1)
    return -A, r


def legs_nplr(N: int, dtype: torch.dtype = torch.float64):
    """Normal-plus-low-rank form of HiPPO-LegS: -> Λ, P, B (N/2,) complex and V (N, N/2) complex.

    With P_legs_n = sqrt(n + 1/2), A + P_legs P_legs^T = -I/2 + S, S skew-symmetric, so it is
    normal with eigenvalues -1/2 + iμ and orthonormal eigenvectors. Keeping one mode of each
    conjugate pair (Im Λ < 0), V_full = (V, conj V) is unitary and
    A = V_full (diag(Λ, conj Λ) - p p^*) V_full^*, p = (P, conj P), P = V^* P_legs, B = V^* B_legs.
    """
    if N % 2:
        raise ValueError(f"the NPLR form keeps conjugate pairs: N must be even, got {N}")
    A, B = hippo_legs(N, torch.float64)
    p = torch.sqrt(torch.arange(N, dtype=torch.float64) + 0.5)
    S = A + p.unsqueeze(-1) * p + 0.5 * torch.eye(N, dtype=torch.float64)
    # S = V diag(iμ) V^* with -iS Hermitian, so eigh gives exact orthonormal eigenvectors.
    mu, V = torch.linalg.eigh(-1j * S.to(torch.complex128))
    # eigh sorts μ ascending and the spectrum is ±μ: the first half are the negative ones.
    mu, V = mu[: N // 2], V[:, : N // 2]
    if mu.abs().min() < 1e-8:
        raise ValueError("HiPPO-LegS normal part has a zero eigenvalue; its conjugate pairs are ill-defined")
    Vh = V.conj().T
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    Lambda = torch.complex(torch.full_like(mu, -0.5), mu)
    return Lambda.to(cdtype), (Vh @ p.to(V.dtype)).to(cdtype), (Vh @ B.to(V.dtype)).to(cdtype), V.to(cdtype)


def s4d_init(N: int, H: int, init: str = "legs", dtype: torch.dtype = torch.float32):
    """Diagonal A and B of S4D: -> A, B (H, N/2) complex, one mode per conjugate pair.

    "legs" (S4D-LegS): the diagonal Λ of `legs_nplr`, B = V^* B_legs, the LegS input vector
    in the eigenbasis of the normal part. "lin" (S4D-Lin): A_n = -1/2 + iπn. "inv" (S4D-Inv):
    A_n = -1/2 + i N/π (N/(2n+1) - 1). Lin and Inv have no LegS basis, so B = 1 (S4D paper).
    """
    if init not in S4D_INITS:
        raise ValueError(f"unknown S4D init {init!r}; choose one of {S4D_INITS}")
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    if init == "legs":
        A, _, B, _ = legs_nplr(N, torch.float64)
    else:
        n = torch.arange(N // 2, dtype=torch.float64)
        imag = math.pi * n if init == "lin" else N / math.pi * (N / (2 * n + 1) - 1)
        A = torch.complex(torch.full_like(n, -0.5), imag)
        B = torch.ones(N // 2, dtype=torch.complex128)
    return A.to(cdtype).expand(H, -1).clone(), B.to(cdtype).expand(H, -1).clone()


def s4_init(N: int, H: int, dtype: torch.dtype = torch.float32):
    """DPLR A = Λ - p p^* and B of S4 from HiPPO-LegS: -> Λ, P, B (H, N/2) complex."""
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    Lambda, P, B, _ = legs_nplr(N, torch.float64)
    return tuple(t.to(cdtype).expand(H, -1).clone() for t in (Lambda, P, B))


def log_dt_init(H: int, dt_min: float = 0.001, dt_max: float = 0.1, dtype: torch.dtype = torch.float32,
                distribution: str = "log-uniform") -> torch.Tensor:
    """log Δ (H,), Δ in [dt_min, dt_max]: log-uniform (the S4 papers' and code's), or "uniform" (Ulbaek 2024 thesis,
    12.2.4)."""
    if not 0 < dt_min <= dt_max:
        raise ValueError(f"need 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
    if distribution not in DT_DISTRIBUTIONS:
        raise ValueError(f"unknown Δ distribution {distribution!r}; choose one of {DT_DISTRIBUTIONS}")
    u = torch.rand(H, dtype=torch.float64)
    if distribution == "uniform":
        return torch.log(dt_min + u * (dt_max - dt_min)).to(dtype)
    return (math.log(dt_min) + u * (math.log(dt_max) - math.log(dt_min))).to(dtype)


def legs_real_part(N: int) -> torch.Tensor:
    """Re Λ (N,) of the LegS DPLR form, float64: -1/2 for every mode and its conjugate (`legs_nplr`); S6's A under
    Ulbaek 2024 thesis, 12.2.4 ("In s6 the A matrix is initialized as Re(Λ) from the DPLR decomposition"), any N."""
    return torch.full((N,), -0.5, dtype=torch.float64)
