"""The RL memory layers (S5, MinGRU, LSSL/LSSLf, KalmanLayer/vSSM, GRU): the layer contract, masked
scans against per-sequence scans, gradient checks, and each layer against its plain definition."""

from __future__ import annotations

import pytest
import torch

from seqssm.layers.gru import GRU
from seqssm.layers.hippo import hippo_legs, legs_nplr
from seqssm.layers.kalman import KalmanLayer, associative_scan, vSSM
from seqssm.layers.lssl import LSSL, LSSLf
from seqssm.layers.mingru import MinGRU
from seqssm.layers.s5 import S5, S5_SSM_LR_SCALE
from seqssm.ops.ssm_kernels import dense_kernel
from seqssm.optim import param_groups
from seqssm.testing import assert_close_states, check_layer_contract

H = 4

LAYERS = {
    "s5": lambda: S5(H, 8, blocks=2),
    "s5-full-bilinear": lambda: S5(H, 6, conj_sym=False, discretization="bilinear"),
    "mingru": lambda: MinGRU(H),
    "mingru-wide": lambda: MinGRU(H, d_hidden=6),
    "lssl": lambda: LSSL(H, 4),
    "lsslf": lambda: LSSLf(H, 4),
    "kalman": lambda: KalmanLayer(H, 5),
    "vssm": lambda: vSSM(H, 5),
    "gru": lambda: GRU(H),
    "gru-wide": lambda: GRU(H, d_hidden=6),
}


def make(name: str, seed: int = 0):
    """A float64 layer moved off its init, as if trained, with steps large enough that state matters in short tests."""
    torch.manual_seed(seed)
    layer = LAYERS[name]().double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
        if hasattr(layer, "log_dt"):
            layer.log_dt.copy_(torch.empty_like(layer.log_dt).uniform_(-3, -0.5))  # Δ in [0.05, 0.6]
        if isinstance(layer, KalmanLayer):
            layer.dt_raw.fill_(-1.0)
    return layer


def rand(*shape, seed=1, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def map_state(fn, state):
    return type(state)(map_state(fn, s) for s in state) if isinstance(state, (tuple, list)) else fn(state)


@pytest.mark.parametrize("name", LAYERS)
def test_contract(name):
    layer = make(name)
    check_layer_contract(layer, d_in=H)
    check_layer_contract(layer, d_in=H, batch=3, length=29)


@pytest.mark.parametrize("name", LAYERS)
def test_masked_scan_equals_per_sequence_scans(name):
    """Right-padded batch: valid outputs and each sequence's final state match scanning it alone; padding is inert."""
    layer = make(name)
    lengths, L = [11, 7, 1], 11
    x = rand(3, L, H)
    mask = torch.arange(L) < torch.tensor(lengths)[:, None]
    resets = torch.zeros(3, L, dtype=torch.bool)
    resets[0, 4] = resets[1, 2] = True
    resets[1, 9] = True  # on padding: must be ignored
    start = layer.scan(rand(3, 5, H, seed=2))[1]  # a carried, nonzero state
    y, s = layer.scan(x, start, resets=resets, mask=mask)

    x_other = torch.where(mask[..., None], x, rand(3, L, H, seed=3) * 100)
    y_other, s_other = layer.scan(x_other, start, resets=resets, mask=mask)
    torch.testing.assert_close(y_other, y, rtol=0, atol=0)
    assert_close_states(s_other, s, rtol=0, atol=0)
    assert (y[~mask] == 0).all()
    for b, n in enumerate(lengths):
        y_b, s_b = layer.scan(x[b : b + 1, :n], map_state(lambda t: t[b : b + 1], start), resets=resets[b : b + 1, :n])
        torch.testing.assert_close(y[b : b + 1, :n], y_b, rtol=1e-9, atol=1e-10)
        assert_close_states(map_state(lambda t: t[b : b + 1], s), s_b, rtol=1e-9, atol=1e-10)


class ScanCall(torch.nn.Module):
    """`layer.scan` as a forward, so torch.func.functional_call can swap in the parameters."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, state, resets, mask):
        return self.layer.scan(x, state, resets=resets, mask=mask)


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "resets-mask"])
@pytest.mark.parametrize("name", LAYERS)
def test_gradcheck(name, masked):
    """Gradients of outputs and final state w.r.t. input, parameters and carried state, with or without resets and a mask."""
    call = ScanCall(make(name))
    names = [n for n, _ in call.named_parameters()]
    start = call.layer.scan(rand(2, 3, H, seed=2))[1]
    is_pair = isinstance(start, tuple)
    start = [t.detach().clone().requires_grad_() for t in (start if is_pair else (start,))]
    resets = torch.tensor([[False, False, True, False, False], [False] * 5]) if masked else None
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]]) if masked else None

    def fn(x, *args):
        params, s0 = dict(zip(names, args[: len(names)])), args[len(names) :]
        y, s = torch.func.functional_call(call, params, (x, tuple(s0) if is_pair else s0[0], resets, mask))
        return (y, *(s if is_pair else (s,)))

    params = [p.detach().clone().requires_grad_() for p in call.parameters()]
    assert torch.autograd.gradcheck(fn, (rand(2, 5, H).requires_grad_(), *params, *start))
