"""The attention block of hybrid stacks: pre-norm, residual, causal multi-head self-attention, as mamba_ssm's `MHA`
defines the attention layers it puts at `attn_layer_idx` of a Mamba or Mamba-2 model.

    in_proj(norm(x)) -> q, k, v (and the MLP's up, gate);  [causal depthwise conv over q, k, v];  RoPE on q, k
    out = x + out_proj(attention(q, k, v) ‖ up * SiLU(gate))

Its state is a KV cache: every key and value seen so far, so it grows by one step per step (unlike the SSM blocks'
fixed-size states). Resets and masks keep the layer contract in what later steps see: a step attends to the steps
since its sequence's last reset and never to masked ones, and rotary positions count the valid steps since the last
reset. The cache keeps the hidden entries (marked not visible), so states equal in meaning can differ in size: the
contract's checks that compare states as tensors (`seqssm.testing`) do not apply, and the tests compare outputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.blocks.common import add_residual, make_norm
from seqssm.blocks.config import AttentionConfig
from seqssm.errors import ConfigError, InputDtypeError, InputShapeError
from seqssm.layers.base import SequenceLayer, check_sizes, mask_outputs
from seqssm.layers.rope import rope_positions
from seqssm.ops.conv1d import causal_conv1d
from seqssm.ops.masked import masked_causal_conv1d
from seqssm.ops.rotary import rotary_table


class AttentionBlock(SequenceLayer):
    """Pre-norm residual causal self-attention: x (B, L, d_model) -> (B, L, d_model). Settings: `config` (an
    AttentionConfig) and the stack's norm (rms_norm, norm_eps) and residual_in_fp32. State, a KV cache of the T steps
    seen: (keys (B, n_kv_heads, T, head_dim) with RoPE applied, values (B, n_kv_heads, T, head_dim), visible (B, T)
    bool: the cached steps later steps attend to, position (B,) long: the rotary position of the next step, conv
    state (B, qkv channels, d_conv - 1))."""

    def __init__(self, d_model: int, config: AttentionConfig, rms_norm: bool = True, norm_eps: float = 1e-5,
                 residual_in_fp32: bool = False):
        super().__init__()
        if not isinstance(config, AttentionConfig):
            raise TypeError(f"AttentionBlock takes an AttentionConfig, got {type(config).__name__}")
        check_sizes("AttentionBlock", d_model=d_model)
        if config.head_dim is None and d_model % config.n_heads:
            raise ConfigError(f"AttentionBlock: d_model {d_model} does not split into n_heads {config.n_heads} heads; "
                              "give head_dim or a divisor of d_model")
        self.d_model, self.config, self.residual_in_fp32 = d_model, config, residual_in_fp32
        self.n_heads, self.n_kv_heads = config.n_heads, config.n_kv_heads or config.n_heads
        self.head_dim = config.head_dim or d_model // config.n_heads
        if config.rotary_dim > self.head_dim:
            raise ConfigError(f"AttentionBlock: rotary_dim {config.rotary_dim} exceeds head_dim {self.head_dim}")
        self.qkv_dim = self.head_dim * (self.n_heads + 2 * self.n_kv_heads)
        self.norm = make_norm(d_model, rms_norm, norm_eps)
        self.in_proj = nn.Linear(d_model, self.qkv_dim + config.mlp_dim, bias=config.qkv_bias)
        # mamba_ssm's conv over q, k, v has a bias and no activation after it
        self.conv1d = nn.Conv1d(self.qkv_dim, self.qkv_dim, config.d_conv, groups=self.qkv_dim) if config.d_conv \
            else None
        self.out_proj = nn.Linear(self.n_heads * self.head_dim + config.mlp_dim // 2, d_model, bias=config.out_bias)

    # ----------------------------------------------------------------------------- pieces

    def _project(self, x: torch.Tensor):
        """x (B, L, d_model) -> (q, k, v before the conv, as one (B, qkv_dim, L) tensor; the MLP's output (B, L,
        mlp_dim / 2) or None)."""
        projected = self.in_proj(self.norm(x.to(self.norm.weight.dtype)))
        qkv, mlp = projected.split([self.qkv_dim, self.config.mlp_dim], dim=-1)
        if self.config.mlp_dim:
            up, gate = mlp.chunk(2, dim=-1)
            return qkv.transpose(1, 2), up * F.silu(gate)
        return qkv.transpose(1, 2), None

    def _heads(self, qkv: torch.Tensor, positions: torch.Tensor):
        """qkv (B, qkv_dim, L), positions (B, L) -> q (B, n_heads, L, head_dim), k, v (B, n_kv_heads, L, head_dim),
        RoPE applied to q and k."""
        q, k, v = qkv.transpose(1, 2).split([self.n_heads * self.head_dim, *(self.n_kv_heads * self.head_dim,) * 2],
                                            dim=-1)
        q, k, v = (t.unflatten(-1, (-1, self.head_dim)).transpose(1, 2) for t in (q, k, v))
        return self._rotate(q, positions), self._rotate(k, positions), v

    def _rotate(self, t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """RoPE on the first rotary_dim channels of t (B, heads, L, head_dim) at positions (B, L): the first and second
        half of those channels rotate as the two coordinates of each pair."""
        if not self.config.rotary_dim:
            return t
        # float64 frequencies made here, not a buffer: casting the model to bf16 would round a buffer's too
        pairs = torch.arange(0, self.config.rotary_dim, 2, dtype=torch.float64, device=t.device)
        cos, sin = rotary_table(positions, self.config.rotary_base ** (-pairs / self.config.rotary_dim))
        cos, sin = (a[:, None, :, ::2].to(t.dtype) for a in (cos, sin))  # the table repeats each pair's angle
        half = self.config.rotary_dim // 2
        first, second, rest = t[..., :half], t[..., half:2 * half], t[..., 2 * half:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos, rest], dim=-1)

    def _finish(self, x: torch.Tensor, context: torch.Tensor, mlp: torch.Tensor | None) -> torch.Tensor:
        """x + out_proj(context (B, heads, L, head_dim) as (B, L, heads * head_dim), then the MLP's output)."""
        context = context.transpose(1, 2).flatten(2)
        if mlp is not None:
            context = torch.cat([context, mlp], dim=-1)
        return add_residual(x, self.out_proj(context), self.residual_in_fp32)

    def _attend(self, q, k, v, mask=None, causal=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                              scale=self.config.softmax_scale, enable_gqa=self.n_kv_heads != self.n_heads)

    # ----------------------------------------------------------------------------- the contract

    def _forward(self, x, lengths=None):
        """The zero-state path: plain causal attention (the fused kernels of scaled_dot_product_attention)."""
        qkv, mlp = self._project(x)
        if self.conv1d is not None:
            qkv = causal_conv1d(qkv, self.conv1d.weight[:, 0], self.conv1d.bias)
        positions = torch.arange(x.shape[1], device=x.device).expand(x.shape[0], -1)
        q, k, v = self._heads(qkv, positions)
        return self._finish(x, self._attend(q, k, v, causal=True), mlp)

    def _scan(self, x, state, resets, mask):
        """x (B, L, d_model), state (None: empty), resets / mask (B, L) -> (y (B, L, d_model), the cache with L more
        steps)."""
        batch, length = x.shape[:2]
        keys, values, visible, position, conv_state = (
            self.initial_state(batch, x.device, x.dtype) if state is None else state)
        positions = rope_positions(position, length, resets, mask)
        valid = torch.ones(batch, length, dtype=torch.bool, device=x.device) if mask is None else mask
        resets = torch.zeros_like(valid) if resets is None else resets
        segment = torch.cumsum(resets.long(), 1)  # resets so far: steps attend within one segment

        qkv, mlp = self._project(x)
        if self.conv1d is not None:
            qkv, conv_state = masked_causal_conv1d(qkv, self.conv1d.weight[:, 0], self.conv1d.bias,
                                                   conv_state.to(qkv.dtype), resets, mask)
        q, k, v = self._heads(qkv, positions)
        steps = torch.arange(length, device=x.device)
        # A masked query still sees itself, so that no row of the softmax is empty (its output is zeroed anyway).
        own = (steps[None, :] <= steps[:, None]) & (segment[:, :, None] == segment[:, None, :]) & (
            valid[:, None, :] | torch.eye(length, dtype=torch.bool, device=x.device))
        cached = visible[:, None, :] & (segment == 0)[:, :, None]
        keys, values = torch.cat([keys.to(k.dtype), k], 2), torch.cat([values.to(v.dtype), v], 2)
        context = self._attend(q, keys, values, mask=torch.cat([cached, own], 2)[:, None])
        last = segment[:, -1:]
        visible = torch.cat([visible & (last == 0), valid & (segment == last)], 1)
        position = positions[:, -1] + valid[:, -1].long()
        return mask_outputs(mask, self._finish(x, context, mlp)), (keys, values, visible, position, conv_state)

    def _step(self, x_t, state):
        """x_t (B, d_model), state -> (y_t (B, d_model), the cache one step longer): a scan of one step."""
        y, state = self._scan(x_t[:, None], state, None, None)
        return y[:, 0], state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        """An empty cache (T = 0) and a zero conv state, in the weights' dtype unless `dtype` is given."""
        w = self.in_proj.weight
        device, dtype = device or w.device, dtype or w.dtype
        empty = torch.zeros(batch_size, self.n_kv_heads, 0, self.head_dim, device=device, dtype=dtype)
        conv = torch.zeros(batch_size, self.qkv_dim if self.conv1d is not None else 0, max(self.config.d_conv - 1, 0),
                           device=device, dtype=dtype)
        return (empty, empty.clone(), torch.zeros(batch_size, 0, dtype=torch.bool, device=device),
                torch.zeros(batch_size, dtype=torch.long, device=device), conv)

    def _check_state(self, where: str, state, batch: int, path: str = "state") -> None:
        """A KV cache of this block: the five parts of `initial_state`, any number T of cached steps."""
        if not isinstance(state, (tuple, list)) or len(state) != 5:
            raise InputShapeError(f"{where}: {path} must be a KV cache, the tuple of 5 that initial_state({batch}) "
                                  f"or an earlier scan gives")
        keys, values, visible, position, conv = state
        steps = keys.shape[2] if torch.is_tensor(keys) and keys.ndim == 4 else -1
        want = {"keys": (batch, self.n_kv_heads, steps, self.head_dim), "values": (batch, self.n_kv_heads, steps,
                self.head_dim), "visible": (batch, steps), "position": (batch,),
                "conv": (batch, self.qkv_dim if self.conv1d is not None else 0, max(self.config.d_conv - 1, 0))}
        for (name, shape), part in zip(want.items(), state):
            if not torch.is_tensor(part) or tuple(part.shape) != shape or steps < 0:
                got = tuple(part.shape) if torch.is_tensor(part) else type(part).__name__
                raise InputShapeError(f"{where}: {path}'s {name} must be {shape} with T cached steps (as initial_state "
                                      f"or a scan gives it), got {got}")
        if visible.dtype != torch.bool or position.dtype.is_floating_point or not keys.is_floating_point():
            raise InputDtypeError(f"{where}: {path} must hold float keys / values, bool visible and integer position, "
                                  f"got {keys.dtype}, {visible.dtype}, {position.dtype}")
