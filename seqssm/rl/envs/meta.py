"""The environments of Lu et al. 2023 ("Structured State Space Models for In-Context Reinforcement Learning"): the
randomly projected multi-trial meta-RL wrapper (algorithm 1, 3.2 and 4.3) with its in-context StatelessCartPole
task, and the memory-length T-maze (4.1, bsuite's memory_len).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class RandomProjection(gym.Env):
    """Lu et al. 2023, algorithm 1: fresh random linear projections on every reset, several trials per episode.

    On reset a projection M_o (obs_size x inner obs dim, N(0, 1/dim) entries) of the observation and
    M_a of the action are drawn and kept for the whole episode, which runs `trials` episodes of the
    inner environment. Observation: [M_o o, r, d], with r the last inner reward and d = 1 when that
    step ended an inner episode (both 0 on reset); when a trial ends, o is the first observation of
    the next one. Actions: Box(-1, 1, (action_size,)) mapped by M_a (inner dim x action_size) and
    clipped to an inner Box; for a Discrete inner space, Discrete(action_size) and the inner action
    is argmax of column a of M_a, drawn again until every inner action is reachable (no trial is
    unsolvable). The episode terminates after the last trial; info["trial_returns"] then holds the
    return of each trial. `inner_factory` builds the inner environment (a class or a function).
    """

    metadata = {"render_modes": []}

    def __init__(self, inner_factory, obs_size: int = 4, action_size: int = 2, trials: int = 16):
        if trials < 1 or obs_size < 1 or action_size < 1:
            raise ValueError(f"need trials, obs_size, action_size >= 1, got {trials}, {obs_size}, {action_size}")
        self.inner: gym.Env = inner_factory()
        self.trials, self.obs_size, self.action_size = trials, obs_size, action_size
        inner_act = self.inner.action_space
        self.inner_obs_dim = spaces.flatdim(self.inner.observation_space)
        if isinstance(inner_act, spaces.Discrete):
            if action_size < inner_act.n:
                raise ValueError(f"action_size {action_size} cannot reach the {inner_act.n} inner actions")
            self.action_space = spaces.Discrete(action_size)
        elif isinstance(inner_act, spaces.Box) and len(inner_act.shape) == 1:
            self.action_space = spaces.Box(-1.0, 1.0, (action_size,), np.float32)
        else:
            raise ValueError(f"RandomProjection handles Discrete or 1-d Box inner actions, got {inner_act}")
        self.observation_space = spaces.Box(-np.inf, np.inf, (obs_size + 2,), np.float32)

    def _draw_projections(self) -> None:
        rng, inner_act = self.np_random, self.inner.action_space
        self.M_o = rng.normal(0.0, self.inner_obs_dim**-0.5, (self.obs_size, self.inner_obs_dim))
        if isinstance(inner_act, spaces.Discrete):
            while True:
                self.M_a = rng.normal(0.0, 1.0, (int(inner_act.n), self.action_size))
                self.action_map = self.M_a.argmax(0)
                if len(set(self.action_map.tolist())) == inner_act.n:
                    break
        else:
            self.M_a = rng.normal(0.0, self.action_size**-0.5, (inner_act.shape[0], self.action_size))

    def _observe(self, obs, reward: float, done: bool) -> np.ndarray:
        flat = spaces.flatten(self.inner.observation_space, obs).astype(np.float64)
        return np.concatenate([self.M_o @ flat, [reward, float(done)]]).astype(np.float32)

    def inner_action(self, action):
        """The inner environment's action for an outer `action` under the current projection."""
        inner_act = self.inner.action_space
        if isinstance(inner_act, spaces.Discrete):
            return int(self.action_map[int(action)])
        a = self.M_a @ np.asarray(action, np.float64)
        return np.clip(a, inner_act.low, inner_act.high).astype(inner_act.dtype)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._draw_projections()
        inner_seed = int(self.np_random.integers(2**31))
        obs, info = self.inner.reset(seed=inner_seed)
        self.trial, self.trial_returns = 0, [0.0]
        return self._observe(obs, 0.0, False), {"trial": 0}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.inner.step(self.inner_action(action))
        reward = float(reward)
        self.trial_returns[-1] += reward
        inner_done = terminated or truncated
        info = {"trial": self.trial}
        if inner_done:
            self.trial += 1
            if self.trial == self.trials:
                info["trial_returns"] = list(self.trial_returns)
                return self._observe(obs, reward, True), reward, True, False, info
            self.trial_returns.append(0.0)
            obs, _ = self.inner.reset()
        return self._observe(obs, reward, inner_done), reward, False, False, info


def in_context_cartpole(trials: int = 16, obs_size: int = 4, action_size: int = 2, max_episode_length: int = 200):
    """Lu et al. 2023, 4.3: POPGym's StatelessCartPole (position and angle only) randomly projected, `trials` per
    episode."""
    from popgym.envs.position_only_cartpole import PositionOnlyCartPole

    return RandomProjection(lambda: PositionOnlyCartPole(max_episode_length=max_episode_length),
                            obs_size=obs_size, action_size=action_size, trials=trials)


class MemoryLength(gym.Env):
    """bsuite's memory_len (Lu et al. 2023, 4.1) as a gymnasium T-maze: recall a cue `memory_length` steps later.

    Step t = 0 shows the cue, a random ±1 per bit (`num_bits`); steps 1 .. memory_length show zeros
    there. Every observation shows the time left, 1 - t / memory_length; the last step also shows
    which bit is queried (one-hot). Actions: Discrete(2). Actions before the last step earn 0; the
    action at t = memory_length ends the episode with +1 if it equals the queried bit ((cue + 1) / 2)
    and -1 otherwise. Observation: Box (1 + 2 num_bits,) = [time left, query one-hot, cue].
    """

    metadata = {"render_modes": []}

    def __init__(self, memory_length: int = 10, num_bits: int = 1):
        if memory_length < 0 or num_bits < 1:
            raise ValueError(f"need memory_length >= 0 and num_bits >= 1, got {memory_length}, {num_bits}")
        self.memory_length, self.num_bits = memory_length, num_bits
        self.observation_space = spaces.Box(-1.0, 1.0, (1 + 2 * num_bits,), np.float32)
        self.action_space = spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, np.float32)
        obs[0] = 1.0 - self.t / max(self.memory_length, 1)
        if self.t == self.memory_length:
            obs[1 + self.query] = 1.0
        if self.t == 0:
            obs[1 + self.num_bits :] = 2.0 * self.context - 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.context = self.np_random.integers(0, 2, self.num_bits)
        self.query = int(self.np_random.integers(self.num_bits))
        return self._obs(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"MemoryLength action must be in {self.action_space}, got {action!r}")
        if self.t < self.memory_length:
            self.t += 1
            return self._obs(), 0.0, False, False, {}
        correct = int(action) == int(self.context[self.query])
        return self._obs(), 1.0 if correct else -1.0, True, False, {"correct": float(correct)}
