"""Best Arm Identification, the uncertainty probe of "Uncertainty Representations in State-Space Layers for
Deep Reinforcement Learning under Partial Observability" (the Kalman-layer paper), 5.2."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ASK, ABOVE, BELOW = 0, 1, 2


class BestArmIdentification(gym.Env):
    """Is the mean of a Gaussian arm above or below zero? Kalman-layer paper, 5.2 and fig. 3.

    Each episode draws μ ~ U(mu_range) and σ ~ U(sigma_range) (out of distribution: sigma_range
    (2, 3)). reset shows one sample x ~ N(μ, σ). Actions: 0 asks for another sample (reward -cost),
    1 decides μ > 0, 2 decides μ < 0; a decision ends the episode with +win_reward if right and
    -win_reward if wrong. At max_steps without a decision the episode ends with -win_reward.
    Observation: (x,), or with oracle=True the posterior mean and standard deviation of μ given
    every sample so far and the true σ, under the Gaussian prior with U(mu_range)'s moments.
    info at the end: win (1.0 / 0.0), decided, mu, sigma.
    """

    metadata = {"render_modes": []}

    def __init__(self, cost: float = 0.0, mu_range=(-0.5, 0.5), sigma_range=(0.0, 2.0), win_reward: float = 10.0,
                 max_steps: int = 1000, oracle: bool = False):
        if cost < 0 or max_steps < 1 or win_reward <= 0:
            raise ValueError(f"need cost >= 0, max_steps >= 1, win_reward > 0; got {cost}, {max_steps}, {win_reward}")
        if not (mu_range[0] < mu_range[1] and 0 <= sigma_range[0] <= sigma_range[1]):
            raise ValueError(f"bad ranges mu {mu_range}, sigma {sigma_range}")
        self.cost, self.win_reward, self.max_steps, self.oracle = cost, win_reward, max_steps, oracle
        self.mu_range, self.sigma_range = tuple(mu_range), tuple(sigma_range)
        self.observation_space = spaces.Box(-np.inf, np.inf, (2 if oracle else 1,), np.float32)
        self.action_space = spaces.Discrete(3)

    def _sample(self) -> np.ndarray:
        x = self.mu + self.sigma * self.np_random.standard_normal()
        self.n, self.total = self.n + 1, self.total + x
        if not self.oracle:
            return np.array([x], np.float32)
        return np.array(self.posterior(), np.float32)

    def posterior(self) -> tuple[float, float]:
        """Posterior mean and std of μ after the samples so far (known σ, Gaussian prior with U(mu_range)'s moments)."""
        lo, hi = self.mu_range
        prior_mean, prior_prec = (lo + hi) / 2, 12.0 / (hi - lo) ** 2
        noise_prec = self.n / max(self.sigma, 1e-6) ** 2
        prec = prior_prec + noise_prec
        mean = (prior_prec * prior_mean + noise_prec * self.total / max(self.n, 1)) / prec
        return mean, prec**-0.5

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.mu = float(self.np_random.uniform(*self.mu_range))
        self.sigma = float(self.np_random.uniform(*self.sigma_range))
        self.n, self.total, self.t = 0, 0.0, 0
        return self._sample(), {}

    def _end(self, win: bool, decided: bool):
        info = {"win": float(win), "decided": decided, "mu": self.mu, "sigma": self.sigma}
        return np.zeros(self.observation_space.shape, np.float32), self.win_reward if win else -self.win_reward, info

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"BestArmIdentification action must be in {self.action_space}, got {action!r}")
        self.t += 1
        if action != ASK:
            obs, reward, info = self._end((action == ABOVE) == (self.mu > 0), decided=True)
            return obs, reward, True, False, info
        if self.t >= self.max_steps:
            obs, reward, info = self._end(False, decided=False)
            return obs, reward - self.cost, True, False, info
        return self._sample(), -self.cost, False, False, {}
