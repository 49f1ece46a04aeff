"""Recurrent actor-critic: observation encoder -> memory core (any seqssm causal stack) -> actor and critic heads.

Rollouts call `act` once per environment step, which advances the core with `step`; PPO updates
call `evaluate` on a stored rollout, which runs the core's `scan` from the stored start state
with the episode starts as resets (the resettable scan of Lu et al. 2023, "Structured State Space
Models for In-Context Reinforcement Learning", 3.1). Both reset the core to its initial state where
an episode starts, so the two give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Normal

from seqssm.errors import check_int
from seqssm.models.sequence_model import SequenceModel
from seqssm.rl.core import (
    ACTIVATIONS, CoreConfig, build_core, core_from_model_config, core_width, load_core, reset_state
)
from seqssm.rl.env_loop import ActOutput

INITS = ("default", "orthogonal")
SUPPORTED_ACTIONS = "Discrete, MultiDiscrete or a 1-d Box"


def mlp(sizes: Sequence[int], activation: str, last_activation: bool) -> nn.Sequential:
    """Linear layers through `sizes` with `activation` between them (and after the last if last_activation)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {tuple(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_activation or i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class ActionHead(nn.Module):
    """Features (..., d) -> a torch distribution over one action of `space` whose log_prob / entropy are (...)."""

    def __init__(self, space: spaces.Space, d_in: int, hidden: Sequence[int], activation: str):
        super().__init__()
        if np.any(getattr(space, "start", 0) != 0):
            raise ValueError(f"unsupported action space {space}: discrete actions must start at 0")
        if isinstance(space, spaces.Discrete):
            self.kind, self.sizes = "discrete", [int(space.n)]
        elif isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
            self.kind, self.sizes = "multi", [int(n) for n in space.nvec]
        elif isinstance(space, spaces.Box) and len(space.shape) == 1:
            self.kind, self.sizes = "box", [int(space.shape[0])]
        else:
            raise ValueError(f"unsupported action space {space}; the actor handles {SUPPORTED_ACTIONS}")
        self.net = mlp([d_in, *hidden, sum(self.sizes)], activation, last_activation=False)
        # Small last layer: the initial policy is near uniform (CleanRL's std 0.01 actor init, by scale).
        with torch.no_grad():
            self.net[-1].weight.mul_(0.01)
            self.net[-1].bias.zero_()
        self.log_std = nn.Parameter(torch.zeros(self.sizes[0])) if self.kind == "box" else None

    def distribution(self, h: torch.Tensor) -> "Policy":
        """h (..., d) -> the policy at every position of h."""
        out = self.net(h)
        # The network's outputs are valid parameters by construction; argument checks cost as much as the
        # rest of a rollout step's sampling.
        if self.kind == "box":
            return Policy(self.kind, [Normal(out, self.log_std.exp().expand_as(out), validate_args=False)])
        parts = out.split(self.sizes, dim=-1)
        return Policy(self.kind, [Categorical(logits=part, validate_args=False) for part in parts])


@dataclass
class Policy:
    """A distribution over one action. kind "discrete": one Categorical, action (...) long; "multi":
    independent Categoricals, action (..., k) long; "box": a diagonal Normal, action (..., k) float."""

    kind: str
    dists: list

    def sample(self, deterministic: bool = False) -> torch.Tensor:
        if self.kind == "box":
            return self.dists[0].mean if deterministic else self.dists[0].sample()
        picks = [d.probs.argmax(-1) if deterministic else d.sample() for d in self.dists]
        return picks[0] if self.kind == "discrete" else torch.stack(picks, dim=-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        if self.kind == "box":
            return self.dists[0].log_prob(action).sum(-1)
        if self.kind == "discrete":
            return self.dists[0].log_prob(action)
        return sum(d.log_prob(action[..., i]) for i, d in enumerate(self.dists))

    def entropy(self) -> torch.Tensor:
        if self.kind == "box":
            return self.dists[0].entropy().sum(-1)
        return sum(d.entropy() for d in self.dists)


@dataclass
class EvaluateOutput:
    """A stored rollout re-run: log_prob, entropy, value (B, L) and the core state after the last step."""

    log_prob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor
    state: object = field(repr=False)


class ActorCritic(nn.Module):
    """obs (B, obs_dim) -> encoder MLP -> core (B, d_model) -> actor distribution and critic value.

    core: any module with the layer contract on (B, L, d_model) (a layer, a BlockStack from
    `seqssm.rl.build_core` or `seqssm.blocks`), or a causal SequenceModel, whose backbone is used.
    observation_space: the flat Box that `seqssm.rl.make_env` produces (observation, previous
    action, previous reward, start flag). action_space: Discrete, MultiDiscrete or a 1-d Box
    (Gaussian policy with a learned, state-independent std; `env_action` clips it to the Box).
    Defaults follow Lu et al. 2023, table 3 in shape (encoder [128, 256 = d_model], heads [128, 128],
    LeakyReLU).
    """

    def __init__(
        self,
        core: nn.Module,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        d_model: int | None = None,
        encoder: Sequence[int] = (128,),
        actor: Sequence[int] = (128, 128),
        critic: Sequence[int] = (128, 128),
        activation: str = "leaky_relu",
    ):
        super().__init__()
        if isinstance(core, SequenceModel):
            core = core.backbone
        if not getattr(core, "causal", True):
            raise ValueError("the agent's core must be causal: a bidirectional stack has no recurrent state")
        if not (isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 1):
            raise ValueError(f"ActorCritic reads flat observations, got {observation_space}; build environments "
                             "with seqssm.rl.make_env / make_vector_env (they flatten and add the previous action)")
        self.observation_space, self.action_space = observation_space, action_space
        self.d_model = d_model or core_width(core)
        self.encoder = mlp([observation_space.shape[0], *encoder, self.d_model], activation, last_activation=True)
        self.core = core
        self.actor = ActionHead(action_space, self.d_model, actor, activation)
        self.critic = mlp([self.d_model, *critic, 1], activation, last_activation=False)

    def initial_state(self, batch_size: int, device=None):
        """The core's initial state for batch_size environments."""
        check_int("ActorCritic.initial_state", "batch_size", batch_size, minimum=0)
        p = next(self.parameters())
        return self.core.initial_state(batch_size, device=device or p.device, dtype=p.dtype)

    def act(self, obs: torch.Tensor, state, done: torch.Tensor | None = None, deterministic: bool = False) -> ActOutput:
        """obs (B, obs_dim), core state, done (B,) bool = obs starts a new episode (state reset first) -> ActOutput."""
        if done is not None and bool(done.any()):
            state = reset_state(state, self.initial_state(obs.shape[0], obs.device), done)
        h, state = self.core.step(self.encoder(obs), state)
        policy = self.actor.distribution(h)
        action = policy.sample(deterministic)
        return ActOutput(action, state, policy.log_prob(action), self.critic(h).squeeze(-1))

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """Actions (B, ...) from `act` -> the numpy batch a vector env takes (Box actions clipped to its bounds)."""
        out = action.detach().cpu().numpy()
        if isinstance(self.action_space, spaces.Box):
            out = np.clip(out, self.action_space.low, self.action_space.high)
        return out

    def evaluate(self, obs: torch.Tensor, start_state, dones: torch.Tensor, actions: torch.Tensor) -> EvaluateOutput:
        """obs (B, L, obs_dim) from `start_state`, dones (B, L) bool (episode starts: resets), actions (B, L, ...)
        -> EvaluateOutput with (B, L) log-probs of `actions`, entropies and values."""
        h, state = self.core.scan(self.encoder(obs), start_state, resets=dones)
        policy = self.actor.distribution(h)
        return EvaluateOutput(policy.log_prob(actions), policy.entropy(), self.critic(h).squeeze(-1), state)


def orthogonal_init(agent: ActorCritic) -> None:
    """Initialise `agent` as Lu et al.'s public code does (CleanRL's scheme): orthogonal weights and zero biases,
    gain sqrt(2) in the encoder, 2 in the heads' hidden layers, 0.01 in the actor's last layer, 1 in the critic's.
    An `nn.GRU` in the core gets the initialisation of flax's GRUCell, the code's GRU: LeCun-normal input weights,
    an orthogonal recurrent matrix per gate, zero biases. Every other core layer keeps its own initialisation."""
    def linears(module: nn.Module) -> list[nn.Linear]:
        return [m for m in module.modules() if isinstance(m, nn.Linear)]

    with torch.no_grad():
        for layers, gain, last_gain in ((linears(agent.encoder), math.sqrt(2), math.sqrt(2)),
                                        (linears(agent.actor.net), 2.0, 0.01), (linears(agent.critic), 2.0, 1.0)):
            for i, layer in enumerate(layers):
                nn.init.orthogonal_(layer.weight, last_gain if i == len(layers) - 1 else gain)
                nn.init.zeros_(layer.bias)
        for gru in (m for m in agent.core.modules() if isinstance(m, nn.GRU)):
            for name, param in gru.named_parameters():
                if name.startswith("weight_ih"):
                    # flax's lecun_normal: a normal truncated at 2 std, scaled so the variance is 1 / fan_in
                    std = 1 / math.sqrt(param.shape[1]) / 0.87962566103423978
                    nn.init.trunc_normal_(param, std=std, a=-2 * std, b=2 * std)
                elif name.startswith("weight_hh"):
                    for gate in param.chunk(3, dim=0):
                        nn.init.orthogonal_(gate)
                else:
                    nn.init.zeros_(param)


@dataclass
class AgentConfig:
    """What `build_agent` builds: the core (or `core_init_from`: a `seqssm fit` checkpoint or exported folder,
    whose backbone replaces `core`; `seqssm rl` says so and records that backbone as `core`), MLP sizes of the encoder (before the core's d_model) and heads, their
    activation, and the initialisation of the agent's own layers: "default" (torch's, the actor's last layer
    scaled to 0.01) or "orthogonal" (Lu et al.'s public code, see `orthogonal_init`)."""

    LIMITS: ClassVar[dict[str, str]] = {"encoder": ">= 1", "actor": ">= 1", "critic": ">= 1"}

    core: CoreConfig = field(default_factory=CoreConfig)
    core_init_from: str | None = None
    encoder: list[int] = field(default_factory=lambda: [128])
    actor: list[int] = field(default_factory=lambda: [128, 128])
    critic: list[int] = field(default_factory=lambda: [128, 128])
    activation: str = "leaky_relu"
    init: str = "default"

    @property
    def memory(self) -> str:
        """The memory core in a word: its layer, or where it was loaded from."""
        return f"init_from:{self.core_init_from}" if self.core_init_from else self.core.layer


def build_agent(config: AgentConfig, observation_space: spaces.Space, action_space: spaces.Space,
                core_model_config: dict | None = None) -> ActorCritic:
    """The ActorCritic of `config`. core_model_config (from an agent checkpoint) rebuilds a core that was
    loaded from a supervised model, without the original file; the agent keeps it as `core_model_config`."""
    if config.init not in INITS:
        raise ValueError(f"unknown init {config.init!r}; choose one of {INITS}")
    if core_model_config is not None:
        core = core_from_model_config(core_model_config)
    elif config.core_init_from:
        core, core_model_config = load_core(config.core_init_from)
    else:
        core = build_core(config.core)
    agent = ActorCritic(core, observation_space, action_space, encoder=config.encoder, actor=config.actor,
                        critic=config.critic, activation=config.activation)
    if config.init == "orthogonal":
        orthogonal_init(agent)
    agent.core_model_config = core_model_config
    return agent
