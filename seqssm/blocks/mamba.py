"""The Mamba block (Ulbaek 2024 thesis, 12.1, fig. 9) with any SSP, and its bidirectional and placebo forms (fig. 16).

Like mamba_ssm's `mamba_simple.Mamba`, the block switches to channels first, (B, d_inner, L), once after
in_proj and back once before out_proj; the conv1d and the SSP in between read that layout.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.blocks.common import (
    FeatureDropout, add_residual, checked_config, flip_within_lengths, make_norm, make_ssp, residual_stream
)
from seqssm.blocks.config import MambaBlockConfig, SSPConfig
from seqssm.layers.base import ChannelsFirstLayer, SequenceLayer, mask_outputs, non_causal_error
from seqssm.layers.s6 import S6
from seqssm.ops.conv1d import causal_conv1d, causal_conv1d_step
from seqssm.ops.masked import masked_causal_conv1d


def _in_product(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """weight (m, k), x (n, k), bias (m) or None -> weight x^T + bias (m, n), the bias as the product's addend."""
    return torch.mm(weight, x.t()) if bias is None else torch.addmm(bias.unsqueeze(-1), weight, x.t())


class _ProductHalves(torch.autograd.Function):
    """weight (2 d, k), x (n, k), bias (2 d) or None -> the two halves (d, n) of weight x^T + bias, views of one
    product. Autograd's backward of `chunk` concatenates the halves' gradients into a new (2 d, n) tensor, one pass
    over the block's widest activation; this backward takes the halves' products one by one instead."""

    @staticmethod
    def forward(ctx, weight, x, bias):
        ctx.save_for_backward(weight, x)
        ctx.has_bias = bias is not None
        return _in_product(weight, x, bias).chunk(2, dim=0)

    @staticmethod
    def backward(ctx, grad_first, grad_second):
        weight, x = ctx.saved_tensors
        (w1, w2), n = weight.chunk(2, dim=0), x.shape[0]
        g1, g2 = (x.new_zeros(w.shape[0], n) if g is None else g for g, w in ((grad_first, w1), (grad_second, w2)))
        grad_weight = torch.cat([torch.mm(g1, x), torch.mm(g2, x)]) if ctx.needs_input_grad[0] else None
        grad_x = torch.addmm(torch.mm(g1.t(), w1), g2.t(), w2) if ctx.needs_input_grad[1] else None
        grad_bias = torch.cat([g1.sum(1), g2.sum(1)]) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_weight, grad_x, grad_bias


class ConvSSPBranch(ChannelsFirstLayer):
    """Causal depthwise conv1d (with bias) -> SiLU -> [RoPE ->] SSP over d_inner channels, channels first.

    ssp_kwargs: constructor arguments of the SSP beyond its config (S6's dt_rank).
    x (B, d_inner, L) -> (B, d_inner, L) (`forward` / `scan`: (B, L, d_inner)); state (conv state
    (B, d_inner, d_conv-1), SSP state). A masked step leaves the conv window unchanged too.
    """

    def __init__(self, d_inner: int, ssp: SSPConfig, d_conv: int = 4, conv_bias: bool = True, **ssp_kwargs):
        super().__init__()
        self.d_inner, self.d_conv = d_inner, d_conv
        self.d_model = d_inner  # the width of this branch's input, as the layer contract reads it
        # An nn.Conv1d only to hold weight (d_inner, 1, d_conv) and bias with PyTorch's default init
        # (Ulbaek 2024 thesis, 12.2.4) and mamba_ssm's parameter layout; the computation is `causal_conv1d`.
        self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, bias=conv_bias)
        self.ssp = make_ssp(ssp, d_inner, **ssp_kwargs)

    def _forward_channels_first(self, x: torch.Tensor) -> torch.Tensor:
        return self.ssp.forward_channels_first(self._conv(x))

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, d_inner, L) -> SiLU(conv1d(x)), the activation inside the conv's kernels where the causal_conv1d
        package serves it (as mamba_ssm's block calls it): one pass over (B, d_inner, L) less each way, and no
        pre-activation kept for the backward."""
        return causal_conv1d(x, self.conv1d.weight[:, 0], self.conv1d.bias, silu=True)

    def gated_channels_first(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """x, z (B, d_inner, L) -> the branch's output * SiLU(z) (B, d_inner, L): inside the SSP where it takes the
        gate (S6, in its scan kernel), else after it."""
        h = self._conv(x)
        if isinstance(self.ssp, S6):
            return self.ssp.gated_forward_channels_first(h, z)
        return self.ssp.forward_channels_first(h) * F.silu(z)

    def _conv_step(self, x_t: torch.Tensor, conv_state: torch.Tensor):
        """One step of `_conv`: x_t (B, d_inner), conv state -> (SiLU(conv1d), next conv state), one kernel on CUDA."""
        return causal_conv1d_step(x_t, conv_state, self.conv1d.weight[:, 0], self.conv1d.bias, silu=True)

    def _scan_channels_first(self, x, state, resets, mask):
        conv_state, ssp_state = (None, None) if state is None else state
        h, conv_state = masked_causal_conv1d(x, self.conv1d.weight[:, 0], self.conv1d.bias, conv_state, resets, mask,
                                             silu=True)
        y, ssp_state = self.ssp.scan_channels_first(h, ssp_state, resets, mask)
        return y, (conv_state, ssp_state)

    def _step(self, x_t, state):
        conv_state, ssp_state = state
        h, conv_state = self._conv_step(x_t, conv_state)
        y, ssp_state = self.ssp.step(h, ssp_state)
        return y, (conv_state, ssp_state)

    def gated_step(self, x_t: torch.Tensor, z_t: torch.Tensor, state):
        """x_t, z_t (B, d_inner), state -> (`step`'s output * SiLU(z_t), next state): `gated_channels_first` for one
        step, the gate inside S6's step kernel."""
        if not isinstance(self.ssp, S6):
            y, state = self.step(x_t, state)
            return y * F.silu(z_t), state
        conv_state, ssp_state = state
        h, conv_state = self._conv_step(x_t, conv_state)
        y, ssp_state = self.ssp.gated_step(h, z_t, ssp_state)
        return y, (conv_state, ssp_state)

    def initial_state(self, batch_size: int, device=None, dtype=None):
        w = self.conv1d.weight
        conv = torch.zeros(batch_size, self.d_inner, self.d_conv - 1, device=device or w.device, dtype=dtype or w.dtype)
        return conv, self.ssp.initial_state(batch_size, device=device or w.device, dtype=dtype)


class MambaBlock(SequenceLayer):
    """Pre-norm residual Mamba block: x (B, L, d_model) -> (B, L, d_model).

    norm -> in_proj to (x, z), 2 x expand x d_model -> conv1d + SiLU -> SSP -> feature dropout ->
    * SiLU(z) -> out_proj -> + residual (dropout there by default; config.dropout_position moves it onto x
    before the conv1d, Ulbaek 2024 thesis, 12.1.4, or onto both x and z). `bidirectional`: a second conv1d + SSP branch
    runs on each sequence reversed within its own length and its output, reversed back, is added (non-causal;
    `scan`/`step` raise). `placebo`: the same two branches without the flips (causal). Settings: `config`.
    State: (conv state, SSP state); for placebo, one such pair per branch. With RoPE (config.ssp.rope)
    the SSP state is (SSP state, positions).
    """

    def __init__(self, d_model: int, config: MambaBlockConfig | None = None):
        super().__init__()
        config = checked_config("MambaBlock", d_model, config, MambaBlockConfig)
        d_inner = config.expand * d_model
        self.d_model, self.d_inner = d_model, d_inner
        self.bidirectional, self.placebo = config.bidirectional, config.placebo
        self.residual_in_fp32 = config.residual_in_fp32
        # mamba_ssm's dt_rank rule, on the block width (not d_inner); only S6 has a Δ projection
        ssp_kwargs = {}
        if config.ssp.layer == "s6":
            ssp_kwargs["dt_rank"] = math.ceil(d_model / 16) if config.dt_rank == "auto" else config.dt_rank
        self.norm = make_norm(d_model, config.rms_norm, config.norm_eps)
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=config.proj_bias)
        self.branches = nn.ModuleList(
            ConvSSPBranch(d_inner, config.ssp, config.d_conv, config.conv_bias, **ssp_kwargs)
            for _ in range(2 if (config.bidirectional or config.placebo) else 1)
        )
        self.dropout = FeatureDropout(config.dropout)
        self.dropout_position = config.dropout_position
        self.out_proj = nn.Linear(d_inner, d_model, bias=config.proj_bias)

    @property
    def causal(self) -> bool:
        return not self.bidirectional

    def _project(self, x: torch.Tensor, channels_first: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., d_model) -> the SSP input xi and the gate z (..., d_inner), halves of in_proj(norm(x)), with
        the feature dropout of dropout_position "ssp_input" (xi) or "in_proj" (both). channels_first: x is
        (B, L, d_model), and xi, z are views of (B, 2 d_inner, L) memory, contiguous along time."""
        # The norm reads the residual stream in its own dtype (float32 stream, lower-precision weights).
        h = self.norm(x.to(self.norm.weight.dtype))
        if channels_first:
            xi, z = self._in_proj_channels_first(h)
        else:
            xz = self.in_proj(h)
            if self.dropout_position == "in_proj":
                xz = self.dropout(xz)
            xi, z = xz.chunk(2, dim=-1)
        return (self.dropout(xi) if self.dropout_position == "ssp_input" else xi), z

    def _in_proj_channels_first(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h (B, L, d_model) -> xi, z (B, L, d_inner), views of the halves of W h^T (2 d_inner, B L), with the
        "in_proj" feature dropout."""
        # As mamba_ssm's block computes it: (d_inner, B L) memory is the layout of every tensor up to out_proj
        # (time-contiguous, as the conv and scan kernels read it, and a plain matrix to each product), so that
        # nothing between in_proj and out_proj copies, forward or backward.
        b, length, _ = h.shape
        weight, bias, h = self.in_proj.weight, self.in_proj.bias, h.reshape(b * length, -1)
        if self.dropout_position == "in_proj" and self.dropout.training and self.dropout.p > 0:
            xz = self.dropout(_in_product(weight, h, bias).view(-1, b, length).permute(1, 2, 0))
            halves = xz.permute(2, 0, 1).reshape(-1, b * length).chunk(2, dim=0)
        else:
            # The product's dtype under autocast, cast once here: the halves' function computes in its inputs' dtype.
            device = h.device.type
            dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                     else torch.promote_types(weight.dtype, h.dtype))
            halves = _ProductHalves.apply(weight.to(dtype), h.to(dtype), None if bias is None else bias.to(dtype))
        return tuple(half.view(-1, b, length).permute(1, 2, 0) for half in halves)

    def _channels_first(self, x: torch.Tensor):
        """x (B, L, d_model) -> SSP input, gate z, each (B, d_inner, L): the block's one switch of layout."""
        # On CUDA the conv and scan kernels read time-contiguous tensors; the CPU path reads time-major ones,
        # and the channels-first product made a CPU training step of mamba-s6 about 20% slower.
        return tuple(t.transpose(1, 2) for t in self._project(x, channels_first=x.is_cuda))

    def _finish(self, residual: torch.Tensor, gated: torch.Tensor) -> torch.Tensor:
        """residual (..., d_model) + out_proj(gated), gated = SSP output * SiLU(z) (..., d_inner), with the feature
        dropout of dropout_position "ssp_output" on gated."""
        if self.dropout_position == "ssp_output":
            gated = self.dropout(gated)  # feature dropout commutes with the gate: dropout(y) * SiLU(z)
        if gated.ndim == 2 and self.out_proj.bias is None and not torch.is_autocast_enabled(gated.device.type):
            stream, weight = residual_stream(residual, self.residual_in_fp32), self.out_proj.weight
            if stream.dtype == gated.dtype == weight.dtype:
                # A step: the residual as the product's addend, one operator (beta = 1) instead of a product and an
                # add. On CUDA it is still two launches (cuBLAS copies the addend into the output first, measured on
                # an H100), so a decoding graph replays as many kernels either way.
                return torch.addmm(stream, gated, weight.t())
        return add_residual(residual, self.out_proj(gated), self.residual_in_fp32)

    def _forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d_model), lengths (B,) of right-padded sequences (used by the reverse branch) -> (B, L, d_model)."""
        xi, z = self._channels_first(x)
        if self.bidirectional:
            forward, backward = self.branches
            flipped = backward.forward_channels_first(flip_within_lengths(xi, lengths, dim=2))
            y = forward.forward_channels_first(xi) + flip_within_lengths(flipped, lengths, dim=2)
        elif len(self.branches) == 1:
            return self._finish(x, self.branches[0].gated_channels_first(xi, z).transpose(1, 2))
        else:
            y = sum(branch.forward_channels_first(xi) for branch in self.branches)
        return self._finish(x, (y * F.silu(z)).transpose(1, 2))

    def _states(self, state):
        return (None,) * len(self.branches) if state is None else (state,) if len(self.branches) == 1 else state

    def _pack(self, states):
        return states[0] if len(states) == 1 else tuple(states)

    def _scan(self, x, state, resets, mask):
        """x (B, L, d_model), state or None, resets / mask (B, L) -> (y (B, L, d_model), state)."""
        xi, z = self._channels_first(x)
        outs = [branch.scan_channels_first(xi, s, resets, mask) for branch, s in zip(self.branches, self._states(state))]
        y = sum(o[0] for o in outs)
        return mask_outputs(mask, self._finish(x, (y * F.silu(z)).transpose(1, 2))), self._pack([o[1] for o in outs])

    def _step(self, x_t, state):
        """x_t (B, d_model), state -> (y_t (B, d_model), state)."""
        xi, z = self._project(x_t)
        if len(self.branches) == 1:
            y, state = self.branches[0].gated_step(xi, z, state)
            return self._finish(x_t, y), state
        outs = [branch.step(xi, s) for branch, s in zip(self.branches, self._states(state))]
        return self._finish(x_t, sum(o[0] for o in outs) * F.silu(z)), self._pack([o[1] for o in outs])

    def initial_state(self, batch_size: int, device=None, dtype=None):
        if self.bidirectional:
            raise non_causal_error(self)
        return self._pack([b.initial_state(batch_size, device=device, dtype=dtype) for b in self.branches])
