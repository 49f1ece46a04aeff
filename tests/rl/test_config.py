"""RunConfig: per-algorithm defaults, recipe-shaped dicts both ways, and range checks that name the option."""

import pytest
import torch

from seqssm.rl import AgentConfig, ConfigError, EnvConfig, PPOConfig, RACConfig, RunConfig, SACConfig
from seqssm.arguments import resolve_device
from seqssm.rl.config import check_limits, validate, within
from seqssm.rl.core import CoreConfig


def test_algorithm_defaults():
    ppo, sac = RunConfig(), RunConfig(algorithm="sac")
    assert isinstance(ppo.agent, AgentConfig) and isinstance(ppo.algo, PPOConfig) and ppo.env.previous_action_reward
    assert isinstance(sac.agent, RACConfig) and isinstance(sac.algo, SACConfig)
    assert sac.env.previous_action_reward is False  # SAC's networks read the previous action themselves
    assert RunConfig(algorithm="sac", env=EnvConfig(previous_action_reward=True)).env.previous_action_reward
    with pytest.raises(ConfigError, match="--algorithm = 'dqn' is not an algorithm; choose one of ppo, sac"):
        RunConfig(algorithm="dqn")
    with pytest.raises(ConfigError, match="--agent: a sac run takes a RACConfig, got AgentConfig"):
        RunConfig(algorithm="sac", agent=AgentConfig())


def test_dicts_round_trip_and_unknown_keys_are_named():
    config = RunConfig(algorithm="sac", env=EnvConfig("BestArm", {"cost": 0.1}), seed=3)
    config.agent.core.layer = "vssm"
    data = config.to_dict()
    assert "sac" in data and "algo" not in data and "ppo" not in data and "encoder" not in data["agent"]
    again = RunConfig.from_dict(data)
    assert again == config and again.agent.core.layer == "vssm"
    memoryless = RunConfig.from_dict({"algorithm": "sac", "agent": {"core": None}})
    assert memoryless.agent.core is None and RunConfig.from_dict(memoryless.to_dict()) == memoryless
    assert RunConfig.from_dict({"env": {"name": "RepeatFirstEasy"}}).algorithm == "ppo"  # a missing field means ppo
    with pytest.raises(ConfigError, match=r"--agent.core: unknown key\(s\) \['layers'\]"):
        RunConfig.from_dict({"agent": {"core": {"layers": 2}}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['ppo'\] in a sac run config"):
        RunConfig.from_dict({"algorithm": "sac", "ppo": {}})


def test_sac_and_ppo_take_one_core_section():
    sac, ppo = RunConfig(algorithm="sac"), RunConfig()
    assert sac.agent.core == ppo.agent.core == CoreConfig()  # the defaults are CoreConfig's, stated once
    assert set(sac.to_dict()["agent"]["core"]) == set(ppo.to_dict()["agent"]["core"])


def test_sac_s_former_encoder_keys_load_with_a_warning_naming_agent_core():
    former = {"algorithm": "sac", "agent": {"encoder": {"kind": "mamba", "d_model": 16, "d_state": 128}}}
    with pytest.warns(FutureWarning, match=r"agent.encoder is SAC's former .* write agent.core, .*: `core: \{layer: "
                                           r"s6, d_model: 16, d_state: 4, n_layers: 1, block: mamba, final_norm: false\}`"):
        config = RunConfig.from_dict(former)
    assert config.agent.core == CoreConfig(layer="s6", d_model=16, d_state=4, n_layers=1, block="mamba",
                                           final_norm=False)  # N = 128 over expand 2 x 16 channels
    assert "encoder" not in config.to_dict()["agent"]
    with pytest.warns(FutureWarning, match="`core: null`"):
        assert RunConfig.from_dict({"algorithm": "sac", "agent": {"encoder": {"kind": "none"}}}).agent.core is None
    with pytest.raises(ConfigError, match="--agent.encoder is the former name of --agent.core; give only agent.core"):
        RunConfig.from_dict({"algorithm": "sac", "agent": {"encoder": {"kind": "gru"}, "core": {"layer": "gru"}}})


@pytest.mark.parametrize("value, limit, ok", [
    (1, ">= 1", True), (0, ">= 1", False), (0.0, "> 0", False), (1e-9, "> 0", True), (-1, ">= -1", True),
    (0.0, "[0, 1]", True), (1.0, "[0, 1]", True), (1.0, "[0, 1)", False), (0.0, "(0, 1]", False),
    (float("nan"), "> 0", False),
])
def test_within(value, limit, ok):
    assert within(value, limit) is ok


@pytest.mark.parametrize("config, message", [
    (RunConfig(algo=PPOConfig(num_envs=-4)), r"--ppo.num_envs = -4 is out of range: must be >= 1"),
    (RunConfig(algo=PPOConfig(minibatches=0)), r"--ppo.minibatches = 0 is out of range: must be >= 1"),
    (RunConfig(algo=PPOConfig(num_envs=6, minibatches=4)), r"--ppo.minibatches = 4 must divide --ppo.num_envs = 6"),
    (RunConfig(algorithm="sac", algo=SACConfig(num_envs=-2)), r"--sac.num_envs = -2 is out of range: must be >= 1"),
    (RunConfig(algorithm="sac", algo=SACConfig(tau=0.0)), r"--sac.tau = 0.0 is out of range: must be \(0, 1\]"),
    (RunConfig(agent=AgentConfig(actor=[16, 0])),
     r"--agent.actor = \[16, 0\] is out of range: each entry must be >= 1"),
    (RunConfig(seed=-1), r"--seed = -1 is out of range: must be >= 0"),
    (RunConfig(env=EnvConfig(observation_noise=-0.1)), r"--env.observation_noise = -0.1 is out of range"),
])
def test_validate_names_the_option_value_and_range(config, message):
    with pytest.raises(ConfigError, match=message):
        validate(config)


def test_nested_limits():
    config = RunConfig()
    config.agent.core.n_layers = 0
    with pytest.raises(ConfigError, match=r"--agent.core.n_layers = 0 is out of range: must be >= 1"):
        validate(config)
    sac = RunConfig(algorithm="sac")
    sac.agent.core.d_state = 0
    with pytest.raises(ConfigError, match=r"--agent.core.d_state = 0"):
        check_limits(sac.agent, "agent")
    validate(RunConfig())  # the defaults are valid
    validate(RunConfig(algorithm="sac"))


def test_device_auto_is_cuda_when_available_and_bad_devices_are_named():
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu") and RunConfig(device="cpu").device == "cpu"
    with pytest.raises(ConfigError, match="--device = 'gpu0' is not a device; use auto, cpu, cuda or cuda:N"):
        RunConfig(device="gpu0")
    with pytest.raises(ConfigError, match="--device = 'meta': only cpu and cuda devices are supported"):
        resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="torch sees no CUDA device here; use --device auto or cpu"):
            resolve_device("cuda:0")
