"""Kalman filter layer, vSSM and KF-u ("Uncertainty Representations in State-Space Layers for Deep RL under
Partial Observability", sections 4.2, 4.3, 5.1 and appendix B).

The input x_t is projected to a control input u_t, an observation w_t and a diagonal observation
noise r_t = softplus(.) > 0, all of size N. The latent model is diagonal with C = I:
z_t = Ā z_{t-1} + B̄ u_t + ε_t, ε ~ N(0, diag q); w_t = z_t + ν_t, ν ~ N(0, diag r_t), with
A = -exp(.) < 0 (S4D-Real at init, A_n = -(n + 1)), B learned (ones at init), ZOH with a scalar
Δ = softplus(Δ̃) (Δ̃ = -7 at init, so Ā starts near 1) and a learned q (ones at init). Per state
dimension the filter is, with belief N(m, P) and initial belief N(0, init_var):

    predict  m⁻_t = ā m_{t-1} + b̄ u_t          P⁻_t = ā² P_{t-1} + q
    update   K_t = P⁻_t / (P⁻_t + r_t)         m_t = m⁻_t + K_t (w_t - m⁻_t)     P_t = (1 - K_t) P⁻_t

and the layer outputs a linear read-out of the posterior mean m_t. vSSM is the same layer with
the update step removed: m_t = ā m_{t-1} + b̄ u_t (no w, r or P; its state is m alone).

Parallel formulation (why this one): everything is elementwise, so the filter splits into two
scans. (1) The variance does not depend on the means: P_t = r_t (ā² P_{t-1} + q) / (ā² P_{t-1} + q + r_t)
is a Möbius map of P_{t-1}, i.e. the 2x2 matrix M_t = [[r ā², r q], [ā², q + r]] acting on
homogeneous coordinates, and maps compose by matrix products, which `ops.associative_scan` runs
in O(log L) depth. All entries are >= 0, so the products have no cancellation; they are rescaled
to unit sum after each product (a Möbius map ignores scale) so long sequences cannot overflow.
(2) Given the variances, the mean is linear: m_t = (1 - K_t) ā m_{t-1} + (1 - K_t) b̄ u_t + K_t w_t,
one `linear_scan`. The alternative, Särkkä's general associative Kalman operator, carries five
quantities per element to cover non-diagonal models; the Möbius + linear split needs four, and
reuses the resettable `linear_scan` with its recomputation-free backward for the mean.

Resets put the belief back to N(0, init_var): the Möbius element of a reset step is M_t composed
with the constant map P -> init_var (matrix [[0, init_var], [0, 1]]). Masked steps (section 4.3)
are the identity map for P and pass-through (a = 1, b = 0) for m.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.layers.base import (
    SequenceLayer, check_sizes, compute_dtype, full_precision, mask_outputs, mask_recurrence, promoted_call,
    step_system
)
from seqssm.ops.associative import associative_scan, mobius_compose
from seqssm.ops.linear import linear_scan
from seqssm.ops.ssm_kernels import discretize_diag

class KalmanLayer(SequenceLayer):
    """Kalman filter layer: x (B, L, d_model) -> y (B, L, d_model); state (mean, variance), each (B, d_state).

    dt_init is Δ̃ at init (Δ = softplus(Δ̃)); init_var is the prior variance that resets return to.
    update=False gives vSSM (prefer the `vSSM` class), whose state is the mean (B, d_state) alone.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        dt_init: float = -7.0,
        init_var: float = 1.0,
        update: bool = True,
        backend: str = "auto",
    ):
        super().__init__()
        check_sizes(type(self).__name__, d_model=d_model, d_state=d_state)
        if init_var <= 0:
            raise ValueError(f"init_var must be positive, got {init_var}")
        self.d_model, self.d_state, self.init_var = d_model, d_state, init_var
        self.update, self.backend = update, backend
        self.in_proj = nn.Linear(d_model, (3 if update else 1) * d_state)  # u (and w, raw r)
        self.log_neg_A = nn.Parameter(torch.log(torch.arange(1.0, d_state + 1)))
        self.B = nn.Parameter(torch.ones(d_state))
        self.dt_raw = nn.Parameter(torch.tensor(dt_init))
        if update:
            self.log_q = nn.Parameter(torch.zeros(d_state))  # process noise variance, 1 at init
        self.out_proj = nn.Linear(d_state, d_model)

    def discrete(self, dtype: torch.dtype):
        """-> ā, b̄ and q (None for vSSM), each (N,) in `dtype`."""
        A = -torch.exp(self.log_neg_A.to(dtype))
        log_dA, dB = discretize_diag(A, self.B.to(dtype), F.softplus(self.dt_raw.to(dtype)), "zoh")
        return torch.exp(log_dA), dB, torch.exp(self.log_q.to(dtype)) if self.update else None

    def project(self, x: torch.Tensor, dtype: torch.dtype):
        """x (..., d_model) -> u, and with the update step w and r > 0, each (..., N) in `dtype`."""
        z = promoted_call(self.in_proj, x).to(dtype)
        if not self.update:
            return (z,)
        u, w, r = z.chunk(3, dim=-1)
        return u, w, F.softplus(r)

    def _scan(self, x: torch.Tensor, state, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """x (B, L, d_model), state or None, resets / mask (B, L) bool -> (y (B, L, d_model), final state).

        Masked steps leave the belief unchanged and output zeros.
        """
        dtype = compute_dtype(x.dtype, self.B.dtype)
        signals = self.project(x, dtype)  # under the caller's autocast, like any projection
        if state is None:
            state = self.initial_state(x.shape[0], x.device, dtype)
        with full_precision(x, self.B):
            dA, dB, q = self.discrete(dtype)
            if not self.update:
                a, b = mask_recurrence(mask, dA, dB * signals[0])
                means = linear_scan(a, b, initial_state=state.to(dtype), resets=resets, backend=self.backend)
                final = means[:, -1]
            else:
                means, final = self._filter(signals, (state[0].to(dtype), state[1].to(dtype)), dA, dB, q, resets, mask)
        y = mask_outputs(mask, self._read_out(means, x.dtype))
        return y, final

    def _read_out(self, means: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The output y in the input's `dtype` from the posterior means (..., N)."""
        return promoted_call(self.out_proj, means.to(dtype)).to(dtype)

    def _filter(self, signals, state, dA, dB, q, resets, mask):
        """The parallel filter: -> posterior means (B, L, N) and the final (mean, variance)."""
        u, w, r = signals
        m0, P0 = state
        a2 = dA * dA
        ones, zero = torch.ones_like(r), torch.zeros_like(r)
        # M_t = [[r ā², r q], [ā², q + r]] acting on P_(t-1).
        M = (r * a2, r * q, a2 * ones, q + r)
        if resets is not None:
            # M_t ∘ (P -> init_var) = M_t [[0, init_var], [0, 1]]: a constant map, column 1 zero.
            keep = ~resets.unsqueeze(-1)
            M = (
                torch.where(keep, M[0], zero),
                torch.where(keep, M[1], M[0] * self.init_var + M[1]),
                torch.where(keep, M[2], zero),
                torch.where(keep, M[3], M[2] * self.init_var + M[3]),
            )
        if mask is not None:
            valid = mask.unsqueeze(-1)
            M = tuple(torch.where(valid, e, identity) for e, identity in zip(M, (ones, zero, zero, ones)))
        Ma, Mb, Mc, Md = associative_scan(mobius_compose, M)
        P0 = P0.unsqueeze(1)
        P = (Ma * P0 + Mb) / (Mc * P0 + Md)  # posterior variances P_t, (B, L, N)
        P_prev = torch.cat([P0, P[:, :-1]], dim=1)
        if resets is not None:
            P_prev = P_prev.masked_fill(resets.unsqueeze(-1), self.init_var)
        prior = a2 * P_prev + q
        innov = prior + r
        # 1 - K = r / (P⁻ + r) directly, not 1 - K, which loses r's digits when P⁻ >> r.
        a, b = mask_recurrence(mask, r / innov * dA, (r * dB * u + prior * w) / innov)
        means = linear_scan(a, b, initial_state=m0, resets=resets, backend=self.backend)
        return means, (means[:, -1], P[:, -1])

    def _step(self, x_t: torch.Tensor, state):
        """x_t (B, d_model), state -> (y_t (B, d_model), next state): one predict (and update) step."""
        dtype = compute_dtype(x_t.dtype, self.B.dtype)
        signals = self.project(x_t, dtype)
        with full_precision(x_t, self.B):
            dA, dB, q = step_system(self, self.discrete, dtype)
            if not self.update:
                m = dA * state.to(dtype) + dB * signals[0]
                new_state = m
            else:
                u, w, r = signals
                m, P = state[0].to(dtype), state[1].to(dtype)
                m, prior = dA * m + dB * u, dA * dA * P + q
                innov = prior + r
                m = (r * m + prior * w) / innov
                new_state = (m, r * prior / innov)
        return self._read_out(m, x_t.dtype), new_state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        """The prior belief: mean zeros (batch_size, N) and variance init_var (vSSM: the mean alone)."""
        dtype = compute_dtype(dtype or self.B.dtype)
        device = device or self.B.device
        mean = torch.zeros(batch_size, self.d_state, device=device, dtype=dtype)
        return (mean, torch.full_like(mean, self.init_var)) if self.update else mean


class vSSM(KalmanLayer):  # noqa: N801 - the paper's name
    """Real diagonal SSM, the Kalman layer without its update step: x (B, L, d_model) -> y; state (B, d_state)."""

    def __init__(self, d_model: int, d_state: int = 64, dt_init: float = -7.0, backend: str = "auto"):
        super().__init__(d_model, d_state, dt_init=dt_init, update=False, backend=backend)


class KalmanNoInput(KalmanLayer):
    """The Kalman layer without control input u (vSSM+KF-u of "Uncertainty Representations in State-Space
    Layers for Deep RL under Partial Observability", section 5.1): only w and r are projected.
    x (B, L, d_model) -> y (B, L, d_model); state (mean, variance), each (B, d_state)."""

    def __init__(self, d_model: int, d_state: int = 64, **kwargs):
        super().__init__(d_model, d_state, **kwargs)
        self.in_proj = nn.Linear(d_model, 2 * d_state)
        self.B.requires_grad_(False)  # it only ever multiplies u = 0

    def project(self, x: torch.Tensor, dtype: torch.dtype):
        """x (..., d_model) -> u = 0, w, r > 0, each (..., N)."""
        w, r = promoted_call(self.in_proj, x).to(dtype).chunk(2, dim=-1)
        return torch.zeros_like(w), w, F.softplus(r)
