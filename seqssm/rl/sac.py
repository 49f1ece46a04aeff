"""Soft Actor-Critic with recurrent history encoders (seed 002 section 4.1, figure 1, appendices B and C).

Continuous actions: SAC with a tanh-Gaussian actor (Haarnoja et al. 2018/2019); discrete actions:
discrete SAC (Christodoulou 2019), whose critic outputs Q for every action and whose losses take
expectations under the policy. Both use twin critics, a Polyak-averaged target critic and
(optionally) automatic entropy tuning. Updates sample right-padded sub-trajectories of whole
episodes from `EpisodeReplay`, compute each sequence's start state by a masked scan over its
burn-in prefix, and run one masked scan per network over the sub-trajectory.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from seqssm.optim import param_groups
from seqssm.rl.checkpoint import read_checkpoint, write_checkpoint
from seqssm.rl.core import reset_state
from seqssm.rl.meta_envs import MemoryLength, in_context_cartpole
from seqssm.rl.noisy_envs import BestArmIdentification, DMCEnv, ObservationNoise
from seqssm.rl.offpolicy import Actor, Critic, HistoryEncoderConfig, RACConfig, action_features
from seqssm.rl.replay import Episode, EpisodeReplay, SequenceBatch

CHECKPOINT_FORMAT = "seqssm-sac-agent"


@dataclass
class OffPolicyEnvConfig:
    """An environment for SAC and how it is evaluated.

    name: BestArm, BestArmOracle, MemoryLength, InContextCartPole, "gym:<id>" (e.g. gym:Pendulum-v1),
    "dmc:<domain>-<task>" (needs dm-control), or any POPGym / MemoryCorridor name of `seqssm.rl.make_env`.
    kwargs go to the environment; observation_noise adds Gaussian noise of that scale to observations.
    eval_sets: evaluation name -> kwargs overriding `kwargs` (e.g. {ood: {sigma_range: [2, 3]}}).
    """

    name: str = "BestArm"
    kwargs: dict[str, Any] = field(default_factory=dict)
    observation_noise: float = 0.0
    eval_sets: dict[str, dict[str, Any]] = field(default_factory=lambda: {"eval": {}})


def make_offpolicy_env(config: OffPolicyEnvConfig, overrides: dict[str, Any] | None = None) -> gym.Env:
    """One environment of `config` (kwargs updated by `overrides`) with a flat float32 Box observation."""
    name, kwargs = config.name, {**config.kwargs, **(overrides or {})}
    if name in ("BestArm", "BestArmOracle"):
        env = BestArmIdentification(oracle=name == "BestArmOracle", **kwargs)
    elif name == "MemoryLength":
        env = MemoryLength(**kwargs)
    elif name == "InContextCartPole":
        env = in_context_cartpole(**kwargs)
    elif name.startswith("gym:"):
        env = gym.make(name[4:], **kwargs)
    elif name.startswith("dmc:"):
        domain, _, task = name[4:].partition("-")
        env = DMCEnv(domain, task.replace("-", "_"))
    else:
        from seqssm.rl.envs import make_env

        env = make_env(name, kwargs, previous_action_reward=False)  # the embedder reads the previous action itself
    if not (isinstance(env.observation_space, spaces.Box) and len(env.observation_space.shape) == 1):
        env = gym.wrappers.FlattenObservation(env)
    if config.observation_noise > 0:
        env = ObservationNoise(env, config.observation_noise)
    return env


@dataclass
class SACConfig:
    """SAC hyperparameters (defaults after seed 002 table 1; budgets are CPU-sized).

    utd: gradient updates per environment step. context: most transitions per sampled
    sub-trajectory; burn_in: steps before it whose masked scan gives its start state (-1: all).
    alpha: the entropy temperature (its start value with autotune). Target entropy: -dim(A) for
    Box actions, target_entropy_scale * log(n) for Discrete(n).
    """

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
    eval_every: int = 5000
    eval_episodes: int = 16
    deterministic_eval: bool = True


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


class SAC(nn.Module):
    """Actor, twin critic and target critic (each with its own embedder and history encoder), entropy temperature."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, rac: RACConfig, config: SACConfig):
        super().__init__()
        obs_dim = spaces.flatdim(observation_space)
        self.action_space, self.config = action_space, config
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.act_dim = action_features(action_space)
        self.actor = Actor(obs_dim, action_space, rac)
        self.critic = Critic(obs_dim, action_space, rac)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.alpha)), requires_grad=config.autotune)
        self.target_entropy = (config.target_entropy_scale * math.log(self.act_dim) if self.discrete
                               else -float(self.act_dim))
        # Tagged SSM parameters keep their lower learning rate; no weight decay (plain Adam, as in SAC).
        self.actor_opt = torch.optim.Adam(param_groups(self.actor, config.lr, weight_decay=0.0))
        self.critic_opt = torch.optim.Adam(param_groups(self.critic, config.lr, weight_decay=0.0))
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.lr)

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

    @torch.no_grad()
    def act(self, obs: torch.Tensor, prev_action: torch.Tensor, state, deterministic: bool = False):
        """obs (B, obs_dim), prev_action (B, act_dim), actor state -> (policy action, next actor state)."""
        features, state = self.actor.history.step(obs, prev_action, state)
        return self.actor.policy(features, deterministic)[0], state

    def _features(self, net: nn.Module, batch: SequenceBatch, grad: bool) -> torch.Tensor:
        """The history features (B, L + 1, d) of `net` on the sub-trajectories, started from their burn-in states."""
        state = None
        if batch.prefix_mask.shape[1] > 0 and net.history.encoder is not None:
            with torch.no_grad():
                _, state = net.history.scan(batch.prefix_obs, batch.prefix_prev_action, None, mask=batch.prefix_mask)
        with torch.set_grad_enabled(grad):
            return net.history.scan(batch.obs, batch.prev_action, state, mask=batch.input_mask)[0]

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor, params) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip:
            nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        opt.step()

    def update(self, batch: SequenceBatch) -> dict[str, float]:
        """One gradient step of critic, actor and temperature, then the target update -> metrics."""
        cfg, mask = self.config, batch.mask
        alpha = self.log_alpha.exp().detach()
        fc = self._features(self.critic, batch, grad=True)
        fa = self._features(self.actor, batch, grad=True)
        ft = self._features(self.critic_target, batch, grad=False)
        not_done = 1.0 - batch.terminal
        with torch.no_grad():
            next_action, next_logp, next_probs = self.actor.policy(fa[:, 1:].detach())
            if self.discrete:
                tq1, tq2 = self.critic_target.q(ft[:, 1:])
                v_next = (next_probs * (torch.min(tq1, tq2) - alpha * next_logp)).sum(-1)
            else:
                tq1, tq2 = self.critic_target.q(ft[:, 1:], next_action)
                v_next = torch.min(tq1, tq2) - alpha * next_logp
            target = batch.reward + cfg.gamma * not_done * v_next
        if self.discrete:
            index = batch.action.argmax(-1, keepdim=True)
            q1, q2 = (q.gather(-1, index).squeeze(-1) for q in self.critic.q(fc[:, :-1]))
        else:
            q1, q2 = self.critic.q(fc[:, :-1], batch.action)
        critic_loss = _masked_mean((q1 - target) ** 2 + (q2 - target) ** 2, mask)
        self._step(self.critic_opt, critic_loss, self.critic.parameters())

        action, logp, probs = self.actor.policy(fa[:, :-1])
        if self.discrete:
            with torch.no_grad():
                q = torch.min(*self.critic.q(fc[:, :-1].detach()))
            actor_loss = _masked_mean((probs * (alpha * logp - q)).sum(-1), mask)
            entropy = -(probs * logp).sum(-1)
        else:
            q = torch.min(*self.critic.q(fc[:, :-1].detach(), action))
            actor_loss = _masked_mean(alpha * logp - q, mask)
            entropy = -logp
        self._step(self.actor_opt, actor_loss, self.actor.parameters())
        if cfg.autotune:
            alpha_loss = self.log_alpha * _masked_mean(entropy.detach() - self.target_entropy, mask)
            self._step(self.alpha_opt, alpha_loss, [self.log_alpha])
        with torch.no_grad():
            for p, tp in zip(self.critic.parameters(), self.critic_target.parameters()):
                tp.lerp_(p, cfg.tau)
        return {"critic_loss": float(critic_loss.detach()), "actor_loss": float(actor_loss.detach()), "alpha": float(alpha),
                "entropy": float(_masked_mean(entropy.detach(), mask)), "q": float(_masked_mean(q1.detach(), mask))}


def _summarize_infos(infos: list[dict]) -> dict[str, Any]:
    """Mean of every numeric scalar in the episodes' final infos; element-wise mean of equal-length number lists."""
    out: dict[str, Any] = {}
    for key in sorted({k for info in infos for k in info}):
        values = [info[key] for info in infos if key in info]
        if all(isinstance(v, (bool, int, float, np.number)) for v in values):
            out[key] = float(np.mean(values))
        elif all(isinstance(v, (list, tuple, np.ndarray)) for v in values) and len({len(v) for v in values}) == 1:
            out[key] = np.mean(np.asarray(values, np.float64), axis=0).tolist()
    return out


class Runner:
    """n environments stepped side by side by the actor, resetting each (and its row of the state) as it finishes."""

    def __init__(self, sac: SAC, envs: list[gym.Env], seed: int):
        self.sac, self.envs = sac, envs
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
        self.state = sac.actor.history.initial_state(len(envs))
        self.prev = torch.zeros(len(envs), sac.act_dim)
        self.trajectories = [([o], [], []) for o in self.obs]

    def step(self, deterministic: bool = False, random: bool = False) -> list[tuple[int, Episode, dict]]:
        """One step in every environment (random: uniform actions) -> (env index, episode, final info) of those that ended."""
        sac = self.sac
        action, self.state = sac.act(torch.as_tensor(self.obs), self.prev, self.state, deterministic)
        if random:
            action = (torch.randint(sac.act_dim, (len(self.envs),)) if sac.discrete
                      else torch.rand(len(self.envs), sac.act_dim) * 2 - 1)
        features, env_actions = sac.action_feature(action), sac.env_action(action)
        finished, done = [], torch.zeros(len(self.envs), dtype=torch.bool)
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(env_actions[i])
            observations, actions, rewards = self.trajectories[i]
            observations.append(np.asarray(obs, np.float32))
            actions.append(features[i].numpy())
            rewards.append(float(reward))
            if terminated or truncated:
                episode = Episode(np.stack(observations), np.stack(actions).astype(np.float32),
                                  np.array(rewards, np.float32), bool(terminated))
                finished.append((i, episode, info))
                obs, _ = env.reset()
                self.trajectories[i] = ([np.asarray(obs, np.float32)], [], [])
                done[i] = True
            self.obs[i] = obs
        self.prev = torch.where(done[:, None], 0.0, features)
        if self.state is not None and bool(done.any()):
            self.state = reset_state(self.state, sac.actor.history.initial_state(len(self.envs)), done)
        return finished


@torch.no_grad()
def evaluate(sac: SAC, env_config: OffPolicyEnvConfig, overrides: dict | None = None, episodes: int = 16,
             seed: int = 10_000, deterministic: bool = True, num_envs: int = 8) -> dict[str, Any]:
    """Play `episodes` episodes, an equal quota per environment so that short episodes are not favoured
    -> mean return, length and the mean of the final infos' statistics (see `_summarize_infos`)."""
    n = max(1, min(num_envs, episodes))
    quota = math.ceil(episodes / n)
    runner = Runner(sac, [make_offpolicy_env(env_config, overrides) for _ in range(n)], seed)
    counts = [0] * n
    returns, lengths, infos = [], [], []
    while min(counts) < quota:
        for i, episode, info in runner.step(deterministic):
            if counts[i] < quota:
                counts[i] += 1
                returns.append(float(episode.rewards.sum()))
                lengths.append(len(episode))
                infos.append(info)
    return {"episodes": len(returns), "return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
            "length_mean": float(np.mean(lengths)), **_summarize_infos(infos)}


def save_checkpoint(path: str | Path, sac: SAC, env: OffPolicyEnvConfig, rac: RACConfig, config: SACConfig,
                    **extra) -> Path:
    """Write a SAC agent checkpoint: configs as plain dicts and weights (loadable with weights_only=True)."""
    payload = {"format": CHECKPOINT_FORMAT, "env": asdict(env), "agent": asdict(rac), "sac": asdict(config),
               "state_dict": sac.state_dict(), **extra}
    return write_checkpoint(path, payload)


def load_checkpoint(path: str | Path) -> tuple[SAC, OffPolicyEnvConfig, dict]:
    """(SAC agent with its trained weights, its environment config, the checkpoint dict) from save_checkpoint's file."""
    ckpt = read_checkpoint(
        path, CHECKPOINT_FORMAT, "seqssm SAC agent checkpoint (write one with `seqssm rl` and algorithm: sac)"
    )
    env = OffPolicyEnvConfig(**ckpt["env"])
    agent = dict(ckpt["agent"])
    rac = RACConfig(**{**agent, "encoder": HistoryEncoderConfig(**agent["encoder"])})
    probe = make_offpolicy_env(env)
    sac = SAC(probe.observation_space, probe.action_space, rac, SACConfig(**ckpt["sac"]))
    sac.load_state_dict(ckpt["state_dict"])
    return sac, env, ckpt


def train(env: OffPolicyEnvConfig, rac: RACConfig, config: SACConfig, seed: int = 0, out_dir: str | Path | None = None,
          log: Callable[[str], None] | None = print) -> dict:
    """Train a SAC agent -> summary (its last evaluation per eval set, steps, wall time, parameter count).

    With out_dir: metrics.jsonl (one record per evaluation), last.pt after each evaluation, summary.json.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    envs = [make_offpolicy_env(env) for _ in range(config.num_envs)]
    sac = SAC(envs[0].observation_space, envs[0].action_space, rac, config)
    replay = EpisodeReplay(config.buffer_size, spaces.flatdim(envs[0].observation_space), sac.act_dim)
    runner = Runner(sac, envs, seed)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text("")
    steps, updates, due, next_eval, start = 0, 0, 0.0, config.eval_every, time.perf_counter()
    train_returns: list[float] = []
    losses: list[dict] = []
    record: dict[str, Any] = {}
    while steps < config.total_steps:
        for _, episode, _ in runner.step(random=steps < config.learning_starts):
            replay.add(episode)
            train_returns.append(float(episode.rewards.sum()))
        steps += config.num_envs
        if steps >= config.learning_starts and len(replay) > 0:
            due += config.num_envs * config.utd
            while due >= 1.0:
                batch = replay.sample(config.batch_size, config.context, config.burn_in, rng)
                losses.append(sac.update(batch))
                updates, due = updates + 1, due - 1.0
        if steps >= next_eval or steps >= config.total_steps:
            next_eval += config.eval_every
            record = {"steps": steps, "updates": updates, "wall_s": round(time.perf_counter() - start, 1),
                      "train_return": float(np.mean(train_returns[-20:])) if train_returns else None,
                      **{k: float(np.mean([m[k] for m in losses])) for k in (losses[0] if losses else {})}}
            for name, overrides in env.eval_sets.items():
                record[name] = evaluate(sac, env, overrides, config.eval_episodes, seed=10_000 + seed,
                                        deterministic=config.deterministic_eval)
            losses.clear()
            if log is not None:
                evals = "  ".join(f"{k} {v['return_mean']:.3f}" for k, v in record.items() if isinstance(v, dict))
                log(f"steps {steps:8d}  updates {updates:7d}  train_return {record['train_return']}  {evals}  "
                    f"alpha {record.get('alpha', math.nan):.3f}  {record['wall_s']:.0f}s")
            if out is not None:
                with (out / "metrics.jsonl").open("a") as f:
                    f.write(json.dumps(record) + "\n")
                save_checkpoint(out / "last.pt", sac, env, rac, config, seed=seed, steps=steps)
    summary = {**record, "env": env.name, "encoder": rac.encoder.kind, "seed": seed,
               "parameters": sum(p.numel() for n, p in sac.named_parameters() if not n.startswith("critic_target"))}
    if out is not None:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
