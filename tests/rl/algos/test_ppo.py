"""Recurrent PPO: GAE against its definition, the clipped policy and value losses against hand computations,
config errors, and a smoke test that learns a memory task through the runner."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from seqssm.rl import PPO, AgentConfig, CoreConfig, PPOConfig, build_agent, run_episodes, run_iterations
from seqssm.rl.algos.ppo import clipped_policy_loss, gae, normalize, value_loss
from seqssm.rl.config import check_limits
from seqssm.rl import ConfigError


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


def cue_envs(n: int):
    return gym.vector.SyncVectorEnv([CueRecall] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


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


def test_clipped_policy_loss_by_hand():
    # ratios e^0.5 = 1.649 (clipped to 1.2), e^-0.5 = 0.607 (clipped to 0.8), e^0.1 = 1.105 (inside)
    log_prob, old = torch.tensor([0.5, -0.5, 0.1, 0.5]), torch.zeros(4)
    adv = torch.tensor([2.0, 2.0, -1.0, -1.0])
    # per step max(-A r, -A clip(r)): A > 0 takes the clipped ratio when r is above 1 + ε, the raw one below
    # 1 - ε (the pessimistic side); A < 0 mirrors it
    expected = [-2.0 * 1.2, -2.0 * np.exp(-0.5), 1.0 * np.exp(0.1), 1.0 * np.exp(0.5)]
    loss = clipped_policy_loss(log_prob, old, adv, clip=0.2)
    assert loss.item() == pytest.approx(np.mean(expected), rel=1e-6)
    # no gradient through a clipped step
    log_prob.requires_grad_(True)
    clipped_policy_loss(log_prob, old, adv, clip=0.2).backward()
    assert log_prob.grad[0] == 0.0 and log_prob.grad[1] != 0.0


def test_value_loss_by_hand_with_and_without_clipping():
    value, returns, old = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 1.0, 2.5]), torch.tensor([0.0, 0.0, 2.4])
    assert value_loss(value, returns).item() == pytest.approx(0.5 * (1.0 + 1.0 + 0.25) / 3)
    # clip 0.5: clipped values 0.5, 0.0, 2.0 (value - old = -0.4, inside) -> errors max(1, 0.25), max(1, 1),
    # max(0.25, 0.25)
    assert value_loss(value, returns, old, clip=0.5).item() == pytest.approx(0.5 * (1.0 + 1.0 + 0.25) / 3)
    value3 = torch.tensor([-1.0, 0.0, 2.5])
    # value -1 vs old 0 clipped to -0.5: max(1, 0.25) = 1; value 2.5 vs old 2.4: inside, error 0
    assert value_loss(value3, returns, old, clip=0.5).item() == pytest.approx(0.5 * (1.0 + 1.0 + 0.0) / 3)
    far = torch.tensor([3.0])
    # far from old 0 and from the return 1: the clipped value 0.5 errs less (0.25) but the max keeps 4
    assert value_loss(far, torch.tensor([1.0]), torch.tensor([0.0]), clip=0.5).item() == pytest.approx(2.0)
    below = torch.tensor([1.2])
    # a step towards the return past the clip range: clipped 0.5 errs 0.25 > 0.04, so the loss is 0.125
    assert value_loss(below, torch.tensor([1.0]), torch.tensor([0.0]), clip=0.5).item() == pytest.approx(0.125)


def test_normalize():
    adv = normalize(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    assert adv.mean().abs() < 1e-6 and adv.std().item() == pytest.approx(1.0, abs=1e-6)


def test_config_errors_are_explained():
    envs = cue_envs(6)
    agent = build_agent(AgentConfig(core=CoreConfig(d_model=8, n_layers=1)), envs.single_observation_space,
                        envs.single_action_space)
    with pytest.raises(ConfigError, match=r"--ppo.minibatches = 4 must divide --ppo.num_envs = 6"):
        PPO(agent, envs, PPOConfig(num_envs=6, minibatches=4))
    with pytest.raises(ValueError, match="num_envs = 8 but the vector env has 6"):
        PPO(agent, envs, PPOConfig(num_envs=8, minibatches=2))
    for field, value, limit in (("num_envs", -4, ">= 1"), ("minibatches", 0, ">= 1"), ("gamma", 1.5, r"\[0, 1\]"),
                                ("adam_eps", 0.0, "> 0")):
        with pytest.raises(ConfigError, match=rf"--ppo.{field} = {value} is out of range: must be {limit}"):
            check_limits(PPOConfig(**{field: value}), "ppo")


def test_the_optimizer_takes_the_configured_epsilon():
    envs = cue_envs(2)
    agent = build_agent(AgentConfig(core=CoreConfig(d_model=8, n_layers=1)), envs.single_observation_space,
                        envs.single_action_space)
    for eps in (1e-8, 1e-5):
        optimizer = PPO(agent, envs, PPOConfig(num_envs=2, minibatches=1, adam_eps=eps)).optimizer
        assert {group["eps"] for group in optimizer.param_groups} == {eps}


def test_ppo_learns_a_memory_task():
    """S5 PPO solves CueRecall (memoryless optimum: 0) in a few thousand steps; the greedy policy recalls the cue."""
    torch.manual_seed(0)
    envs = cue_envs(8)
    config = AgentConfig(core=CoreConfig(layer="s5", d_model=16, d_state=8, n_layers=1), encoder=[16], actor=[16],
                         critic=[16])
    agent = build_agent(config, envs.single_observation_space, envs.single_action_space)
    ppo = PPOConfig(total_steps=30_000, num_envs=8, unroll=32, epochs=4, minibatches=2, lr=3e-3, gamma=0.9,
                    gae_lambda=0.95)
    summary = run_iterations(PPO(agent, envs, ppo, seed=0), target_return=0.9)
    assert summary["mmer"] >= 0.9 and summary["steps_to_target"] == summary["steps"] < 30_000, summary
    result = run_episodes(agent, cue_envs(16), episodes=64, deterministic=True, seed=100)
    assert result["episodes"] == 64 and result["return_mean"] >= 0.9, result
