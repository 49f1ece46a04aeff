"""SAC with recurrent history encoders: replay sub-trajectories, burn-in states, losses, a learning smoke run, the CLI."""

import json

import numpy as np
import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from seqssm.rl.offpolicy import Actor, HistoryEncoderConfig, RACConfig
from seqssm.rl.replay import Episode, EpisodeReplay
from seqssm.rl.sac import SAC, OffPolicyEnvConfig, SACConfig, evaluate, load_checkpoint, make_offpolicy_env, train
from seqssm.rl.sac_cli import main as sac_main
from seqssm.rl.sac_cli import sac_requested


def _episode(T: int, obs_dim: int = 2, act_dim: int = 3, terminated: bool = True, offset: float = 0.0) -> Episode:
    t = np.arange(T + 1, dtype=np.float32)
    obs = np.stack([t + offset] + [np.full(T + 1, offset, np.float32)] * (obs_dim - 1), -1)
    actions = np.eye(act_dim, dtype=np.float32)[np.arange(T) % act_dim]
    return Episode(obs, actions, np.arange(T, dtype=np.float32) + offset, terminated)


def test_replay_sub_trajectories_are_right_padded_and_aligned():
    replay = EpisodeReplay(capacity=1000, obs_dim=2, act_dim=3)
    replay.add(_episode(3, offset=100.0, terminated=True))
    replay.add(_episode(30, offset=200.0, terminated=False))
    b = replay.sample(64, context=8, burn_in=5, rng=np.random.default_rng(0))
    L = b.action.shape[1]
    assert L == 8 and b.obs.shape == (64, 9, 2) and b.prefix_obs.shape[1] == 5
    for i in range(64):
        n = int(b.mask[i].sum())
        assert b.mask[i, :n].all() and not b.mask[i, n:].any() and int(b.input_mask[i].sum()) == n + 1
        first = b.obs[i, 0, 0].item()
        offset = 100.0 if b.obs[i, 0, 1] == 100.0 else 200.0
        s = int(first - offset)
        # inputs at t are (o_t, a_(t-1)); transitions are (o_t, a_t, r_t, o_(t+1))
        assert torch.equal(b.obs[i, : n + 1, 0], torch.arange(s, s + n + 1) + offset)
        assert torch.equal(b.reward[i, :n], torch.arange(s, s + n) + offset)
        assert torch.equal(b.action[i, :n].argmax(-1), torch.arange(s, s + n) % 3)
        assert torch.equal(b.prev_action[i, 1 : n + 1], b.action[i, :n])
        assert b.prev_action[i, 0].sum() == (0 if s == 0 else 1)
        # terminal only on the true last transition of a terminated episode
        assert b.terminal[i].sum() == (1.0 if offset == 100.0 else 0.0)
        if offset == 100.0:
            assert n == 3 and s == 0 and b.terminal[i, 2] == 1.0
        # the burn-in prefix holds the (up to 5) inputs just before the window
        p = int(b.prefix_mask[i].sum())
        assert p == min(5, s) and torch.equal(b.prefix_obs[i, :p, 0], torch.arange(s - p, s) + offset)
    replay.add(_episode(990, offset=300.0))
    assert len(replay) == 990 and len(replay.episodes) == 1  # oldest episodes dropped past capacity


@pytest.mark.parametrize("kind", ["kalman", "mamba", "transformer"])
def test_burn_in_gives_the_state_of_the_whole_prefix(kind):
    """Features of a window started from the masked burn-in state equal those of one scan over the whole episode."""
    torch.manual_seed(0)
    env = make_offpolicy_env(OffPolicyEnvConfig(name="MemoryLength", kwargs={"memory_length": 5}))
    rac = RACConfig(encoder=HistoryEncoderConfig(kind=kind, d_model=8, d_state=8, context=64, d_ff=16),
                    actor=[8], critic=[8])
    sac = SAC(env.observation_space, env.action_space, rac, SACConfig())
    rng = np.random.default_rng(0)
    replay = EpisodeReplay(10_000, 3, 2)
    for T in (20, 13, 25):
        replay.add(Episode(rng.normal(size=(T + 1, 3)).astype(np.float32),
                           np.eye(2, dtype=np.float32)[rng.integers(0, 2, T)], np.zeros(T, np.float32), True))
    batch = replay.sample(6, context=7, burn_in=-1, rng=rng)
    with torch.no_grad():
        feats = sac._features(sac.actor, batch, grad=False)
        for i in range(6):
            p, n = int(batch.prefix_mask[i].sum()), int(batch.input_mask[i].sum())
            obs = torch.cat([batch.prefix_obs[i, :p], batch.obs[i, :n]])[None]
            prev = torch.cat([batch.prefix_prev_action[i, :p], batch.prev_action[i, :n]])[None]
            whole, _ = sac.actor.history.scan(obs, prev)
            torch.testing.assert_close(feats[i, :n], whole[0, p:], atol=1e-5, rtol=1e-5)


def test_tanh_gaussian_log_prob_and_discrete_policy():
    torch.manual_seed(0)
    from gymnasium import spaces

    actor = Actor(4, spaces.Box(-1, 1, (2,)), RACConfig(encoder=HistoryEncoderConfig(kind="none"), actor=[16]))
    feats = torch.randn(5, 4)
    action, log_prob, _ = actor.policy(feats)
    mean, log_std = actor.head(feats).chunk(2, -1)
    dist = TransformedDistribution(Normal(mean, log_std.clamp(-5, 2).exp()), TanhTransform())
    torch.testing.assert_close(log_prob, dist.log_prob(action.clamp(-1 + 1e-6, 1 - 1e-6)).sum(-1), atol=1e-3, rtol=1e-3)
    assert action.abs().max() < 1
    discrete = Actor(4, spaces.Discrete(3), RACConfig(encoder=HistoryEncoderConfig(kind="none"), actor=[16]))
    a, log_probs, probs = discrete.policy(feats)
    assert a.shape == (5,) and torch.allclose(probs.sum(-1), torch.ones(5)) and torch.allclose(log_probs.exp(), probs)
    assert torch.equal(discrete.policy(feats, deterministic=True)[0], probs.argmax(-1))


def test_continuous_update_moves_target_by_tau_and_tunes_alpha():
    torch.manual_seed(0)
    env_cfg = OffPolicyEnvConfig(name="gym:Pendulum-v1", observation_noise=0.1)
    env = make_offpolicy_env(env_cfg)
    cfg = SACConfig(tau=0.5, autotune=True, alpha=0.2)
    sac = SAC(env.observation_space, env.action_space, RACConfig(
        encoder=HistoryEncoderConfig(kind="vssm", d_model=8, d_state=8), actor=[16], critic=[16]), cfg)
    replay = EpisodeReplay(1000, 3, 1)
    rng = np.random.default_rng(0)
    replay.add(Episode(rng.normal(size=(11, 3)).astype(np.float32), rng.uniform(-1, 1, (10, 1)).astype(np.float32),
                       rng.normal(size=10).astype(np.float32), False))
    before = [p.clone() for p in sac.critic_target.parameters()]
    metrics = sac.update(replay.sample(4, 6, 2, rng))
    assert all(np.isfinite(v) for v in metrics.values())
    for b, p, tp in zip(before, sac.critic.parameters(), sac.critic_target.parameters()):
        torch.testing.assert_close(tp, 0.5 * b + 0.5 * p)
    assert sac.log_alpha.item() != pytest.approx(np.log(0.2))
    actions = sac.env_action(torch.tensor([[-1.0], [0.0], [1.0]]))
    np.testing.assert_allclose(actions[:, 0], [-2.0, 0.0, 2.0])


@pytest.fixture
def one_thread():
    """Tiny networks: intra-op threads only add synchronisation (and stall on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_sac_learns_a_tiny_memory_task(one_thread):
    env = OffPolicyEnvConfig(name="MemoryLength", kwargs={"memory_length": 3})
    rac = RACConfig(encoder=HistoryEncoderConfig(kind="gru", d_model=16, d_state=32), actor=[64], critic=[64])
    cfg = SACConfig(total_steps=1000, num_envs=4, batch_size=32, context=8, burn_in=0, learning_starts=200, utd=0.5,
                    lr=1e-3, alpha=0.1, autotune=False, eval_every=10_000, eval_episodes=32)
    torch.manual_seed(0)
    probe = make_offpolicy_env(env)
    untrained = evaluate(SAC(probe.observation_space, probe.action_space, rac, cfg), env, episodes=32)
    summary = train(env, rac, cfg, seed=0, log=None)
    assert summary["eval"]["return_mean"] >= 0.8 > untrained["return_mean"] + 0.3
    assert summary["eval"]["correct"] >= 0.9


def test_cli_dispatch_train_and_checkpoint(tmp_path):
    recipe = tmp_path / "bai.yaml"
    recipe.write_text(
        "algorithm: sac\nenv:\n  name: BestArm\n  kwargs: {cost: 0.1, max_steps: 20}\n"
        "  eval_sets: {in_dist: {}, ood: {sigma_range: [2.0, 3.0]}}\n"
        "agent:\n  encoder: {kind: kalman, d_model: 8, d_state: 8}\n  actor: [16]\n  critic: [16]\n"
        "sac: {total_steps: 64, num_envs: 4, batch_size: 4, context: 8, learning_starts: 16, eval_every: 64, "
        "eval_episodes: 4}\n")
    assert sac_requested(["--config", str(recipe)]) and sac_requested(["--algorithm=sac"])
    assert not sac_requested(["--config", "recipes/rl/repeat_first_easy/s5.yaml"])
    summary = sac_main(["--config", str(recipe), "--out_dir", str(tmp_path / "run"), "--agent.encoder.kind", "vssm"])
    assert summary["encoder"] == "vssm" and summary["steps"] == 64
    assert {"in_dist", "ood"} <= set(summary) and 0.0 <= summary["ood"]["win"] <= 1.0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 64
    sac, env, ckpt = load_checkpoint(tmp_path / "run" / "last.pt")
    assert env.name == "BestArm" and ckpt["steps"] == 64
    assert isinstance(sac.actor.history.encoder.layers[0], type(sac.critic.history.encoder.layers[0]))
