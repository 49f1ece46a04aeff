"""Checks that a module honours the layer contract (seqssm.layers.base); used by the test suite
and usable on your own layers: `check_layer_contract(MyLayer(...).double(), d_in=8)`."""

from __future__ import annotations

import torch

from seqssm.layers.base import map_state, where_state


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
    == one scan; resets == independent pieces; causality; masks (`check_mask_contract`). Returns the forward output."""
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
    assert_close_states(map_state(lambda s: s[:1], s_r), s_tail, **tol)

    x2 = x.clone()
    x2[:, cut + 1 :] = torch.randn_like(x2[:, cut + 1 :])
    torch.testing.assert_close(layer(x2)[:, : cut + 1], y[:, : cut + 1], **tol)
    assert not torch.allclose(layer(x2)[:, cut + 1 :], y[:, cut + 1 :]), "later inputs had no effect at all"
    check_mask_contract(layer, d_in, batch, length, dtype, atol, rtol)
    return y


def _rows(state, b: int):
    return map_state(lambda s: s[b : b + 1], state)


@torch.no_grad()
def check_mask_contract(layer, d_in: int, batch: int = 2, length: int = 13, dtype=torch.float64, atol=1e-9, rtol=1e-7):
    """Assert the mask half of the contract, from a carried (nonzero) state: a right-padded batch gives each
    sequence the outputs and final state it has alone, unpadded; masked steps output zeros, leave the state
    unchanged and drop their resets, whatever the padding holds; a scan with any mask equals the loop of
    `step` that skips the masked steps."""
    tol = dict(atol=atol, rtol=rtol)
    g = torch.Generator().manual_seed(1)
    start = layer.scan(torch.randn(batch, 3, d_in, dtype=dtype, generator=g), None)[1]
    x = torch.randn(batch, length, d_in, dtype=dtype, generator=g)
    t = torch.arange(length)
    lengths = torch.tensor([max(1, length - 1 - 4 * b) for b in range(batch)])
    lengths[-1] = 0 if batch > 1 else lengths[-1]  # an empty sequence: its state must pass through untouched
    mask = t < lengths[:, None]
    resets = torch.zeros(batch, length, dtype=torch.bool)
    resets[0, length // 2] = True  # on a valid step
    resets[-1, length - 1] = True  # on padding (or, with batch 1, on the last valid step): dropped
    padded = torch.where(mask[..., None], x, 100 * torch.randn(x.shape, dtype=dtype, generator=g))
    y, s_end = layer.scan(padded, start, resets=resets, mask=mask)
    assert (y[~mask] == 0).all(), "masked steps must output zeros"
    y_other, s_other = layer.scan(torch.where(mask[..., None], x, -padded), start, resets=resets, mask=mask)
    torch.testing.assert_close(y_other, y, **tol)
    assert_close_states(s_other, s_end, **tol)
    for b, n in enumerate(lengths.tolist()):
        if n == 0:
            assert_close_states(_rows(s_end, b), _rows(start, b), **tol)
            continue
        y_b, s_b = layer.scan(x[b : b + 1, :n], _rows(start, b), resets=resets[b : b + 1, :n])
        torch.testing.assert_close(y[b : b + 1, :n], y_b, **tol)
        assert_close_states(_rows(s_end, b), s_b, **tol)

    # Any mask (holes anywhere) against the step loop that skips masked steps.
    holes = torch.rand(batch, length, generator=g) < 0.6
    y, s_end = layer.scan(padded, start, resets=resets, mask=holes)
    fresh, state, ys = layer.initial_state(batch, device=x.device, dtype=dtype), start, []
    for i in range(length):
        keep, reset = holes[:, i], resets[:, i] & holes[:, i]
        state_in = where_state(reset, fresh, state)
        y_t, stepped = layer.step(padded[:, i], state_in)
        state = where_state(keep, stepped, state)
        ys.append(y_t * keep[:, None].to(y_t.dtype))
    torch.testing.assert_close(y, torch.stack(ys, 1), **tol)
    assert_close_states(s_end, state, **tol)

