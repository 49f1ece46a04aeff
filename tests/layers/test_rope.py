"""RoPE (Ulbaek 2024 thesis, 14.2-14.3): the rotation and its options."""

import math

import pytest
import torch

from seqssm.layers.rope import RoPE, rope_positions


def rotation_matrix(angles: torch.Tensor) -> torch.Tensor:
    """Eq. 81: the block-diagonal matrix of 2 x 2 rotations by `angles` (d/2,)."""
    blocks = [torch.tensor([[a.cos(), -a.sin()], [a.sin(), a.cos()]], dtype=torch.float64) for a in angles]
    return torch.block_diag(*blocks)


def test_matches_the_rotation_matrix_of_eq_81():
    rope = RoPE(6, base=10000.0).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    y = rope(x)
    theta = 10000.0 ** (-torch.arange(0, 6, 2, dtype=torch.float64) / 6)
    for k in range(5):
        torch.testing.assert_close(y[:, k], x[:, k] @ rotation_matrix(k * theta).T)


@pytest.mark.parametrize("base", [10.0, 10000.0])
def test_theta_follows_eq_82(base):
    rope = RoPE(8, base=base)
    torch.testing.assert_close(rope.frequencies(), base ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8))


def test_zero_angles_are_the_identity():
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    rope = RoPE(8, trainable=True).double()
    torch.testing.assert_close(rope(x)[:, 0], x[:, 0])  # position 0
    with torch.no_grad():
        rope.theta.zero_()
    torch.testing.assert_close(rope(x), x)


def test_rotation_preserves_norms_and_encodes_relative_position():
    rope = RoPE(16, base=10.0).double()
    x = torch.randn(2, 30, 16, dtype=torch.float64)
    y = rope(x)
    torch.testing.assert_close(y.view(2, 30, 8, 2).norm(dim=-1), x.view(2, 30, 8, 2).norm(dim=-1))
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)

    def dot(m, n):
        return rope(q.expand(1, 30, 16))[0, m] @ rope(k.expand(1, 30, 16))[0, n]

    torch.testing.assert_close(dot(7, 3), dot(24, 20))


@pytest.mark.parametrize("trainable", [False, True])
def test_normalised_maximum_angle_is_pi(trainable):
    rope = RoPE(10, base=10.0, trainable=trainable, normalize_len=50).double()
    angles = rope.angles(torch.arange(50))
    assert angles[0].abs().max() == 0
    assert math.isclose(angles[-1].max().item(), math.pi, rel_tol=1e-12)
    assert torch.all(angles[-1] <= math.pi + 1e-12)
    x = torch.randn(1, 50, 10, dtype=torch.float64)
    x[:, -1] = x[:, 0]
    y = rope(x)
    torch.testing.assert_close(y[0, -1, :2], -x[0, 0, :2])  # the fastest pair points the opposite way


def test_cache_grows_and_follows_dtype():
    rope = RoPE(4)
    x = torch.randn(1, 10, 4, dtype=torch.float64)
    short = rope(x)
    long = rope(torch.cat([x, torch.randn(1, 100, 4, dtype=torch.float64)], 1))
    torch.testing.assert_close(long[:, :10], short)
    assert rope(x.float()).dtype == torch.float32
    assert not list(rope.parameters())
    assert len(list(RoPE(4, trainable=True).parameters())) == 1


def test_trainable_theta_gets_gradients():
    rope = RoPE(6, trainable=True)
    rope(torch.randn(2, 5, 6)).pow(2).sum().backward()
    assert rope.theta.grad is not None and rope.theta.grad.abs().sum() > 0


def test_positions_restart_at_resets_and_continue_from_start():
    resets = torch.tensor([[False, False, True, False], [False, False, False, False]])
    pos = rope_positions(torch.tensor([5, 2]), 4, resets)
    assert pos.tolist() == [[5, 6, 0, 1], [2, 3, 4, 5]]


def test_step_positions_match_scan():
    rope = RoPE(6).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    y = rope(x)
    for t in range(5):
        torch.testing.assert_close(rope(x[:, t], torch.full((2,), t)), y[:, t])


def test_odd_width_is_refused():
    with pytest.raises(ValueError, match="even"):
        RoPE(7)
