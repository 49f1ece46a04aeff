"""S4 and S4D layers: the layer contract (forward == scan == step, split scans, resets,
causality), kernels against the dense discretised system, gradients, init and tags."""

from __future__ import annotations

import pytest
import torch

from seqssm.layers.hippo import hippo_legs, legs_nplr
from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.ops.ssm_kernels import dense_kernel, dplr_dense
from seqssm.optim import param_groups

H, N = 3, 8

LAYERS = {
    "s4d-legs-zoh": lambda: S4D(H, N),
    "s4d-lin-bilinear": lambda: S4D(H, N, init="lin", discretization="bilinear"),
    "s4d-inv-zoh": lambda: S4D(H, N, init="inv"),
    "s4": lambda: S4(H, N),
}


def make(name: str, dtype=torch.float64, seed=0):
    """A layer whose parameters are moved off their init, as if trained, so tests see a generic system."""
    torch.manual_seed(seed)
    layer = LAYERS[name]().to(dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
        layer.log_dt.copy_(torch.empty_like(layer.log_dt).uniform_(-3, -0.5))  # Δ in [0.05, 0.6]: fast dynamics, short tests
    return layer


def step_loop(layer, x, state):
    ys = []
    for t in range(x.shape[1]):
        y_t, state = layer.step(x[:, t], state)
        ys.append(y_t)
    return torch.stack(ys, 1), state


def rand(*shape, dtype=torch.float64, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("name", LAYERS)
def test_forward_scan_step_agree_float64(name):
    layer = make(name)
    x = rand(2, 23, H)
    y = layer(x)
    s0 = layer.initial_state(2, dtype=torch.float64)
    y_scan, s_scan = layer.scan(x, s0)
    y_none, s_none = layer.scan(x, None)
    y_reset_path, s_reset_path = layer.scan(x, s0, resets=torch.zeros(2, 23, dtype=torch.bool))
    y_step, s_step = step_loop(layer, x, s0)
    for y_other in (y_scan, y_none, y_reset_path, y_step):
        torch.testing.assert_close(y_other, y, rtol=0, atol=1e-10)
    for s in (s_none, s_reset_path, s_step):
        torch.testing.assert_close(s, s_scan, rtol=0, atol=1e-10)
    assert y.dtype == torch.float64 and y.shape == x.shape


@pytest.mark.parametrize("name", LAYERS)
def test_forward_scan_step_agree_float32(name):
    layer = make(name, torch.float32)
    x = rand(2, 200, H, dtype=torch.float32)
    y = layer(x)
    y_step, s_step = step_loop(layer, x, layer.initial_state(2))
    y_scan, s_scan = layer.scan(x, None, resets=torch.zeros(2, 200, dtype=torch.bool))
    scale = y.abs().max().item()
    torch.testing.assert_close(y_step, y, rtol=0, atol=1e-5 * scale)
    torch.testing.assert_close(y_scan, y, rtol=0, atol=1e-5 * scale)
    torch.testing.assert_close(s_scan, s_step, rtol=1e-4, atol=1e-5)
    assert y.dtype == torch.float32


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("with_resets_path", [False, True])
def test_split_scan_equals_one_scan(name, with_resets_path):
    layer = make(name)
    x = rand(2, 20, H)
    no_reset = (lambda L: torch.zeros(2, L, dtype=torch.bool)) if with_resets_path else (lambda L: None)
    start = layer.scan(rand(2, 5, H, seed=7), None)[1]  # a non-zero state to continue from
    y, s = layer.scan(x, start, no_reset(20))
    y1, s1 = layer.scan(x[:, :8], start, no_reset(8))
    y2, s2 = layer.scan(x[:, 8:], s1, no_reset(12))
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=0, atol=1e-10)
    torch.testing.assert_close(s2, s, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", LAYERS)
def test_resets_equal_separate_pieces(name):
    layer = make(name)
    x = rand(3, 16, H)
    start = layer.scan(rand(3, 4, H, seed=5), None)[1]
    resets = torch.zeros(3, 16, dtype=torch.bool)
    resets[0, 0] = True  # a reset at t = 0 discards the incoming state
    resets[1, [5, 11]] = True
    resets[2, 15] = True
    y, s = layer.scan(x, start, resets)
    for b in range(3):
        cuts = [0] + resets[b].nonzero().flatten().tolist() + [16]
        state = start[b : b + 1]
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            if lo == hi:
                continue
            if resets[b, lo]:
                state = None
            y_piece, state = layer.scan(x[b : b + 1, lo:hi], state)
            torch.testing.assert_close(y[b : b + 1, lo:hi], y_piece, rtol=0, atol=1e-10)
        torch.testing.assert_close(s[b : b + 1], state, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="resets"):
        layer.scan(x, None, resets[:, :3])


@pytest.mark.parametrize("name", LAYERS)
def test_causality(name):
    layer = make(name)
    x = rand(2, 18, H)
    t = 9
    x2 = x.clone()
    x2[:, t + 1 :] = rand(2, 18 - t - 1, H, seed=3)
    resets = torch.zeros(2, 18, dtype=torch.bool)
    resets[0, 4] = True
    for run in (lambda z: layer(z), lambda z: layer.scan(z, None, resets)[0]):
        y, y2 = run(x), run(x2)
        torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)
        assert (y2[:, t + 1 :] - y[:, t + 1 :]).abs().max() > 1e-3


def dense_system(layer):
    """The layer's continuous system as real matrices, built independently of its own code paths."""
    Lambda = torch.complex(-torch.exp(layer.log_A_real), layer.A_imag)
    P = torch.view_as_complex(layer.P) if isinstance(layer, S4) else torch.zeros_like(Lambda)
    A, B, C = dplr_dense(Lambda, P, torch.view_as_complex(layer.B), torch.view_as_complex(layer.C))
    method = "bilinear" if isinstance(layer, S4) else layer.discretization
    return A, B, C, torch.exp(layer.log_dt), method


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("L", [16, 25])
def test_kernel_equals_dense_discretised_system(name, L):
    layer = make(name)
    A, B, C, dt, method = dense_system(layer)
    K = layer.kernel(L, torch.float64)
    torch.testing.assert_close(K, dense_kernel(A, B, C, dt, L, method), rtol=0, atol=1e-10)
    # The kernel is the impulse response of the recurrent form.
    impulse = torch.zeros(1, L, H, dtype=torch.float64)
    impulse[:, 0] = 1
    y, _ = step_loop(layer, impulse, layer.initial_state(1, dtype=torch.float64))
    torch.testing.assert_close(y[0].T - layer.D[:, None] * impulse[0].T, K, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", LAYERS)
def test_gradcheck(name):
    layer = make(name)
    x = rand(1, 5, H).requires_grad_()
    names = [n for n, _ in layer.named_parameters()]

    def fn(x, *params):
        return torch.func.functional_call(layer, dict(zip(names, params)), (x,))

    assert torch.autograd.gradcheck(fn, (x, *[p.detach().clone().requires_grad_() for p in layer.parameters()]))


@pytest.mark.parametrize("name", LAYERS)
def test_gradients_of_conv_and_recurrent_paths_agree(name):
    layer = make(name)
    x = rand(2, 12, H).requires_grad_()
    w = rand(2, 12, H, seed=4)
    start = layer.scan(rand(2, 3, H, seed=6), None)[1].detach()

    def grads(run):
        layer.zero_grad()
        x.grad = None
        (run() * w).sum().backward()
        return [x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]

    resets = torch.zeros(2, 12, dtype=torch.bool)
    reference = grads(lambda: step_loop(layer, x, start)[0])
    for run in (lambda: layer.scan(x, start)[0], lambda: layer.scan(x, start, resets)[0]):
        for g, g_ref in zip(grads(run), reference):
            torch.testing.assert_close(g, g_ref, rtol=1e-9, atol=1e-10)
    g_conv, g_loop = grads(lambda: layer(x)), grads(lambda: step_loop(layer, x, layer.initial_state(2, dtype=torch.float64))[0])
    for g, g_ref in zip(g_conv, g_loop):
        torch.testing.assert_close(g, g_ref, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", LAYERS)
def test_ssm_parameters_are_tagged(name):
    layer = LAYERS[name]()
    ssm_tag = {"lr_scale": 0.1, "weight_decay": 0.0, "ssm": True}
    tagged = {n for n, p in layer.named_parameters() if getattr(p, "_optim", None) == ssm_tag}
    expected = {"log_A_real", "A_imag", "B", "C", "log_dt"} | ({"P"} if name == "s4" else set())
    assert tagged == expected
    groups = {(g["lr"], g["weight_decay"]): {id(p) for p in g["params"]} for g in param_groups(layer, lr=1e-3)}
    assert {id(getattr(layer, n)) for n in expected} == groups[(1e-4, 0.0)]


@pytest.mark.parametrize("name", LAYERS)
def test_init(name):
    torch.manual_seed(0)
    layer = LAYERS[name]()
    dt = torch.exp(layer.log_dt)
    assert torch.all((dt >= 0.001 * 0.999) & (dt <= 0.1 * 1.001))
    torch.testing.assert_close(layer.D, torch.ones(H))
    assert torch.all(torch.exp(layer.log_A_real) == 0.5)  # Re Λ = -1/2 for LegS, Lin and Inv
    assert layer.C.shape == (H, N // 2, 2)
    if name == "s4":
        # The S4 init is HiPPO-LegS itself: read out through C = c V, its kernel is LegS's with output row c.
        A, B = hippo_legs(N)
        c = rand(H, N)
        with torch.no_grad():
            layer.C.copy_(torch.view_as_real(c.to(torch.complex128) @ legs_nplr(N)[3]))
        dt = torch.exp(layer.log_dt.double())
        K_legs = dense_kernel(A.expand(H, N, N), B.expand(H, N), c, dt, 64, "bilinear")
        torch.testing.assert_close(layer.kernel(64).double(), K_legs, rtol=0, atol=1e-5 * K_legs.abs().max().item())


@pytest.mark.parametrize("name", LAYERS)
def test_stable_for_any_parameter_values(name):
    layer = make(name)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(5 * torch.randn_like(p))
    A = dense_system(layer)[0]
    assert torch.linalg.eigvals(A).real.max() < 0


@pytest.mark.parametrize("name", LAYERS)
def test_autocast_keeps_ssm_in_float32(name):
    layer = make(name, torch.float32)
    x = rand(2, 16, H, dtype=torch.float32)
    y = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_ac = layer(x)
        y_scan, _ = layer.scan(x, None, torch.zeros(2, 16, dtype=torch.bool))
        y_step, _ = layer.step(x[:, 0], layer.initial_state(2))
    assert y_ac.dtype == y_scan.dtype == y_step.dtype == torch.float32
    torch.testing.assert_close(y_ac, y)
    torch.testing.assert_close(y_scan, y, rtol=1e-4, atol=1e-5)
    y_bf16 = layer(x.bfloat16())
    assert y_bf16.dtype == torch.bfloat16
    torch.testing.assert_close(y_bf16.float(), y, rtol=0.05, atol=0.05 * y.abs().max().item())


def test_initial_state_shapes_and_dtypes():
    s4d, s4 = S4D(H, N), S4(H, N)
    assert s4d.initial_state(2).shape == (2, H, N // 2) and s4d.initial_state(2).dtype == torch.complex64
    assert s4d.initial_state(2, dtype=torch.float64).dtype == torch.complex128
    assert s4.initial_state(2).shape == (2, H, N) and s4.initial_state(2).dtype == torch.float32
    assert s4.initial_state(2, dtype=torch.float64).dtype == torch.float64


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="even"):
        S4D(H, 7)
    with pytest.raises(ValueError, match="even"):
        S4(H, 7)
    with pytest.raises(ValueError, match="discretization"):
        S4D(H, N, discretization="euler")
    with pytest.raises(ValueError, match="init"):
        S4D(H, N, init="random")
