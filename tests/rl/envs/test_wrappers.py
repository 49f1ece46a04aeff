"""The observation wrappers: previous action and reward appended, Gaussian observation noise."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from seqssm.rl.envs import MemoryCorridor, ObservationNoise, PreviousActionReward


def test_previous_action_reward_layout():
    env = PreviousActionReward(MemoryCorridor(num_doors=3, length=2))
    obs, _ = env.reset(seed=0)
    door = int(env.unwrapped.doors[0])
    assert env.observation_space.shape == (3 + 3 + 2,)
    np.testing.assert_array_equal(obs, np.r_[np.eye(3)[door], np.zeros(3), 0.0, 1.0])
    obs, *_ = env.step(door)
    np.testing.assert_array_equal(obs, np.r_[np.zeros(3), np.eye(3)[door], 1.0, 0.0])


def test_previous_action_without_the_reward():
    """reward=False: [obs, one-hot previous action, start], the observation of POPGym's baselines."""
    env = PreviousActionReward(MemoryCorridor(num_doors=3, length=2), reward=False)
    obs, _ = env.reset(seed=0)
    door = int(env.unwrapped.doors[0])
    assert env.observation_space.shape == (3 + 3 + 1,)
    np.testing.assert_array_equal(obs, np.r_[np.eye(3)[door], np.zeros(3), 1.0])
    obs, *_ = env.step(door)
    np.testing.assert_array_equal(obs, np.r_[np.zeros(3), np.eye(3)[door], 0.0])


def test_observation_noise_on_pendulum():
    clean = gym.make("Pendulum-v1")
    noisy = ObservationNoise(gym.make("Pendulum-v1"), scale=0.5)
    o_clean, _ = clean.reset(seed=0)
    o_noisy, _ = noisy.reset(seed=0)
    diffs = [o_noisy - o_clean]
    for _ in range(300):
        a = clean.action_space.sample()
        diffs.append(noisy.step(a)[0] - clean.step(a)[0])
    diffs = np.array(diffs)
    assert abs(diffs.mean()) < 0.06 and diffs.std() == pytest.approx(0.5, rel=0.1)
    with pytest.raises(ValueError, match="noise scale must be >= 0"):
        ObservationNoise(gym.make("Pendulum-v1"), scale=-1.0)
