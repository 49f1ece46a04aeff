"""The off-policy recurrent actor-critic (RAC) of seed 002 section 4.1 and figure 1, with masked history encoders.

Each of actor and critic embeds the sequence of (observation, previous action) with one linear
layer, runs it through a history encoder (any causal seqssm layer stack, a Mamba block or a causal
Transformer) and feeds the encoding, with skip connections from the current observation (and, for
the continuous critic, the current action), to its MLP head. Encoders take right-padded batches
with `scan(x, state, mask=mask)`: masked steps leave the state unchanged (seed 002 section 4.3),
so the state returned is each sequence's state after its last valid step.

Baselines of seed 002 section 5.1 by encoder kind: vssm (vSSM), kalman (vSSM+KF), kalman_u
(vSSM+KF-u), mamba, gru, transformer (vTransformer); none gives the Memoryless agent, and the
Oracle is `none` on an environment that shows the true state. Every other layer of
`seqssm.layers.LAYERS` (s5, s6, mingru, ...) is offered by its name too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from seqssm.blocks.common import make_norm
from seqssm.blocks.config import block_config
from seqssm.blocks.mamba import MambaBlock
from seqssm.blocks.stack import BlockStack
from seqssm.layers import CausalTransformer, SequenceLayer
from seqssm.layers.registry import LAYERS, build_layer
from seqssm.rl.agent import mlp

# A history encoder: a stack of any registered layer, a stack of Mamba blocks, or none (Memoryless / Oracle).
ENCODERS = (*LAYERS, "mamba", "none")


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
    """The encoder that `config` describes, with scan(..., mask=), step and initial_state; None for kind "none".

    A transformer is one `CausalTransformer` of n_layers encoder layers; every other kind is a `BlockStack` of
    n_layers layers (or Mamba blocks), then an RMSNorm if rms_norm.
    """
    kind, d, kwargs = config.kind, config.d_model, dict(config.layer_kwargs)
    if kind not in ENCODERS:
        raise ValueError(f"unknown history encoder {kind!r}; choose one of {ENCODERS}")
    if kind == "none":
        return None
    if kind == "transformer":
        return CausalTransformer(d, config.n_layers, config.n_heads, config.d_ff, config.context)
    if kind == "mamba":
        per_channel = max(1, config.d_state // (config.expand * d))
        block = block_config("mamba", ssp="s6", d_state=per_channel, expand=config.expand, **kwargs)
        layers = [MambaBlock(d, block) for _ in range(config.n_layers)]
    else:
        layers = [build_layer(kind, d, config.d_state, **kwargs) for _ in range(config.n_layers)]
    return BlockStack(layers, make_norm(d, rms=True) if config.rms_norm else nn.Identity())


def action_features(space: spaces.Space) -> int:
    """Width of an action as the networks read it: one-hot size for Discrete, dim for a 1-d Box."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return int(space.shape[0])
    raise ValueError(f"SAC handles Discrete or 1-d Box actions, got {space}")


_LEGACY_ENCODER_KEYS = ((re.compile(r"^encoder\.norm\."), "encoder.norm_f."),
                        (re.compile(r"^encoder\.layers\.(\d+)\.block\."), r"encoder.layers.\1."))


def _rename_legacy_encoder_keys(module, state_dict, prefix, *args) -> None:
    """Load-state-dict pre-hook: checkpoints written before the encoders became `BlockStack`s named the final
    norm `encoder.norm` and held each Mamba block under `encoder.layers.<i>.block`; rename those keys in place."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        local = key[len(prefix):]
        for pattern, replacement in _LEGACY_ENCODER_KEYS:
            local = pattern.sub(replacement, local)
        if prefix + local != key:
            state_dict[prefix + local] = state_dict.pop(key)


class HistoryNet(nn.Module):
    """(obs, previous action) sequences -> features [encoding, obs] per step: linear embedder + history encoder.

    With encoder None (Memoryless / Oracle) the features are the current observation alone.
    """

    def __init__(self, obs_dim: int, act_dim: int, encoder: HistoryEncoderConfig):
        super().__init__()
        self.encoder = build_history_encoder(encoder)
        self.embed = nn.Linear(obs_dim + act_dim, encoder.d_model) if self.encoder is not None else None
        self.out_dim = obs_dim + (encoder.d_model if self.encoder is not None else 0)
        self.register_load_state_dict_pre_hook(_rename_legacy_encoder_keys)

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
