"""ops.masked (compaction, the masked causal conv1d) and ops.krylov against plain definitions."""

import pytest
import torch

from seqssm.ops.conv1d import causal_conv1d_step
from seqssm.ops.krylov import apply_power, krylov, squarings
from seqssm.ops.masked import gather_steps, masked_causal_conv1d, scatter_steps, valid_first


def test_compaction_is_stable_and_inverted_by_scatter():
    mask = torch.tensor([[True, False, True, True, False], [False, False, False, False, False], [True] * 5])
    order, counts = valid_first(mask)
    assert order[0].tolist() == [0, 2, 3, 1, 4] and counts.tolist() == [3, 0, 5]
    x = torch.randn(3, 5, 2)
    torch.testing.assert_close(scatter_steps(gather_steps(x, order), order), x, rtol=0, atol=0)


def conv_step_loop(x, weight, bias, state, resets, mask):
    """The definition: step through time, skip masked steps (state kept, output 0), reset before a valid step."""
    ys = []
    for t in range(x.shape[-1]):
        keep = mask[:, t, None, None]
        start = state.masked_fill(resets[:, t, None, None] & keep, 0)
        y_t, stepped = causal_conv1d_step(x[..., t], start, weight, bias)
        state = torch.where(keep, stepped, state)
        ys.append(y_t * mask[:, t, None])
    return torch.stack(ys, -1), state


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("right_padded", [False, True])
def test_masked_conv_equals_the_step_loop_with_gradients(channels_last, right_padded):
    g = torch.Generator().manual_seed(0)
    batch, dim, length, k = 3, 4, 11, 4
    leaf = torch.randn(batch, length, dim, dtype=torch.float64, generator=g) if channels_last else \
        torch.randn(batch, dim, length, dtype=torch.float64, generator=g)
    leaf.requires_grad_()
    x = leaf.transpose(1, 2) if channels_last else leaf
    weight, bias = torch.randn(dim, k, dtype=torch.float64, generator=g), torch.randn(dim, dtype=torch.float64, generator=g)
    state = torch.randn(batch, dim, k - 1, dtype=torch.float64, generator=g)
    t = torch.arange(length)
    mask = t < torch.tensor([11, 5, 0])[:, None] if right_padded else torch.rand(batch, length, generator=g) < 0.6
    resets = torch.zeros(batch, length, dtype=torch.bool)
    resets[0, 3] = resets[0, 8] = resets[1, 2] = resets[1, 7] = resets[2, 1] = True
    y, s = masked_causal_conv1d(x, weight, bias, state, resets, mask)
    y_ref, s_ref = conv_step_loop(x, weight, bias, state, resets, mask)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(s, s_ref)
    w = torch.randn(y.shape, dtype=torch.float64, generator=g)
    (g1,) = torch.autograd.grad((y * w).sum() + s.square().sum(), leaf)
    (g2,) = torch.autograd.grad((y_ref * w).sum() + s_ref.square().sum(), leaf)
    torch.testing.assert_close(g1, g2)


@pytest.mark.parametrize("L", [1, 2, 5, 8, 13])
def test_krylov_rows_are_matrix_powers(L):
    g = torch.Generator().manual_seed(L)
    A = torch.randn(2, 3, 3, dtype=torch.float64, generator=g) / 2
    v = torch.randn(2, 3, dtype=torch.float64, generator=g)
    expected = torch.stack([(torch.linalg.matrix_power(A, j) @ v[..., None])[..., 0] for j in range(L)], -2)
    torch.testing.assert_close(krylov(A, v, L), expected)


@pytest.mark.parametrize("L", [1, 2, 5, 8, 9])
def test_shared_squarings_give_krylov_rows_and_powers(L):
    torch.manual_seed(0)
    A, v = torch.randn(3, 4, 4, dtype=torch.float64) / 2, torch.randn(3, 4, dtype=torch.float64)
    powers = squarings(A, L)
    torch.testing.assert_close(krylov(A, v, L, powers), krylov(A, v, L))
    for p in range(2 ** len(powers)):
        expected = (torch.linalg.matrix_power(A, p) @ v.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(apply_power(powers, p, v), expected)
    with pytest.raises(ValueError, match="squarings"):
        apply_power(powers, 2 ** len(powers), v)
