"""LSSL and LSSLf (Gu et al. 2021; van Gelooven 2025 thesis, 2.1.2 and appendix A.1.1): dense HiPPO-LegS SSMs.

Each of the H channels is a SISO system with a dense state of size N sharing one A (N, N) and
B (N), both HiPPO-LegS at init, with its own step Δ_h (log-uniform in [dt_min, dt_max]), C_h (N)
and D_h. The generalised bilinear transform with α = 1/2 (the bilinear transform,
`discretize_dense(..., "bilinear")`) gives Ā_h = (I - Δ_h/2 A)^{-1} (I + Δ_h/2 A) and
B̄_h = Δ_h (I - Δ_h/2 A)^{-1} B.

Without resets or mask the layer is a convolution with the Krylov kernel K_j = C Ā^j B̄
(van Gelooven 2025, eq. 2.8), computed by repeated squaring; a carried state adds its free response
C Ā^(t+1) h_0. Resets split the sequence into segments, each a convolution of its own inputs from a zero
state: `scan` applies the Toeplitz matrix of K masked to same-segment pairs, O(L^2) but parallel (van Gelooven
2025 thesis, 2.2.3, notes that the Krylov form alone cannot reset), for sequences up to TOEPLITZ_MAX_ELEMENTS.
A mask, or longer sequences with resets, run the dense recurrence step by step: correct, not fast.

LSSL learns A, B and Δ (tagged for 0.1x learning rate, no weight decay) besides C and D.
LSSLf fixes A, B and Δ (buffers) and learns only C and D, as in van Gelooven 2025 thesis, 2.1.2 ("fixes
the state matrix A, input matrix B and sampling time Δt").
"""

from __future__ import annotations

import torch
from torch import nn

from seqssm.layers.base import (
    SequenceLayer, check_sizes, compute_dtype, full_precision, mask_outputs, ssm_param, step_system, where_state
)
from seqssm.layers.hippo import hippo_legs, log_dt_init
from seqssm.ops.fftconv import fft_conv
from seqssm.ops.krylov import apply_power, krylov, squarings
from seqssm.ops.ssm_kernels import discretize_dense

# Largest batch x d_model x L x L of the masked Toeplitz matrix the reset path builds (256 MiB in float32);
# beyond it the step-by-step recurrence keeps memory linear in L.
TOEPLITZ_MAX_ELEMENTS = 1 << 26


class LSSL(SequenceLayer):
    """Dense HiPPO-LegS SSM per channel: x (B, L, d_model) -> y (B, L, d_model); state (B, d_model, d_state)."""

    def __init__(
        self, d_model: int, d_state: int = 64, dt_min: float = 0.001, dt_max: float = 0.1, fixed: bool = False
    ):
        super().__init__()
        check_sizes(type(self).__name__, d_model=d_model, d_state=d_state)
        self.d_model, self.d_state, self.fixed = d_model, d_state, fixed
        A, B = hippo_legs(d_state, torch.float32)
        for name, value in (("A", A), ("B", B), ("log_dt", log_dt_init(d_model, dt_min, dt_max))):
            if fixed:
                self.register_buffer(name, value)
            else:
                setattr(self, name, ssm_param(value))
        self.C = nn.Parameter(torch.randn(d_model, d_state))
        self.D = nn.Parameter(torch.ones(d_model))

    def discrete(self, dtype: torch.dtype):
        """-> Ā (H, N, N), B̄ (H, N), C (H, N) in `dtype`."""
        dA, dB = discretize_dense(self.A.to(dtype), self.B.to(dtype), torch.exp(self.log_dt.to(dtype)), "bilinear")
        return dA, dB, self.C.to(dtype)

    def kernel(self, L: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The Krylov kernel K (H, L), K_j = C Ā^j B̄."""
        dA, dB, C = self.discrete(dtype)
        return (krylov(dA, dB, L) @ C.unsqueeze(-1)).squeeze(-1)

    def _scan(self, x: torch.Tensor, state, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """x (B, L, H), state (B, H, N) or None, resets / mask (B, L) bool -> (y (B, L, H), final state).

        Masked steps leave the state unchanged and output zeros.
        """
        batch, L, _ = x.shape
        with full_precision(x, self.D) as dtype:
            dA, dB, C = self.discrete(dtype)
            u, D = x.to(dtype), self.D.to(dtype)
            h0 = None if state is None else state.to(dtype)
            # With resets, the Toeplitz product would spread a non-finite input to every step of its sequence
            # (0 x inf): such an input takes the recurrence below, which keeps the outputs before it finite. Without
            # resets the FFT convolution is causal for it already, so no sum is taken there.
            if mask is None and (resets is None or (batch * self.d_model * L * L <= TOEPLITZ_MAX_ELEMENTS
                                                    and bool(torch.isfinite(u.sum())))):
                y, h = self._convolution(dA, dB, C, D, u, h0, resets)
                return y.to(x.dtype), h
            h = torch.zeros(batch, self.d_model, self.d_state, dtype=dtype, device=x.device) if h0 is None else h0
            ys = []
            for t in range(L):
                if resets is not None:
                    h = h.masked_fill(resets[:, t, None, None], 0)
                y_t, h_t = self._recurrence_step(dA, dB, C, D, u[:, t], h)
                h = h_t if mask is None else where_state(mask[:, t], h_t, h)
                ys.append(y_t)
            y = mask_outputs(mask, torch.stack(ys, dim=1))
        return y.to(x.dtype), h

    @staticmethod
    def _convolution(dA, dB, C, D, u, h0, resets):
        """The Krylov form: u (B, L, H), h0 (B, H, N) or None, resets (B, L) bool or None -> (y, final state).

        With resets, step t sees only the inputs of its own segment (since the last reset at or before t), and
        h0 only while no reset has come yet."""
        L = u.shape[1]
        powers = squarings(dA, L)  # shared by every power of Ā below: the squarings are most of the cost
        Kx = krylov(dA, dB, L, powers)  # (H, L, N): Ā^j B̄
        K = (Kx @ C.unsqueeze(-1)).squeeze(-1)  # (H, L)
        if resets is None:
            y = fft_conv(u, K, D)
            last, first = u, None  # inputs in the final state's segment; steps that h0 reaches (all)
        else:
            segment = torch.cumsum(resets.long(), dim=1)  # (B, L): resets so far, counting the step's own
            # (H, L, L): K_(t-k) for k <= t, 0 above the diagonal; windows of [K reversed, zeros], a gather-free view
            padded = torch.cat([K.flip(-1), K.new_zeros(K.shape[0], L - 1)], dim=-1)
            toeplitz = padded.unfold(-1, L, 1).flip(-2)
            same = segment[:, :, None] == segment[:, None, :]  # (B, L, L)
            weights = toeplitz.unsqueeze(0) * same.unsqueeze(1).to(u.dtype)  # (B, H, L, L)
            y = (weights @ u.transpose(1, 2).unsqueeze(-1)).squeeze(-1).transpose(1, 2) + D * u
            last = u * (segment == segment[:, -1:]).unsqueeze(-1).to(u.dtype)
            first = (segment == 0).to(u.dtype)  # (B, L)
        h = torch.einsum("hjn,bjh->bhn", Kx, last.flip(1))  # h_L = Σ_j Ā^j B̄ u_(L-1-j)
        if h0 is not None:
            h1 = torch.einsum("hnm,bhm->bhn", dA, h0)  # Ā h0
            free = torch.einsum("htn,bhn->bth", krylov(dA.mT, C, L, [p.mT for p in powers]), h1)  # C Ā^t Ā h0
            carried = apply_power(powers, L - 1, h1)  # Ā^(L-1) Ā h0
            if first is not None:
                free, carried = free * first.unsqueeze(-1), carried * first[:, -1, None, None]
            y, h = y + free, h + carried
        return y, h

    @staticmethod
    def _recurrence_step(dA, dB, C, D, u_t, h):
        """One step of the discrete system: u_t (B, H), h (B, H, N) -> (y_t (B, H), next h)."""
        # einsum, not dA @ h[..., None]: broadcast matmul copies Ā once per batch element.
        h = torch.einsum("hnm,bhm->bhn", dA, h) + dB * u_t.unsqueeze(-1)
        return (h * C).sum(-1) + D * u_t, h

    def _step(self, x_t: torch.Tensor, state: torch.Tensor):
        """x_t (B, H), state (B, H, N) -> (y_t (B, H), next state)."""
        with full_precision(x_t, self.D) as dtype:
            dA, dB, C = step_system(self, self.discrete, dtype)
            y, h = self._recurrence_step(dA, dB, C, self.D.to(dtype), x_t.to(dtype), state.to(dtype))
        return y.to(x_t.dtype), h

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, H, N) in the compute dtype of `dtype` (default: the parameters')."""
        dtype = compute_dtype(dtype or self.D.dtype)
        return torch.zeros(batch_size, self.d_model, self.d_state, device=device or self.D.device, dtype=dtype)


class LSSLf(LSSL):
    """LSSL with A, B and Δ fixed at their HiPPO-LegS / log-uniform init; only C and D learn."""

    def __init__(self, d_model: int, d_state: int = 64, dt_min: float = 0.001, dt_max: float = 0.1):
        super().__init__(d_model, d_state, dt_min, dt_max, fixed=True)
