"""S6: the selective state space layer of Mamba (Ulbaek 2024 thesis, 7.5), Δ, B and C computed from the input."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.layers.base import (
    ChannelsFirstLayer, check_sizes, check_steps, compute_dtype, promoted_call, promoted_mm, ssm_param, step_system
)
from seqssm.layers.hippo import legs_real_part
from seqssm.ops import selective_scan, selective_step
from seqssm.optim import tag_param

S6_A_INITS = ("mamba", "legs")


def inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    """The y with softplus(y) = x, for x > 0."""
    return x + torch.log(-torch.expm1(-x))


class S6(ChannelsFirstLayer):
    """Selective SSM over d_model channels with state size d_state: x (B, L, d_model) -> (B, L, d_model).

    It computes channels first, (B, d_model, L) as mamba_ssm's kernels do; `scan_projected` and
    `step_projected` run it on Δ, B and C that the caller projected (RoPE on some of them, say).

    A = -exp(A_log) stays negative; at init A_n = -(n + 1) (S4D-Real, mamba_ssm's; A_init="mamba") or A = Re Λ
    of the LegS DPLR form, -1/2 everywhere (A_init="legs", Ulbaek 2024 thesis, 12.2.4). Δ = softplus(dt_proj(.) + bias)
    with the bias set so that Δ starts log-uniform in [dt_min, dt_max]; B, C from `x_proj`; D = 1.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        dt_rank: int | str = "auto",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        dt_scale: float = 1.0,
        backend: str = "auto",
        A_init: str = "mamba",
    ):
        super().__init__()
        check_sizes("S6", d_model=d_model, d_state=d_state)
        if dt_rank == "auto":
            dt_rank = math.ceil(d_model / 16)
        check_sizes("S6", dt_rank=dt_rank)
        if not (0 < dt_min <= dt_max):
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={dt_min}, dt_max={dt_max}")
        self.d_model, self.d_state, self.dt_rank, self.backend = d_model, d_state, int(dt_rank), backend
        self.x_proj = nn.Linear(d_model, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_model, bias=True)
        bound = self.dt_rank**-0.5 * dt_scale
        nn.init.uniform_(self.dt_proj.weight, -bound, bound)
        dt = torch.exp(torch.rand(d_model) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        with torch.no_grad():
            self.dt_proj.bias.copy_(inverse_softplus(dt.clamp(min=dt_init_floor)))
        if A_init not in S6_A_INITS:
            raise ValueError(f"unknown S6 A_init {A_init!r}; choose one of {S6_A_INITS}")
        if A_init == "legs":
            A = -legs_real_part(d_state).to(torch.float32).repeat(d_model, 1)
        else:
            A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_model, 1)
        self.A_log = ssm_param(torch.log(A))  # A = -exp(A_log)
        self.D = tag_param(nn.Parameter(torch.ones(d_model)), lr_scale=1.0, weight_decay=0.0)

    @property
    def A(self) -> torch.Tensor:
        """(d_model, d_state), real part negative by construction; float32, or float64 in a float64 layer."""
        return -torch.exp(self.A_log.to(self._ssm_dtype))

    @property
    def _ssm_dtype(self) -> torch.dtype:
        """The dtype of A, D and Δ's bias in the scan: the parameters' precision, at least float32."""
        return compute_dtype(self.A_log.dtype)

    def project(self, x: torch.Tensor):
        """x (..., d_model) -> Δ before bias (..., d_model), B (..., N), C (..., N), in the promotion of x's and
        the weights' dtypes."""
        dt, B, C = promoted_call(self.x_proj, x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        return F.linear(dt, self.dt_proj.weight.to(dt.dtype)), B, C

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, d_model, d_state), float32 (float64 in a float64 layer) unless `dtype` is given."""
        device = device or self.A_log.device
        return torch.zeros(batch_size, self.d_model, self.d_state, device=device, dtype=dtype or self._ssm_dtype)

    def _project_channels_first(self, x):
        """x (B, d_model, L) -> Δ before bias (B, d_model, L), contiguous along time as the scan kernels read it,
        B, C (B, d_state, L)."""
        if x.transpose(0, 1).is_contiguous():
            return self._project_matrix(x)
        dt, B, C = promoted_call(self.x_proj, x.transpose(1, 2)).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        # W (d_model, R) @ dt (B, R, L) writes Δ channels first, as mamba_ssm's block computes it: the transposed
        # F.linear output would cost the scan a copy, forward and backward.
        return torch.matmul(self.dt_proj.weight.to(dt.dtype), dt.transpose(1, 2)), B.transpose(1, 2), C.transpose(1, 2)

    def _project_matrix(self, x):
        """`_project_channels_first` of x laid out as a (d_model, B L) matrix (the Mamba block's CUDA layout): each
        product one matrix product that reads and writes that layout, as mamba_ssm's block computes them; Δ is
        laid out as x, B and C as (d_state, B L) matrices."""
        b, _, length = x.shape
        x_dbl = promoted_mm(self.x_proj.weight, x.transpose(0, 1).reshape(self.d_model, b * length))
        dt, B, C = x_dbl.split([self.dt_rank, self.d_state, self.d_state], dim=0)
        delta = torch.mm(self.dt_proj.weight.to(dt.dtype), dt)
        return tuple(m.view(-1, b, length).transpose(0, 1) for m in (delta, B, C))

    def _scan_channels_first(self, x, state, resets, mask):
        """x (B, d_model, L), state (B, d_model, d_state) or None, resets / mask (B, L) -> (y (B, d_model, L),
        final state): `scan` in the layout of the selective scan."""
        return self.scan_projected(x, *self._project_channels_first(x), state, resets, mask)

    def _forward_channels_first(self, x):
        # No final state is asked for, so the scan need not keep one with a gradient (mamba_ssm's cannot).
        return self._selective(x, *self._project_channels_first(x), None, None, None, return_state=False)[0]

    def gated_forward_channels_first(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """x, z (B, d_model, L) -> `forward_channels_first(x)` * SiLU(z), the gate applied inside the selective scan
        (as mamba_ssm's kernel does: one pass over y less, forward and backward)."""
        return self._selective(x, *self._project_channels_first(x), None, None, None, return_state=False, z=z)[0]

    def _widen(self, u: torch.Tensor) -> torch.Tensor:
        """u in float64 when the layer is float64 (the selective scan computes in u's precision, at least float32)."""
        return u.to(self._ssm_dtype) if self._ssm_dtype == torch.float64 else u

    def scan_projected(self, u, delta, B, C, state=None, resets=None, mask=None):
        """The scan after the projections: u, delta (Δ before its bias) (B, d_model, L), B, C (B, d_state, L),
        state or None, resets / mask (B, L) -> (y (B, d_model, L), final state).

        Masked steps leave the state untouched (Δ = 0 gives exp(ΔA) = 1 and ΔBu = 0) and output zeros.
        """
        resets, mask = check_steps(u, resets, mask, time_dim=2, where="S6.scan_projected")
        return self._selective(u, delta, B, C, state, resets, mask, return_state=True)

    def _selective(self, u, delta, B, C, state, resets, mask, return_state: bool, z=None):
        """`scan_projected` on checked steps, times SiLU(z) when z is given; the final state is None unless
        `return_state`."""
        out_dtype, u = u.dtype, self._widen(u)
        ssm = self._ssm_dtype
        delta_bias, softplus = self.dt_proj.bias.to(ssm), True
        if mask is not None:  # Δ itself, in the scan's compute dtype, zero on masked steps
            compute = torch.promote_types(u.dtype, torch.float32)
            delta = F.softplus(delta.to(compute) + delta_bias.to(compute)[:, None]).masked_fill(~mask.unsqueeze(1), 0.0)
            delta_bias, softplus = None, False
        out = selective_scan(
            u, delta, self.A, B, C, self.D.to(ssm), z=z, delta_bias=delta_bias, delta_softplus=softplus,
            return_last_state=return_state, initial_state=state, resets=resets, backend=self.backend,
        )
        y, last = out if return_state else (out, None)
        return (y if mask is None else y.masked_fill(~mask.unsqueeze(1), 0)).to(out_dtype), last

    def _step(self, x_t, state):
        """x_t (B, d_model), state (B, d_model, d_state) -> (y_t (B, d_model), next state)."""
        return self.step_projected(x_t, *self.project(x_t), state)

    def gated_step(self, x_t: torch.Tensor, z_t: torch.Tensor, state):
        """x_t, z_t (B, d_model), state -> (`step(x_t)`'s output * SiLU(z_t), next state), the gate inside the step
        kernel (as `gated_forward_channels_first` in the scan's)."""
        return self.step_projected(x_t, *self.project(x_t), state, z_t=z_t)

    def step_projected(self, u_t, delta_t, B_t, C_t, state, z_t=None):
        """One step after the projections: u_t, delta_t (Δ before its bias) (B, d_model), B_t, C_t (B, d_state),
        state, the gate z_t (B, d_model) or None -> (y_t (B, d_model), times SiLU(z_t) when given, next state)."""
        ssm = self._ssm_dtype
        A = step_system(self, lambda dtype: self.A, ssm)
        y, state = selective_step(state, self._widen(u_t), delta_t, A, B_t, C_t, self.D.to(ssm), z_t=z_t,
                                  delta_bias=self.dt_proj.bias.to(ssm), delta_softplus=True)
        return y.to(u_t.dtype), state
