"""make_env / make_vector_env: every named environment runs with an agent, flat observations, same-step
autoreset, wrappers in order, clear errors for unknown names, the optional DMC adapter."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from seqssm.rl import AgentConfig, CoreConfig, EnvConfig, build_agent, env_names, make_env, make_vector_env
from seqssm.rl.envs import ObservationNoise, PreviousActionReward


def test_same_step_autoreset_marks_the_new_episode():
    envs = make_vector_env(EnvConfig("MemoryCorridor", {"num_doors": 2, "length": 3}), 2)
    envs.reset(seed=0)
    doors = [e.unwrapped.doors for e in envs.envs]
    wrong = np.array([1 - doors[0][0], doors[1][0]])
    obs, reward, terminated, truncated, infos = envs.step(wrong)
    assert terminated.tolist() == [True, False] and reward.tolist() == [0.0, 1.0]
    assert obs[0, -1] == 1.0 and obs[0, -2] == 0.0  # env 0 already shows its next episode's first step
    assert obs[1, -1] == 0.0
    assert infos["final_obs"][0][-1] == 0.0 and infos["_final_obs"].tolist() == [True, False]


@pytest.mark.parametrize("name", env_names())
def test_every_environment_runs_with_an_agent(name):
    envs = make_vector_env(name, 2)
    agent = build_agent(AgentConfig(core=CoreConfig(d_model=8, d_state=4), encoder=[8], actor=[8], critic=[8]),
                        envs.single_observation_space, envs.single_action_space)
    obs, _ = envs.reset(seed=0)
    state, done = agent.initial_state(2), torch.ones(2, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(3):
            out = agent.act(torch.as_tensor(obs), state, done)
            obs, reward, terminated, truncated, _ = envs.step(agent.env_action(out.action))
            state, done = out.state, torch.as_tensor(terminated | truncated)
    assert obs.dtype == np.float32 and obs.shape == (2, envs.single_observation_space.shape[0])


def test_names_resolve_and_unknown_names_suggest_the_closest():
    by_id, by_class = make_env("popgym-RepeatFirstEasy-v0"), make_env("RepeatFirstEasy")
    assert by_id.observation_space.shape == by_class.observation_space.shape
    flat = make_env(EnvConfig("RepeatFirstEasy", previous_action_reward=False))
    assert flat.observation_space.shape == (4,)
    with pytest.raises(ValueError, match="unknown environment 'RepeatFirstEsy'; did you mean RepeatFirstEasy"):
        make_env("RepeatFirstEsy")
    with pytest.raises(ValueError, match="unknown environment 'CartPole'.*gym:<id>"):
        make_env("CartPole")


def test_wrappers_order_and_overrides():
    config = EnvConfig("gym:Pendulum-v1", observation_noise=0.1, eval_sets={"long": {"max_episode_steps": 7}})
    env = make_env(config)
    assert isinstance(env, PreviousActionReward) and isinstance(env.env, ObservationNoise)
    assert env.observation_space.shape == (3 + 1 + 2,)
    assert env.action_space == gym.make("Pendulum-v1").action_space  # bounds kept: SAC rescales into them
    short = make_env(config, config.eval_sets["long"])
    short.reset(seed=0)
    lengths = [short.step(short.action_space.sample())[3] for _ in range(7)]
    assert lengths == [False] * 6 + [True]


def test_dmc_is_optional():
    config = EnvConfig("dmc:pendulum-swingup", observation_noise=0.1, previous_action_reward=False)
    try:
        import dm_control  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="seqssm\\[dmc\\]"):
            make_env(config)
        return
    env = make_env(config)
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape and env.action_space.shape == (1,)
    _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
    assert np.isfinite(reward) and not terminated and not truncated


@pytest.mark.parametrize("old, new", [("StatelessCartPoleHard", "PositionOnlyCartPoleHard"),
                                      ("NoisyStatelessPendulumHard", "NoisyPositionOnlyPendulumHard"),
                                      ("popgym-StatelessCartPoleEasy-v0", "PositionOnlyCartPoleEasy")])
def test_popgym_names_before_1_0_find_the_renamed_environments(old, new):
    """POPGym 1.0 renamed Stateless... to PositionOnly... (Lu et al. 2023 and Morad et al. 2023 use the old names)."""
    assert type(make_env(old).unwrapped).__name__ == new


def test_previous_reward_option_reaches_the_wrapper():
    with_reward = make_env(EnvConfig("RepeatPreviousHard"))
    without = make_env(EnvConfig("RepeatPreviousHard", previous_reward=False))
    assert with_reward.observation_space.shape == (4 + 4 + 2,) and without.observation_space.shape == (4 + 4 + 1,)
