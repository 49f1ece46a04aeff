"""A policy stepping a batch of environments, the episodes it finishes, and evaluation: shared by PPO's rollouts,
SAC's data collection and every evaluation.

A policy is any module with `initial_state(batch_size)`, `act(obs, state, done, deterministic) -> ActOutput`
(done (B,) marks observations that start an episode: the policy resets those rows of its state first)
and `env_action(action) -> np.ndarray` (PPO's `ActorCritic`, SAC's `SACAgent`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqssm.layers import frozen_weights


@dataclass
class ActOutput:
    """One step of a policy for B environments: action (B, ...), the policy's next state, and for PPO's
    actor-critic the action's log_prob (B,) and the critic's value (B,)."""

    action: torch.Tensor
    state: object
    log_prob: torch.Tensor | None = None
    value: torch.Tensor | None = None


class EpisodeTracker:
    """Running return and length of each of n environments; `record` collects the episodes that end.

    quota: keep at most this many episodes per environment, so that an evaluation over a fixed
    number of episodes is not biased towards the short ones (which finish first).
    """

    def __init__(self, n: int, quota: int | None = None):
        self.ret, self.len = np.zeros(n), np.zeros(n, dtype=np.int64)
        self.count, self.quota = np.zeros(n, dtype=np.int64), quota
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.infos: list[dict[str, Any]] = []

    def record(self, reward: np.ndarray, done: np.ndarray, infos: list[dict[str, Any]] | None = None) -> None:
        """reward, done (n,) of one step; infos: the final info of each environment with done, in order."""
        self.ret += reward
        self.len += 1
        for k, i in enumerate(np.flatnonzero(done)):
            if self.quota is None or self.count[i] < self.quota:
                self.returns.append(float(self.ret[i]))
                self.lengths.append(int(self.len[i]))
                self.infos.append(infos[k] if infos is not None else {})
            self.count[i] += 1
        self.ret[done], self.len[done] = 0.0, 0

    def pop(self) -> tuple[list[float], list[int]]:
        """The returns and lengths of the episodes finished since the last pop."""
        out = (self.returns, self.lengths)
        self.returns, self.lengths, self.infos = [], [], []
        return out

    def summary(self) -> dict[str, Any]:
        """Count, mean / std / min / max return and mean length of the recorded episodes, and the mean of their
        final infos' statistics (see `summarize_infos`)."""
        returns, lengths = np.array(self.returns), np.array(self.lengths)
        return {"episodes": len(returns), "return_mean": float(returns.mean()), "return_std": float(returns.std()),
                "return_min": float(returns.min()), "return_max": float(returns.max()),
                "length_mean": float(lengths.mean()), **summarize_infos(self.infos)}


def final_infos(infos: dict[str, Any], done: np.ndarray) -> list[dict[str, Any]]:
    """The info each environment with done (n,) returned with its episode's last step, from a same-step autoreset
    vector env's batched infos (their "final_info": values per key with a "_key" mask)."""
    final = infos.get("final_info", {})
    return [{key: values[i] for key, values in final.items()
             if not key.startswith("_") and not isinstance(values, dict) and final[f"_{key}"][i]}
            for i in np.flatnonzero(done)]


def summarize_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of every numeric scalar in the episodes' final infos; element-wise mean of equal-length number lists."""
    out: dict[str, Any] = {}
    for key in sorted({k for info in infos for k in info}):
        values = [info[key] for info in infos if key in info]
        if all(isinstance(v, (bool, int, float, np.bool_, np.number)) for v in values):
            out[key] = float(np.mean(values))
        elif all(isinstance(v, (list, tuple, np.ndarray)) for v in values) and len({len(v) for v in values}) == 1:
            out[key] = np.mean(np.asarray(values, np.float64), axis=0).tolist()
    return out


class EnvLoop:
    """A policy and a vector env (same-step autoreset) stepped together: the current observation (B, obs_dim) in
    the policy's dtype, done flags (B,) (True where the observation starts an episode), the policy's state, all on
    the policy's device."""

    def __init__(self, policy, envs, seed: int | None = None, quota: int | None = None):
        self.policy, self.envs = policy, envs
        weight = next(policy.parameters())
        self.dtype, self.device = weight.dtype, weight.device
        obs, _ = envs.reset(seed=seed)
        self.obs = self.tensor(obs, self.dtype)
        self.done = torch.ones(envs.num_envs, dtype=torch.bool, device=self.device)
        self.state = policy.initial_state(envs.num_envs, device=self.device)
        self.episodes = EpisodeTracker(envs.num_envs, quota)

    def act(self, deterministic: bool = False) -> ActOutput:
        """The policy's output for the current observations (its state is not advanced until `step`)."""
        return self.policy.act(self.obs, self.state, self.done, deterministic=deterministic)

    def step(self, out: ActOutput) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Take out.action in every environment and move on to out.state -> reward, terminated, done (B,) and the
        vector env's infos (the last observation of an episode that ended is in infos["final_obs"])."""
        next_obs, reward, terminated, truncated, infos = self.envs.step(self.policy.env_action(out.action))
        done = np.logical_or(terminated, truncated)
        self.episodes.record(reward, done, final_infos(infos, done) if done.any() else [])
        self.obs = self.tensor(next_obs, self.dtype)
        self.done = self.tensor(done)
        self.state = out.state
        return reward, terminated, done, infos

    def tensor(self, array: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        """`array` as a tensor on the policy's device."""
        return torch.as_tensor(array, dtype=dtype, device=self.device)


@torch.no_grad()
def run_episodes(policy, envs, episodes: int, deterministic: bool = False, seed: int | None = None,
                 keep: bool = False) -> dict[str, Any]:
    """Play ceil(episodes / num_envs) whole episodes in every environment of `envs` (at least `episodes` in all,
    none favoured for being short) -> `EpisodeTracker.summary()` of them; `keep`: with every episode's return,
    length and numeric final info ("returns", "lengths", "infos")."""
    training = policy.training
    policy.eval()
    loop = EnvLoop(policy, envs, seed=seed, quota=math.ceil(episodes / envs.num_envs))
    with frozen_weights():
        while (loop.episodes.count < loop.episodes.quota).any():
            loop.step(loop.act(deterministic))
    policy.train(training)
    tracker = loop.episodes
    if not keep:
        return tracker.summary()
    infos = [{k: float(v) for k, v in info.items() if isinstance(v, (bool, int, float, np.number, np.bool_))}
             for info in tracker.infos]
    return {"returns": tracker.returns, "lengths": tracker.lengths, "infos": infos, **tracker.summary()}
