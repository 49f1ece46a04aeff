import pytest
import torch

from seqssm.layers import S6
from seqssm.optim import param_groups
from seqssm.testing import check_layer_contract


@pytest.mark.parametrize("backend", ["torch", "reference"])
def test_s6_contract(backend):
    layer = S6(8, d_state=4, backend=backend).double()
    check_layer_contract(layer, d_in=8)


def test_s6_init_follows_mamba():
    layer = S6(40, d_state=16, dt_min=0.001, dt_max=0.1)
    assert layer.dt_rank == 3
    torch.testing.assert_close(layer.A[0], -torch.arange(1.0, 17.0))
    dt = torch.nn.functional.softplus(layer.dt_proj.bias)
    assert dt.min() >= 0.001 * 0.999 and dt.max() <= 0.1 * 1.001
    torch.testing.assert_close(layer.D, torch.ones(40), check_device=False)


def test_s6_gradients_flow_through_initial_state_and_final_state():
    layer = S6(6, d_state=3).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    s0 = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    y, s1 = layer.scan(x, s0)
    g0, = torch.autograd.grad(s1.pow(2).sum() + y.sum(), s0)
    assert g0.abs().sum() > 0


def test_s6_param_groups():
    layer = S6(16, d_state=4)
    groups = param_groups(layer, lr=1e-3, weight_decay=0.01)
    by_param = {id(p): g for g in groups for p in g["params"]}
    assert by_param[id(layer.A_log)]["lr"] == pytest.approx(1e-4)
    assert by_param[id(layer.A_log)]["weight_decay"] == 0.0
    assert by_param[id(layer.D)]["weight_decay"] == 0.0
    assert by_param[id(layer.x_proj.weight)]["weight_decay"] == 0.01
    assert sum(len(g["params"]) for g in groups) == len(list(layer.parameters()))


def test_s6_autocast_keeps_ssm_in_fp32():
    layer = S6(8, d_state=4)
    x = torch.randn(2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, s = layer.scan(x)
    assert layer.A_log.dtype == torch.float32
    assert s.dtype == torch.float32
    assert torch.isfinite(y).all()


def test_s6_masked_scan_equals_per_sequence_scans():
    layer = S6(6, d_state=3).double()
    lengths = [9, 4, 1]
    x = torch.randn(3, 9, 6, dtype=torch.float64)
    s0 = torch.randn(3, 6, 3, dtype=torch.float64)
    mask = torch.arange(9)[None] < torch.tensor(lengths)[:, None]
    resets = torch.zeros(3, 9, dtype=torch.bool)
    resets[0, 5] = True
    resets[1, 6] = True  # on padding: must be ignored
    y, s_end = layer.scan(x, s0, resets=resets, mask=mask)
    for i, n in enumerate(lengths):
        y_i, s_i = layer.scan(x[i : i + 1, :n], s0[i : i + 1], resets=resets[i : i + 1, :n])
        torch.testing.assert_close(y[i : i + 1, :n], y_i)
        torch.testing.assert_close(s_end[i : i + 1], s_i)
        assert (y[i, n:] == 0).all()


def test_s6_projections_of_the_mamba_block_layout_equal_the_plain_ones():
    """x laid out as a (d_model, B L) matrix, as the Mamba block passes it on CUDA: Δ, B and C are the plain
    projections' values and gradients, and Δ comes back in x's layout (B, C time-contiguous) for the scan."""
    layer = S6(6, d_state=3).double()
    plain = torch.randn(3, 6, 11, dtype=torch.float64, requires_grad=True)
    matrix = plain.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    ours, theirs = layer._project_channels_first(matrix), layer._project_channels_first(plain)
    assert ours[0].stride() == matrix.stride() and all(m.stride(-1) == 1 for m in ours[1:])
    weights = [torch.randn_like(t) for t in theirs]
    grads = torch.autograd.grad(sum((t * w).sum() for t, w in zip(ours, weights)), [matrix, *layer.parameters()],
                                allow_unused=True)
    grads_ref = torch.autograd.grad(sum((t * w).sum() for t, w in zip(theirs, weights)), [plain, *layer.parameters()],
                                    allow_unused=True)
    torch.testing.assert_close(ours, theirs)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # under autocast, as mixed-precision training runs it
        ours = layer.float()._project_channels_first(matrix.float())
    assert all(t.dtype == torch.bfloat16 for t in ours)


def test_s6_projections_of_the_mamba_block_layout_copy_no_input_under_autocast():
    """Mixed-precision training on CUDA: the bfloat16 conv output in the block's layout goes into x_proj's product as
    it is, forward and backward (widening it to float32 first, for autocast to cast it back, took four passes over
    (d_inner, B L) a layer), and gives the values of the plain projection under autocast."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        def __init__(self, size):
            super().__init__()
            self.size, self.count = size, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in ("_to_copy", "copy_", "clone") and args[0].numel() == self.size:
                self.count += 1
            return func(*args, **(kwargs or {}))

    layer = S6(16, d_state=4)
    plain = torch.randn(3, 16, 40).to(torch.bfloat16)
    matrix = plain.transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    copies = Copies(matrix.numel())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with copies:
            ours = layer._project_channels_first(matrix)
            torch.autograd.grad(sum(t.sum() for t in ours), matrix)
        theirs = layer._project_channels_first(plain)
    assert copies.count == 0
    torch.testing.assert_close(ours, theirs)
