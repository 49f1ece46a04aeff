"""HiPPO-LegS and the S4 / S4D initialisations built from it, against the matrix written out entry by entry."""

from __future__ import annotations

import math

import pytest
import torch

from seqssm.layers.hippo import hippo_legs, legs_nplr, log_dt_init, s4_init, s4d_init
from seqssm.ops.ssm_kernels import dense_kernel, dplr_dense

F64 = torch.float64
C128 = torch.complex128


def test_hippo_legs_matrix():
    A, B = hippo_legs(4)
    r = torch.sqrt(torch.tensor([1.0, 3, 5, 7], dtype=F64))
    expected = torch.zeros(4, 4, dtype=F64)
    for n in range(4):  # equation (76), written out entry by entry
        expected[n, n] = -(n + 1)
        for k in range(n):
            expected[n, k] = -r[n] * r[k]
    torch.testing.assert_close(A, expected)
    torch.testing.assert_close(B, r)


@pytest.mark.parametrize("N", [2, 8, 64])
def test_legs_nplr_reconstructs_hippo(N):
    A, B = hippo_legs(N)
    Lambda, P, Bt, V = legs_nplr(N)
    V_full = torch.cat([V, V.conj()], 1)
    torch.testing.assert_close(V_full.conj().T @ V_full, torch.eye(N, dtype=C128), rtol=0, atol=1e-10)
    p = torch.cat([P, P.conj()])
    A_c = torch.diag_embed(torch.cat([Lambda, Lambda.conj()])) - p.unsqueeze(-1) * p.conj()
    B_c = torch.cat([Bt, Bt.conj()])
    scale = A.abs().max().item()
    torch.testing.assert_close(V_full @ A_c @ V_full.conj().T, A.to(C128), rtol=0, atol=1e-12 * scale)
    torch.testing.assert_close(V_full @ B_c, B.to(C128), rtol=0, atol=1e-10)
    assert torch.all(Lambda.real == -0.5) and torch.all(Lambda.imag < 0)


def test_s4_init_is_exactly_legs():
    """The DPLR system of s4_init, read out through C = c V, is HiPPO-LegS with output row c."""
    N = 8
    A, B = hippo_legs(N)
    Lambda, P, Bt = (t[0] for t in s4_init(N, 1, F64))
    V = legs_nplr(N)[3]
    c = torch.randn(N, dtype=F64)
    A_r, B_r, C_r = dplr_dense(Lambda, P, Bt, c.to(C128) @ V)
    eig = torch.linalg.eigvals(A_r)
    torch.testing.assert_close(eig.real.sort().values, -torch.arange(N, 0, -1, dtype=F64), rtol=0, atol=1e-8)
    dt = torch.tensor([0.1], dtype=F64)
    for method in ("zoh", "bilinear"):
        K = dense_kernel(A_r[None], B_r[None], C_r[None], dt, 10, method)
        torch.testing.assert_close(K, dense_kernel(A[None], B[None], c[None], dt, 10, method), rtol=0, atol=1e-10)


def test_s4d_inits():
    N, H = 8, 3
    A, B = s4d_init(N, H, "lin", F64)
    assert A.shape == B.shape == (H, N // 2) and A.dtype == C128
    torch.testing.assert_close(A[0], torch.complex(torch.full((4,), -0.5, dtype=F64), math.pi * torch.arange(4, dtype=F64)))
    torch.testing.assert_close(B, torch.ones_like(B))
    A, _ = s4d_init(N, H, "inv", F64)
    n = torch.arange(4, dtype=F64)
    torch.testing.assert_close(A[1].imag, N / math.pi * (N / (2 * n + 1) - 1))
    A, B = s4d_init(N, H, "legs", F64)
    Lambda, _, Bt, _ = legs_nplr(N)
    torch.testing.assert_close(A[2], Lambda)
    torch.testing.assert_close(B[2], Bt)
    with pytest.raises(ValueError, match="init"):
        s4d_init(N, H, "fourier")
    with pytest.raises(ValueError, match="even"):
        legs_nplr(7)


def test_log_dt_init_is_log_uniform():
    torch.manual_seed(0)
    dt = torch.exp(log_dt_init(20000, 1e-3, 1e-1).double())
    assert dt.min() >= 1e-3 * (1 - 1e-6) and dt.max() <= 1e-1 * (1 + 1e-6)
    # Log-uniform: each decade holds half of the samples.
    assert abs((dt < 1e-2).double().mean().item() - 0.5) < 0.02
