"""Environments: MemoryCorridor follows its rules (seed 000 section 4.5), the action embedding wrapper,
every POPGym environment through make_vector_env with same-step autoreset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqssm.rl import MemoryCorridor, PreviousActionReward, build_agent, env_names, make_env, make_vector_env
from seqssm.rl.agent import AgentConfig
from seqssm.rl.core import CoreConfig


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


def test_previous_action_reward_layout():
    env = PreviousActionReward(MemoryCorridor(num_doors=3, length=2))
    obs, _ = env.reset(seed=0)
    door = int(env.unwrapped.doors[0])
    assert env.observation_space.shape == (3 + 3 + 2,)
    np.testing.assert_array_equal(obs, np.r_[np.eye(3)[door], np.zeros(3), 0.0, 1.0])
    obs, *_ = env.step(door)
    np.testing.assert_array_equal(obs, np.r_[np.zeros(3), np.eye(3)[door], 1.0, 0.0])


def test_same_step_autoreset_marks_the_new_episode():
    envs = make_vector_env("MemoryCorridor", 2, seed=0, env_kwargs={"num_doors": 2, "length": 3})
    doors = [e.unwrapped.doors for e in envs.envs]
    wrong = np.array([1 - doors[0][0], doors[1][0]])
    obs, reward, terminated, truncated, _ = envs.step(wrong)
    assert terminated.tolist() == [True, False] and reward.tolist() == [0.0, 1.0]
    assert obs[0, -1] == 1.0 and obs[0, -2] == 0.0  # env 0 already shows its next episode's first step
    assert obs[1, -1] == 0.0


@pytest.mark.parametrize("name", env_names())
def test_every_environment_runs_with_an_agent(name):
    envs = make_vector_env(name, 2, seed=0)
    agent = build_agent(AgentConfig(core=CoreConfig(d_model=8, d_state=4), encoder=[8], actor=[8], critic=[8]),
                        envs.single_observation_space, envs.single_action_space)
    obs, _ = envs.reset(seed=0)
    state, done = agent.initial_state(2), torch.ones(2, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(3):
            out = agent.act(torch.as_tensor(obs), state, done)
            obs, reward, terminated, truncated, _ = envs.step(out.action.numpy())
            state, done = out.state, torch.as_tensor(terminated | truncated)
    assert obs.dtype == np.float32 and obs.shape == (2, envs.single_observation_space.shape[0])


def test_names_resolve_and_unknown_names_list_the_choices():
    assert make_env("popgym-RepeatFirstEasy-v0").observation_space.shape == make_env("RepeatFirstEasy").observation_space.shape
    flat = make_env("RepeatFirstEasy", previous_action_reward=False)
    assert flat.observation_space.shape == (4,)
    with pytest.raises(ValueError, match="unknown environment 'CartPole'.*PositionOnlyCartPoleEasy"):
        make_env("CartPole")
