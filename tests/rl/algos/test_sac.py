"""SAC with recurrent history encoders: each loss against a hand computation, burn-in states, the tanh-Gaussian
policy, an update step, data collection into the replay, and a learning smoke run through the runner."""

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from seqssm.rl import EnvConfig, RunConfig, SACAgent, SACConfig, make_env, make_vector_env, run_episodes, train
from seqssm.rl.algos.sac import (
    actor_loss,
    critic_loss,
    critic_target,
    history_features,
    masked_mean,
    policy_entropy,
    polyak_update,
    soft_value,
    temperature_loss,
)
from seqssm.rl.core import CoreConfig
from seqssm.rl.offpolicy import Actor, RACConfig
from seqssm.rl.replay import Episode, EpisodeReplay
from seqssm.rl.runner import build

MASK = torch.tensor([True, True, False])


def test_masked_mean_and_critic_target_by_hand():
    assert masked_mean(torch.tensor([1.0, 3.0, 100.0]), MASK).item() == 2.0
    assert masked_mean(torch.tensor([5.0]), torch.tensor([False])).item() == 0.0
    # r + γ (1 - d) V': 1 + 0.5 * 4, 2 + 0 (terminal), -1 + 0.5 * -2
    target = critic_target(torch.tensor([1.0, 2.0, -1.0]), torch.tensor([0.0, 1.0, 0.0]),
                           torch.tensor([4.0, 9.0, -2.0]), gamma=0.5)
    assert target.tolist() == [3.0, 2.0, -2.0]


def test_soft_value_box_and_discrete_by_hand():
    # Box: min(q1, q2) - α log π(a) for the sampled action
    v = soft_value(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 0.5]), torch.tensor([-1.0, 0.5]), alpha=0.2)
    assert v.tolist() == pytest.approx([1.0 + 0.2, 0.5 - 0.1])
    # Discrete: Σ_a π(a) (min(q1, q2)(a) - α log π(a)) over two actions with π = (0.25, 0.75)
    probs = torch.tensor([[0.25, 0.75]])
    q1, q2 = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 0.0]])
    v = soft_value(q1, q2, probs.log(), alpha=0.5, probs=probs)
    expected = 0.25 * (1.0 - 0.5 * math.log(0.25)) + 0.75 * (0.0 - 0.5 * math.log(0.75))
    assert v.item() == pytest.approx(expected)


def test_critic_actor_entropy_and_temperature_losses_by_hand():
    q1, q2, target = torch.tensor([1.0, 2.0, 9.0]), torch.tensor([0.0, 4.0, 9.0]), torch.tensor([1.0, 3.0, 0.0])
    # masked mean of (q1 - y)^2 + (q2 - y)^2 over the first two steps: (0 + 1) and (1 + 1)
    assert critic_loss(q1, q2, target, MASK).item() == pytest.approx(1.5)
    logp, q = torch.tensor([-1.0, -2.0, 7.0]), torch.tensor([0.5, 1.0, 7.0])
    # Box: mean of α log π - Q = (-0.1 - 0.5, -0.2 - 1.0)
    assert actor_loss(logp, q, 0.1, MASK).item() == pytest.approx((-0.6 - 1.2) / 2)
    assert policy_entropy(logp).tolist() == [1.0, 2.0, -7.0]
    # Discrete: Σ π (α log π - Q) per step, and the exact entropy -Σ π log π
    probs = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.3, 0.7]])
    logp_all = torch.log(probs.clamp(min=1e-30))
    q_all = torch.tensor([[1.0, 3.0], [2.0, 5.0], [0.0, 0.0]])
    step0 = 0.5 * (0.1 * math.log(0.5) - 1.0) + 0.5 * (0.1 * math.log(0.5) - 3.0)
    step1 = 1.0 * (0.0 - 2.0)
    assert actor_loss(logp_all, q_all, 0.1, MASK, probs).item() == pytest.approx((step0 + step1) / 2)
    assert policy_entropy(logp_all, probs)[:2].tolist() == pytest.approx([math.log(2), 0.0])
    # temperature: log α * mean(H - target); its gradient raises α (descends) while H is below the target
    log_alpha = torch.tensor(math.log(0.2), requires_grad=True)
    loss = temperature_loss(log_alpha, torch.tensor([0.1, 0.3, 5.0]), 1.0, MASK)
    assert loss.item() == pytest.approx(math.log(0.2) * (0.2 - 1.0))
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(-0.8)


def test_polyak_update_by_hand():
    source, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update(target, source, tau=0.25)
    for b, s, t in zip(before, source.parameters(), target.parameters()):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * s)


@pytest.mark.parametrize("core", [CoreConfig(layer="kalman", block="none", d_model=8, d_state=8, n_layers=1),
                                  CoreConfig(layer="s6", block="mamba", d_model=8, d_state=1, n_layers=1),
                                  CoreConfig(layer="transformer", block="none", d_model=8, d_state=64, n_layers=1,
                                             layer_kwargs={"d_ff": 16})], ids=["kalman", "mamba", "transformer"])
def test_burn_in_gives_the_state_of_the_whole_prefix(core):
    """Features of a window started from the masked burn-in state equal those of one scan over the whole episode."""
    torch.manual_seed(0)
    env = make_env(EnvConfig("MemoryLength", {"memory_length": 5}, previous_action_reward=False))
    rac = RACConfig(core=core, actor=[8], critic=[8])
    agent = SACAgent(env.observation_space, env.action_space, rac)
    rng = np.random.default_rng(0)
    replay = EpisodeReplay(10_000, 3, 2)
    for T in (20, 13, 25):
        replay.add(Episode(rng.normal(size=(T + 1, 3)).astype(np.float32),
                           np.eye(2, dtype=np.float32)[rng.integers(0, 2, T)], np.zeros(T, np.float32), True))
    batch = replay.sample(6, context=7, burn_in=-1, rng=rng)
    with torch.no_grad():
        feats = history_features(agent.actor, batch, grad=False)
        for i in range(6):
            p, n = int(batch.prefix_mask[i].sum()), int(batch.input_mask[i].sum())
            obs = torch.cat([batch.prefix_obs[i, :p], batch.obs[i, :n]])[None]
            prev = torch.cat([batch.prefix_prev_action[i, :p], batch.prev_action[i, :n]])[None]
            whole, _ = agent.actor.history.scan(obs, prev)
            torch.testing.assert_close(feats[i, :n], whole[0, p:], atol=1e-5, rtol=1e-5)


def test_tanh_gaussian_log_prob_and_discrete_policy():
    torch.manual_seed(0)
    actor = Actor(4, spaces.Box(-1, 1, (2,)), RACConfig(core=None, actor=[16]))
    feats = torch.randn(5, 4)
    action, log_prob, _ = actor.policy(feats)
    mean, log_std = actor.head(feats).chunk(2, -1)
    dist = TransformedDistribution(Normal(mean, log_std.clamp(-5, 2).exp()), TanhTransform())
    torch.testing.assert_close(log_prob, dist.log_prob(action.clamp(-1 + 1e-6, 1 - 1e-6)).sum(-1), atol=1e-3, rtol=1e-3)
    assert action.abs().max() < 1
    discrete = Actor(4, spaces.Discrete(3), RACConfig(core=None, actor=[16]))
    a, log_probs, probs = discrete.policy(feats)
    assert a.shape == (5,) and torch.allclose(probs.sum(-1), torch.ones(5)) and torch.allclose(log_probs.exp(), probs)
    assert torch.equal(discrete.policy(feats, deterministic=True)[0], probs.argmax(-1))


def sac_config(**overrides) -> RunConfig:
    env = EnvConfig("gym:Pendulum-v1", observation_noise=0.1)
    agent = RACConfig(core=CoreConfig(layer="vssm", block="none", d_model=8, d_state=8, n_layers=1), actor=[16],
                      critic=[16])
    return RunConfig(algorithm="sac", env=env, agent=agent, algo=SACConfig(**overrides), out_dir=None)


def test_continuous_update_moves_target_by_tau_and_tunes_alpha():
    sac = build(sac_config(num_envs=1, tau=0.5, autotune=True, alpha=0.2))
    rng = np.random.default_rng(0)
    obs, actions = rng.normal(size=(11, 3)).astype(np.float32), rng.uniform(-1, 1, (10, 1)).astype(np.float32)
    sac.replay.add(Episode(obs, actions, rng.normal(size=10).astype(np.float32), False))
    agent = sac.agent
    before = [p.clone() for p in agent.critic_target.parameters()]
    metrics = sac.update(sac.replay.sample(4, 6, 2, rng))
    assert all(np.isfinite(v) for v in metrics.values())
    for b, p, tp in zip(before, agent.critic.parameters(), agent.critic_target.parameters()):
        torch.testing.assert_close(tp, 0.5 * b + 0.5 * p)
    assert agent.log_alpha.item() != pytest.approx(np.log(0.2))
    actions = agent.env_action(torch.tensor([[-1.0], [0.0], [1.0]]))
    np.testing.assert_allclose(actions[:, 0], [-2.0, 0.0, 2.0])


def test_collected_episodes_are_the_environment_s():
    """Every stored episode starts with its reset observation and holds each step's observation, action and reward."""
    config = RunConfig(algorithm="sac", env=EnvConfig("BestArm", {"cost": 0.5, "max_steps": 3}),
                       agent=RACConfig(core=CoreConfig(layer="gru", block="none", d_model=4, d_state=4, n_layers=1), actor=[8],
                                       critic=[8]), algo=SACConfig(num_envs=2), out_dir=None)
    sac = build(config)
    first_obs = sac.loop.obs.clone()
    for _ in range(6):
        sac.collect_step(random=True)
    episodes = list(sac.replay.episodes)
    assert len(episodes) >= 4
    firsts = {float(e.obs[0, 0]) for e in episodes}
    assert {float(first_obs[0, 0]), float(first_obs[1, 0])} <= firsts  # the first episodes begin at the reset obs
    for e in episodes:
        asks = e.actions.argmax(-1) == 0
        assert e.actions.shape == (len(e), 3) and np.all(e.actions.sum(-1) == 1.0) and e.terminated
        assert asks[:-1].all() and e.obs.shape == (len(e) + 1, 1)
        np.testing.assert_allclose(e.rewards[:-1], -0.5)
        if asks[-1]:  # ran out of samples: lost, and the last ask paid too
            assert len(e) == 3 and e.rewards[-1] == -10.5
        else:
            assert abs(e.rewards[-1]) == 10.0


@pytest.fixture
def one_thread():
    """Tiny networks: intra-op threads only add synchronisation (and stall on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_sac_learns_a_tiny_memory_task(one_thread):
    env = EnvConfig("MemoryLength", {"memory_length": 3})
    rac = RACConfig(core=CoreConfig(layer="gru", block="none", d_model=16, d_state=32, n_layers=1), actor=[64],
                    critic=[64])
    sac = SACConfig(total_steps=1000, num_envs=4, batch_size=32, context=8, burn_in=0, learning_starts=200, utd=0.5,
                    lr=1e-3, alpha=0.1, autotune=False)
    config = RunConfig(algorithm="sac", env=env, agent=rac, algo=sac, out_dir=None)
    config.eval.every, config.eval.episodes = 10_000, 32
    torch.manual_seed(0)
    probe = make_env(config.env)
    untrained = SACAgent(probe.observation_space, probe.action_space, rac)
    before = run_episodes(untrained, make_vector_env(config.env, 8), 32, deterministic=True, seed=10_000)
    summary = train(config, log=None)
    assert summary["eval"]["eval"]["return_mean"] >= 0.8 > before["return_mean"] + 0.3
    assert summary["eval"]["eval"]["correct"] >= 0.9
