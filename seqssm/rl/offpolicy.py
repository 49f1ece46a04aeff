"""The off-policy recurrent actor-critic (RAC) of seed 002 section 4.1 and figure 1, with masked history encoders.

Each of actor and critic embeds the sequence of (observation, previous action) with one linear
layer, runs it through a history encoder (any causal seqssm layer stack, a Mamba block or a causal
Transformer) and feeds the encoding, with skip connections from the current observation (and, for
the continuous critic, the current action), to its MLP head. Encoders take right-padded batches
with `scan(x, state, mask=mask)`: masked steps leave the state unchanged (seed 002 section 4.3),
so the state returned is each sequence's state after its last valid step.

Baselines of seed 002 section 5.1 by encoder kind: vssm (vSSM), kalman (vSSM+KF), kalman_u
(vSSM+KF-u), mamba, gru, transformer (vTransformer); none gives the Memoryless agent, and the
Oracle is `none` on an environment that shows the true state. s5, s6 and mingru are also offered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from seqssm.blocks.common import make_norm
from seqssm.blocks.mamba import MambaBlock
from seqssm.layers import KalmanLayer
from seqssm.layers.base import SequenceLayer, check_mask, mask_outputs
from seqssm.ops.conv1d import causal_conv1d
from seqssm.rl.agent import mlp
from seqssm.rl.core import LAYERS

ENCODERS = ("vssm", "kalman", "kalman_u", "mamba", "gru", "s5", "s6", "mingru", "transformer", "none")


class KalmanNoInput(KalmanLayer):
    """vSSM+KF-u (seed 002 section 5.1): the Kalman layer without control input u; only w and r are projected."""

    def __init__(self, d_model: int, d_state: int = 64, **kwargs):
        super().__init__(d_model, d_state, **kwargs)
        self.in_proj = nn.Linear(d_model, 2 * d_state)
        self.B.requires_grad_(False)  # it only ever multiplies u = 0

    def project(self, x: torch.Tensor, dtype: torch.dtype):
        """x (..., d_model) -> u = 0, w, r > 0, each (..., N)."""
        w, r = self.in_proj(x).to(dtype).chunk(2, dim=-1)
        return torch.zeros_like(w), w, F.softplus(r)


class LayerStack(SequenceLayer):
    """Layers applied in turn, then an optional RMSNorm (seed 002's history encoder); passes `mask` to each."""

    causal = True

    def __init__(self, layers: Sequence[nn.Module], d_model: int, rms_norm: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = make_norm(d_model, rms=True) if rms_norm else nn.Identity()

    def scan(self, x, state=None, resets=None, mask=None):
        """x (B, L, d), state (tuple per layer) or None, resets / mask (B, L) -> (y (B, L, d), state)."""
        states = []
        for layer, s in zip(self.layers, (None,) * len(self.layers) if state is None else state):
            x, s = layer.scan(x, s, resets, mask=mask)
            states.append(s)
        return mask_outputs(mask, self.norm(x)), tuple(states)

    def step(self, x_t, state):
        """x_t (B, d), state -> (y_t (B, d), state)."""
        states = []
        for layer, s in zip(self.layers, state):
            x_t, s = layer.step(x_t, s)
            states.append(s)
        return self.norm(x_t), tuple(states)

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return tuple(layer.initial_state(batch_size, device=device, dtype=dtype) for layer in self.layers)


class MaskedMamba(SequenceLayer):
    """A causal `MambaBlock` whose scan accepts a right-padding mask.

    The block's S6 takes the mask itself (Δ = 0 on padding); its conv1d carries a window of the
    last d_conv - 1 inputs, which is not a linear recurrence, so the final window is gathered at
    each sequence's length (the per-sequence fallback).
    """

    causal = True

    def __init__(self, d_model: int, d_state: int = 16, expand: int = 2, d_conv: int = 4, **kwargs):
        super().__init__()
        self.block = MambaBlock(d_model, ssp="s6", d_state=d_state, expand=expand, d_conv=d_conv, **kwargs)

    def scan(self, x, state=None, resets=None, mask=None):
        """x (B, L, d), state or None, resets / mask (B, L) (not both) -> (y (B, L, d), state)."""
        mask = check_mask(mask, x.shape[0], x.shape[1])
        if mask is None:
            return self.block.scan(x, state, resets)
        if resets is not None:
            raise ValueError("MaskedMamba takes resets or a mask, not both: the conv window would need both")
        branch = self.block.branches[0]
        conv_state, ssp_state = self.block.initial_state(x.shape[0], x.device) if state is None else state
        xi, z = self.block._split(x)
        weight, k = branch.conv1d.weight[:, 0], branch.d_conv
        h = causal_conv1d(xi.transpose(1, 2), weight, branch.conv1d.bias, conv_state)
        y, ssp_state = branch.ssp.scan(F.silu(h).transpose(1, 2), ssp_state, mask=mask)
        window = torch.cat([conv_state.to(xi.dtype), xi.transpose(1, 2)], dim=-1)  # (B, d_inner, k - 1 + L)
        index = mask.sum(1).view(-1, 1, 1) + torch.arange(k - 1, device=x.device)
        conv_state = window.gather(-1, index.expand(-1, window.shape[1], -1))
        return mask_outputs(mask, self.block._finish(x, y, z)), (conv_state, ssp_state)

    def step(self, x_t, state):
        return self.block.step(x_t, state)

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return self.block.initial_state(batch_size, device=device, dtype=dtype)


def sinusoidal(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """The sinusoidal position code of Vaswani et al.: positions (...) long -> (..., d_model)."""
    i = torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32)
    angles = positions.unsqueeze(-1).float() * torch.exp(-math.log(10000.0) * i / d_model)
    code = torch.zeros(*positions.shape, d_model, device=positions.device)
    code[..., 0::2] = torch.sin(angles)
    code[..., 1::2] = torch.cos(angles[..., : d_model // 2])
    return code


class CausalTransformer(SequenceLayer):
    """vTransformer: torch encoder layers with causal attention over the last `context` steps and sinusoidal positions.

    State: (past inputs (B, context - 1, d) right-aligned, their count (B,), steps so far (B,)), so
    `step` and `scan` continue a sequence; `scan` accepts a right-padding mask (not resets).
    """

    causal = True

    def __init__(self, d_model: int, n_layers: int = 1, n_heads: int = 1, d_ff: int = 128, context: int = 64):
        super().__init__()
        if context < 1:
            raise ValueError(f"transformer context must be >= 1, got {context}")
        self.d_model, self.n_heads, self.context = d_model, n_heads, context
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True) for _ in range(n_layers)
        )

    def scan(self, x, state=None, resets=None, mask=None):
        """x (B, L, d), state or None, mask (B, L) -> (y (B, L, d), state)."""
        if resets is not None and bool(resets.any()):
            raise ValueError("CausalTransformer.scan has no resets; start a new sequence from initial_state")
        batch, length, _ = x.shape
        mask = check_mask(mask, batch, length)
        valid_x = torch.ones(batch, length, dtype=torch.bool, device=x.device) if mask is None else mask
        past, count, steps = self.initial_state(batch, x.device, x.dtype) if state is None else state
        n_past = self.context - 1
        seq = torch.cat([past.to(x.dtype), x], dim=1)
        valid = torch.cat([torch.arange(n_past, device=x.device) >= n_past - count[:, None], valid_x], dim=1)
        # Valid tokens are contiguous (left-padded past, right-padded input), so index gaps are time gaps.
        positions = (steps - count)[:, None] + valid.long().cumsum(1) - 1
        idx = torch.arange(seq.shape[1], device=x.device)
        gap = idx[:, None] - idx[None, :]  # query - key
        blocked = (gap < 0) | (gap >= self.context) | ~valid[:, None, :]
        blocked = blocked & (gap != 0)  # every query sees itself, so padded queries have a finite softmax
        attn_mask = blocked.repeat_interleave(self.n_heads, dim=0)
        h = seq + sinusoidal(positions.clamp(min=0), self.d_model).to(x.dtype)
        for layer in self.layers:
            h = layer(h, src_mask=attn_mask)
        n_new = valid_x.sum(1)
        keep = n_new[:, None] + torch.arange(n_past, device=x.device)  # the last n_past valid tokens
        new_count = (count + n_new).clamp(max=n_past)
        new_past = seq.gather(1, keep.unsqueeze(-1).expand(-1, -1, self.d_model))
        new_past = new_past * (torch.arange(n_past, device=x.device) >= n_past - new_count[:, None]).unsqueeze(-1)
        return mask_outputs(mask, h[:, n_past:]), (new_past, new_count, steps + n_new)

    def step(self, x_t, state):
        """x_t (B, d), state -> (y_t (B, d), state): attends over the stored window."""
        y, state = self.scan(x_t.unsqueeze(1), state)
        return y[:, 0], state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        p = self.layers[0].linear1.weight
        device, dtype = device or p.device, dtype or p.dtype
        zeros = torch.zeros(batch_size, dtype=torch.long, device=device)
        return torch.zeros(batch_size, self.context - 1, self.d_model, device=device, dtype=dtype), zeros, zeros


@dataclass
class HistoryEncoderConfig:
    """A history encoder over embeddings of width d_model (seed 002's E; table 1: 16 with N = 128).

    kind: one of ENCODERS. d_state: the latent size N (GRU hidden size; Mamba: N is spread over
    its expand * d_model channels, seed 002 table 1: d_state 4 per channel). n_layers stacked, then
    an RMSNorm if rms_norm. Transformer: n_heads, d_ff, context (attention window).
    layer_kwargs go to the layer (e.g. {dt_init: -7.0} for kalman / vssm).
    """

    kind: str = "kalman"
    d_model: int = 16
    d_state: int = 128
    n_layers: int = 1
    rms_norm: bool = False
    n_heads: int = 1
    d_ff: int = 128
    context: int = 64
    expand: int = 2
    layer_kwargs: dict[str, Any] = field(default_factory=dict)


def build_history_encoder(config: HistoryEncoderConfig) -> SequenceLayer | None:
    """The encoder that `config` describes, with scan(..., mask=), step and initial_state; None for kind "none"."""
    kind, d, kwargs = config.kind, config.d_model, dict(config.layer_kwargs)
    if kind not in ENCODERS:
        raise ValueError(f"unknown history encoder {kind!r}; choose one of {ENCODERS}")
    if kind == "none":
        return None
    if kind == "transformer":
        return CausalTransformer(d, config.n_layers, config.n_heads, config.d_ff, config.context)
    if kind == "mamba":
        per_channel = max(1, config.d_state // (config.expand * d))
        layers = [MaskedMamba(d, per_channel, config.expand, **kwargs) for _ in range(config.n_layers)]
    elif kind == "kalman_u":
        layers = [KalmanNoInput(d, config.d_state, **kwargs) for _ in range(config.n_layers)]
    else:
        cls, state_kw = LAYERS[kind]
        layers = [cls(d, **{state_kw: config.d_state}, **kwargs) for _ in range(config.n_layers)]
    return LayerStack(layers, d, config.rms_norm)


def action_features(space: spaces.Space) -> int:
    """Width of an action as the networks read it: one-hot size for Discrete, dim for a 1-d Box."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return int(space.shape[0])
    raise ValueError(f"SAC handles Discrete or 1-d Box actions, got {space}")


class HistoryNet(nn.Module):
    """(obs, previous action) sequences -> features [encoding, obs] per step: linear embedder + history encoder.

    With encoder None (Memoryless / Oracle) the features are the current observation alone.
    """

    def __init__(self, obs_dim: int, act_dim: int, encoder: HistoryEncoderConfig):
        super().__init__()
        self.encoder = build_history_encoder(encoder)
        self.embed = nn.Linear(obs_dim + act_dim, encoder.d_model) if self.encoder is not None else None
        self.out_dim = obs_dim + (encoder.d_model if self.encoder is not None else 0)

    def initial_state(self, batch_size: int, device=None):
        """The encoder's initial state (None without an encoder)."""
        if self.encoder is None:
            return None
        return self.encoder.initial_state(batch_size, device=device or self.embed.weight.device)

    def scan(self, obs, prev_action, state=None, mask=None):
        """obs (B, L, obs_dim), prev_action (B, L, act_dim), state, mask (B, L) -> (features (B, L, out_dim), state)."""
        if self.encoder is None:
            return obs, None
        h, state = self.encoder.scan(self.embed(torch.cat([obs, prev_action], -1)), state, mask=mask)
        return torch.cat([h, obs], -1), state

    def step(self, obs, prev_action, state):
        """obs (B, obs_dim), prev_action (B, act_dim), state -> (features (B, out_dim), state)."""
        if self.encoder is None:
            return obs, None
        h, state = self.encoder.step(self.embed(torch.cat([obs, prev_action], -1)), state)
        return torch.cat([h, obs], -1), state


@dataclass
class RACConfig:
    """The recurrent actor-critic: its history encoder (one per network), MLP head sizes, activation."""

    encoder: HistoryEncoderConfig = field(default_factory=HistoryEncoderConfig)
    actor: list[int] = field(default_factory=lambda: [256, 256])
    critic: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"


class Actor(nn.Module):
    """History net -> MLP -> logits (Discrete) or tanh-Gaussian mean and log-std (Box), in [-1, 1]^k."""

    LOG_STD = (-5.0, 2.0)

    def __init__(self, obs_dim: int, action_space: spaces.Space, config: RACConfig):
        super().__init__()
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.act_dim = action_features(action_space)
        self.history = HistoryNet(obs_dim, self.act_dim, config.encoder)
        out = self.act_dim * (1 if self.discrete else 2)
        self.head = mlp([self.history.out_dim, *config.actor, out], config.activation, last_activation=False)

    def policy(self, features: torch.Tensor, deterministic: bool = False):
        """features (..., d) -> (action, log_prob, probs): discrete: action (...) long, log_prob and probs
        (..., n) over all actions; continuous: action (..., k) in [-1, 1], log_prob (...), probs None."""
        out = self.head(features)
        if self.discrete:
            log_probs = F.log_softmax(out, -1)
            probs = log_probs.exp()
            action = probs.argmax(-1) if deterministic else torch.multinomial(probs.reshape(-1, self.act_dim), 1)
            return action.reshape(out.shape[:-1]), log_probs, probs
        mean, log_std = out.chunk(2, -1)
        log_std = log_std.clamp(*self.LOG_STD)
        pre = mean if deterministic else mean + log_std.exp() * torch.randn_like(mean)
        action = torch.tanh(pre)
        # log N(pre) minus the tanh Jacobian, log(1 - tanh^2) = 2 (log 2 - pre - softplus(-2 pre)) for stability
        normal = -0.5 * ((pre - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = (normal - 2 * (math.log(2) - pre - F.softplus(-2 * pre))).sum(-1)
        return action, log_prob, None


class Critic(nn.Module):
    """History net -> twin MLP Q heads: Q(h, o) over all actions (Discrete) or Q(h, o, a) (Box)."""

    def __init__(self, obs_dim: int, action_space: spaces.Space, config: RACConfig):
        super().__init__()
        self.discrete = isinstance(action_space, spaces.Discrete)
        act_dim = action_features(action_space)
        self.history = HistoryNet(obs_dim, act_dim, config.encoder)
        d_in = self.history.out_dim + (0 if self.discrete else act_dim)
        d_out = act_dim if self.discrete else 1
        self.q1 = mlp([d_in, *config.critic, d_out], config.activation, last_activation=False)
        self.q2 = mlp([d_in, *config.critic, d_out], config.activation, last_activation=False)

    def q(self, features: torch.Tensor, action: torch.Tensor | None = None):
        """features (..., d), action (..., k) for Box -> (q1, q2): (..., n) for Discrete, (...) for Box."""
        x = features if self.discrete else torch.cat([features, action], -1)
        q1, q2 = self.q1(x), self.q2(x)
        return (q1, q2) if self.discrete else (q1.squeeze(-1), q2.squeeze(-1))


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
