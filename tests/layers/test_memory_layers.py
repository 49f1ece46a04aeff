"""The RL memory layers (S5, MinGRU, LSSL/LSSLf, KalmanLayer/vSSM, GRU): the layer contract, masked
scans against per-sequence scans, gradient checks, and each layer against its plain definition."""

from __future__ import annotations

import pytest
import torch

from seqssm.layers import S4, S4D, S6, frozen_weights
from seqssm.layers.base import step_system
from seqssm.layers.gru import GRU
from seqssm.layers.hippo import hippo_legs, legs_nplr
from seqssm.layers.kalman import KalmanLayer, vSSM
from seqssm.ops.associative import associative_scan
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
    y_all, s_all = layer.scan(x, start, resets=resets, mask=torch.ones_like(mask))
    y_none, s_none = layer.scan(x, start, resets=resets)
    # an all-true mask may take the masked path (its own operator or kernel): float64 rounding apart
    torch.testing.assert_close(y_all, y_none, rtol=1e-12, atol=1e-12)
    assert_close_states(s_all, s_none, rtol=1e-12, atol=1e-12)

    # the same call on the same valid steps: padding is replaced before any arithmetic, so exactly inert
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
    """d(outputs, final state) / d(input, parameters, carried state), with or without resets and a mask."""
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


def kalman_reference(layer: KalmanLayer, x, mean, var, resets=None):
    """The textbook diagonal Kalman filter (C = I), one predict and one update per step, from the layer's parameters."""
    dA, dB, q = (t.detach() for t in layer.discrete(x.dtype))
    u, w, r = layer.project(x, x.dtype)
    means = []
    for t in range(x.shape[1]):
        if resets is not None:
            mean = torch.where(resets[:, t, None], 0.0, mean)
            var = torch.where(resets[:, t, None], layer.init_var, var)
        mean, var = dA * mean + dB * u[:, t], dA * var * dA + q  # predict
        gain = var / (var + r[:, t])
        mean, var = mean + gain * (w[:, t] - mean), (1 - gain) * var  # update
        means.append(mean)
    return layer.out_proj(torch.stack(means, 1)), (mean, var)


def test_kalman_equals_sequential_kalman_filter():
    layer = make("kalman")
    x = rand(3, 40, H) * 3  # spreads r = softplus(.) over orders of magnitude
    start = (rand(3, 5, seed=4), rand(3, 5, seed=5).exp())
    resets = torch.zeros(3, 40, dtype=torch.bool)
    resets[0, 7] = resets[0, 30] = resets[2, 0] = True
    for kw in ({}, {"resets": resets}):
        y, (m, P) = layer.scan(x, start, **kw)
        y_ref, (m_ref, P_ref) = kalman_reference(layer, x, *start, **kw)
        torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(m, m_ref, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(P, P_ref, rtol=1e-10, atol=1e-12)


def test_kalman_long_float32_stays_accurate():
    """Möbius products over 3000 steps with r spanning 1e-3..1e3 neither overflow nor drift from the float64 filter."""
    layer = make("kalman").float()
    x = rand(2, 3000, H, dtype=torch.float32) * 6
    with torch.no_grad():
        y, (m, P) = layer.scan(x)
        prior = layer.initial_state(2, dtype=torch.float64)
        y_ref, (m_ref, P_ref) = kalman_reference(layer.double(), x.double(), *prior)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(P.double(), P_ref, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-3, atol=1e-4)


def test_vssm_is_the_predict_step_alone():
    layer = make("vssm")
    x = rand(2, 17, H)
    dA, dB, _ = layer.discrete(torch.float64)
    u, = layer.project(x, torch.float64)
    m, means = torch.zeros(2, 5, dtype=torch.float64), []
    for t in range(17):
        m = dA * m + dB * u[:, t]
        means.append(m)
    y, s = layer.scan(x)
    torch.testing.assert_close(y, layer.out_proj(torch.stack(means, 1)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s, m, rtol=1e-12, atol=1e-12)
    assert not hasattr(layer, "log_q")  # no unused parameters (DDP would need find_unused_parameters)


def test_kalman_init_follows_seed():
    layer = KalmanLayer(8, 6)
    dA, dB, q = layer.discrete(torch.float64)
    assert torch.all((dA > 0.99) & (dA < 1))  # Δ = softplus(-7): slow decay at init
    torch.testing.assert_close(q, torch.ones(6, dtype=torch.float64))
    mean, var = layer.initial_state(3)
    assert (mean == 0).all() and (var == 1).all()


@pytest.mark.parametrize("length", [1, 2, 3, 7, 8, 13])
def test_associative_scan_matrix_products(length):
    """Inclusive prefix products of 2x2 matrices (non-commutative), later elements on the left."""
    m = rand(2, length, 3, 2, 2)
    out = associative_scan(lambda a, b: (b[0] @ a[0],), (m,))[0]
    ref, acc = [], torch.eye(2, dtype=torch.float64)
    for t in range(length):
        acc = m[:, t] @ acc
        ref.append(acc)
    torch.testing.assert_close(out, torch.stack(ref, 1), rtol=1e-12, atol=1e-12)


def test_s5_init_is_block_diagonal_legs():
    layer = S5(3, 12, blocks=3)
    Lambda, _, _, V = legs_nplr(4, torch.float64)
    torch.testing.assert_close(-layer.log_Lambda_real.exp().double(), Lambda.real.repeat(3), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(layer.Lambda_imag.double(), Lambda.imag.repeat(3), rtol=1e-6, atol=1e-6)
    dt = layer.log_dt.exp()
    assert layer.log_dt.shape == (6,) and dt.min() >= 0.001 * 0.999 and dt.max() <= 0.1 * 1.001
    assert layer.initial_state(2).shape == (2, 6) and layer.initial_state(2).is_complex()
    # B̃ = V^* B with B real: the full conjugate-completed system has real input B = V_full B̃.
    B = torch.view_as_complex(layer.B.double())
    V_full = torch.block_diag(*[torch.cat([V, V.conj()], 1)] * 3)
    B_full = torch.cat([B.view(3, 2, 3), B.conj().view(3, 2, 3)], 1).reshape(12, 3)
    assert (V_full @ B_full).imag.abs().max() < 1e-6


def test_s5_conjugate_symmetry_equals_the_full_system():
    """2 Re(C h) over P/2 stored modes == Re(C h) over all P modes with the conjugates written out."""
    half = make("s5")
    full = S5(H, 8, blocks=2, conj_sym=False).double()
    with torch.no_grad():
        full.log_Lambda_real.copy_(half.log_Lambda_real.repeat(2))
        full.Lambda_imag.copy_(torch.cat([half.Lambda_imag, -half.Lambda_imag]))
        full.log_dt.copy_(half.log_dt.repeat(2))
        B, C = torch.view_as_complex(half.B), torch.view_as_complex(half.C)
        full.B.copy_(torch.view_as_real(torch.cat([B, B.conj()])))
        full.C.copy_(torch.view_as_real(torch.cat([C, C.conj()], 1)))
        full.D.copy_(half.D)
    x = rand(2, 19, H)
    torch.testing.assert_close(full(x), half(x), rtol=1e-10, atol=1e-12)


def test_s5_zoh_and_bilinear_formulas():
    for method in ("zoh", "bilinear"):
        layer = S5(H, 8, discretization=method).double()
        dA, dB, _ = layer.discrete(torch.float64)
        Lam = torch.complex(-layer.log_Lambda_real.exp(), layer.Lambda_imag)
        dt, B = layer.log_dt.exp(), torch.view_as_complex(layer.B)
        if method == "zoh":
            ref_A, ref_B = torch.exp(Lam * dt), ((torch.exp(Lam * dt) - 1) / Lam)[:, None] * B
        else:
            bl = 1 / (1 - dt / 2 * Lam)
            ref_A, ref_B = bl * (1 + dt / 2 * Lam), (bl * dt)[:, None] * B
        torch.testing.assert_close(dA, ref_A, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(dB, ref_B, rtol=1e-12, atol=1e-12)


def test_s5_tags_ssm_parameters():
    layer = S5(8, 16)
    groups = {id(p): g for g in param_groups(layer, lr=1e-3, weight_decay=0.01) for p in g["params"]}
    for p in (layer.log_Lambda_real, layer.Lambda_imag, layer.B, layer.log_dt):
        assert groups[id(p)]["lr"] == pytest.approx(1e-3 * S5_SSM_LR_SCALE) and groups[id(p)]["weight_decay"] == 0.0
    assert groups[id(layer.C)]["lr"] == pytest.approx(1e-3) and groups[id(layer.C)]["weight_decay"] == 0.01


def test_lssl_kernel_matches_dense_power_loop_and_init():
    layer = make("lssl")
    K = layer.kernel(20, torch.float64)
    ref = dense_kernel(layer.A.expand(H, -1, -1), layer.B.expand(H, -1), layer.C, layer.log_dt.exp(), 20, "bilinear")
    torch.testing.assert_close(K, ref, rtol=1e-10, atol=1e-12)
    fresh, fixed = LSSL(H, 6), LSSLf(H, 6)
    A, B = hippo_legs(6, torch.float32)
    torch.testing.assert_close(fresh.A.detach(), A)
    torch.testing.assert_close(fixed.B, B)
    assert {n for n, _ in fixed.named_parameters()} == {"C", "D"}
    assert {n for n, _ in fresh.named_parameters()} == {"A", "B", "log_dt", "C", "D"}


def test_mingru_equals_its_equations():
    layer = make("mingru-wide")
    x = rand(2, 9, H)
    W, bias = layer.in_proj.weight, layer.in_proj.bias
    h, ys = torch.zeros(2, 6, dtype=torch.float64), []
    for t in range(9):
        z = torch.sigmoid(x[:, t] @ W[:6].T + bias[:6])
        h = (1 - z) * h + z * (x[:, t] @ W[6:].T + bias[6:])
        ys.append(layer.out_proj(h))
    y, s = layer.scan(x)
    torch.testing.assert_close(y, torch.stack(ys, 1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s, h, rtol=1e-12, atol=1e-12)


def test_gru_is_torch_gru_and_resets_restart_it():
    layer = make("gru")
    x = rand(2, 12, H)
    h0 = rand(2, H, seed=7)
    y, s = layer.scan(x, h0)
    y_ref, s_ref = layer.gru(x, h0[None])
    torch.testing.assert_close(y, y_ref, rtol=0, atol=0)  # without resets: the very same nn.GRU call
    resets = torch.zeros(2, 12, dtype=torch.bool)
    resets[1, 5] = True
    y_r, _ = layer.scan(x, h0, resets=resets)
    torch.testing.assert_close(y_r[1, 5:], layer.gru(x[1:, 5:])[0][0], rtol=1e-12, atol=1e-12)
    # a reset elsewhere splits the call at step 5: nn.GRU's input projection then runs as other matrix products,
    # whose rounding differs by ~1e-16 on some CPUs
    torch.testing.assert_close(y_r[0], y[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["s5", "kalman", "lssl", "mingru"])
def test_autocast_keeps_state_in_fp32(name):
    layer = LAYERS[name]()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, s = layer.scan(torch.randn(2, 6, H))
        y_t, s_t = layer.step(torch.randn(2, H), s)
    for t in (s if isinstance(s, tuple) else (s,)):
        assert t.dtype in (torch.float32, torch.complex64)
    assert torch.isfinite(y).all() and torch.isfinite(y_t).all()


FROZEN_LAYERS = {**{k: LAYERS[k] for k in ("s5", "lssl", "kalman", "vssm")},
                 "s4d": lambda: S4D(H, 4), "s4": lambda: S4(H, 4), "s6": lambda: S6(H, 4)}


@pytest.mark.parametrize("name", FROZEN_LAYERS)
def test_frozen_weights_caches_the_step_system_and_drops_it_on_exit(name):
    """Inside `frozen_weights` without autograd, stepping reuses one discretised system and gives the same
    numbers; a parameter changed between blocks is seen by the next block; with autograd on nothing is cached."""
    torch.manual_seed(0)
    layer = FROZEN_LAYERS[name]().double()
    x = rand(5, 2, H)

    def run():
        state, ys = layer.initial_state(2, dtype=torch.float64), []
        for x_t in x:
            y, state = layer.step(x_t, state)
            ys.append(y)
        return torch.stack(ys)

    with torch.no_grad():
        plain = run()
        with frozen_weights():
            cached = run()
            first = step_system(layer, lambda d: object(), torch.float64)
            again = step_system(layer, lambda d: object(), torch.float64)
        torch.testing.assert_close(cached, plain)
        assert first is again  # one system per layer and dtype for the whole block
        for p in layer.parameters():
            p.mul_(1.1)
        with frozen_weights():
            after = run()
        changed = run()
    torch.testing.assert_close(after, changed)
    assert not torch.allclose(after, plain)
    with frozen_weights():
        y, _ = layer.step(x[0].requires_grad_(), layer.initial_state(2, dtype=torch.float64))
        y.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.parameters())


@pytest.mark.parametrize("carried", [False, True], ids=["zero-state", "carried-state"])
def test_lssl_reset_convolution_equals_the_recurrence(carried, monkeypatch):
    """With resets, the masked Toeplitz path gives the step-by-step recurrence's outputs, final state and grads."""
    import seqssm.layers.lssl as lssl

    torch.manual_seed(0)
    layer = LSSL(H, 6).double()
    x = torch.randn(3, 17, H, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(3, H, 6, dtype=torch.float64, requires_grad=True) if carried else None
    resets = torch.zeros(3, 17, dtype=torch.bool)
    resets[0, 0] = resets[1, 5] = resets[1, 6] = resets[1, 16] = True  # first step, adjacent, last step

    def run():
        y, h = layer.scan(x, h0, resets=resets)
        grads = torch.autograd.grad((y.square().sum() + h.sin().sum()),
                                    [x, *([h0] if carried else []), *layer.parameters()])
        return y, h, grads

    y, h, grads = run()
    monkeypatch.setattr(lssl, "TOEPLITZ_MAX_ELEMENTS", 0)  # the step-by-step recurrence
    y_ref, h_ref, grads_ref = run()
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(h, h_ref)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref)
