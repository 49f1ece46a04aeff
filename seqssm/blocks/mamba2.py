"""The Mamba-2 block (Dao & Gu 2024, "Transformers are SSMs", 7.1), as mamba_ssm's `Mamba2` and transformers'
`Mamba2Mixer` define it, pre-norm and residual like the Mamba block.

    in_proj(norm(x)) -> z, xBC, Δ;  xBC -> causal conv1d -> SiLU -> x, B, C;  y = SSD(x, Δ, B, C)
    out = x + out_proj(RMSNorm_groups(y * SiLU(z)))

Unlike Mamba-1, B, C and Δ come from the block's input projection, not from the SSM's input, and the gate is
normalised (per group of heads) before out_proj.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.blocks.common import (
    FeatureDropout, add_residual, checked_config, flip_within_lengths, make_norm, make_ssp
)
from seqssm.blocks.config import Mamba2BlockConfig
from seqssm.layers.base import SequenceLayer, mask_outputs, non_causal_error
from seqssm.ops.conv1d import causal_conv1d_step
from seqssm.ops.masked import masked_causal_conv1d


class GatedRMSNorm(nn.Module):
    """RMSNorm of y * SiLU(z) over groups of `group_size` channels (mamba_ssm's RMSNormGated with
    norm_before_gate=False): y, z (..., dim) -> (..., dim) in y's dtype, computed in float32."""

    def __init__(self, dim: int, group_size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.group_size, self.eps = group_size, eps

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        h = (y.float() * F.silu(z.float())).unflatten(-1, (-1, self.group_size))
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        return self.weight * h.to(y.dtype)


class Mamba2Block(SequenceLayer):
    """Pre-norm residual Mamba-2 block: x (B, L, d_model) -> (B, L, d_model); d_inner = expand x d_model channels
    in the SSD's heads of head_dim, its d_state per head, B and C shared by its n_groups groups of heads. Settings:
    `config` (a Mamba2BlockConfig). State: (conv state (B, d_inner + 2 n_groups d_state, d_conv - 1), SSD state
    (B, heads, head_dim, d_state)); for placebo, one such pair per branch.

    bidirectional: a second conv1d + SSD branch (`second_conv1d`, `second_ssm`) reads in_proj's x, B, C and Δ reversed
    within each sequence's length, and its output, reversed back, is added to the first's before the gated norm, as
    the Mamba block's MambaBi (Ulbaek 2024 thesis, fig. 16) does; non-causal, so `scan` / `step` raise. placebo: the
    same two branches without the flips (causal)."""

    def __init__(self, d_model: int, config: Mamba2BlockConfig | None = None):
        super().__init__()
        config = checked_config("Mamba2Block", d_model, config, Mamba2BlockConfig)
        d_inner = config.expand * d_model
        self.d_model, self.d_inner, self.residual_in_fp32 = d_model, d_inner, config.residual_in_fp32
        self.bidirectional = config.bidirectional
        self.ssm = make_ssp(config.ssp, d_inner, project=False)
        self.conv_dim = d_inner + 2 * self.ssm.n_groups * self.ssm.d_state
        self.norm = make_norm(d_model, config.rms_norm, config.norm_eps)
        self.in_proj = nn.Linear(d_model, d_inner + self.conv_dim + self.ssm.heads, bias=config.proj_bias)
        # An nn.Conv1d only to hold weight (conv_dim, 1, d_conv) and bias in mamba_ssm's layout and init
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, config.d_conv, groups=self.conv_dim,
                                bias=config.conv_bias)
        self.second_conv1d = self.second_ssm = None
        if config.bidirectional or config.placebo:
            self.second_conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, config.d_conv, groups=self.conv_dim,
                                           bias=config.conv_bias)
            self.second_ssm = make_ssp(config.ssp, d_inner, project=False)
        self.dropout = FeatureDropout(config.dropout)
        self.dropout_input = config.dropout_position == "ssp_input"
        self.gated_norm = GatedRMSNorm(d_inner, d_inner // self.ssm.n_groups, config.norm_eps)
        self.out_proj = nn.Linear(d_inner, d_model, bias=config.proj_bias)

    @property
    def causal(self) -> bool:
        return not self.bidirectional

    def _branches(self):
        """(conv1d, SSD) of each branch."""
        first = ((self.conv1d, self.ssm),)
        return first if self.second_ssm is None else (*first, (self.second_conv1d, self.second_ssm))

    def _project(self, x: torch.Tensor):
        """x (..., d_model) -> in_proj(norm(x)) split into z (..., d_inner), xBC (..., conv_dim) and Δ before its
        bias (..., heads). The norm reads the residual stream in its own dtype."""
        projected = self.in_proj(self.norm(x.to(self.norm.weight.dtype)))
        return projected.split([self.d_inner, self.conv_dim, self.ssm.heads], dim=-1)

    def _ssm_inputs(self, xbc: torch.Tensor):
        """The conv's output after SiLU (..., conv_dim) -> x (..., d_inner) (dropped out at "ssp_input"), B, C (...,
        n_groups, d_state)."""
        size = self.ssm.n_groups * self.ssm.d_state
        x, B, C = xbc.split([self.d_inner, size, size], dim=-1)
        if self.dropout_input:
            x = self.dropout(x)
        return x, B.unflatten(-1, (self.ssm.n_groups, -1)), C.unflatten(-1, (self.ssm.n_groups, -1))

    def _finish(self, residual: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """residual + out_proj(norm(y SiLU(z))) (y dropped out at "ssp_output"), the residual widened with
        residual_in_fp32."""
        out = self.out_proj(self.gated_norm(y if self.dropout_input else self.dropout(y), z))
        return add_residual(residual, out, self.residual_in_fp32)

    def _branch(self, conv1d, ssm, xbc, dt, state, resets, mask):
        """One conv1d + SSD branch: xBC (B, L, conv_dim), Δ (B, L, heads), its state or None -> (y (B, L, d_inner),
        state)."""
        conv_state, ssd_state = (None, None) if state is None else state
        xbc, conv_state = masked_causal_conv1d(xbc.transpose(1, 2), conv1d.weight[:, 0], conv1d.bias, conv_state,
                                               resets, mask, silu=True)
        u, B, C = self._ssm_inputs(xbc.transpose(1, 2))
        y, ssd_state = ssm.scan_projected(u, dt, B, C, ssd_state, resets, mask)
        return y, (conv_state, ssd_state)

    def _forward(self, x, lengths=None):
        """x (B, L, d_model), lengths (B,) of right-padded sequences (read by the reversed branch) -> (B, L, d_model)."""
        if not self.bidirectional:
            return self._scan(x, None, None, None)[0]
        z, xbc, dt = self._project(x)
        (conv, ssm), (second_conv, second_ssm) = self._branches()
        y = self._branch(conv, ssm, xbc, dt, None, None, None)[0]
        flip = functools.partial(flip_within_lengths, lengths=lengths)
        y = y + flip(self._branch(second_conv, second_ssm, flip(xbc), flip(dt), None, None, None)[0])
        return self._finish(x, y, z)

    def _scan(self, x, state, resets, mask):
        """x (B, L, d_model), state or None, resets / mask (B, L) -> (y (B, L, d_model), state)."""
        z, xbc, dt = self._project(x)
        states = (None,) * 2 if state is None else (state,) if self.second_ssm is None else state
        outs = [self._branch(conv, ssm, xbc, dt, s, resets, mask) for (conv, ssm), s in zip(self._branches(), states)]
        y = sum(o[0] for o in outs)
        return mask_outputs(mask, self._finish(x, y, z)), self._pack([o[1] for o in outs])

    def _step(self, x_t, state):
        """x_t (B, d_model), state -> (y_t (B, d_model), state)."""
        z, xbc, dt = self._project(x_t)
        states = (state,) if self.second_ssm is None else state
        ys, new = [], []
        for (conv, ssm), (conv_state, ssd_state) in zip(self._branches(), states):
            h, conv_state = causal_conv1d_step(xbc, conv_state, conv.weight[:, 0], conv.bias, silu=True)
            u, B, C = self._ssm_inputs(h)
            y, ssd_state = ssm.step_projected(u, dt, B, C, ssd_state)
            ys.append(y)
            new.append((conv_state, ssd_state))
        return self._finish(x_t, sum(ys), z), self._pack(new)

    def _pack(self, states):
        return states[0] if len(states) == 1 else tuple(states)

    def initial_state(self, batch_size: int, device=None, dtype=None):
        """(zeros (batch_size, conv_dim, d_conv - 1) in the weights' dtype, the SSD's initial state), per branch."""
        if self.bidirectional:
            raise non_causal_error(self)
        w = self.conv1d.weight
        states = []
        for _, ssm in self._branches():
            conv = torch.zeros(batch_size, self.conv_dim, w.shape[-1] - 1, device=device or w.device,
                               dtype=dtype or w.dtype)
            states.append((conv, ssm.initial_state(batch_size, device=device or w.device, dtype=dtype)))
        return self._pack(states)
