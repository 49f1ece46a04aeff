"""SAC's recurrent actor-critic: masked scans of right-padded sub-trajectories equal per-sequence scans (outputs and
final states) for every history encoder; SACAgent as a policy (its state carries the previous action)."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from seqssm.layers.base import map_state
from seqssm.rl.core import CoreConfig, build_core
from seqssm.rl.offpolicy import ENCODERS, HistoryEncoderConfig, RACConfig, SACAgent

KINDS = [k for k in ENCODERS if k != "none"]
LENGTHS = [7, 1, 4, 7, 3]
# S6 computes Δ and A, the Mamba-2 block its gated norm, in float32 whatever the module dtype
FLOAT32_INSIDE = ("s6", "mamba", "mamba2")


def _tol(kind: str) -> dict:
    return {"atol": 1e-5, "rtol": 1e-5} if kind in FLOAT32_INSIDE else {"atol": 1e-9, "rtol": 1e-7}


def _flat(state) -> list[torch.Tensor]:
    out = []
    map_state(lambda s: out.append(s), state)
    return out


def _row(state, i: int):
    return map_state(lambda s: s[i : i + 1], state)


def build_encoder(config: HistoryEncoderConfig):
    return build_core(config.core_config())


@pytest.mark.parametrize("kind", KINDS)
def test_masked_batch_equals_per_sequence_scans(kind):
    torch.manual_seed(0)
    config = HistoryEncoderConfig(kind=kind, d_model=8, d_state=16, n_layers=2, context=5, d_ff=16,
                                  layer_kwargs={"dt_init": -1.0} if kind in ("vssm", "kalman", "kalman_u") else {})
    encoder = build_encoder(config).double()
    batch, length = len(LENGTHS), max(LENGTHS)
    lengths = torch.tensor(LENGTHS)
    mask = torch.arange(length) < lengths[:, None]
    # Start from a non-trivial state (a prefix of 3 steps), as after a burn-in.
    _, start = encoder.scan(torch.randn(batch, 3, 8, dtype=torch.float64))
    x = torch.randn(batch, length, 8, dtype=torch.float64)
    x_padded = x.masked_fill(~mask[..., None], 1e3)  # padding values must not matter
    y, final = encoder.scan(x_padded, start, mask=mask)

    assert torch.all(y[~mask] == 0), "padded steps output zeros"
    for i, n in enumerate(LENGTHS):
        y_i, final_i = encoder.scan(x[i : i + 1, :n], _row(start, i))
        torch.testing.assert_close(y[i : i + 1, :n], y_i, **_tol(kind))
        for got, want in zip(_flat(_row(final, i)), _flat(final_i), strict=True):
            torch.testing.assert_close(got, want, **_tol(kind))
    # The final states continue correctly: one more step from them equals stepping each sequence on.
    x_next = torch.randn(batch, 8, dtype=torch.float64)
    y_next, _ = encoder.step(x_next, final)
    for i, n in enumerate(LENGTHS):
        _, s_i = encoder.scan(x[i : i + 1, :n], _row(start, i))
        y_i, _ = encoder.step(x_next[i : i + 1], s_i)
        torch.testing.assert_close(y_next[i : i + 1], y_i, **_tol(kind))


@pytest.mark.parametrize("kind", ["kalman", "transformer", "mamba", "gru"])
def test_scan_equals_step_loop(kind):
    torch.manual_seed(1)
    encoder = build_encoder(HistoryEncoderConfig(kind=kind, d_model=8, d_state=16, context=4, d_ff=16)).double()
    x = torch.randn(3, 9, 8, dtype=torch.float64)
    y, _ = encoder.scan(x)
    state, ys = encoder.initial_state(3, dtype=torch.float64), []
    for t in range(x.shape[1]):
        y_t, state = encoder.step(x[:, t], state)
        ys.append(y_t)
    torch.testing.assert_close(y, torch.stack(ys, 1), **_tol(kind))


def test_transformer_window_and_kf_u_ignores_input_channel():
    torch.manual_seed(2)
    enc = build_encoder(HistoryEncoderConfig(kind="transformer", d_model=8, context=3, d_ff=16)).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    y, _ = enc.scan(x)
    x2 = x.clone()
    x2[:, :3] += 1.0  # steps outside the window of step 5 (window = steps 3, 4, 5)
    y2, _ = enc.scan(x2)
    torch.testing.assert_close(y[:, 5], y2[:, 5])
    assert not torch.allclose(y[:, 3], y2[:, 3])
    kfu = build_encoder(HistoryEncoderConfig(kind="kalman_u", d_model=8, d_state=4))
    kf = build_encoder(HistoryEncoderConfig(kind="kalman", d_model=8, d_state=4))
    assert kfu.layers[0].in_proj.out_features == 8 and kf.layers[0].in_proj.out_features == 12


@pytest.mark.parametrize("kind", ["gru", "none"])
def test_sac_agent_acts_with_the_previous_action_and_forgets_at_episode_starts(kind):
    torch.manual_seed(3)
    core = None if kind == "none" else CoreConfig(layer=kind, block="none", d_model=8, d_state=8, n_layers=1)
    agent = SACAgent(spaces.Box(-1, 1, (3,)), spaces.Discrete(4), RACConfig(core=core, actor=[16], critic=[16]))
    obs = torch.randn(5, 2, 3)
    state = agent.initial_state(2)
    for t in range(4):
        out = agent.act(obs[t], state, torch.tensor([t == 0, t == 0]), deterministic=True)
        assert torch.equal(out.state[0], torch.nn.functional.one_hot(out.action, 4).float())
        if kind != "none":  # the same step from the same inputs, by hand
            features, _ = agent.actor.history.step(obs[t], state[0] if t else torch.zeros(2, 4),
                                                   state[1] if t else agent.actor.history.initial_state(2))
            assert torch.equal(out.action, agent.actor.policy(features, deterministic=True)[0])
        state = out.state
    after_done = agent.act(obs[4], state, torch.tensor([True, False]), deterministic=True)
    fresh = agent.act(obs[4], agent.initial_state(2), deterministic=True)
    assert after_done.action[0] == fresh.action[0]
    if kind != "none":
        for got, want in zip(_flat(after_done.state[1]), _flat(fresh.state[1]), strict=True):
            torch.testing.assert_close(got[0], want[0])
    bounds = spaces.Box(np.array([0.0, -4.0], np.float32), np.array([1.0, 4.0], np.float32))
    box = SACAgent(spaces.Box(-1, 1, (3,)), bounds, RACConfig())
    np.testing.assert_allclose(box.env_action(torch.tensor([[-1.0, 1.0], [0.0, 0.5]])), [[0.0, 4.0], [0.5, 2.0]])


def test_encoder_keys_convert_to_the_core_they_describe():
    assert HistoryEncoderConfig(kind="none").core_config() is None
    assert HistoryEncoderConfig(kind="gru", d_model=16, d_state=32, n_layers=2, rms_norm=True).core_config() == \
        CoreConfig(layer="gru", block="none", d_model=16, d_state=32, n_layers=2, final_norm=True)
    # the Kalman-layer paper's N = 128 spread over expand 2 x d_model 16 channels: 4 per channel, S6 by the block
    mamba = HistoryEncoderConfig(kind="mamba", d_model=16, d_state=128, expand=2).core_config()
    assert mamba == CoreConfig(layer="s6", block="mamba", d_model=16, d_state=4, n_layers=1, final_norm=False,
                               block_kwargs={"expand": 2})
    assert HistoryEncoderConfig(kind="mamba", d_model=16, d_state=128).core_config().d_state == 4  # the block's expand
    transformer = HistoryEncoderConfig(kind="transformer", d_model=16, n_layers=2, d_ff=32, rms_norm=True)
    assert transformer.core_config() == CoreConfig(layer="transformer", block="none", d_model=16, n_layers=1,
                                                   final_norm=False, layer_kwargs={"n_layers": 2, "d_ff": 32})
    with pytest.raises(ValueError, match="unknown history encoder 'lstm'"):
        HistoryEncoderConfig(kind="lstm").core_config()
