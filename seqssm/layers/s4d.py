"""S4D: the diagonal structured state space layer (Ulbaek 2024 thesis, 7.2, 7.3).

Each of the H channels is its own SISO system with N/2 complex modes (the other N/2 are their
conjugates, implicit): h_t = Ā h_{t-1} + B̄ x_t, y_t = 2 Re(C h_t) + D x_t. Training runs the
convolution with the Vandermonde kernel by FFT; `scan` and `step` run the same recurrence.

Parametrisation: A = -exp(log_A_real) + i A_imag, so Re A < 0 for any parameter values and the
discrete system stays stable through training; Δ = exp(log_dt). A, B, C, Δ train at 0.1x lr
without weight decay (Ulbaek 2024 thesis, 12.2.4). SSM numerics run in at least float32 with autocast off.
"""

from __future__ import annotations

import torch
from torch import nn

from seqssm.layers.base import (
    SequenceLayer, check_sizes, complex_dtype, full_precision, mask_outputs, mask_recurrence, ssm_param, step_system
)
from seqssm.layers.hippo import log_dt_init, s4d_init
from seqssm.ops.fftconv import fft_conv
from seqssm.ops.linear import linear_scan
from seqssm.ops.ssm_kernels import (
    DISCRETIZATIONS,
    discretize_diag,
    s4d_kernel,
    vandermonde_product,
    vandermonde_transpose_product,
)


def init_diagonal_ssm(layer: nn.Module, A: torch.Tensor, B: torch.Tensor, dt_min: float, dt_max: float,
                      dt_distribution: str = "log-uniform") -> None:
    """Give `layer` (with d_model, d_state) the parameters S4 and S4D share (Ulbaek 2024 thesis, 12.2.4): A (H, N/2) as
    Re A = -exp(log_A_real) < 0 and A_imag, B (H, N/2), C ~ N(0, 1) complex (unscaled: E|C|^2 = 1), Δ in
    [dt_min, dt_max] log-uniform (S4's code) or uniform (`dt_distribution`, Ulbaek 2024 thesis, 12.2.4), all tagged as
    SSM parameters, and D = 1."""
    layer.log_A_real = ssm_param(torch.log(-A.real))
    layer.A_imag = ssm_param(A.imag)
    layer.B = ssm_param(torch.view_as_real(B))
    layer.C = ssm_param(torch.view_as_real(torch.randn(layer.d_model, layer.d_state // 2, dtype=torch.complex64)))
    layer.log_dt = ssm_param(log_dt_init(layer.d_model, dt_min, dt_max, distribution=dt_distribution))
    layer.D = nn.Parameter(torch.ones(layer.d_model))


def diagonal_A(layer: nn.Module, dtype: torch.dtype) -> torch.Tensor:
    """The continuous-time diagonal A (H, N/2) of a layer set up by `init_diagonal_ssm`, complex in `dtype`."""
    return torch.complex(-torch.exp(layer.log_A_real.to(dtype)), layer.A_imag.to(dtype))


class ConvolutionalSSM(SequenceLayer):
    """Base of S4 and S4D: trains as one FFT convolution with the kernel of its current parameters.
    Subclasses give `kernel(L, dtype)` -> (H, L), the feedthrough `D` (H,), and scan / step."""

    def _forward(self, x: torch.Tensor, lengths=None) -> torch.Tensor:
        """x (B, L, H) -> y (B, L, H) from the zero state: FFT convolution with the kernel, plus D x."""
        with full_precision(x, self.D) as dtype:
            y = fft_conv(x.to(dtype), self.kernel(x.shape[1], dtype), self.D.to(dtype))
        return y.to(x.dtype)


class S4D(ConvolutionalSSM):
    """Diagonal SSM layer: x (B, L, d_model) -> y (B, L, d_model); state (B, d_model, d_state/2) complex.

    init: "legs" (S4D-LegS, default), "lin" or "inv"; discretization: "zoh" (default) or "bilinear";
    dt_distribution: Δ "log-uniform" (default) or "uniform" in [dt_min, dt_max].
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        init: str = "legs",
        discretization: str = "zoh",
        dt_distribution: str = "log-uniform",
    ):
        super().__init__()
        check_sizes("S4D", d_model=d_model)
        check_sizes("S4D", minimum=2, d_state=d_state)
        if discretization not in DISCRETIZATIONS:
            raise ValueError(f"unknown discretization {discretization!r}; choose one of {DISCRETIZATIONS}")
        if d_state % 2:
            raise ValueError(f"d_state counts conjugate pairs twice and must be even, got {d_state}")
        self.d_model, self.d_state, self.discretization = d_model, d_state, discretization
        init_diagonal_ssm(self, *s4d_init(d_state, d_model, init), dt_min, dt_max, dt_distribution)

    def discrete(self, dtype: torch.dtype):
        """-> log Ā, B̄, C, each (H, N/2) complex in `dtype`'s precision."""
        B, C = torch.view_as_complex(self.B.to(dtype)), torch.view_as_complex(self.C.to(dtype))
        log_dA, dB = discretize_diag(diagonal_A(self, dtype), B, torch.exp(self.log_dt.to(dtype)), self.discretization)
        return log_dA, dB, C

    def _step_system(self, dtype: torch.dtype):
        log_dA, dB, C = self.discrete(dtype)
        return torch.exp(log_dA), dB, C

    def kernel(self, L: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The convolution kernel K (H, L) of the current parameters."""
        log_dA, dB, C = self.discrete(dtype)
        return s4d_kernel(C, dB, log_dA, L)

    def _scan(self, x: torch.Tensor, state, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """x (B, L, H), state (B, H, N/2) complex or None, resets / mask (B, L) -> (y (B, L, H), final state).

        Without resets or mask this is the FFT convolution plus the response to `state`, both
        Vandermonde products; with either it is the recurrence through `linear_scan`.
        """
        L = x.shape[1]
        with full_precision(x, self.D) as dtype:
            log_dA, dB, C = self.discrete(dtype)
            u = x.to(dtype)
            h0 = None if state is None else state.to(log_dA.dtype)
            if resets is None and mask is None:
                y = fft_conv(u, s4d_kernel(C, dB, log_dA, L), self.D.to(dtype))
                # h_L = Σ_j Ā^(L-1-j) B̄ x_j (+ Ā^L h_0); y_t gains 2 Re C Ā^(t+1) h_0.
                u_rev = u.flip(1).transpose(1, 2).to(log_dA.dtype)
                h = dB * vandermonde_transpose_product(u_rev, log_dA)
                if h0 is not None:
                    y = y + 2 * vandermonde_product(C * torch.exp(log_dA) * h0, log_dA, L).real.transpose(1, 2)
                    h = h + torch.exp(L * log_dA) * h0
                return y.to(x.dtype), h
            a, b = mask_recurrence(mask, torch.exp(log_dA), dB * u.unsqueeze(-1))
            hs = linear_scan(a, b, initial_state=h0, resets=resets)
            y = mask_outputs(mask, 2 * torch.einsum("blhn,hn->blh", hs, C).real + self.D.to(dtype) * u)
        return y.to(x.dtype), hs[:, -1]

    def _step(self, x_t: torch.Tensor, state):
        """x_t (B, H), state (B, H, N/2) complex -> (y_t (B, H), next state)."""
        with full_precision(x_t, self.D) as dtype:
            dA, dB, C = step_system(self, self._step_system, dtype)
            u = x_t.to(dtype)
            h = dA * state.to(dA.dtype) + dB * u.unsqueeze(-1)
            y = 2 * (h * C).sum(-1).real + self.D.to(dtype) * u
        return y.to(x_t.dtype), h

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, H, N/2), complex in the precision of `dtype` (default: the parameters')."""
        dtype = complex_dtype(dtype or self.D.dtype)
        return torch.zeros(batch_size, self.d_model, self.d_state // 2, device=device or self.D.device, dtype=dtype)
