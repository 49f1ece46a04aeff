"""Checks that a module honours the layer contract (seqssm.layers.base); used by the test suite
and usable on your own layers: `check_layer_contract(MyLayer(...).double(), d_in=8)`."""

from __future__ import annotations

import torch


def _map_state(fn, state):
    if isinstance(state, (tuple, list)):
        return type(state)(_map_state(fn, s) for s in state)
    return fn(state) if isinstance(state, torch.Tensor) else state


def assert_close_states(a, b, **tol) -> None:
    """Assert two (nested) states are equal to tolerance."""
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_close_states(x, y, **tol)
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, **tol)
    else:
        assert a == b


@torch.no_grad()
def check_layer_contract(layer, d_in: int, batch: int = 2, length: int = 13, dtype=torch.float64, atol=1e-9, rtol=1e-7):
    """Assert forward == scan from the initial state == a loop of step; split scans with carried state
    == one scan; resets == independent pieces; causality. Returns the forward output."""
    torch.manual_seed(0)
    x = torch.randn(batch, length, d_in, dtype=dtype)
    tol = dict(atol=atol, rtol=rtol)
    y = layer(x)
    s0 = layer.initial_state(batch, device=x.device, dtype=dtype)
    y_scan, s_end = layer.scan(x, s0)
    torch.testing.assert_close(y_scan, y, **tol)

    state, ys = s0, []
    for t in range(length):
        y_t, state = layer.step(x[:, t], state)
        ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, 1), y, **tol)
    assert_close_states(state, s_end, **tol)

    cut = length // 3
    y1, s1 = layer.scan(x[:, :cut], s0)
    y2, s2 = layer.scan(x[:, cut:], s1)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, **tol)
    assert_close_states(s2, s_end, **tol)

    # A reset at `cut` (sequence 0 only) must equal running the tail from a fresh state.
    resets = torch.zeros(batch, length, dtype=torch.bool)
    resets[0, cut] = True
    y_r, s_r = layer.scan(x, s0, resets=resets)
    y_tail, s_tail = layer.scan(x[:1, cut:], layer.initial_state(1, device=x.device, dtype=dtype))
    torch.testing.assert_close(y_r[:1, cut:], y_tail, **tol)
    torch.testing.assert_close(y_r[:1, :cut], y[:1, :cut], **tol)
    torch.testing.assert_close(y_r[1:], y[1:], **tol)
    assert_close_states(_map_state(lambda s: s[:1], s_r), s_tail, **tol)

    x2 = x.clone()
    x2[:, cut + 1 :] = torch.randn_like(x2[:, cut + 1 :])
    torch.testing.assert_close(layer(x2)[:, : cut + 1], y[:, : cut + 1], **tol)
    assert not torch.allclose(layer(x2)[:, cut + 1 :], y[:, cut + 1 :]), "later inputs had no effect at all"
    return y
