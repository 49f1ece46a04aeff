"""RoPE in front of an SSP (Ulbaek 2024 thesis, 14.3): which inputs of the SSP see rotated positions."""

import pytest
import torch

from seqssm.blocks import RotarySSP
from seqssm.layers.rope import RoPE
from seqssm.layers.s4d import S4D
from seqssm.layers.s6 import S6
from seqssm.ops.selective import selective_scan_reference


def test_rope_on_all_inputs_is_the_ssp_on_rotated_x():
    s6 = S6(8, 4).double()
    rot = RotarySSP(s6).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(rot(x), s6(rot.rope(x)))
    s4d = S4D(8, 4).double()
    torch.testing.assert_close(RotarySSP(s4d)(x), s4d(RoPE(8).double()(x)))


@pytest.mark.parametrize("targets", [("B",), ("C", "delta"), ("x",), ("x", "B")])
def test_s6_rope_targets_pick_which_inputs_see_rope(targets):
    s6 = S6(8, 4).double()
    rot = RotarySSP(s6, base=10.0, targets=targets).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    xr = rot.rope(x)
    plain, rotated = s6.project(x), s6.project(xr)
    delta, B, C = (rotated[i] if name in targets else plain[i] for i, name in enumerate(("delta", "B", "C")))
    u = xr if "x" in targets else x
    expected = selective_scan_reference(
        u.transpose(1, 2), delta.transpose(1, 2), s6.A, B.transpose(1, 2), C.transpose(1, 2), s6.D,
        delta_bias=s6.dt_proj.bias, delta_softplus=True,
    ).transpose(1, 2)
    torch.testing.assert_close(rot(x), expected)
    assert not torch.allclose(rot(x), s6(x))


def test_rope_targets_are_checked():
    with pytest.raises(ValueError, match="subset"):
        RotarySSP(S4D(8, 4), targets=("B",))
    with pytest.raises(ValueError, match="subset"):
        RotarySSP(S6(8, 4), targets=())
