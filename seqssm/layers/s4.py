"""S4: the diagonal-plus-low-rank structured state space layer (Ulbaek 2024 thesis, 7.4, 9.2).

Each channel is a SISO system of state size N whose transition is A = Λ - p p^* over the N/2
modes Λ and their implicit conjugates (`seqssm.ops.ssm_kernels.dplr_dense`), initialised to
exactly HiPPO-LegS. Discretisation is bilinear: it is the one under which the generating
function reduces to a Cauchy sum of the continuous resolvent.

The parameter C is the output vector of the system itself. The kernel of length L needs the
truncated generating function, so `kernel` computes C~ = C (I - Ā^L) on the fly from the dense
Ā (repeated squaring, O(N^3 log L) per channel); the recurrent form (`scan`, `step`) uses the
dense real N x N matrices (Ā, B̄, C) of the same system, rebuilt from the current parameters on
every call. Both are therefore the same linear system at every L and after every update.

Re Λ = -exp(log_A_real) < 0 and the low-rank term is -p p^*, so A + A^T is negative definite:
the system stays stable however training moves the parameters.
"""

from __future__ import annotations

import torch

from seqssm.layers.base import (
    check_sizes, compute_dtype, full_precision, mask_outputs, ssm_param, step_system, where_state
)
from seqssm.layers.hippo import s4_init
from seqssm.layers.s4d import ConvolutionalSSM, diagonal_A, init_diagonal_ssm
from seqssm.ops.ssm_kernels import discretize_dense, dplr_dense, dplr_kernel, real_to_half


class S4(ConvolutionalSSM):
    """DPLR SSM layer: x (B, L, d_model) -> y (B, L, d_model); state (B, d_model, d_state) real.

    dt_distribution: Δ "log-uniform" (default) or "uniform" in [dt_min, dt_max]."""

    def __init__(self, d_model: int, d_state: int = 64, dt_min: float = 0.001, dt_max: float = 0.1,
                 dt_distribution: str = "log-uniform"):
        super().__init__()
        check_sizes("S4", d_model=d_model)
        check_sizes("S4", minimum=2, d_state=d_state)
        if d_state % 2:
            raise ValueError(f"d_state counts conjugate pairs twice and must be even, got {d_state}")
        self.d_model, self.d_state = d_model, d_state
        Lambda, P, B = s4_init(d_state, d_model)
        init_diagonal_ssm(self, Lambda, B, dt_min, dt_max, dt_distribution)
        self.P = ssm_param(torch.view_as_real(P))  # the low-rank term: A = Λ - p p^*

    def dplr(self, dtype: torch.dtype):
        """-> Λ, P, B, C (H, N/2) complex and Δ (H,) in `dtype`'s precision."""
        P, B, C = (torch.view_as_complex(p.to(dtype)) for p in (self.P, self.B, self.C))
        return diagonal_A(self, dtype), P, B, C, torch.exp(self.log_dt.to(dtype))

    def dense(self, dtype: torch.dtype):
        """The discrete system as real matrices: -> Ā (H, N, N), B̄ (H, N), C (H, N)."""
        Lambda, P, B, C, dt = self.dplr(dtype)
        A_r, B_r, C_r = dplr_dense(Lambda, P, B, C)
        dA, dB = discretize_dense(A_r, B_r, dt, "bilinear")
        return dA, dB, C_r

    def kernel(self, L: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The convolution kernel K (H, L) of the current parameters."""
        Lambda, P, B, _, dt = self.dplr(dtype)
        dA, _, C_r = self.dense(dtype)
        C_tilde = C_r - (C_r.unsqueeze(-2) @ torch.linalg.matrix_power(dA, L)).squeeze(-2)
        return dplr_kernel(Lambda, P, B, real_to_half(C_tilde), dt, L)

    def _scan(self, x: torch.Tensor, state, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """x (B, L, H), state (B, H, N) or None, resets / mask (B, L) -> (y (B, L, H), final state): the dense
        recurrence, one step at a time (correct, not fast: the convolution has no carried state)."""
        with full_precision(x, self.D) as dtype:
            dA, dB, C = self.dense(dtype)
            u = x.to(dtype)
            h = self.initial_state(x.shape[0], x.device, dtype) if state is None else state.to(dtype)
            ys = []
            for t in range(x.shape[1]):
                if resets is not None:
                    h = h * (~resets[:, t]).to(dtype)[:, None, None]
                h_t = torch.einsum("hmn,bhn->bhm", dA, h) + dB * u[:, t, :, None]
                h = h_t if mask is None else where_state(mask[:, t], h_t, h)
                ys.append((h * C).sum(-1))
            y = mask_outputs(mask, torch.stack(ys, 1) + self.D.to(dtype) * u)
        return y.to(x.dtype), h

    def _step(self, x_t: torch.Tensor, state):
        """x_t (B, H), state (B, H, N) -> (y_t (B, H), next state)."""
        with full_precision(x_t, self.D) as dtype:
            dA, dB, C = step_system(self, self.dense, dtype)
            u = x_t.to(dtype)
            h = torch.einsum("hmn,bhn->bhm", dA, state.to(dtype)) + dB * u.unsqueeze(-1)
            y = (h * C).sum(-1) + self.D.to(dtype) * u
        return y.to(x_t.dtype), h

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, H, N), real in `dtype` (default: the parameters', at least float32)."""
        dtype = compute_dtype(dtype or self.D.dtype)
        return torch.zeros(batch_size, self.d_model, self.d_state, device=device or self.D.device, dtype=dtype)
