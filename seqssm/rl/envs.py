"""Environments: all of POPGym (the `popgym` package) and MemoryCorridor, behind gymnasium's vector API.

`make_env(name)` returns one gymnasium env whose observation is a flat float32 vector: the
environment's own observation flattened (one-hot for discrete parts), then, with the action
embedding of seed 000 section 4.2, the previous action (one-hot for discrete spaces), the
previous reward and an episode-start flag. `make_vector_env(name, num_envs)` batches them with
same-step autoreset: when an episode ends, the observation returned is the next episode's first
one (its start flag is 1), which is what the recurrent PPO rollout expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

MEMORY_CORRIDORS = ("MemoryCorridor", "MemoryCorridorEasy")


@dataclass
class EnvConfig:
    """Environment by name (see `env_names()`), its constructor kwargs, and whether to add seed 000's action embedding."""

    name: str = "RepeatFirstEasy"
    kwargs: dict[str, Any] = field(default_factory=dict)
    previous_action_reward: bool = True


class MemoryCorridor(gym.Env):
    """Memory Corridor (seed 000 section 4.5, after Moerland et al. 2024): `length` corridors of `num_doors` doors.

    Each corridor has one correct door, and every correct door earns 1. The correct door of an
    opened corridor leads to the next corridor; the correct door of the newest corridor opens it
    and puts the agent back at the start, so all earlier doors must be chosen again to go further
    (reaching door n earns n(n-1)/2 in all). A wrong door ends the episode; opening all `length`
    corridors ends it too. Observation (Box (num_doors,)): the correct door one-hot the first time
    a corridor is reached, zeros otherwise. Easy variant (Box (length + num_doors,)): every step
    shows one-hot(position) and one-hot(correct door of the newest corridor), so only the doors of
    opened corridors must be remembered. Action: Discrete(num_doors).
    """

    metadata = {"render_modes": []}

    def __init__(self, num_doors: int = 4, length: int = 8, easy: bool = False):
        if num_doors < 2 or length < 1:
            raise ValueError(f"MemoryCorridor needs num_doors >= 2 and length >= 1, got {num_doors}, {length}")
        self.num_doors, self.length, self.easy = num_doors, length, easy
        size = (length + num_doors) if easy else num_doors
        self.observation_space = spaces.Box(0.0, 1.0, (size,), np.float32)
        self.action_space = spaces.Discrete(num_doors)
        self.max_episode_length = length * (length + 1) // 2

    def _obs(self, first_visit: bool) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, np.float32)
        if self.easy:
            obs[self.position] = 1.0
            if self.opened < self.length:
                obs[self.length + self.doors[self.opened]] = 1.0
        elif first_visit:
            obs[self.doors[self.position]] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.doors = self.np_random.integers(self.num_doors, size=self.length)
        self.position, self.opened = 0, 0  # corridor the agent is in; corridors opened so far
        return self._obs(first_visit=True), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"MemoryCorridor action must be in {self.action_space}, got {action!r}")
        if action != self.doors[self.position]:
            return self._obs(first_visit=False), 0.0, True, False, {}
        if self.position < self.opened:
            self.position += 1
        else:
            self.opened, self.position = self.opened + 1, 0
        # The newest corridor is reached once: failing there ends the episode, opening it sends the agent back.
        first_visit = self.position == self.opened
        return self._obs(first_visit), 1.0, self.opened == self.length, False, {}


class PreviousActionReward(gym.Wrapper):
    """Seed 000 section 4.2's action embedding: obs -> [flatten(obs), flatten(previous action), previous reward, start].

    flatten is gymnasium's (one-hot for Discrete, concatenated one-hots for MultiDiscrete, as is for
    Box). On reset the previous action and reward are zeros and start is 1. float32 Box output.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._obs_dim = spaces.flatdim(env.observation_space)
        self._act_dim = spaces.flatdim(env.action_space)
        self.observation_space = spaces.Box(-np.inf, np.inf, (self._obs_dim + self._act_dim + 2,), np.float32)

    def _embed(self, obs, action_flat: np.ndarray, reward: float, start: bool) -> np.ndarray:
        flat = spaces.flatten(self.env.observation_space, obs).astype(np.float32, copy=False)
        return np.concatenate([flat, action_flat, np.array([reward, float(start)], np.float32)])

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._embed(obs, np.zeros(self._act_dim, np.float32), 0.0, True), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        action_flat = spaces.flatten(self.env.action_space, action).astype(np.float32, copy=False)
        return self._embed(obs, action_flat, float(reward), False), reward, terminated, truncated, info


def env_names() -> list[str]:
    """Every environment name make_env accepts: POPGym's class names and the MemoryCorridors."""
    from popgym.envs import ALL

    return sorted(cls.__name__ for cls in ALL) + list(MEMORY_CORRIDORS)


def _popgym_class(name: str):
    from popgym.envs import ALL

    for cls, meta in ALL.items():
        if name in (cls.__name__, meta.get("id")):
            return cls
    return None


def make_env(name: str, env_kwargs: dict[str, Any] | None = None, previous_action_reward: bool = True) -> gym.Env:
    """One environment by name ("RepeatFirstEasy", "popgym-RepeatFirstEasy-v0", "MemoryCorridorEasy", ...)
    with a flat float32 observation (plus the previous action, reward and start flag unless disabled)."""
    env_kwargs = dict(env_kwargs or {})
    if name in MEMORY_CORRIDORS:
        env = MemoryCorridor(easy=name == "MemoryCorridorEasy", **env_kwargs)
    else:
        cls = _popgym_class(name)
        if cls is None:
            raise ValueError(f"unknown environment {name!r}; choose one of {env_names()}")
        env = cls(**env_kwargs)
    if isinstance(env.action_space, spaces.Box):
        env = gym.wrappers.ClipAction(env)  # the Gaussian policy samples unbounded actions
    if previous_action_reward:
        return PreviousActionReward(env)
    return gym.wrappers.FlattenObservation(env)


def make_vector_env(name: str, num_envs: int, seed: int | None = None, env_kwargs: dict[str, Any] | None = None,
                    previous_action_reward: bool = True) -> gym.vector.VectorEnv:
    """`num_envs` copies of make_env(name) in one process, same-step autoreset; reset with seed, seed + 1, ..."""
    mode = getattr(gym.vector, "AutoresetMode", None)
    if mode is None:
        raise RuntimeError(f"gymnasium {gym.__version__} has no same-step autoreset; install gymnasium>=1.1")
    envs = gym.vector.SyncVectorEnv(
        [lambda: make_env(name, env_kwargs, previous_action_reward) for _ in range(num_envs)],
        autoreset_mode=mode.SAME_STEP,
    )
    envs.reset(seed=seed)
    return envs
