"""EpisodeReplay: whole episodes in, right-padded sub-trajectories with aligned burn-in prefixes out."""

import numpy as np
import pytest
import torch

from seqssm.rl.replay import Episode, EpisodeReplay


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


def test_bad_episodes_and_empty_buffers_are_refused():
    replay = EpisodeReplay(capacity=10, obs_dim=2, act_dim=3)
    with pytest.raises(ValueError, match="sampling from an empty replay buffer"):
        replay.sample(1, 4, 0, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"obs \(T \+ 1, 2\)"):
        replay.add(Episode(np.zeros((3, 2), np.float32), np.zeros((3, 3), np.float32), np.zeros(3, np.float32), True))
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        EpisodeReplay(capacity=0, obs_dim=2, act_dim=3)
