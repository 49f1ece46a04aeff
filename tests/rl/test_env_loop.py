"""Acting in vector envs: episode bookkeeping with quotas, final infos of a same-step autoreset env, evaluation."""

import numpy as np
import pytest

from seqssm.rl import EnvConfig, SACAgent, make_vector_env, run_episodes
from seqssm.rl.env_loop import EpisodeTracker, final_infos, summarize_infos
from seqssm.rl.core import CoreConfig
from seqssm.rl.offpolicy import RACConfig


def test_tracker_counts_returns_and_keeps_a_quota_per_environment():
    tracker = EpisodeTracker(2, quota=1)
    tracker.record(np.array([1.0, 2.0]), np.array([False, True]), [{"win": 1.0}])
    tracker.record(np.array([3.0, 5.0]), np.array([True, True]), [{"win": 0.0}, {"win": 1.0}])
    # env 0: one episode of return 4 (2 steps); env 1: return 2 (1 step), then a second episode over its quota
    assert tracker.returns == [2.0, 4.0] and tracker.lengths == [1, 2] and tracker.count.tolist() == [1, 2]
    summary = tracker.summary()
    assert summary["episodes"] == 2 and summary["return_mean"] == 3.0 and summary["return_min"] == 2.0
    assert summary["length_mean"] == 1.5 and summary["win"] == 0.5  # the infos of the kept episodes only
    assert tracker.pop() == ([2.0, 4.0], [1, 2]) and tracker.pop() == ([], [])


def test_final_infos_unpack_the_batched_infos():
    infos = {"final_info": {"win": np.array([1.0, 0.0, 0.0]), "_win": np.array([True, False, True]),
                            "trial_returns": np.array([[1.0, 2.0], None, [3.0, 4.0]], dtype=object),
                            "_trial_returns": np.array([True, False, True])}}
    got = final_infos(infos, np.array([True, False, True]))
    assert got == [{"win": 1.0, "trial_returns": [1.0, 2.0]}, {"win": 0.0, "trial_returns": [3.0, 4.0]}]
    stats = summarize_infos(got + [{"decided": np.bool_(True)}])
    assert stats == {"decided": 1.0, "trial_returns": [2.0, 3.0], "win": 0.5}


def test_run_episodes_plays_whole_episodes_with_infos():
    """Best Arm ends with info win / decided: evaluation reports their means over exactly the episodes asked for."""
    env = EnvConfig("BestArm", {"max_steps": 4}, previous_action_reward=False)
    envs = make_vector_env(env, 3)
    agent = SACAgent(envs.single_observation_space, envs.single_action_space,
                     RACConfig(core=CoreConfig(layer="gru", block="none", d_model=4, d_state=4, n_layers=1), actor=[8],
                               critic=[8]))
    result = run_episodes(agent, envs, episodes=7, seed=0)
    assert result["episodes"] == 9  # ceil(7 / 3) = 3 per environment
    assert 0.0 <= result["win"] <= 1.0 and 0.0 <= result["decided"] <= 1.0 and 1.0 <= result["length_mean"] <= 4.0
    assert result["return_min"] >= -10.0 and result["return_max"] <= 10.0
    again = run_episodes(agent, make_vector_env(env, 3), episodes=7, seed=0, deterministic=True)
    assert again == pytest.approx(run_episodes(agent, make_vector_env(env, 3), episodes=7, seed=0, deterministic=True))
