"""Rules of the off-policy environments: Best Arm Identification, the random-projection meta wrapper,
memory length, observation noise, and the optional DMC adapter."""

import gymnasium as gym
import numpy as np
import pytest

from seqssm.rl.meta_envs import MemoryLength, RandomProjection, in_context_cartpole
from seqssm.rl.noisy_envs import ABOVE, ASK, BELOW, BestArmIdentification, ObservationNoise
from seqssm.rl.sac import OffPolicyEnvConfig, make_offpolicy_env


def test_best_arm_costs_rewards_and_end():
    env = BestArmIdentification(cost=0.3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1,) and env.action_space.n == 3
    for _ in range(5):
        obs, reward, terminated, truncated, _ = env.step(ASK)
        assert reward == pytest.approx(-0.3) and not terminated and not truncated
    right = ABOVE if env.mu > 0 else BELOW
    _, reward, terminated, _, info = env.step(right)
    assert terminated and reward == 10.0 and info["win"] == 1.0 and info["decided"]
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(BELOW if right == ABOVE else ABOVE)
    assert terminated and reward == -10.0 and info["win"] == 0.0


def test_best_arm_step_limit_and_samples():
    env = BestArmIdentification(cost=0.0, max_steps=4, mu_range=(0.2, 0.3), sigma_range=(0.5, 0.5))
    env.reset(seed=1)
    xs = [env.step(ASK) for _ in range(3)]
    assert all(not t for _, _, t, _, _ in xs)
    _, reward, terminated, _, info = env.step(ASK)
    assert terminated and reward == -10.0 and info["win"] == 0.0 and not info["decided"]
    # Observations are samples of N(mu, sigma): their mean over many steps approaches mu.
    env = BestArmIdentification(max_steps=10_000, mu_range=(0.2, 0.3), sigma_range=(0.5, 0.5))
    env.reset(seed=2)
    samples = [env.step(ASK)[0][0] for _ in range(4000)]
    assert np.mean(samples) == pytest.approx(env.mu, abs=0.03) and np.std(samples) == pytest.approx(0.5, abs=0.03)


def test_best_arm_latent_sampling_in_and_out_of_distribution():
    ind, ood = BestArmIdentification(), BestArmIdentification(sigma_range=(2.0, 3.0))
    mus, sigmas, ood_sigmas = [], [], []
    for seed in range(300):
        ind.reset(seed=seed)
        ood.reset(seed=seed)
        mus.append(ind.mu)
        sigmas.append(ind.sigma)
        ood_sigmas.append(ood.sigma)
    assert -0.5 <= min(mus) < -0.4 and 0.4 < max(mus) <= 0.5
    assert 0.0 <= min(sigmas) < 0.1 and 1.9 < max(sigmas) <= 2.0
    assert 2.0 <= min(ood_sigmas) and max(ood_sigmas) <= 3.0


def test_best_arm_oracle_is_the_posterior():
    env = BestArmIdentification(oracle=True, max_steps=10_000)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (2,)
    for _ in range(2000):
        obs, *_ = env.step(ASK)
    # known sigma, prior N(0, 1/12): after n samples the std is (12 + n / sigma^2)^-1/2
    assert obs[1] == pytest.approx((12 + 2001 / env.sigma**2) ** -0.5, rel=1e-4)
    assert obs[0] == pytest.approx(env.mu, abs=float(4 * obs[1] + 1e-3))


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
    env = make_offpolicy_env(OffPolicyEnvConfig(name="gym:Pendulum-v1", observation_noise=0.1))
    assert isinstance(env, ObservationNoise) and env.observation_space.shape == (3,)


def test_dmc_is_optional():
    config = OffPolicyEnvConfig(name="dmc:pendulum-swingup", observation_noise=0.1)
    try:
        import dm_control  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="seqssm\\[dmc\\]"):
            make_offpolicy_env(config)
        return
    env = make_offpolicy_env(config)
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape and env.action_space.shape == (1,)
    _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
    assert np.isfinite(reward) and not terminated and not truncated
