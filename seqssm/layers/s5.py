"""S5 (Smith, Warrington and Linderman 2023; van Gelooven 2025 thesis, 2.1.6; Lu et al. 2023, 3.1): one MIMO SSM.

A single diagonal system with P complex states reads all d_model channels at once:
h_t = Λ̄ h_{t-1} + B̄ x_t, y_t = Re(C h_t) + D x_t, with B (P, H) and C (H, P) dense complex.
Λ starts as the eigenvalues of the normal part of HiPPO-LegS, in J blocks of size P/J, and B, C
are drawn in the original basis and moved into the eigenbasis (B̃ = V^* B, C̃ = C V). With
conjugate symmetry (the default) only the P/2 modes with Im Λ < 0 are stored; their partners
are implicit and the output is 2 Re(C̃ h). Every step of the recurrence is a `linear_scan`, and
resets use that scan's reset flags, i.e. the resettable operator of Lu et al. (2023, 3.1).

Parametrisation: Re Λ = -exp(log_Lambda_real) < 0 keeps the system stable (van Gelooven 2025 thesis, 4.2),
Δ = exp(log_dt) per state, complex tensors stored as (..., 2) real parameters. Λ, B and Δ train
at a reduced learning rate without weight decay; C and D train like ordinary weights (van Gelooven 2025 thesis,
sections 4.2 and 4.3: SSM learning rate 1/5 of the network's).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from seqssm.layers.base import (
    SequenceLayer, check_sizes, complex_dtype, full_precision, mask_outputs, mask_recurrence, ssm_param, step_system
)
from seqssm.layers.hippo import legs_nplr, log_dt_init
from seqssm.ops.linear import linear_scan
from seqssm.ops.ssm_kernels import DISCRETIZATIONS, discretize_diag

# van Gelooven 2025 thesis, 4.3, fixes the other weights' learning rate at 5x the SSM learning rate.
S5_SSM_LR_SCALE = 0.2


def s5_init(P: int, H: int, blocks: int = 1, conj_sym: bool = True, generator: torch.Generator | None = None):
    """Λ (P'), B̃ (P', H), C̃ (H, P') complex128, P' = P/2 with conjugate symmetry else P.

    Λ, V: block-diagonal eigendecomposition of the HiPPO-LegS normal part, `blocks` blocks of size
    P/blocks; B drawn LeCun-normal (std 1/sqrt(H)) and C with real and imaginary parts of std
    1/sqrt(P), both in the original basis, then B̃ = V^* B and C̃ = C V.
    """
    if P % blocks or (P // blocks) % 2:
        raise ValueError(f"P = {P} must split into {blocks} blocks of even size")
    Lambda, _, _, V = legs_nplr(P // blocks, torch.float64)  # the Im Λ < 0 half of each block
    Lambda, V = Lambda.repeat(blocks), torch.block_diag(*[V] * blocks)  # V (P, P/2)
    if not conj_sym:
        Lambda, V = torch.cat([Lambda, Lambda.conj()]), torch.cat([V, V.conj()], dim=1)  # V unitary (P, P)
    B = torch.randn(P, H, dtype=torch.float64, generator=generator) / math.sqrt(H)
    C = torch.randn(H, P, dtype=torch.complex128, generator=generator) * math.sqrt(2 / P)  # Re, Im ~ N(0, 1/P)
    return Lambda, V.conj().T @ B.to(V.dtype), C @ V


class S5(SequenceLayer):
    """S5: x (B, L, d_model) -> y (B, L, d_model); state (B, P/2) complex, (B, P) with conj_sym=False.

    d_state = P, blocks = J (P/J must be even), discretization "zoh" (default) or "bilinear".
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        blocks: int = 1,
        conj_sym: bool = True,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        discretization: str = "zoh",
        backend: str = "auto",
    ):
        super().__init__()
        check_sizes("S5", d_model=d_model, blocks=blocks)
        check_sizes("S5", minimum=2, d_state=d_state)
        if discretization not in DISCRETIZATIONS:
            raise ValueError(f"unknown discretization {discretization!r}; choose one of {DISCRETIZATIONS}")
        self.d_model, self.d_state, self.blocks, self.conj_sym = d_model, d_state, blocks, conj_sym
        self.discretization, self.backend = discretization, backend
        Lambda, B, C = s5_init(d_state, d_model, blocks, conj_sym)
        n_modes = Lambda.shape[0]
        self.log_Lambda_real = ssm_param(torch.log(-Lambda.real).float(), S5_SSM_LR_SCALE)
        self.Lambda_imag = ssm_param(Lambda.imag.float(), S5_SSM_LR_SCALE)
        self.B = ssm_param(torch.view_as_real(B).float(), S5_SSM_LR_SCALE)
        self.log_dt = ssm_param(log_dt_init(n_modes, dt_min, dt_max), S5_SSM_LR_SCALE)
        self.C = nn.Parameter(torch.view_as_real(C).float().contiguous())
        self.D = nn.Parameter(torch.randn(d_model))

    def discrete(self, dtype: torch.dtype):
        """-> Λ̄ (P'), B̄ (P', H), C (H, P') complex in `dtype`'s precision."""
        Lambda = torch.complex(-torch.exp(self.log_Lambda_real.to(dtype)), self.Lambda_imag.to(dtype))
        B, C = torch.view_as_complex(self.B.to(dtype)), torch.view_as_complex(self.C.to(dtype))
        # Each mode has its own Δ: discretise it as a channel of one mode whose B row is broadcast.
        log_dA, dB = discretize_diag(Lambda.unsqueeze(-1), B, torch.exp(self.log_dt.to(dtype)), self.discretization)
        return torch.exp(log_dA.squeeze(-1)), dB, C

    def _readout(self, h: torch.Tensor, C: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Re(C h) (x2 with conjugate symmetry) + D u, with real matmuls: h (..., P'), u (..., H)."""
        y = h.real @ C.real.T - h.imag @ C.imag.T
        return (2 * y if self.conj_sym else y) + self.D.to(u.dtype) * u

    @staticmethod
    def _drive(u: torch.Tensor, dB: torch.Tensor) -> torch.Tensor:
        """B̄ u: u (..., H) real, B̄ (P', H) complex -> (..., P') complex."""
        return torch.complex(u @ dB.real.T, u @ dB.imag.T)

    def _scan(self, x: torch.Tensor, state, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """x (B, L, H), state (B, P') complex or None, resets / mask (B, L) bool -> (y (B, L, H), final state)."""
        with full_precision(x, self.D) as dtype:
            dA, dB, C = self.discrete(dtype)
            u = x.to(dtype)
            a, b = mask_recurrence(mask, dA, self._drive(u, dB))
            h0 = None if state is None else state.to(dA.dtype)
            h = linear_scan(a, b, initial_state=h0, resets=resets, backend=self.backend)
            y = mask_outputs(mask, self._readout(h, C, u))
        return y.to(x.dtype), h[:, -1]

    def _step(self, x_t: torch.Tensor, state: torch.Tensor):
        """x_t (B, H), state (B, P') complex -> (y_t (B, H), next state)."""
        with full_precision(x_t, self.D) as dtype:
            dA, dB, C = step_system(self, self.discrete, dtype)
            u = x_t.to(dtype)
            h = dA * state.to(dA.dtype) + self._drive(u, dB)
            y = self._readout(h, C, u)
        return y.to(x_t.dtype), h

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, P'), complex in the precision of `dtype` (default: the parameters')."""
        cdtype = complex_dtype(dtype or self.D.dtype)
        return torch.zeros(batch_size, self.log_dt.shape[0], device=device or self.D.device, dtype=cdtype)
