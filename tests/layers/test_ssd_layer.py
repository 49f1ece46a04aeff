"""The SSD layer (Mamba-2's SSM): the layer contract on both backends, gradients through the states, its
initialisation and bad sizes."""

import pytest
import torch

from seqssm.layers.ssd import SSD
from seqssm.testing import check_layer_contract


@pytest.mark.parametrize("backend", ["chunked", "reference"])
@pytest.mark.parametrize("n_groups", [1, 2])
def test_ssd_contract(backend, n_groups):
    layer = SSD(8, d_state=4, head_dim=2, n_groups=n_groups, chunk_size=4, backend=backend).double()
    check_layer_contract(layer, d_in=8)


def test_ssd_gradients_reach_the_initial_state_and_leave_the_final_state():
    layer = SSD(6, d_state=3, head_dim=3, chunk_size=4).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    y, s1 = layer.scan(x, s0)
    g0, gx = torch.autograd.grad(s1.pow(2).sum() + y.sum(), [s0, x])
    assert g0.abs().sum() > 0 and gx.abs().sum() > 0
    layer.backend = "reference"
    y_ref, s1_ref = layer.scan(x, s0)
    g0_ref, gx_ref = torch.autograd.grad(s1_ref.pow(2).sum() + y_ref.sum(), [s0, x])
    torch.testing.assert_close((g0, gx), (g0_ref, gx_ref))


def test_ssd_init_follows_mamba2():
    layer = SSD(32, d_state=8, head_dim=8, dt_min=0.001, dt_max=0.1, A_init_range=(1, 16))
    assert layer.heads == 4 and layer.initial_state(3).shape == (3, 4, 8, 8)
    dt = torch.nn.functional.softplus(layer.dt_bias)
    assert dt.min() >= 0.001 * 0.999 and dt.max() <= 0.1 * 1.001
    A = -torch.exp(layer.A_log)
    assert (A <= -1).all() and (A >= -16).all()
    torch.testing.assert_close(layer.D, torch.ones(4), check_device=False)


def test_ssd_autocast_keeps_the_state_in_float32():
    layer = SSD(8, d_state=4, head_dim=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, s = layer.scan(torch.randn(2, 5, 8))
    assert s.dtype == torch.float32 and torch.isfinite(y).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(d_model=10, head_dim=4), "no multiple of head_dim 4"),
    (dict(d_model=8, head_dim=2, n_groups=3), "4 heads do not split into n_groups 3"),
    (dict(d_model=8, head_dim=2, A_init_range=(0, 1)), "A_init_range"),
])
def test_ssd_bad_sizes_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SSD(**kwargs)
