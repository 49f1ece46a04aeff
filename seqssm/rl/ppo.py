"""Recurrent PPO in the stored-state style of CleanRL's ppo_atari_lstm and Stable-Baselines3's RecurrentPPO.

Each update collects `unroll` steps from `num_envs` environments with `ActorCritic.act` (the core
stepping its fixed-size state), keeps the core state the rollout started from, computes GAE, and
trains for `epochs` passes over `minibatches` groups of whole environment sequences: every
minibatch re-runs its sequences with one `scan` from their stored start state, episode starts
as resets (seed 001 section 3.1). Loss: clipped surrogate + vf_coef * value error - ent_coef *
entropy, gradients clipped to max_grad_norm. Defaults are seed 001 table 3; the recipes under
recipes/rl/ hold CPU-sized settings.

Logged per update: mean episodic return of the episodes that ended in it, MMER (the max over
updates of that mean, POPGym's metric), environment steps per second, losses, KL, clip fraction.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from seqssm.layers import frozen_weights
from seqssm.optim import param_groups
from seqssm.rl.agent import ActorCritic, AgentConfig, build_agent
from seqssm.rl.checkpoint import read_checkpoint, write_checkpoint
from seqssm.rl.core import map_state
from seqssm.rl.envs import EnvConfig, make_vector_env

CHECKPOINT_FORMAT = "seqssm-rl-agent"
CHECKPOINT_VERSION = 1


@dataclass
class PPOConfig:
    """PPO settings; defaults from seed 001 table 3. target_return: stop once MMER reaches it; time_limit_s:
    stop after the first update that ends past this many seconds (CPU budgets). None: never."""

    total_steps: int = 15_000_000
    num_envs: int = 64
    unroll: int = 1024
    epochs: int = 30
    minibatches: int = 8
    lr: float = 5e-5
    weight_decay: float = 0.0
    gamma: float = 0.99
    gae_lambda: float = 1.0
    clip: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 1.0
    max_grad_norm: float = 0.5
    norm_adv: bool = True
    target_return: float | None = None
    time_limit_s: float | None = None


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


class EpisodeTracker:
    """Running return and length of each of n environments; `record(reward, done)` collects finished episodes.

    quota: keep at most this many episodes per environment, so that an evaluation over a fixed
    number of episodes is not biased towards the short ones (which finish first).
    """

    def __init__(self, n: int, quota: int | None = None):
        self.ret, self.len = np.zeros(n), np.zeros(n, dtype=np.int64)
        self.count, self.quota = np.zeros(n, dtype=np.int64), quota
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def record(self, reward: np.ndarray, done: np.ndarray) -> None:
        self.ret += reward
        self.len += 1
        for i in np.flatnonzero(done):
            if self.quota is None or self.count[i] < self.quota:
                self.returns.append(float(self.ret[i]))
                self.lengths.append(int(self.len[i]))
            self.count[i] += 1
        self.ret[done], self.len[done] = 0.0, 0

    def pop(self) -> tuple[list[float], list[int]]:
        """The episodes finished since the last pop."""
        out = (self.returns, self.lengths)
        self.returns, self.lengths = [], []
        return out


def to_env_action(action: torch.Tensor) -> np.ndarray:
    """A batch of actions (B, ...) as the numpy array a gymnasium vector env takes."""
    return action.detach().cpu().numpy()


class PPO:
    """Recurrent PPO for `agent` on vector env `envs`: `collect()` one rollout, `update(rollout)`, or `train()`."""

    def __init__(self, agent: ActorCritic, envs, config: PPOConfig):
        if config.num_envs != envs.num_envs:
            raise ValueError(f"PPOConfig.num_envs = {config.num_envs} but the vector env has {envs.num_envs}")
        if config.num_envs % config.minibatches:
            raise ValueError(f"num_envs ({config.num_envs}) must be divisible by minibatches ({config.minibatches}): "
                             "minibatches are groups of whole environment sequences")
        self.agent, self.envs, self.config = agent, envs, config
        self.optimizer = torch.optim.AdamW(param_groups(agent, config.lr, config.weight_decay), lr=config.lr)
        self.dtype = next(agent.parameters()).dtype  # observations and rewards follow the agent's precision
        obs, _ = envs.reset()
        self.obs = torch.as_tensor(obs, dtype=self.dtype)
        self.done = torch.ones(envs.num_envs, dtype=torch.bool)  # every env starts an episode
        self.state = agent.initial_state(envs.num_envs)
        self.episodes = EpisodeTracker(envs.num_envs)
        self.steps = 0

    @torch.no_grad()
    def collect(self) -> Rollout:
        """Step all environments `unroll` times with the current policy; returns the rollout with advantages."""
        self.agent.eval()
        length = self.config.unroll
        start_state = self.state
        obs, dones, actions, log_probs, values, rewards = [], [], [], [], [], []
        with frozen_weights():
            for _ in range(length):
                out = self.agent.act(self.obs, self.state, self.done)
                next_obs, reward, terminated, truncated, _ = self.envs.step(to_env_action(out.action))
                done = np.logical_or(terminated, truncated)
                self.episodes.record(reward, done)
                obs.append(self.obs)
                dones.append(self.done)
                actions.append(out.action)
                log_probs.append(out.log_prob)
                values.append(out.value)
                rewards.append(torch.as_tensor(reward, dtype=self.dtype))
                self.obs = torch.as_tensor(next_obs, dtype=self.dtype)
                self.done = torch.as_tensor(done)
                self.state = out.state
        self.steps += length * self.envs.num_envs
        rollout = Rollout(*(torch.stack(x, dim=1) for x in (obs, dones, actions, log_probs, values, rewards)),
                          start_state=start_state)
        next_value = self.agent.act(self.obs, self.state, self.done).value
        rollout.advantages, rollout.returns = gae(rollout.rewards, rollout.values, rollout.dones, next_value,
                                                  self.done, self.config.gamma, self.config.gae_lambda)
        return rollout

    def update(self, rollout: Rollout) -> dict[str, float]:
        """`epochs` passes of minibatch PPO steps over whole sequences; returns mean losses and diagnostics."""
        cfg, agent = self.config, self.agent
        agent.train()
        n_envs = rollout.obs.shape[0]
        per_batch = n_envs // cfg.minibatches
        stats: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")}
        for _ in range(cfg.epochs):
            for idx in torch.randperm(n_envs).split(per_batch):
                out = agent.evaluate(rollout.obs[idx], map_state(lambda s: s[idx], rollout.start_state),
                                     rollout.dones[idx], rollout.actions[idx])
                adv = rollout.advantages[idx]
                if cfg.norm_adv:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                log_ratio = out.log_prob - rollout.log_probs[idx]
                ratio = log_ratio.exp()
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)).mean()
                value_loss = 0.5 * (out.value - rollout.returns[idx]).pow(2).mean()
                entropy = out.entropy.mean()
                loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    stats["policy_loss"].append(policy_loss.item())
                    stats["value_loss"].append(value_loss.item())
                    stats["entropy"].append(entropy.item())
                    stats["approx_kl"].append(((ratio - 1) - log_ratio).mean().item())  # the k3 estimator
                    stats["clip_frac"].append(((ratio - 1).abs() > cfg.clip).float().mean().item())
        return {k: float(np.mean(v)) for k, v in stats.items()}

    def train(self, callback: Callable[[dict], bool | None] | None = None) -> dict:
        """Run updates until total_steps (or target_return) -> summary; callback(record) per update, True stops."""
        cfg = self.config
        n_updates = max(1, math.ceil(cfg.total_steps / (cfg.num_envs * cfg.unroll)))
        mmer, start, steps_to_target = -math.inf, time.perf_counter(), None
        record: dict = {}
        for update in range(1, n_updates + 1):
            rollout = self.collect()
            record = {"update": update, "steps": self.steps, **self.update(rollout)}
            returns, lengths = self.episodes.pop()
            record["episodes"] = len(returns)
            if returns:
                record["episodic_return"] = float(np.mean(returns))
                record["episode_length"] = float(np.mean(lengths))
                mmer = max(mmer, record["episodic_return"])
            record["mmer"] = mmer if mmer > -math.inf else None
            record["wall_s"] = time.perf_counter() - start
            record["sps"] = self.steps / record["wall_s"]
            reached = cfg.target_return is not None and mmer >= cfg.target_return
            if reached and steps_to_target is None:
                steps_to_target = self.steps
            out_of_time = cfg.time_limit_s is not None and record["wall_s"] >= cfg.time_limit_s
            if (callback is not None and callback(record)) or reached or out_of_time:
                break
        return {"mmer": record.get("mmer"), "steps": self.steps, "updates": record.get("update"),
                "wall_s": record.get("wall_s"), "sps": record.get("sps"), "steps_to_target": steps_to_target,
                "last": record}


def save_checkpoint(path: str | Path, agent: ActorCritic, env: EnvConfig, agent_config: AgentConfig,
                    ppo: PPOConfig | None = None, **extra) -> Path:
    """Write an agent checkpoint (configs as plain dicts + weights; loadable with weights_only=True)."""
    payload = {
        "format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "env": asdict(env), "agent": asdict(agent_config),
        "core_model_config": agent.core_model_config, "ppo": asdict(ppo) if ppo is not None else None,
        "state_dict": agent.state_dict(), **extra,
    }
    return write_checkpoint(path, payload)


def load_checkpoint(path: str | Path) -> tuple[ActorCritic, EnvConfig, dict]:
    """(agent with its trained weights, its EnvConfig, the whole checkpoint dict) from save_checkpoint's file."""
    from seqssm.rl.core import CoreConfig

    ckpt = read_checkpoint(path, CHECKPOINT_FORMAT, "seqssm RL agent checkpoint (write one with `seqssm rl`)")
    env = EnvConfig(**ckpt["env"])
    agent_cfg = dict(ckpt["agent"])
    agent_cfg["core"] = CoreConfig(**agent_cfg["core"])
    agent_config = AgentConfig(**{**agent_cfg, "core_init_from": None})
    probe = make_vector_env(env.name, 1, env_kwargs=env.kwargs, previous_action_reward=env.previous_action_reward)
    agent = build_agent(agent_config, probe.single_observation_space, probe.single_action_space,
                        core_model_config=ckpt.get("core_model_config"))
    probe.close()
    agent.load_state_dict(ckpt["state_dict"])
    return agent, env, ckpt


@torch.no_grad()
def run_episodes(agent: ActorCritic, envs, episodes: int, deterministic: bool = False) -> dict:
    """Play ceil(episodes / num_envs) whole episodes in every environment of `envs` (at least `episodes` in all,
    none favoured for being short) -> their count, mean/std/min/max return and mean length."""
    agent.eval()
    quota, dtype = math.ceil(episodes / envs.num_envs), next(agent.parameters()).dtype
    obs, _ = envs.reset()
    obs = torch.as_tensor(obs, dtype=dtype)
    done = torch.ones(envs.num_envs, dtype=torch.bool)
    state = agent.initial_state(envs.num_envs)
    tracker = EpisodeTracker(envs.num_envs, quota=quota)
    with frozen_weights():
        while (tracker.count < quota).any():
            out = agent.act(obs, state, done, deterministic=deterministic)
            next_obs, reward, terminated, truncated, _ = envs.step(to_env_action(out.action))
            done_np = np.logical_or(terminated, truncated)
            tracker.record(reward, done_np)
            obs, done, state = torch.as_tensor(next_obs, dtype=dtype), torch.as_tensor(done_np), out.state
    returns, lengths = np.array(tracker.returns), np.array(tracker.lengths)
    return {"episodes": len(returns), "mean_return": float(returns.mean()), "std_return": float(returns.std()),
            "min_return": float(returns.min()), "max_return": float(returns.max()),
            "mean_length": float(lengths.mean())}


def train(env: EnvConfig, agent_config: AgentConfig, ppo: PPOConfig, seed: int = 0, out_dir: str | Path | None = None,
          checkpoint_every: int = 10, log: Callable[[str], None] | None = print) -> dict:
    """Train an agent from configs -> summary dict. With out_dir: metrics.jsonl (one record per update),
    last.pt every `checkpoint_every` updates and at the end, best.pt at each new MMER, summary.json."""
    torch.manual_seed(seed)
    envs = make_vector_env(env.name, ppo.num_envs, seed=seed, env_kwargs=env.kwargs,
                           previous_action_reward=env.previous_action_reward)
    agent = build_agent(agent_config, envs.single_observation_space, envs.single_action_space)
    trainer = PPO(agent, envs, ppo)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text("")
    best = -math.inf

    def save(name: str, record: dict) -> None:
        save_checkpoint(out / name, agent, env, agent_config, ppo, seed=seed, update=record["update"],
                        steps=record["steps"], mmer=record["mmer"])

    def on_update(record: dict) -> None:
        nonlocal best
        if log is not None:
            ret, mmer = record.get("episodic_return", math.nan), record["mmer"]
            log(f"update {record['update']:5d}  steps {record['steps']:9d}  return {ret:6.3f}  "
                f"mmer {math.nan if mmer is None else mmer:6.3f}  "
                f"sps {record['sps']:7.0f}  kl {record['approx_kl']:.4f}  entropy {record['entropy']:.3f}")
        if out is None:
            return
        with (out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        if record.get("episodic_return", -math.inf) > best:
            best = record["episodic_return"]
            save("best.pt", record)
        if record["update"] % checkpoint_every == 0:
            save("last.pt", record)

    summary = trainer.train(on_update)
    envs.close()
    summary.update(env=env.name, core=agent_config.core.layer if agent_config.core_init_from is None else
                   f"init_from:{agent_config.core_init_from}", seed=seed,
                   parameters=sum(p.numel() for p in agent.parameters()))
    if out is not None:
        save("last.pt", summary["last"])
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
