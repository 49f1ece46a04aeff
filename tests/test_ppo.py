"""Recurrent PPO: GAE against its definition, config errors, a smoke test that learns a memory task,
and the `seqssm rl` / `rl-eval` command end to end."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from seqssm.rl import PPO, AgentConfig, CoreConfig, PPOConfig, build_agent, run_episodes
from seqssm.rl.cli import main
from seqssm.rl.ppo import gae


class CueRecall(gym.Env):
    """A cue (one of two, one-hot) at t = 0, then `delay` blank steps; the last action earns +1 if it names
    the cue, else -1. Without memory the last action is independent of the cue: expected return 0."""

    def __init__(self, delay: int = 4):
        self.delay = delay
        self.observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return np.eye(2, dtype=np.float32)[self.cue], {}

    def step(self, action):
        self.t += 1
        blank = np.zeros(2, np.float32)
        if self.t < self.delay:
            return blank, 0.0, False, False, {}
        return blank, 1.0 if action == self.cue else -1.0, True, False, {}


def cue_envs(n: int, seed: int):
    envs = gym.vector.SyncVectorEnv([CueRecall] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs.reset(seed=seed)
    return envs


def test_gae_matches_its_definition():
    g = torch.Generator().manual_seed(0)
    batch, length, gamma, lam = 3, 9, 0.9, 0.8
    rewards, values = torch.randn(batch, length, generator=g), torch.randn(batch, length, generator=g)
    dones = torch.rand(batch, length, generator=g) < 0.3
    next_value, next_done = torch.randn(batch, generator=g), torch.tensor([False, True, False])
    adv, ret = gae(rewards, values, dones, next_value, next_done, gamma, lam)
    for b in range(batch):
        # δ_t = r_t + γ V(t+1) [t+1 not an episode start] - V(t); A_t = Σ_k (γλ)^k δ_{t+k} within the episode
        v_next = torch.cat([values[b, 1:], next_value[b:b + 1]])
        cont = 1.0 - torch.cat([dones[b, 1:], next_done[b:b + 1]]).float()
        delta = rewards[b] + gamma * v_next * cont - values[b]
        for t in range(length):
            expected, factor = 0.0, 1.0
            for k in range(t, length):
                expected += factor * delta[k]
                if cont[k] == 0:
                    break
                factor *= gamma * lam
            torch.testing.assert_close(adv[b, t], torch.as_tensor(expected, dtype=adv.dtype))
    torch.testing.assert_close(ret, adv + values)
    # λ = 1: returns are discounted reward sums to the episode end, bootstrapped where the rollout cuts it
    _, mc = gae(rewards[:1, -2:], values[:1, -2:], torch.zeros(1, 2, dtype=torch.bool), next_value[:1],
                torch.tensor([False]), gamma, 1.0)
    torch.testing.assert_close(mc[0, 0], rewards[0, -2] + gamma * rewards[0, -1] + gamma**2 * next_value[0])


def test_config_errors_are_explained():
    envs = cue_envs(6, 0)
    agent = build_agent(AgentConfig(core=CoreConfig(d_model=8, n_layers=1)), envs.single_observation_space,
                        envs.single_action_space)
    with pytest.raises(ValueError, match="divisible by minibatches"):
        PPO(agent, envs, PPOConfig(num_envs=6, minibatches=4))
    with pytest.raises(ValueError, match="num_envs = 8 but the vector env has 6"):
        PPO(agent, envs, PPOConfig(num_envs=8, minibatches=2))


def test_ppo_learns_a_memory_task():
    """S5 PPO solves CueRecall (memoryless optimum: 0) in a few thousand steps; the greedy policy recalls the cue."""
    torch.manual_seed(0)
    envs = cue_envs(8, seed=0)
    config = AgentConfig(core=CoreConfig(layer="s5", d_model=16, d_state=8, n_layers=1), encoder=[16], actor=[16],
                         critic=[16])
    agent = build_agent(config, envs.single_observation_space, envs.single_action_space)
    ppo = PPOConfig(total_steps=30_000, num_envs=8, unroll=32, epochs=4, minibatches=2, lr=3e-3, gamma=0.9,
                    gae_lambda=0.95, target_return=0.9)
    summary = PPO(agent, envs, ppo).train()
    assert summary["mmer"] >= 0.9, summary
    result = run_episodes(agent, cue_envs(16, seed=100), episodes=64, deterministic=True)
    assert result["episodes"] == 64 and result["mean_return"] >= 0.9, result


def test_cli_trains_checkpoints_and_evaluates(tmp_path, capsys):
    out = tmp_path / "run"
    summary = main(["rl", "--config", "recipes/rl/repeat_first_easy/s5.yaml", "--ppo.total_steps", "512",
                    "--ppo.num_envs", "4", "--ppo.unroll", "64", "--ppo.minibatches", "2", "--ppo.epochs", "1",
                    "--agent.core.d_model", "8", "--agent.core.d_state", "4", "--out_dir", str(out)])
    assert summary["steps"] == 512 and summary["env"] == "RepeatFirstEasy"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == [1, 2] and all("sps" in r and "mmer" in r for r in records)
    assert json.loads((out / "summary.json").read_text())["steps"] == 512
    assert (out / "config.yaml").is_file() and (out / "last.pt").is_file() and (out / "best.pt").is_file()
    result = main(["rl-eval", str(out / "last.pt"), "--episodes", "6", "--num_envs", "4"])
    assert result["episodes"] == 6 and result["mean_length"] == 51.0 and -1.0 <= result["mean_return"] <= 1.0
    assert '"mean_return"' in capsys.readouterr().out
