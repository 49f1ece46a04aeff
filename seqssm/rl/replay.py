"""A replay buffer of whole episodes that samples right-padded sub-trajectories with a burn-in prefix.

A sub-trajectory of n transitions starting at step s carries the n + 1 encoder inputs
(o_t, a_(t-1)) for t = s .. s + n, so the same history-encoder pass gives the features of every
state and of every next state. Its burn-in prefix holds the inputs of steps max(0, s - burn_in)
.. s - 1: a masked scan over the right-padded prefixes yields each sequence's start state.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Episode:
    """obs (T + 1, obs_dim): every observation including the last; actions (T, act_dim) as the networks read
    them (one-hot or in [-1, 1]); rewards (T,); terminated: whether the last transition ended the task."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool

    def __len__(self) -> int:
        return len(self.rewards)


@dataclass
class SequenceBatch:
    """B sub-trajectories right-padded to L transitions and their burn-in prefixes, right-padded to P steps.

    obs, prev_action (B, L + 1, .) and input_mask (B, L + 1): encoder inputs; action (B, L, act_dim),
    reward, terminal (B, L) float and mask (B, L) bool: transitions. prefix_obs, prefix_prev_action
    (B, P, .) and prefix_mask (B, P) bool; P may be 0.
    """

    obs: torch.Tensor
    prev_action: torch.Tensor
    input_mask: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    terminal: torch.Tensor
    mask: torch.Tensor
    prefix_obs: torch.Tensor
    prefix_prev_action: torch.Tensor
    prefix_mask: torch.Tensor


def _pad(parts: list[np.ndarray], length: int, feature_shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad arrays (n_i, *feature_shape) to (B, length, *feature_shape) with zeros; -> (padded, mask)."""
    out = np.zeros((len(parts), length, *feature_shape), np.float32)
    mask = np.zeros((len(parts), length), bool)
    for i, p in enumerate(parts):
        out[i, : len(p)] = p
        mask[i, : len(p)] = True
    return out, mask


class EpisodeReplay:
    """Whole episodes, oldest dropped first once more than `capacity` transitions are held."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int):
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity, self.obs_dim, self.act_dim = capacity, obs_dim, act_dim
        self.episodes: deque[Episode] = deque()
        self.transitions = 0
        self.lengths: deque[int] = deque()  # len() of each episode, in the same order
        self._weights: np.ndarray | None = None  # `lengths` as an array for sampling, rebuilt after a change

    def __len__(self) -> int:
        return self.transitions

    def add(self, episode: Episode) -> None:
        """Store one finished (or cut) episode of at least one transition."""
        if len(episode) < 1 or episode.obs.shape != (len(episode) + 1, self.obs_dim):
            raise ValueError(f"episode needs T >= 1 transitions and obs (T + 1, {self.obs_dim}), "
                             f"got T = {len(episode)} and obs {episode.obs.shape}")
        self.episodes.append(episode)
        self.lengths.append(len(episode))
        self.transitions += len(episode)
        self._weights = None
        while self.transitions > self.capacity and len(self.episodes) > 1:
            self.episodes.popleft()
            self.transitions -= self.lengths.popleft()

    @staticmethod
    def _inputs(ep: Episode, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Encoder inputs of steps start .. stop - 1: observations and previous actions (zeros before step 0)."""
        prev = np.zeros((stop - start, ep.actions.shape[1]), np.float32)
        lo = min(max(start, 1), stop)
        prev[lo - start :] = ep.actions[lo - 1 : stop - 1]
        return ep.obs[start:stop], prev

    def sample(self, batch_size: int, context: int, burn_in: int, rng: np.random.Generator,
               device: torch.device | str = "cpu") -> SequenceBatch:
        """batch_size sub-trajectories of at most `context` transitions; burn_in < 0 means the whole prefix.

        Episodes are drawn in proportion to their length (transitions uniformly); an episode of at
        most `context` transitions is taken whole, a longer one from a uniform start s in
        [0, T - context].
        """
        if not self.episodes:
            raise ValueError("sampling from an empty replay buffer")
        if self._weights is None:
            # from the int deque at C speed: asking every episode its length costs O(episodes) Python calls
            self._weights = np.fromiter(self.lengths, np.float64, len(self.lengths))
        lengths = self._weights
        picks = rng.choice(len(self.episodes), size=batch_size, p=lengths / lengths.sum())
        seqs = {k: [] for k in ("obs", "prev", "action", "reward", "terminal", "p_obs", "p_prev")}
        for i in picks:
            ep = self.episodes[i]
            T = len(ep)
            s = int(rng.integers(0, T - context + 1)) if T > context else 0
            n = min(context, T - s)
            obs, prev = self._inputs(ep, s, s + n + 1)
            seqs["obs"].append(obs)
            seqs["prev"].append(prev)
            seqs["action"].append(ep.actions[s : s + n])
            seqs["reward"].append(ep.rewards[s : s + n, None])
            terminal = np.zeros((n, 1), np.float32)
            terminal[-1] = float(ep.terminated and s + n == T)
            seqs["terminal"].append(terminal)
            p0 = 0 if burn_in < 0 else max(0, s - burn_in)
            p_obs, p_prev = self._inputs(ep, p0, s)
            seqs["p_obs"].append(p_obs)
            seqs["p_prev"].append(p_prev)
        L = max(len(a) for a in seqs["action"])
        P = max(len(p) for p in seqs["p_obs"])
        obs, input_mask = _pad(seqs["obs"], L + 1, (self.obs_dim,))
        prev, _ = _pad(seqs["prev"], L + 1, (self.act_dim,))
        action, mask = _pad(seqs["action"], L, (self.act_dim,))
        reward, _ = _pad(seqs["reward"], L, (1,))
        terminal, _ = _pad(seqs["terminal"], L, (1,))
        p_obs, p_mask = _pad(seqs["p_obs"], P, (self.obs_dim,))
        p_prev, _ = _pad(seqs["p_prev"], P, (self.act_dim,))
        t = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
        return SequenceBatch(t(obs), t(prev), t(input_mask), t(action), t(reward[..., 0]), t(terminal[..., 0]),
                             t(mask), t(p_obs), t(p_prev), t(p_mask))
