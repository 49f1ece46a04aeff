"""Agent checkpoints: the one format round trip, files of the two earlier formats (written by the code before the
one-runner redesign, tests/fixtures/rl_legacy) load, compute what they computed and play, and bad files are
reported as what they are, never by running their content."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seqssm.rl import CheckpointError, RunConfig, load_checkpoint, make_vector_env, run_episodes, save_checkpoint
from seqssm.rl.checkpoint import CHECKPOINT_FORMAT, read_checkpoint
from seqssm.rl.runner import build

LEGACY = Path(__file__).parents[1] / "fixtures" / "rl_legacy"


@pytest.fixture(scope="module")
def expected():
    """Fixed inputs and the outputs the code that wrote the fixtures computed from each agent."""
    return load_file(str(LEGACY / "expected.safetensors"))


@pytest.mark.parametrize("name", ["ppo_s5.pt", "ppo_init_from.pt"])
def test_legacy_ppo_checkpoints_compute_what_they_computed_and_play(name, expected):
    agent, config, ckpt = load_checkpoint(LEGACY / name)
    assert torch.load(LEGACY / name, weights_only=True)["format"] == "seqssm-rl-agent"  # the old format indeed
    assert config.algorithm == "ppo" and config.env.name == "RepeatFirstEasy" and ckpt["progress"]["steps"] == 256
    assert (ckpt["core_model_config"] is not None) == (name == "ppo_init_from.pt")
    with torch.no_grad():
        out = agent.evaluate(expected[f"{name}/obs"], agent.initial_state(3), expected[f"{name}/dones"],
                             expected[f"{name}/actions"])
    torch.testing.assert_close(out.log_prob, expected[f"{name}/log_prob"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.value, expected[f"{name}/value"], rtol=1e-6, atol=1e-6)
    result = run_episodes(agent, make_vector_env(config.env, 2), episodes=2, seed=0)
    assert result["episodes"] == 2 and result["length_mean"] == 51.0


@pytest.mark.parametrize("name", ["sac_best_arm.pt", "sac_pendulum.pt"])
def test_legacy_sac_checkpoints_compute_what_they_computed_and_play(name, expected):
    agent, config, ckpt = load_checkpoint(LEGACY / name)
    assert torch.load(LEGACY / name, weights_only=True)["format"] == "seqssm-sac-agent"
    assert config.algorithm == "sac" and config.env.previous_action_reward is False and ckpt["progress"]["steps"] == 64
    assert config.eval.every == 64 and "eval_every" not in config.to_dict()["sac"]  # moved to the runner's eval
    obs, prev = expected[f"{name}/obs"], expected[f"{name}/prev_action"]
    with torch.no_grad():
        action = agent.actor.policy(agent.actor.history.scan(obs, prev)[0], deterministic=True)[0]
        q1, q2 = agent.critic.q(agent.critic.history.scan(obs, prev)[0], None if agent.discrete else action)
    torch.testing.assert_close(action, expected[f"{name}/action"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(q1, expected[f"{name}/q1"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(q2, expected[f"{name}/q2"], rtol=1e-6, atol=1e-6)
    result = run_episodes(agent, make_vector_env(config.env, 1), episodes=1, seed=0, deterministic=True)
    assert result["episodes"] == 1


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_one_format_round_trip(tmp_path, algorithm):
    config = RunConfig(algorithm=algorithm, out_dir=None)
    config.algo.num_envs = 2
    if algorithm == "ppo":
        config.algo.minibatches = 2
    agent = build(config).agent
    path = save_checkpoint(tmp_path / "a.pt", agent, config, iteration=3, steps=96)
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == CHECKPOINT_FORMAT and raw["algorithm"] == algorithm and raw["config"] == config.to_dict()
    loaded, loaded_config, ckpt = load_checkpoint(path)
    assert loaded_config == config and ckpt["progress"] == {"iteration": 3, "steps": 96}
    for key, value in agent.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    assert sorted(os.listdir(tmp_path)) == ["a.pt"]


class Payload:
    """Unpickling this runs os.system: a checkpoint must never be loaded in a way that does."""

    def __reduce__(self):
        return os.system, (f"touch {Path(os.environ['PAYLOAD_MARK'])}",)


def test_bad_files_are_named_for_what_they_are(tmp_path, monkeypatch):
    with pytest.raises(CheckpointError, match="no such file"):
        read_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="is a folder"):
        read_checkpoint(tmp_path)
    (tmp_path / "garbage.pt").write_bytes(os.urandom(300))
    with pytest.raises(CheckpointError, match="unreadable: truncated, or not a file that torch.save wrote"):
        read_checkpoint(tmp_path / "garbage.pt")
    torch.save({"x": torch.ones(3)}, tmp_path / "whole.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "whole.pt").read_bytes()[:200])
    with pytest.raises(CheckpointError, match="unreadable"):
        read_checkpoint(tmp_path / "cut.pt")
    with pytest.raises(CheckpointError, match="not a seqssm RL agent checkpoint"):
        read_checkpoint(tmp_path / "whole.pt")
    torch.save({"state_dict": {}, "hyper_parameters": {}}, tmp_path / "fit.ckpt")
    with pytest.raises(CheckpointError, match="`seqssm fit` checkpoint: give it to an agent as --agent.core_init_from"):
        read_checkpoint(tmp_path / "fit.ckpt")
    torch.save({"format": CHECKPOINT_FORMAT, "version": 99}, tmp_path / "future.pt")
    with pytest.raises(CheckpointError, match="newer seqssm"):
        read_checkpoint(tmp_path / "future.pt")
    mark = tmp_path / "payload-ran"
    monkeypatch.setenv("PAYLOAD_MARK", str(mark))
    torch.save({"format": CHECKPOINT_FORMAT, "x": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError) as error:
        read_checkpoint(tmp_path / "evil.pt")
    assert "Python objects" in str(error.value) and "weights_only" not in str(error.value)
    assert not mark.exists()


def test_a_sac_agent_saved_with_the_former_encoder_keys_loads_as_its_agent_core(tmp_path):
    core = {"layer": "gru", "block": "none", "d_model": 8, "d_state": 8, "n_layers": 1, "final_norm": False}
    config = RunConfig.from_dict({"algorithm": "sac", "agent": {"core": core, "actor": [8], "critic": [8]},
                                  "sac": {"num_envs": 2}, "out_dir": None})
    agent = build(config).agent
    path = save_checkpoint(tmp_path / "a.pt", agent, config)
    raw = torch.load(path, weights_only=True)
    raw["config"]["agent"] = {"encoder": {"kind": "gru", "d_model": 8, "d_state": 8}, "actor": [8], "critic": [8],
                              "activation": "relu"}  # as SAC wrote its agent before agent.core
    torch.save(raw, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a saved agent is upgraded on reading, not reported
        loaded, loaded_config, _ = load_checkpoint(path)
    assert loaded_config.agent == config.agent
    assert loaded.state_dict().keys() == agent.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in agent.state_dict().items())
