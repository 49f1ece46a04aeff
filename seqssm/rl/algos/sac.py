"""Soft Actor-Critic with recurrent history encoders (the Kalman-layer paper: "Uncertainty Representations in
State-Space Layers for Deep Reinforcement Learning under Partial Observability", 4.1, fig. 1, appendices B, C).

Continuous actions: SAC with a tanh-Gaussian actor (Haarnoja et al. 2018/2019); discrete actions:
discrete SAC (Christodoulou 2019), whose critic outputs Q for every action and whose losses take
expectations under the policy. Both use twin critics, a Polyak-averaged target critic and
(optionally) automatic entropy tuning. Environments step side by side; finished episodes go to
`EpisodeReplay`. Updates sample right-padded sub-trajectories of whole episodes, compute each
sequence's start state by a masked scan over its burn-in prefix, and run one masked scan per network
over the sub-trajectory. The losses are plain functions of tensors, tested on their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from seqssm.optim import param_groups
from seqssm.rl.algos.base import AlgorithmSpec
from seqssm.rl.env_loop import ActOutput, EnvLoop
from seqssm.rl.offpolicy import RACConfig, SACAgent
from seqssm.rl.replay import Episode, EpisodeReplay, SequenceBatch


@dataclass
class SACConfig:
    """SAC hyperparameters (defaults after the Kalman-layer paper, table 1; budgets are CPU-sized).

    utd: gradient updates per environment step. context: most transitions per sampled
    sub-trajectory; burn_in: steps before it whose masked scan gives its start state (-1: all).
    alpha: the entropy temperature (its start value with autotune). Target entropy: -dim(A) for
    Box actions, target_entropy_scale * log(n) for Discrete(n). grad_clip: max gradient norm (None: off).
    """

    LIMITS: ClassVar[dict[str, str]] = {
        "total_steps": ">= 1", "num_envs": ">= 1", "batch_size": ">= 1", "context": ">= 1", "burn_in": ">= -1",
        "buffer_size": ">= 1", "learning_starts": ">= 0", "utd": ">= 0", "lr": "> 0", "gamma": "[0, 1]",
        "tau": "(0, 1]", "alpha": "> 0", "target_entropy_scale": ">= 0", "grad_clip": "> 0",
    }

    total_steps: int = 100_000
    num_envs: int = 4
    batch_size: int = 32
    context: int = 64
    burn_in: int = 64
    buffer_size: int = 1_000_000
    learning_starts: int = 1000
    utd: float = 0.25
    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    alpha: float = 0.1
    autotune: bool = True
    target_entropy_scale: float = 0.5
    grad_clip: float | None = None

    def buffer_bytes(self, obs_dim: int, action_space, state_bytes: int) -> tuple[int, str]:
        """(bytes, how they add up) of the replay buffer once full (buffer_size transitions, or total_steps if
        fewer): per transition a float32 observation, action (as the networks read it) and reward, plus each
        environment's current state (`state_bytes`)."""
        held = min(self.buffer_size, self.total_steps)
        step = 4 * (obs_dim + spaces.flatdim(action_space) + 1)
        return held * step + self.num_envs * state_bytes, (
            f"min(--sac.buffer_size, --sac.total_steps) = {held} transitions x {step} B "
            f"+ --sac.num_envs {self.num_envs} x {state_bytes} B of state")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the positions where mask (same shape, bool) is True; 0 if none is."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def soft_value(q1, q2, log_prob, alpha, probs=None) -> torch.Tensor:
    """The soft state value E_a~pi [min(q1, q2) - alpha log pi(a)]. Box: q1, q2, log_prob (...) of one sampled action;
    Discrete: q1, q2, log_prob, probs (..., n) over all actions, the expectation taken exactly -> (...)."""
    value = torch.min(q1, q2) - alpha * log_prob
    return value if probs is None else (probs * value).sum(-1)


def critic_target(reward, terminal, next_value, gamma: float) -> torch.Tensor:
    """The soft Bellman target r + gamma (1 - terminal) V(s'), all (...)."""
    return reward + gamma * (1.0 - terminal) * next_value


def critic_loss(q1, q2, target, mask) -> torch.Tensor:
    """Twin-critic loss: masked mean over (...) of (q1 - target)^2 + (q2 - target)^2."""
    return masked_mean((q1 - target) ** 2 + (q2 - target) ** 2, mask)


def actor_loss(log_prob, q, alpha, mask, probs=None) -> torch.Tensor:
    """Masked mean of E_a~pi [alpha log pi(a) - Q(a)]: Box with one sampled action (log_prob, q (...)); Discrete
    with probs, log_prob and q (..., n) over all actions."""
    loss = alpha * log_prob - q
    return masked_mean(loss if probs is None else (probs * loss).sum(-1), mask)


def policy_entropy(log_prob, probs=None) -> torch.Tensor:
    """Entropy estimate -log pi(a) of a sampled action (Box), or the exact -sum pi log pi (Discrete) -> (...)."""
    return -log_prob if probs is None else -(probs * log_prob).sum(-1)


def temperature_loss(log_alpha, entropy, target_entropy: float, mask) -> torch.Tensor:
    """log alpha * masked mean of (entropy - target): descending it raises alpha while the entropy is too low."""
    return log_alpha * masked_mean(entropy - target_entropy, mask)


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) target + tau source, parameter by parameter."""
    for p, tp in zip(source.parameters(), target.parameters()):
        tp.lerp_(p, tau)


def history_features(net: nn.Module, batch: SequenceBatch, grad: bool) -> torch.Tensor:
    """The history features (B, L + 1, d) of `net` (actor or critic) on the sub-trajectories, each started from the
    state its masked burn-in prefix leaves."""
    state = None
    if batch.prefix_mask.shape[1] > 0 and net.history.encoder is not None:
        with torch.no_grad():
            _, state = net.history.scan(batch.prefix_obs, batch.prefix_prev_action, None, mask=batch.prefix_mask)
    with torch.set_grad_enabled(grad):
        return net.history.scan(batch.obs, batch.prev_action, state, mask=batch.input_mask)[0]


class SAC:
    """SAC for `agent` on vector env `envs` (reset with `seed`): `collect_step()`, `update(batch)`, or
    `iterate(until)`."""

    LOG_KEYS = ("updates", "alpha", "q")

    def __init__(self, agent: SACAgent, envs, config: SACConfig, seed: int = 0):
        if config.num_envs != envs.num_envs:
            raise ValueError(f"SACConfig.num_envs = {config.num_envs} but the vector env has {envs.num_envs}")
        self.agent, self.envs, self.config = agent, envs, config
        agent.log_alpha.requires_grad_(config.autotune)
        self.target_entropy = (config.target_entropy_scale * math.log(agent.act_dim) if agent.discrete
                               else -float(agent.act_dim))
        # Tagged SSM parameters keep their lower learning rate; no weight decay (plain Adam, as in SAC).
        self.actor_opt = torch.optim.Adam(param_groups(agent.actor, config.lr, weight_decay=0.0))
        self.critic_opt = torch.optim.Adam(param_groups(agent.critic, config.lr, weight_decay=0.0))
        self.alpha_opt = torch.optim.Adam([agent.log_alpha], lr=config.lr)
        self.rng = np.random.default_rng(seed)
        self.replay = EpisodeReplay(config.buffer_size, spaces.flatdim(envs.single_observation_space), agent.act_dim)
        self.loop = EnvLoop(agent, envs, seed=seed)
        self.episodes = self.loop.episodes
        # per environment, its running episode: observations, actions, rewards
        self.trajectories = [([obs], [], []) for obs in self.loop.obs.cpu().numpy()]
        self.steps, self.updates, self.due = 0, 0, 0.0

    def collect_step(self, random: bool = False) -> None:
        """One step in every environment (random: uniform actions); episodes that end go to the replay."""
        agent, n = self.agent, self.envs.num_envs
        out, device = self.loop.act(), self.loop.device
        if random:
            action = (torch.randint(agent.act_dim, (n,), device=device) if agent.discrete
                      else torch.rand(n, agent.act_dim, device=device) * 2 - 1)
            out = ActOutput(action, (agent.action_feature(action), out.state[1]))
        features = out.state[0].cpu().numpy()
        reward, terminated, done, infos = self.loop.step(out)
        next_obs = self.loop.obs.cpu().numpy()
        for i in range(n):
            observations, actions, rewards = self.trajectories[i]
            actions.append(features[i])
            rewards.append(float(reward[i]))
            if done[i]:
                observations.append(np.asarray(infos["final_obs"][i], np.float32))
                self.replay.add(Episode(np.stack(observations), np.stack(actions).astype(np.float32),
                                        np.array(rewards, np.float32), bool(terminated[i])))
                self.trajectories[i] = ([next_obs[i]], [], [])
            else:
                observations.append(next_obs[i])

    def update(self, batch: SequenceBatch) -> dict[str, float]:
        """One gradient step of critic, actor and temperature, then the target update -> metrics."""
        cfg, agent, mask = self.config, self.agent, batch.mask
        actor, critic, target_critic = agent.actor, agent.critic, agent.critic_target
        alpha = agent.log_alpha.exp().detach()
        fc = history_features(critic, batch, grad=True)
        fa = history_features(actor, batch, grad=True)
        ft = history_features(target_critic, batch, grad=False)
        with torch.no_grad():
            next_action, next_logp, next_probs = actor.policy(fa[:, 1:].detach())
            next_q = target_critic.q(ft[:, 1:]) if agent.discrete else target_critic.q(ft[:, 1:], next_action)
            target = critic_target(batch.reward, batch.terminal, soft_value(*next_q, next_logp, alpha, next_probs),
                                   cfg.gamma)
        if agent.discrete:
            index = batch.action.argmax(-1, keepdim=True)
            q1, q2 = (q.gather(-1, index).squeeze(-1) for q in critic.q(fc[:, :-1]))
        else:
            q1, q2 = critic.q(fc[:, :-1], batch.action)
        loss_critic = critic_loss(q1, q2, target, mask)
        self._step(self.critic_opt, loss_critic, critic.parameters())

        action, logp, probs = actor.policy(fa[:, :-1])
        if agent.discrete:
            with torch.no_grad():
                q = torch.min(*critic.q(fc[:, :-1].detach()))
        else:
            q = torch.min(*critic.q(fc[:, :-1].detach(), action))
        loss_actor = actor_loss(logp, q, alpha, mask, probs)
        entropy = policy_entropy(logp, probs)
        self._step(self.actor_opt, loss_actor, actor.parameters())
        if cfg.autotune:
            self._step(self.alpha_opt, temperature_loss(agent.log_alpha, entropy.detach(), self.target_entropy, mask),
                       [agent.log_alpha])
        polyak_update(target_critic, critic, cfg.tau)
        return {"critic_loss": float(loss_critic.detach()), "actor_loss": float(loss_actor.detach()),
                "alpha": float(alpha), "entropy": float(masked_mean(entropy.detach(), mask)),
                "q": float(masked_mean(q1.detach(), mask))}

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor, params) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip:
            nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        opt.step()

    def iterate(self, until: int) -> dict[str, float]:
        """Environment steps (uniform actions before learning_starts), each followed by `utd` updates per new
        transition once learning has started, until `until` steps in all -> the updates' mean metrics."""
        cfg, n = self.config, self.envs.num_envs
        losses: list[dict[str, float]] = []
        while self.steps < until:
            self.collect_step(random=self.steps < cfg.learning_starts)
            self.steps += n
            if self.steps >= cfg.learning_starts and len(self.replay) > 0:
                self.due += n * cfg.utd
                while self.due >= 1.0:
                    batch = self.replay.sample(cfg.batch_size, cfg.context, cfg.burn_in, self.rng, self.loop.device)
                    losses.append(self.update(batch))
                    self.updates, self.due = self.updates + 1, self.due - 1.0
        means = {k: float(np.mean([m[k] for m in losses])) for k in (losses[0] if losses else {})}
        return {"updates": self.updates, **means}


def make_agent(agent_config: RACConfig, config: SACConfig, observation_space, action_space,
               core_model_config: dict | None = None) -> SACAgent:
    """SAC's actor, twin critic and temperature (starting at config.alpha); core_model_config is unused."""
    return SACAgent(observation_space, action_space, agent_config, alpha=config.alpha)


SPEC = AlgorithmSpec("sac", SACConfig, RACConfig, previous_action_reward=False, make_agent=make_agent,
                     algorithm=SAC)
