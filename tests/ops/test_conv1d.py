"""The causal depthwise conv op: fast path, step loop and resets against the plain left-padded convolution."""

import pytest
import torch

from seqssm.ops.conv1d import causal_conv1d, causal_conv1d_reference, causal_conv1d_step


def _conv_inputs(batch, dim, length):
    return tuple(torch.randn(*shape, dtype=torch.float64) for shape in ((batch, dim, length), (dim, 4), (dim,)))


def _resets(batch, length):
    r = torch.zeros(batch, length, dtype=torch.bool)
    r[0, 3], r[0, 7], r[1, 1] = True, True, True
    return r


def test_conv_reference_is_causal_left_padded_depthwise_conv():
    x, w, b = _conv_inputs(2, 3, 10)
    expected = torch.zeros(2, 3, 10, dtype=torch.float64)
    for d in range(3):
        for t in range(10):
            expected[:, d, t] = b[d] + sum(w[d, k] * x[:, d, t - 3 + k] for k in range(4) if t - 3 + k >= 0)
    torch.testing.assert_close(causal_conv1d_reference(x, w, b), expected)


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("with_resets", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv_fast_path_matches_reference(with_state, with_resets, channels_last):
    """Outputs, final state and gradients; a channels-last x (a transposed (batch, L, dim) tensor,
    as the Mamba block passes it) also gives y in that layout."""
    x, w, b = _conv_inputs(2, 5, 11)
    leaf = (x.transpose(1, 2).contiguous() if channels_last else x.clone()).requires_grad_()
    x = leaf.transpose(1, 2) if channels_last else leaf
    s0 = torch.randn(2, 5, 3, dtype=torch.float64) if with_state else None
    r = _resets(2, 11) if with_resets else None
    y_ref, s_ref = causal_conv1d_reference(x, w, b, s0, r, return_final_state=True)
    y, s = causal_conv1d(x, w, b, s0, r, return_final_state=True, backend="torch")
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(s, s_ref)
    assert (y.stride(1) == 1) == channels_last
    weights = torch.randn_like(y_ref)
    (g_ref,) = torch.autograd.grad((y_ref * weights).sum() + s_ref.sum(), leaf)
    (g,) = torch.autograd.grad((y * weights).sum() + s.sum(), leaf)
    torch.testing.assert_close(g, g_ref)


def test_conv_step_loop_and_reset_semantics():
    x, w, b = _conv_inputs(2, 5, 9)
    s0 = torch.randn(2, 5, 3, dtype=torch.float64)
    y, s_end = causal_conv1d(x, w, b, s0, return_final_state=True)
    state, ys = s0, []
    for t in range(9):
        y_t, state = causal_conv1d_step(x[:, :, t], state, w, b)
        ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, -1), y)
    torch.testing.assert_close(state, s_end)
    # A reset at 5: outputs from 5 on equal a fresh run of x[5:], whatever came before.
    r = torch.zeros(2, 9, dtype=torch.bool)
    r[:, 5] = True
    y_r = causal_conv1d(x, w, b, s0, r)
    torch.testing.assert_close(y_r[..., 5:], causal_conv1d(x[..., 5:], w, b))
    torch.testing.assert_close(y_r[..., :5], y[..., :5])


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_conv_silu_is_silu_of_the_conv(backend):
    """silu=True (the Mamba blocks' activation, which the causal_conv1d package applies inside its kernels) is
    F.silu of the plain output, with the state untouched, in the op and in its step."""
    x, w, b = _conv_inputs(2, 5, 9)
    s0 = torch.randn(2, 5, 3, dtype=torch.float64)
    y, state = causal_conv1d(x, w, b, s0, return_final_state=True, backend=backend)
    y_silu, state_silu = causal_conv1d(x, w, b, s0, return_final_state=True, silu=True, backend=backend)
    torch.testing.assert_close(y_silu, torch.nn.functional.silu(y))
    torch.testing.assert_close(state_silu, state)
    y_t, _ = causal_conv1d_step(x[:, :, 0], s0, w, b, silu=True)
    torch.testing.assert_close(y_t, y_silu[:, :, 0])
