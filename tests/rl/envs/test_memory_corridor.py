"""MemoryCorridor follows its rules (van Gelooven 2025 thesis, 4.5)."""

from __future__ import annotations

import numpy as np
import pytest

from seqssm.rl.envs import MemoryCorridor


def corridor(length=4, num_doors=3, easy=False, seed=0) -> tuple[MemoryCorridor, np.ndarray]:
    env = MemoryCorridor(num_doors=num_doors, length=length, easy=easy)
    env.reset(seed=seed)
    return env, env.doors.copy()


def test_memory_corridor_solved_by_repeating_all_doors():
    env, doors = corridor(length=4, num_doors=3)
    obs, _ = env.reset(seed=0)
    assert np.array_equal(obs, np.eye(3, dtype=np.float32)[doors[0]])  # first corridor shown on reset
    total, steps = 0.0, 0
    for n in range(1, 5):  # open corridor n-1: walk through doors 0..n-1 again
        for k in range(n):
            obs, reward, terminated, truncated, _ = env.step(int(doors[k]))
            total, steps = total + reward, steps + 1
            assert reward == 1.0 and not truncated
            is_last = n == 4 and k == 3
            assert terminated == is_last
            if k < n - 1:
                expected = np.eye(3)[doors[k + 1]] if k + 1 == n - 1 else np.zeros(3)
            else:  # opened corridor n-1: back at the start, where the door was already shown
                expected = np.zeros(3)
            if not is_last:
                assert np.array_equal(obs, expected), (n, k, obs)
    assert total == 4 * 5 / 2 == steps  # reaching door n earns n(n-1)/2; all 4 opened: 10


def test_memory_corridor_newest_door_shown_only_on_first_arrival():
    env, doors = corridor(length=3, num_doors=4, seed=2)
    obs, *_ = env.step(int(doors[0]))  # open corridor 0, back to start
    assert not obs.any()
    obs, *_ = env.step(int(doors[0]))  # walk into corridor 1 for the first time
    assert np.array_equal(obs, np.eye(4)[doors[1]])


def test_memory_corridor_wrong_door_ends_episode():
    env, doors = corridor(length=4, num_doors=3, seed=1)
    env.step(int(doors[0]))
    obs, reward, terminated, truncated, _ = env.step(int((doors[0] + 1) % 3))
    assert reward == 0.0 and terminated and not truncated
    with pytest.raises(ValueError, match="action must be in Discrete"):
        env.step(7)


def test_memory_corridor_easy_shows_position_and_newest_door():
    env, doors = corridor(length=3, num_doors=4, easy=True, seed=4)
    obs, _ = env.reset(seed=4)
    assert env.observation_space.shape == (3 + 4,)
    assert np.array_equal(obs, np.concatenate([np.eye(3)[0], np.eye(4)[doors[0]]]))
    obs, *_ = env.step(int(doors[0]))  # corridor 0 opened: position 0, newest corridor is 1
    assert np.array_equal(obs, np.concatenate([np.eye(3)[0], np.eye(4)[doors[1]]]))
    obs, *_ = env.step(int(doors[0]))  # position 1
    assert np.array_equal(obs, np.concatenate([np.eye(3)[1], np.eye(4)[doors[1]]]))
