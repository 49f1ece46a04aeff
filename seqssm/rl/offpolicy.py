"""The off-policy recurrent actor-critic (RAC) of the Kalman-layer paper ("Uncertainty Representations in
State-Space Layers for Deep Reinforcement Learning under Partial Observability", 4.1 and fig. 1), with
masked history encoders.

Each of actor and critic embeds the sequence of (observation, previous action) with one linear
layer, runs it through a history encoder (any causal seqssm layer stack, a Mamba block or a causal
Transformer) and feeds the encoding, with skip connections from the current observation (and, for
the continuous critic, the current action), to its MLP head. Encoders take right-padded batches
with `scan(x, state, mask=mask)`: masked steps leave the state unchanged (Kalman-layer paper, 4.3),
so the state returned is each sequence's state after its last valid step. `SACAgent` holds the
actor, the twin critic, its target and the entropy temperature, and acts as a policy.

The encoder is a memory core in the keys of PPO's `agent.core` (`CoreConfig`, built by `build_core`). Baselines of
the Kalman-layer paper, 5.1, by core layer (block "none", one layer, no final norm): vssm (vSSM), kalman (vSSM+KF),
kalman_u (vSSM+KF-u), gru, transformer (vTransformer), or block mamba; `core: null` gives the Memoryless agent, and
the Oracle is that on an environment that shows the true state. Every other layer of `seqssm.layers.LAYERS` (s5, s6,
mingru, ...) and block of `seqssm.blocks.BLOCKS` is offered by its name too.
"""

from __future__ import annotations

import copy
import math
import re
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from gymnasium import spaces
from torch import nn

from seqssm.blocks.config import block_config
from seqssm.blocks.stack import BLOCKS
from seqssm.errors import ConfigError, check_int
from seqssm.layers.registry import LAYERS
from seqssm.rl.agent import mlp
from seqssm.rl.core import CoreConfig, build_core, reset_state
from seqssm.rl.env_loop import ActOutput

# The kinds of SAC's former encoder keys: a stack of any registered layer or of any block, or none.
ENCODERS = (*LAYERS, *BLOCKS, "none")


@dataclass
class HistoryEncoderConfig:
    """SAC's former history-encoder keys (`agent.encoder`, replaced by `agent.core`): `core_config` reads them into
    the CoreConfig they describe, so old recipes and agents keep loading. Embedding width d_model (the Kalman-layer
    paper's E; table 1: 16 with N = 128).

    kind: one of ENCODERS. d_state: the latent size N (GRU hidden size; a block of `seqssm.blocks` with
    `expand` (Mamba): N is spread over its expand * d_model channels, Kalman-layer paper, table 1: d_state 4 per
    channel). n_layers stacked, then an RMSNorm if rms_norm. Transformer: n_heads, d_ff, context (attention
    window); None keeps the layer's own. expand: the block's width factor (None: the block's own).
    layer_kwargs go to the layer (e.g. {dt_init: -7.0} for kalman / vssm), or to the config of a block kind.
    """

    LIMITS: ClassVar[dict[str, str]] = {"d_model": ">= 1", "d_state": ">= 1", "n_layers": ">= 1", "n_heads": ">= 1",
                                        "d_ff": ">= 1", "context": ">= 1", "expand": ">= 1"}

    kind: str = "kalman"
    d_model: int = 16
    d_state: int = 128
    n_layers: int = 1
    rms_norm: bool = False
    n_heads: int | None = None
    d_ff: int | None = None
    context: int | None = None
    expand: int | None = None
    layer_kwargs: dict[str, Any] = field(default_factory=dict)

    def core_config(self) -> CoreConfig | None:
        """The memory core these keys describe (None for kind "none"), which `build_core` builds.

        A layer kind: n_layers of it bare. A block kind: n_layers of those blocks, their SSP's d_state N spread
        over expand * d_model channels. A transformer: one `CausalTransformer` of n_layers encoder layers and no
        RMSNorm (it ends in its own LayerNorm), as SAC's encoders always were, so saved agents keep their keys.
        """
        if self.kind not in ENCODERS:
            raise ValueError(f"unknown history encoder {self.kind!r}; choose one of {ENCODERS}")
        if self.kind == "none":
            return None
        stack = {"d_model": self.d_model, "n_layers": self.n_layers, "final_norm": self.rms_norm}
        if self.kind in BLOCKS:
            block_kwargs = dict(self.layer_kwargs) | ({} if self.expand is None else {"expand": self.expand})
            block = block_config(self.kind, **block_kwargs)
            channels = getattr(block, "expand", 1) * self.d_model
            return CoreConfig(layer=block.ssp.layer, block=self.kind, d_state=max(1, self.d_state // channels),
                              block_kwargs=block_kwargs, **stack)
        if self.kind == "transformer":
            sizes = {"n_layers": self.n_layers, "n_heads": self.n_heads, "d_ff": self.d_ff}
            return CoreConfig(layer="transformer", block="none", d_model=self.d_model, n_layers=1, final_norm=False,
                              d_state=self.context,
                              layer_kwargs=self.layer_kwargs | {k: v for k, v in sizes.items() if v is not None})
        return CoreConfig(layer=self.kind, block="none", d_state=self.d_state, layer_kwargs=dict(self.layer_kwargs),
                          **stack)


def former_encoder_core(encoder: HistoryEncoderConfig | dict) -> dict | None:
    """The `agent.core` section (CoreConfig keys that differ from the defaults; None: no encoder) that SAC's former
    `agent.encoder` keys describe."""
    if isinstance(encoder, dict):
        encoder = HistoryEncoderConfig(**encoder)
    core = encoder.core_config()
    if core is None:
        return None
    defaults = asdict(CoreConfig())
    return {key: value for key, value in asdict(core).items() if value != defaults[key]}


def action_features(space: spaces.Space) -> int:
    """Width of an action as the networks read it: one-hot size for Discrete, dim for a 1-d Box."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return int(space.shape[0])
    raise ValueError(f"SAC handles Discrete or 1-d Box actions, got {space}")


_LEGACY_ENCODER_KEYS = ((re.compile(r"^encoder\.norm\."), "encoder.norm_f."),
                        (re.compile(r"^encoder\.layers\.(\d+)\.block\."), r"encoder.layers.\1."),
                        (re.compile(r"^encoder\.(layers\.\d+\.(?:self_attn|linear[12]|norm[12])\.)"),
                         r"encoder.layers.0.\1"))


def _rename_legacy_encoder_keys(module, state_dict, prefix, *args) -> None:
    """Load-state-dict pre-hook: checkpoints written before the encoders became `BlockStack`s named the final
    norm `encoder.norm`, held each Mamba block under `encoder.layers.<i>.block` and a transformer as the encoder
    itself (now the stack's one layer); rename those keys in place."""
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

    def __init__(self, obs_dim: int, act_dim: int, core: CoreConfig | None):
        super().__init__()
        self.encoder = None if core is None else build_core(core)
        self.embed = nn.Linear(obs_dim + act_dim, core.d_model) if core is not None else None
        self.out_dim = obs_dim + (core.d_model if core is not None else 0)
        self.register_load_state_dict_pre_hook(_rename_legacy_encoder_keys)

    def initial_state(self, batch_size: int, device=None):
        """The encoder's initial state (None without an encoder)."""
        check_int("HistoryNet.initial_state", "batch_size", batch_size, minimum=0)
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
    """The recurrent actor-critic: its history encoder `core` (one per network, in the keys of PPO's agent.core;
    None: no encoder, the Memoryless agent), MLP head sizes, activation. `encoder`: SAC's former keys, read into
    `core` with a warning naming the section to write instead."""

    LIMITS: ClassVar[dict[str, str]] = {"actor": ">= 1", "critic": ">= 1"}
    FORMER: ClassVar[tuple[str, ...]] = ("encoder",)  # read, never written (RunConfig.to_dict leaves them out)

    core: CoreConfig | None = field(default_factory=CoreConfig)
    actor: list[int] = field(default_factory=lambda: [256, 256])
    critic: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    encoder: HistoryEncoderConfig | None = None

    def __post_init__(self):
        if self.encoder is None:
            return
        if self.core != CoreConfig():
            raise ConfigError("--agent.encoder is the former name of --agent.core; give only agent.core")
        section = former_encoder_core(self.encoder)
        written = "null" if section is None else yaml.safe_dump(section, default_flow_style=True, sort_keys=False).strip()
        warnings.warn(f"agent.encoder is SAC's former history-encoder section; write agent.core, the keys of PPO's "
                      f"memory core, instead: `core: {written}` (read so this time)", FutureWarning, stacklevel=3)
        self.core = None if section is None else CoreConfig(**section)
        self.encoder = None

    @property
    def memory(self) -> str:
        """The history encoder in a word: its layer or block, or "none"."""
        if self.core is None:
            return "none"
        return self.core.layer if self.core.block in ("none", "residual") else self.core.block


class Actor(nn.Module):
    """History net -> MLP -> logits (Discrete) or tanh-Gaussian mean and log-std (Box), in [-1, 1]^k."""

    LOG_STD = (-5.0, 2.0)

    def __init__(self, obs_dim: int, action_space: spaces.Space, config: RACConfig):
        super().__init__()
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.act_dim = action_features(action_space)
        self.history = HistoryNet(obs_dim, self.act_dim, config.core)
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
        self.history = HistoryNet(obs_dim, act_dim, config.core)
        d_in = self.history.out_dim + (0 if self.discrete else act_dim)
        d_out = act_dim if self.discrete else 1
        self.q1 = mlp([d_in, *config.critic, d_out], config.activation, last_activation=False)
        self.q2 = mlp([d_in, *config.critic, d_out], config.activation, last_activation=False)

    def q(self, features: torch.Tensor, action: torch.Tensor | None = None):
        """features (..., d), action (..., k) for Box -> (q1, q2): (..., n) for Discrete, (...) for Box."""
        x = features if self.discrete else torch.cat([features, action], -1)
        q1, q2 = self.q1(x), self.q2(x)
        return (q1, q2) if self.discrete else (q1.squeeze(-1), q2.squeeze(-1))


class SACAgent(nn.Module):
    """Actor, twin critic, the critic's Polyak-averaged target and the entropy temperature `log_alpha`.

    As a policy (`initial_state`, `act`, `env_action`) its state is (previous action (B, act_dim) as the
    networks read it, the actor encoder's state); Box actions live in [-1, 1]^k and `env_action`
    rescales them to the space's bounds.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, config: RACConfig,
                 alpha: float = 0.1):
        super().__init__()
        obs_dim = spaces.flatdim(observation_space)
        self.observation_space, self.action_space = observation_space, action_space
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.act_dim = action_features(action_space)
        self.actor = Actor(obs_dim, action_space, config)
        self.critic = Critic(obs_dim, action_space, config)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)))

    def action_feature(self, action: torch.Tensor) -> torch.Tensor:
        """Policy actions (B,) long or (B, k) in [-1, 1] -> what the networks read: one-hot or as is (B, act_dim)."""
        return F.one_hot(action, self.act_dim).float() if self.discrete else action

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """Policy actions -> environment actions (Box: rescaled from [-1, 1] to the space's bounds)."""
        a = action.cpu().numpy()
        if self.discrete:
            return a
        low, high = self.action_space.low, self.action_space.high
        return (low + (a + 1.0) * 0.5 * (high - low)).astype(self.action_space.dtype)

    def initial_state(self, batch_size: int, device=None):
        """(no previous action (B, act_dim) zeros, the actor encoder's initial state)."""
        check_int("SACAgent.initial_state", "batch_size", batch_size, minimum=0)
        prev = torch.zeros(batch_size, self.act_dim, device=device)
        return prev, self.actor.history.initial_state(batch_size, device=device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, state, done: torch.Tensor | None = None, deterministic: bool = False) -> ActOutput:
        """obs (B, obs_dim), state, done (B,) bool = obs starts an episode (its state reset first) -> ActOutput."""
        prev, encoder_state = state
        if done is not None and bool(done.any()):
            fresh_prev, fresh = self.initial_state(obs.shape[0], obs.device)
            prev = torch.where(done[:, None], fresh_prev, prev)
            if encoder_state is not None:
                encoder_state = reset_state(encoder_state, fresh, done)
        features, encoder_state = self.actor.history.step(obs, prev, encoder_state)
        action = self.actor.policy(features, deterministic)[0]
        return ActOutput(action, (self.action_feature(action), encoder_state))
