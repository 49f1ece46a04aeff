"""Best Arm Identification (the Kalman-layer paper, "Uncertainty Representations in State-Space Layers for Deep
Reinforcement Learning under Partial Observability", 5.2): costs, rewards, limits, latent sampling, the oracle posterior."""

import numpy as np
import pytest

from seqssm.rl.envs.best_arm import ABOVE, ASK, BELOW, BestArmIdentification


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
