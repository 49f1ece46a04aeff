"""The environments of Lu et al. 2023: the random-projection meta wrapper and memory length."""

import gymnasium as gym
import numpy as np
import pytest

from seqssm.rl.envs.meta import MemoryLength, RandomProjection, in_context_cartpole


def _trial_obs(env, action=0):
    obs, reward, terminated, truncated, info = env.step(action)
    return obs, reward, terminated, info


def test_projection_fixed_within_episode_new_across_episodes_and_shapes():
    env = in_context_cartpole(trials=3, obs_size=5, action_size=4)
    assert env.observation_space.shape == (7,) and env.action_space.n == 4
    obs, _ = env.reset(seed=0)
    assert obs.shape == (7,) and obs[-2:].tolist() == [0.0, 0.0]
    M_o, M_a = env.M_o.copy(), env.M_a.copy()
    assert sorted(set(env.action_map.tolist())) == [0, 1]  # both inner actions reachable
    rewards, done_flags, trials = [], [], []
    terminated = False
    while not terminated:
        obs, reward, terminated, info = _trial_obs(env, 0)
        np.testing.assert_array_equal(env.M_o, M_o)
        np.testing.assert_array_equal(env.M_a, M_a)
        assert obs[-2] == np.float32(reward)
        rewards.append(reward)
        done_flags.append(obs[-1])
        trials.append(info["trial"])
    # three inner episodes: d = 1 exactly at each trial's end, the episode ends after the third
    assert sum(done_flags) == 3 and done_flags[-1] == 1.0 and sorted(set(trials)) == [0, 1, 2]
    assert len(info["trial_returns"]) == 3 and sum(info["trial_returns"]) == pytest.approx(sum(rewards))
    # the observation is the projection of the inner observation
    inner = np.array(env.inner.state, np.float64)[[0, 2]]
    env.reset()
    assert not np.allclose(env.M_o, M_o)
    obs, *_ = env.step(1)
    inner = np.array(env.inner.state, np.float64)[[0, 2]]
    np.testing.assert_allclose(obs[:5], env.M_o @ inner, rtol=1e-5, atol=1e-6)


def test_projection_of_box_actions():
    env = RandomProjection(lambda: gym.make("Pendulum-v1"), obs_size=6, action_size=3, trials=2)
    assert env.action_space.shape == (3,) and env.observation_space.shape == (8,)
    env.reset(seed=0)
    a = np.array([0.5, -0.2, 0.1])
    np.testing.assert_allclose(env.inner_action(a), np.clip(env.M_a @ a, -2, 2), rtol=1e-6)


def test_memory_length_rules():
    env = MemoryLength(memory_length=3)
    obs, _ = env.reset(seed=0)
    cue = obs[2]
    assert obs.tolist()[:2] == [1.0, 0.0] and cue in (-1.0, 1.0)
    for t in range(1, 4):
        obs, reward, terminated, _, _ = env.step(0)
        assert reward == 0.0 and not terminated and obs[2] == 0.0  # the cue is shown once
        assert obs[0] == pytest.approx(1 - t / 3) and obs[1] == (1.0 if t == 3 else 0.0)  # query at the last step
    _, reward, terminated, _, info = env.step(int(cue > 0))
    assert terminated and reward == 1.0 and info["correct"] == 1.0
    env.reset(seed=0)
    for _ in range(3):
        env.step(1)
    assert env.step(int(cue < 0))[1] == -1.0
    # 4 decisions per episode: 3 waits and the answer
    assert MemoryLength(memory_length=0).reset(seed=0)[0][1] == 1.0
