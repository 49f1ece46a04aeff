"""Observation wrappers: the previous action and reward as inputs (van Gelooven 2025 thesis, 4.2) and Gaussian
observation noise (the Kalman-layer paper: "Uncertainty Representations in State-Space Layers for Deep
Reinforcement Learning under Partial Observability", 5.3)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PreviousActionReward(gym.Wrapper):
    """obs -> [flatten(obs), flatten(previous action), previous reward, start] (van Gelooven 2025 thesis, 4.2).

    flatten is gymnasium's (one-hot for Discrete, concatenated one-hots for MultiDiscrete, as is for
    Box). On reset the previous action and reward are zeros and start is 1. float32 Box output.
    reward=False leaves the previous reward out: [obs, previous action, start], as POPGym's baselines
    (Morad et al. 2023) and Lu et al. 2023's public code observe.
    """

    def __init__(self, env: gym.Env, reward: bool = True):
        super().__init__(env)
        self.include_reward = reward
        self._obs_dim = spaces.flatdim(env.observation_space)
        self._act_dim = spaces.flatdim(env.action_space)
        size = self._obs_dim + self._act_dim + 1 + int(reward)
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def _embed(self, obs, action_flat: np.ndarray, reward: float, start: bool) -> np.ndarray:
        flat = spaces.flatten(self.env.observation_space, obs).astype(np.float32, copy=False)
        tail = [reward, float(start)] if self.include_reward else [float(start)]
        return np.concatenate([flat, action_flat, np.array(tail, np.float32)])

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._embed(obs, np.zeros(self._act_dim, np.float32), 0.0, True), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        action_flat = spaces.flatten(self.env.action_space, action).astype(np.float32, copy=False)
        return self._embed(obs, action_flat, float(reward), False), reward, terminated, truncated, info


class ObservationNoise(gym.ObservationWrapper):
    """Adds zero-mean Gaussian noise of standard deviation `scale` to every (Box) observation (Kalman-layer paper,
    5.3)."""

    def __init__(self, env: gym.Env, scale: float = 0.1):
        super().__init__(env)
        if scale < 0:
            raise ValueError(f"noise scale must be >= 0, got {scale}")
        if not isinstance(env.observation_space, spaces.Box):
            raise ValueError(f"ObservationNoise needs a Box observation space, got {env.observation_space}")
        self.scale = scale
        self.observation_space = spaces.Box(-np.inf, np.inf, env.observation_space.shape, np.float32)

    def observation(self, observation):
        noise = self.scale * self.np_random.standard_normal(np.shape(observation))
        return (np.asarray(observation, np.float64) + noise).astype(np.float32)
