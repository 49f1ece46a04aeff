"""SSD: the state space layer of Mamba-2 (Dao & Gu 2024, "Transformers are SSMs", 7): scalar A per head.

The input's d_model channels are split into heads of head_dim channels; each head has one decay A_h < 0, one Δ_h
per step, and reads B, C shared by its group of heads (n_groups), so a state is (head_dim, d_state) per head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.layers.base import SequenceLayer, check_sizes, compute_dtype, mask_outputs, promoted_call, ssm_param
from seqssm.layers.s6 import inverse_softplus
from seqssm.ops.ssd import SSD_CHUNK, ssd_scan, ssd_step
from seqssm.optim import tag_param


class SSD(SequenceLayer):
    """Mamba-2's selective SSM with its own projections: x (B, L, d_model) -> (B, L, d_model); state (B, heads,
    head_dim, d_state), heads = d_model / head_dim (head_dim None: 64, or the largest power of two dividing
    d_model when 64 does not).

    B, C (n_groups x d_state each) and Δ (one per head) come from one linear map of x; Δ = softplus(. + dt_bias)
    with dt_bias set so that Δ starts log-uniform in [dt_min, dt_max]; A = -exp(A_log), A_log = log of a uniform
    draw in A_init_range; D = 1 (mamba_ssm's Mamba2 initialisation). `scan_projected` and `step_projected` run
    the SSM on x, Δ, B and C that a block projected itself (Mamba-2's block takes them from its in_proj, and
    builds the layer with project=False).
    """

    def __init__(self, d_model: int, d_state: int = 64, head_dim: int | None = None, n_groups: int = 1,
                 chunk_size: int = SSD_CHUNK, dt_min: float = 0.001, dt_max: float = 0.1, dt_init_floor: float = 1e-4,
                 A_init_range: tuple[float, float] = (1.0, 16.0), backend: str = "auto", project: bool = True):
        super().__init__()
        if head_dim is None:  # mamba_ssm's 64 where it divides d_model, else the largest power of two that does
            head_dim = math.gcd(d_model, 64)
        check_sizes("SSD", d_model=d_model, d_state=d_state, head_dim=head_dim, n_groups=n_groups,
                    chunk_size=chunk_size)
        if d_model % head_dim:
            raise ValueError(f"SSD: d_model {d_model} is no multiple of head_dim {head_dim}; choose a head_dim "
                             f"dividing it")
        heads = d_model // head_dim
        if heads % n_groups:
            raise ValueError(f"SSD: {heads} heads do not split into n_groups {n_groups}; choose a divisor of {heads}")
        if not (0 < dt_min <= dt_max):
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={dt_min}, dt_max={dt_max}")
        if not (0 < A_init_range[0] <= A_init_range[1]):
            raise ValueError(f"need 0 < A_init_range[0] <= A_init_range[1], got {A_init_range}")
        self.d_model, self.d_state, self.head_dim, self.n_groups = d_model, d_state, head_dim, n_groups
        self.heads, self.chunk_size, self.backend = heads, chunk_size, backend
        # Mamba-2's block projects x, B, C and Δ together and calls scan_projected: no projection of its own then
        self.in_proj = nn.Linear(d_model, 2 * n_groups * d_state + heads, bias=False) if project else None
        dt = torch.exp(torch.rand(heads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        self.dt_bias = ssm_param(inverse_softplus(dt.clamp(min=dt_init_floor)))
        self.A_log = ssm_param(torch.log(torch.empty(heads).uniform_(*A_init_range)))
        self.D = tag_param(nn.Parameter(torch.ones(heads)), lr_scale=1.0, weight_decay=0.0)

    @property
    def _ssm_dtype(self) -> torch.dtype:
        """The dtype of A, D and Δ's bias in the scan: the parameters' precision, at least float32."""
        return compute_dtype(self.A_log.dtype)

    def project(self, x: torch.Tensor):
        """x (..., d_model) -> Δ before its bias (..., heads), B, C (..., n_groups, d_state)."""
        if self.in_proj is None:
            raise RuntimeError("this SSD has no projection of its own (project=False): call scan_projected or "
                               "step_projected with the block's x, Δ, B and C")
        size = self.n_groups * self.d_state
        B, C, dt = promoted_call(self.in_proj, x).split([size, size, self.heads], dim=-1)
        return dt, B.unflatten(-1, (self.n_groups, self.d_state)), C.unflatten(-1, (self.n_groups, self.d_state))

    def _delta(self, dt: torch.Tensor) -> torch.Tensor:
        """Δ = softplus(dt + dt_bias) in the compute dtype."""
        dtype = torch.promote_types(dt.dtype, self._ssm_dtype)
        return F.softplus(dt.to(dtype) + self.dt_bias.to(dtype))

    def scan_projected(self, x, dt, B, C, state=None, resets=None, mask=None):
        """x (B, L, d_model), Δ before its bias (B, L, heads), B, C (B, L, n_groups, d_state), state or None,
        resets / mask (B, L) -> (y (B, L, d_model), last state). Masked steps leave the state untouched
        (Δ = 0: decay 1, no input) and output zeros."""
        delta = self._delta(dt)
        if mask is not None:
            delta = delta.masked_fill(~mask[..., None], 0.0)
        ssm = self._ssm_dtype
        y, last = ssd_scan(x.unflatten(-1, (self.heads, self.head_dim)), delta, -torch.exp(self.A_log.to(ssm)), B, C,
                           self.D.to(ssm), state, resets, self.chunk_size, self.backend)
        return mask_outputs(mask, y.flatten(-2).to(x.dtype)), last

    def _scan(self, x, state, resets, mask):
        return self.scan_projected(x, *self.project(x), state, resets, mask)

    def step_projected(self, x_t, dt_t, B_t, C_t, state):
        """One step after the projections: x_t (B, d_model), Δ before its bias (B, heads), B_t, C_t (B, n_groups,
        d_state), state -> (y_t (B, d_model), next state)."""
        ssm = self._ssm_dtype
        y, state = ssd_step(state, x_t.unflatten(-1, (self.heads, self.head_dim)), self._delta(dt_t),
                            -torch.exp(self.A_log.to(ssm)), B_t, C_t, self.D.to(ssm))
        return y.flatten(-2).to(x_t.dtype), state

    def _step(self, x_t, state):
        return self.step_projected(x_t, *self.project(x_t), state)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, heads, head_dim, d_state), float32 (float64 in a float64 layer) unless `dtype`."""
        return torch.zeros(batch_size, self.heads, self.head_dim, self.d_state, device=device or self.A_log.device,
                           dtype=dtype or self._ssm_dtype)
