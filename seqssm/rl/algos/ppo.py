"""Recurrent PPO in the stored-state style of CleanRL's ppo_atari_lstm and Stable-Baselines3's RecurrentPPO.

Each iteration collects `unroll` steps from `num_envs` environments with `ActorCritic.act` (the core
stepping its fixed-size state), keeps the core state the rollout started from, computes GAE, and
trains for `epochs` passes over `minibatches` groups of whole environment sequences: every
minibatch re-runs its sequences with one `scan` from their stored start state, episode starts
as resets (Lu et al. 2023, "Structured State Space Models for In-Context Reinforcement Learning",
3.1). Loss: clipped surrogate + vf_coef * value error (optionally clipped) - ent_coef * entropy,
gradients clipped to max_grad_norm. Defaults are Lu et al. 2023, table 3; seqssm/recipes/rl/popgym_lu2023 runs
that table's experiments, the other recipes under seqssm/recipes/rl/ hold CPU-sized settings. The losses are plain
functions of tensors, tested on their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from seqssm.errors import ConfigError
from seqssm.layers import frozen_weights
from seqssm.layers.base import map_state
from seqssm.optim import param_groups
from seqssm.rl.agent import ActorCritic, AgentConfig, build_agent
from seqssm.rl.algos.base import AlgorithmSpec
from seqssm.rl.env_loop import EnvLoop


@dataclass
class PPOConfig:
    """PPO settings; defaults from Lu et al. 2023, table 3. value_clip: clip the value update to this distance
    from the rollout's value (PPO2 / CleanRL's clip_vloss); None: unclipped. adam_eps: Adam's epsilon. The
    table states neither; Lu et al.'s public code uses value_clip 0.2 and adam_eps 1e-5 (CleanRL's), which the
    recipes under seqssm/recipes/rl/popgym_lu2023 set; the defaults keep torch's epsilon and the unclipped loss."""

    LIMITS: ClassVar[dict[str, str]] = {
        "total_steps": ">= 1", "num_envs": ">= 1", "unroll": ">= 1", "epochs": ">= 1", "minibatches": ">= 1",
        "lr": "> 0", "weight_decay": ">= 0", "gamma": "[0, 1]", "gae_lambda": "[0, 1]", "clip": "> 0",
        "ent_coef": ">= 0", "vf_coef": ">= 0", "max_grad_norm": "> 0", "value_clip": "> 0", "adam_eps": "> 0",
    }

    total_steps: int = 15_000_000
    num_envs: int = 64
    unroll: int = 1024
    epochs: int = 30
    minibatches: int = 8
    lr: float = 5e-5
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    gamma: float = 0.99
    gae_lambda: float = 1.0
    clip: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 1.0
    max_grad_norm: float = 0.5
    norm_adv: bool = True
    value_clip: float | None = None

    def buffer_bytes(self, obs_dim: int, action_space, state_bytes: int) -> tuple[int, str]:
        """(bytes, how they add up) of one rollout: num_envs x unroll steps of a float32 observation, an action (8
        bytes an entry, at most), a done flag and five float32 scalars (log-prob, value, reward, advantage,
        return), plus each environment's start and current core state (`state_bytes` each)."""
        step = 4 * obs_dim + 8 * int(np.prod(action_space.shape, dtype=np.int64) or 1) + 1 + 5 * 4
        total = self.num_envs * (self.unroll * step + 2 * state_bytes)
        return total, (f"--ppo.num_envs {self.num_envs} x (--ppo.unroll {self.unroll} steps x {step} B "
                       f"+ 2 core states x {state_bytes} B)")

    def check(self) -> None:
        """Raise ConfigError unless minibatches split the environments evenly (whole sequences per minibatch)."""
        if self.num_envs % self.minibatches:
            raise ConfigError(f"--ppo.minibatches = {self.minibatches} must divide --ppo.num_envs = {self.num_envs} "
                              "(minibatches are groups of whole environment sequences)")


@dataclass
class Rollout:
    """num_envs (B) sequences of `unroll` (L) steps, batch first. dones[b, t]: obs[b, t] starts an episode."""

    obs: torch.Tensor  # (B, L, obs_dim)
    dones: torch.Tensor  # (B, L) bool
    actions: torch.Tensor  # (B, L, ...)
    log_probs: torch.Tensor  # (B, L)
    values: torch.Tensor  # (B, L)
    rewards: torch.Tensor  # (B, L)
    start_state: object  # core state before step 0 (rows with dones[:, 0] are reset by the scan)
    advantages: torch.Tensor | None = None  # (B, L), set by collect
    returns: torch.Tensor | None = None  # (B, L)


def gae(rewards, values, dones, next_value, next_done, gamma: float, lam: float):
    """Generalised advantage estimation on (B, L) tensors -> (advantages, returns), each (B, L).

    dones[:, t] marks obs t as an episode start, so step t bootstraps from step t + 1 only if
    dones[:, t + 1] is False; next_value / next_done (B,) are those of the observation after the rollout.
    """
    length = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(length)):
        if t == length - 1:
            nonterminal, next_v = 1.0 - next_done.float(), next_value
        else:
            nonterminal, next_v = 1.0 - dones[:, t + 1].float(), values[:, t + 1]
        delta = rewards[:, t] + gamma * next_v * nonterminal - values[:, t]
        last = delta + gamma * lam * nonterminal * last
        advantages[:, t] = last
    return advantages, advantages + values


def normalize(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages shifted and scaled to mean 0, std 1 over the whole minibatch."""
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def clipped_policy_loss(log_prob, old_log_prob, advantages, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7), negated: mean of max(-A r, -A clamp(r, 1 - clip,
    1 + clip)) with r = exp(log_prob - old_log_prob); all inputs of one shape."""
    ratio = (log_prob - old_log_prob).exp()
    return torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()


def value_loss(value, returns, old_value=None, clip: float | None = None) -> torch.Tensor:
    """0.5 * mean squared error of `value` against `returns`; with clip, the larger of that error and the error of
    old_value + clamp(value - old_value, -clip, clip) (PPO2's clipped value loss). All inputs of one shape."""
    error = (value - returns).pow(2)
    if clip is not None:
        clipped = old_value + (value - old_value).clamp(-clip, clip)
        error = torch.max(error, (clipped - returns).pow(2))
    return 0.5 * error.mean()


class PPO:
    """Recurrent PPO for `agent` on vector env `envs` (reset with `seed`): `collect()` a rollout, `update(rollout)`,
    or `iterate()` both."""

    LOG_KEYS = ("approx_kl", "entropy")

    def __init__(self, agent: ActorCritic, envs, config: PPOConfig, seed: int | None = None):
        if config.num_envs != envs.num_envs:
            raise ValueError(f"PPOConfig.num_envs = {config.num_envs} but the vector env has {envs.num_envs}")
        config.check()
        self.agent, self.envs, self.config = agent, envs, config
        self.optimizer = torch.optim.AdamW(param_groups(agent, config.lr, config.weight_decay), lr=config.lr,
                                           eps=config.adam_eps)
        self.loop = EnvLoop(agent, envs, seed=seed)
        self.episodes = self.loop.episodes
        self.steps = 0

    @torch.no_grad()
    def collect(self) -> Rollout:
        """Step all environments `unroll` times with the current policy; returns the rollout with advantages."""
        self.agent.eval()
        loop, length, dtype = self.loop, self.config.unroll, self.loop.dtype
        start_state = loop.state
        obs, dones, actions, log_probs, values, rewards = [], [], [], [], [], []
        with frozen_weights():
            for _ in range(length):
                out = loop.act()
                obs.append(loop.obs)
                dones.append(loop.done)
                reward, *_ = loop.step(out)
                actions.append(out.action)
                log_probs.append(out.log_prob)
                values.append(out.value)
                rewards.append(loop.tensor(reward, dtype))
        self.steps += length * self.envs.num_envs
        rollout = Rollout(*(torch.stack(x, dim=1) for x in (obs, dones, actions, log_probs, values, rewards)),
                          start_state=start_state)
        next_value = loop.act().value
        rollout.advantages, rollout.returns = gae(rollout.rewards, rollout.values, rollout.dones, next_value,
                                                  loop.done, self.config.gamma, self.config.gae_lambda)
        return rollout

    def update(self, rollout: Rollout) -> dict[str, float]:
        """`epochs` passes of minibatch PPO steps over whole sequences; returns mean losses and diagnostics."""
        cfg, agent = self.config, self.agent
        agent.train()
        n_envs = rollout.obs.shape[0]
        per_batch = n_envs // cfg.minibatches
        keys = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")
        stats: dict[str, list[float]] = {k: [] for k in keys}
        for _ in range(cfg.epochs):
            for idx in torch.randperm(n_envs, device=rollout.obs.device).split(per_batch):
                out = agent.evaluate(rollout.obs[idx], map_state(lambda s: s[idx], rollout.start_state),
                                     rollout.dones[idx], rollout.actions[idx])
                adv = normalize(rollout.advantages[idx]) if cfg.norm_adv else rollout.advantages[idx]
                policy_loss = clipped_policy_loss(out.log_prob, rollout.log_probs[idx], adv, cfg.clip)
                v_loss = value_loss(out.value, rollout.returns[idx], rollout.values[idx], cfg.value_clip)
                entropy = out.entropy.mean()
                loss = policy_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    log_ratio = out.log_prob - rollout.log_probs[idx]
                    ratio = log_ratio.exp()
                    stats["policy_loss"].append(policy_loss.item())
                    stats["value_loss"].append(v_loss.item())
                    stats["entropy"].append(entropy.item())
                    stats["approx_kl"].append(((ratio - 1) - log_ratio).mean().item())  # the k3 estimator
                    stats["clip_frac"].append(((ratio - 1).abs() > cfg.clip).float().mean().item())
        return {k: float(np.mean(v)) for k, v in stats.items()}

    def iterate(self, until: int | None = None) -> dict[str, float]:
        """One rollout and its update (whatever `until`) -> the update's mean losses and diagnostics."""
        return self.update(self.collect())


def make_agent(agent_config: AgentConfig, config: PPOConfig, observation_space, action_space,
               core_model_config: dict | None = None) -> ActorCritic:
    """The recurrent actor-critic of `agent_config` (config is unused: PPO's agent has no learner state)."""
    return build_agent(agent_config, observation_space, action_space, core_model_config=core_model_config)


SPEC = AlgorithmSpec("ppo", PPOConfig, AgentConfig, previous_action_reward=True, make_agent=make_agent,
                     algorithm=PPO)
