"""DeepMind Control tasks as gymnasium environments (the optional `dm-control` extra), for the noisy continuous
control of the Kalman-layer paper ("Uncertainty Representations in State-Space Layers for Deep Reinforcement
Learning under Partial Observability", 5.3)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

DMC_EXTRA = "dm-control is an optional extra: pip install 'seqssm[dmc]' (or: pip install dm-control)"


class DMCEnv(gym.Env):
    """A DeepMind Control task (`domain`, `task`) as a gymnasium env: observations flattened, actions in the
    task's bounds; the 1000-step time limit ends episodes as truncations. Needs the `dm-control` extra."""

    metadata = {"render_modes": []}

    def __init__(self, domain: str, task: str):
        try:
            from dm_control import suite
        except ImportError as e:  # optional dependency
            raise ImportError(f"DMCEnv({domain!r}, {task!r}) needs dm_control. {DMC_EXTRA}") from e
        self._suite, self.domain, self.task = suite, domain, task
        self._env = suite.load(domain, task, task_kwargs={"random": 0})
        spec = self._env.action_spec()
        self.action_space = spaces.Box(spec.minimum.astype(np.float32), spec.maximum.astype(np.float32))
        dim = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
        self.observation_space = spaces.Box(-np.inf, np.inf, (dim,), np.float32)

    @staticmethod
    def _flat(time_step) -> np.ndarray:
        return np.concatenate([np.ravel(v) for v in time_step.observation.values()]).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._env = self._suite.load(self.domain, self.task, task_kwargs={"random": seed})
        return self._flat(self._env.reset()), {}

    def step(self, action):
        ts = self._env.step(np.asarray(action, np.float64))
        terminated = ts.last() and ts.discount == 0.0
        return self._flat(ts), float(ts.reward or 0.0), terminated, ts.last() and not terminated, {}
