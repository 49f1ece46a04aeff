"""Memory Corridor (van Gelooven 2025 thesis, 4.5, after Moerland et al. 2024)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class MemoryCorridor(gym.Env):
    """`length` corridors of `num_doors` doors (van Gelooven 2025 thesis, 4.5).

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
