"""SSM kernels and FFT convolution against plain references (dense matrices, loops)."""

from __future__ import annotations

import math

import pytest
import torch

from seqssm.layers.hippo import s4_init
from seqssm.ops.fftconv import fft_conv
from seqssm.ops.ssm_kernels import (
    cauchy_bilinear,
    dense_kernel,
    discretize_dense,
    discretize_diag,
    dplr_dense,
    dplr_kernel,
    real_to_half,
    roots_of_unity,
    s4d_kernel,
    vandermonde_matrix,
    vandermonde_product,
    vandermonde_transpose_product,
)

F64 = torch.float64
C128 = torch.complex128


def random_dplr(H=3, N=8, seed=0, dtype=torch.float64):
    """HiPPO-LegS DPLR parameters, perturbed so that no test leans on the init's structure."""
    g = torch.Generator().manual_seed(seed)
    Lambda, P, B = s4_init(N, H, dtype)
    cdt = Lambda.dtype
    noise = lambda: 0.2 * torch.randn(H, N // 2, generator=g, dtype=F64).to(cdt)  # noqa: E731
    Lambda = torch.complex(-torch.rand(H, N // 2, generator=g, dtype=F64) - 0.1, Lambda.imag.to(F64)).to(cdt) + 1j * noise()
    C = torch.randn(H, N // 2, generator=g, dtype=C128).to(cdt)
    dt = torch.exp(torch.empty(H, dtype=F64).uniform_(math.log(1e-2), math.log(0.5), generator=g)).to(dtype)
    return Lambda, P + noise(), B + noise(), C, dt


def conj_extended(Lambda, P, B, C):
    """The full complex system of N modes: A = diag(Λ, conj Λ) - p p^*, written out directly."""
    cat = lambda t: torch.cat([t, t.conj()], -1)  # noqa: E731
    p = cat(P)
    A = torch.diag_embed(cat(Lambda)) - p.unsqueeze(-1) * p.conj().unsqueeze(-2)
    return A, cat(B), cat(C)


def truncated_C(A_r, B_r, C_r, dt, L):
    dA, _ = discretize_dense(A_r, B_r, dt, "bilinear")
    return real_to_half(C_r - (C_r.unsqueeze(-2) @ torch.linalg.matrix_power(dA, L)).squeeze(-2))


# ----------------------------------------------------------------------------- discretisation


@pytest.mark.parametrize("method", ["zoh", "bilinear"])
def test_diag_discretisation_matches_dense(method):
    Lambda, _, B, _, dt = random_dplr()
    log_dA, dB = discretize_diag(Lambda, B, dt, method)
    dA_dense, dB_dense = discretize_dense(torch.diag_embed(Lambda), B, dt, method)
    torch.testing.assert_close(torch.diag_embed(torch.exp(log_dA)), dA_dense, rtol=0, atol=1e-13)
    torch.testing.assert_close(dB, dB_dense, rtol=0, atol=1e-13)


def test_zoh_dense_matches_closed_form():
    A_r, B_r, _ = dplr_dense(*random_dplr()[:4])
    dt = torch.tensor([0.1, 0.3, 0.05], dtype=F64)
    dA, dB = discretize_dense(A_r, B_r, dt, "zoh")
    expA = torch.linalg.matrix_exp(dt[:, None, None] * A_r)
    torch.testing.assert_close(dA, expA)
    eye = torch.eye(A_r.shape[-1], dtype=F64)
    torch.testing.assert_close(dB, torch.linalg.solve(A_r, ((expA - eye) @ B_r.unsqueeze(-1))).squeeze(-1))


def test_unknown_discretisation_raises():
    with pytest.raises(ValueError, match="discretization"):
        discretize_diag(torch.ones(1, 2, dtype=C128), torch.ones(1, 2, dtype=C128), torch.ones(1), "euler")


# ----------------------------------------------------------------------------- Vandermonde / S4D


@pytest.mark.parametrize("L", [1, 2, 5, 16, 17, 64])
def test_vandermonde_products_match_matrix(L):
    g = torch.Generator().manual_seed(L)
    log_a = torch.complex(-torch.rand(3, 4, generator=g, dtype=F64), torch.randn(3, 4, generator=g, dtype=F64))
    V = vandermonde_matrix(log_a, L)
    torch.testing.assert_close(V[..., -1], torch.exp(log_a) ** (L - 1))
    v = torch.randn(2, 3, 4, generator=g, dtype=C128)
    u = torch.randn(2, 3, L, generator=g, dtype=C128)
    torch.testing.assert_close(vandermonde_product(v, log_a, L), torch.einsum("bhn,hnl->bhl", v, V))
    torch.testing.assert_close(vandermonde_transpose_product(u, log_a), torch.einsum("bhl,hnl->bhn", u, V))


@pytest.mark.parametrize("method", ["zoh", "bilinear"])
@pytest.mark.parametrize("L", [16, 33])
def test_s4d_kernel_matches_dense_system(method, L):
    Lambda, _, B, C, dt = random_dplr()
    log_dA, dB = discretize_diag(Lambda, B, dt, method)
    K = s4d_kernel(C, dB, log_dA, L)
    A_r, B_r, C_r = dplr_dense(Lambda, torch.zeros_like(Lambda), B, C)
    torch.testing.assert_close(K, dense_kernel(A_r, B_r, C_r, dt, L, method), rtol=0, atol=1e-10)
    # The complex conjugate-extended system, built without dplr_dense, has the same kernel.
    A_c, B_c, C_c = conj_extended(Lambda, torch.zeros_like(Lambda), B, C)
    K_c = dense_kernel(A_c, B_c, C_c, dt, L, method)
    torch.testing.assert_close(K_c.imag, torch.zeros_like(K), rtol=0, atol=1e-10)
    torch.testing.assert_close(K, K_c.real, rtol=0, atol=1e-10)


# ----------------------------------------------------------------------------- DPLR / S4


def test_dplr_dense_is_the_conjugate_extended_system():
    params = random_dplr()
    dt = params[-1]
    for method in ("zoh", "bilinear"):
        K_r = dense_kernel(*dplr_dense(*params[:4]), dt, 12, method)
        K_c = dense_kernel(*conj_extended(*params[:4]), dt, 12, method)
        torch.testing.assert_close(K_c, K_r.to(C128), rtol=0, atol=1e-10)
    torch.testing.assert_close(real_to_half(dplr_dense(*params[:4])[2]), params[3])


def test_dplr_dense_is_stable_for_any_low_rank_term():
    Lambda, P, B, C, _ = random_dplr(H=4, N=10, seed=3)
    A_r, _, _ = dplr_dense(Lambda, 30 * P, B, C)
    assert torch.linalg.eigvals(A_r).real.max() < 0


def test_cauchy_bilinear_matches_the_cauchy_product_off_nyquist():
    Lambda, _, _, C, dt = random_dplr()
    omega = roots_of_unity(16)[:-1]  # drop ω = -1, where z below has its pole
    z = (2 / dt[:, None]) * (1 - omega) / (1 + omega)
    direct = 2 / (dt[:, None] * (1 + omega)) * (
        (C[..., None] / (z[:, None] - Lambda[..., None])).sum(1)
        + (C.conj()[..., None] / (z[:, None] - Lambda.conj()[..., None])).sum(1)
    )
    torch.testing.assert_close(cauchy_bilinear(C, Lambda, dt, omega), direct, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("L", [1, 2, 16, 31])
def test_dplr_kernel_matches_dense_bilinear(L):
    Lambda, P, B, C, dt = random_dplr()
    A_r, B_r, C_r = dplr_dense(Lambda, P, B, C)
    K = dplr_kernel(Lambda, P, B, truncated_C(A_r, B_r, C_r, dt, L), dt, L)
    torch.testing.assert_close(K, dense_kernel(A_r, B_r, C_r, dt, L, "bilinear"), rtol=0, atol=1e-10)


def test_dplr_kernel_float32():
    params64 = random_dplr(H=4, N=16, seed=1)
    Lambda, P, B, C, dt = (t.to(torch.complex64) if t.is_complex() else t.float() for t in params64)
    A_r, B_r, C_r = dplr_dense(Lambda, P, B, C)
    K = dplr_kernel(Lambda, P, B, truncated_C(A_r, B_r, C_r, dt, 256), dt, 256)
    assert K.dtype == torch.float32
    ref = dense_kernel(*dplr_dense(*params64[:4]), params64[-1], 256, "bilinear")
    torch.testing.assert_close(K.double(), ref, rtol=0, atol=1e-4 * ref.abs().max().item())


def test_kernel_gradients():
    Lambda, P, B, C, dt = random_dplr(H=2, N=4, seed=2)
    L = 6

    def dplr_fn(lr, li, p, b, c, log_dt):
        Lam, dt_ = torch.complex(-torch.exp(lr), li), torch.exp(log_dt)
        P_, B_, C_ = (torch.view_as_complex(t) for t in (p, b, c))
        A_r, B_r, C_r = dplr_dense(Lam, P_, B_, C_)
        return dplr_kernel(Lam, P_, B_, truncated_C(A_r, B_r, C_r, dt_, L), dt_, L)

    def s4d_fn(lr, li, b, c, log_dt):
        log_dA, dB = discretize_diag(torch.complex(-torch.exp(lr), li), torch.view_as_complex(b), torch.exp(log_dt), "zoh")
        return s4d_kernel(torch.view_as_complex(c), dB, log_dA, L)

    real = lambda t: torch.view_as_real(t).clone().requires_grad_()  # noqa: E731
    lr = torch.log(-Lambda.real).requires_grad_()
    li = Lambda.imag.clone().requires_grad_()
    log_dt = torch.log(dt).requires_grad_()
    assert torch.autograd.gradcheck(dplr_fn, (lr, li, real(P), real(B), real(C), log_dt))
    assert torch.autograd.gradcheck(s4d_fn, (lr, li, real(B), real(C), log_dt))


# ----------------------------------------------------------------------------- FFT convolution


def naive_causal_conv(u, k, D=None):
    B, L, H = u.shape
    y = torch.zeros_like(u)
    for t in range(L):
        for j in range(min(t + 1, k.shape[-1])):
            y[:, t] += k[:, j] * u[:, t - j]
    return y if D is None else y + D * u


@pytest.mark.parametrize("Lk", [9, 4])
def test_fft_conv_matches_naive(Lk):
    g = torch.Generator().manual_seed(Lk)
    u = torch.randn(2, 9, 3, generator=g, dtype=F64, requires_grad=True)
    k = torch.randn(3, Lk, generator=g, dtype=F64, requires_grad=True)
    D = torch.randn(3, generator=g, dtype=F64, requires_grad=True)
    torch.testing.assert_close(fft_conv(u, k, D), naive_causal_conv(u, k, D))
    torch.testing.assert_close(fft_conv(u, k), naive_causal_conv(u, k))
    assert torch.autograd.gradcheck(fft_conv, (u[:1, :6, :2], k[:2, : min(Lk, 6)], D[:2]))


def test_fft_conv_dtypes():
    u, k = torch.randn(2, 8, 3), torch.randn(3, 8)
    assert fft_conv(u, k).dtype == torch.float32
    assert fft_conv(u.bfloat16(), k).dtype == torch.float32
    assert fft_conv(u.double(), k).dtype == torch.float64
    with pytest.raises(ValueError, match="exceeds"):
        fft_conv(u[:, :4], k)


def test_fft_conv_returns_the_layers_layout():
    """y in (B, L, H) memory, as the layers' activations are, with and without D, on the finite and the non-finite
    path: the inverse transform's (B, H, L) memory made every elementwise op after the conv read with a stride of L."""
    u, k, D = torch.randn(2, 8, 3), torch.randn(3, 8), torch.randn(3)
    bad = u.clone()
    bad[0, 3, 1] = float("inf")
    for x in (u, bad):
        for d in (D, None):
            assert fft_conv(x, k, d).is_contiguous()


def test_fft_conv_is_nan_from_each_rows_first_non_finite_step_on():
    """Non-finite steps at t = 0, at the last step and twice in one row: NaN from each row's first one on, every
    other output as the convolution of u with them left out, which only reaches later steps."""
    u, k = torch.randn(3, 9, 4, dtype=torch.float64), torch.randn(4, 9, dtype=torch.float64)
    bad = u.clone()
    for b, t, h, value in ((0, 0, 1, float("nan")), (1, 8, 2, float("inf")), (2, 3, 0, -float("inf")),
                           (2, 6, 0, float("nan"))):
        bad[b, t, h] = value
    y = fft_conv(bad, k)
    expected = torch.zeros(3, 9, 4, dtype=torch.bool)
    expected[0, :, 1] = expected[1, 8:, 2] = expected[2, 3:, 0] = True
    assert torch.equal(torch.isnan(y), expected)
    torch.testing.assert_close(y[~expected], fft_conv(u.masked_fill(~torch.isfinite(bad), 0.0), k)[~expected])
