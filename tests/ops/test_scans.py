"""Every fast scan path against the sequential reference: outputs and gradients."""

import itertools

import pytest
import torch

import seqssm.ops.linear as linear_scan_module
import seqssm.ops.selective as selective_scan_module
from seqssm.ops import linear_scan, selective_scan, selective_step

TOL = {torch.float64: dict(atol=1e-10, rtol=1e-9), torch.float32: dict(atol=2e-4, rtol=2e-4)}


def _grads(out, inputs):
    loss = sum((o.abs() ** 2).sum() for o in out)
    return torch.autograd.grad(loss, [i for i in inputs if i is not None and i.requires_grad], allow_unused=True)


# ----------------------------------------------------------------------------- linear_scan


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128, torch.float32])
@pytest.mark.parametrize("with_state,with_resets", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("slice_target", [1, 1 << 12])  # sequential loop / chunks side by side
def test_linear_scan_matches_reference(dtype, with_state, with_resets, slice_target, monkeypatch):
    monkeypatch.setattr(linear_scan_module, "_SLICE_TARGET", slice_target)
    B, L, F = 3, 53, 4
    a = (torch.rand(B, L, F, dtype=dtype) * 1.2).requires_grad_()
    b = torch.randn(B, L, F, dtype=dtype, requires_grad=True)
    h0 = torch.randn(B, F, dtype=dtype, requires_grad=True) if with_state else None
    resets = torch.rand(B, L) < 0.1 if with_resets else None
    ref = linear_scan(a, b, h0, resets, backend="reference")
    fast = linear_scan(a, b, h0, resets, backend="torch")
    tol = TOL[torch.float32 if dtype == torch.float32 else torch.float64]
    torch.testing.assert_close(fast, ref, **tol)
    for g_fast, g_ref in zip(_grads([fast], [a, b, h0]), _grads([ref], [a, b, h0])):
        torch.testing.assert_close(g_fast, g_ref, **tol)


def test_linear_scan_broadcast_a_and_complex_gradcheck():
    a = (0.9 * torch.exp(1j * torch.rand(1, 1, 3, dtype=torch.float64))).requires_grad_()
    b = torch.randn(2, 9, 3, dtype=torch.complex128, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=torch.complex128, requires_grad=True)
    resets = torch.zeros(2, 9, dtype=torch.bool)
    resets[1, 4] = True
    assert torch.autograd.gradcheck(lambda a, b, h0: linear_scan(a, b, h0, resets, backend="torch"), (a, b, h0))


def test_linear_scans_shape_broadcast_is_torchs():
    """The eager shape rule of linear_scan's inputs (torch.broadcast_shapes costs tens of microseconds a call)
    gives torch.broadcast_shapes' shape, or fails where it fails."""
    shapes = [(), (1,), (3,), (1, 1, 5), (2, 1, 5), (2, 3, 1), (4, 2, 3, 5), (0,), (2, 0, 5), (1, 0, 1)]
    for x, y in itertools.product(map(torch.Size, shapes), repeat=2):
        try:
            expected = torch.broadcast_shapes(x, y)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                linear_scan_module._broadcast_shape(x, y)
        else:
            assert linear_scan_module._broadcast_shape(x, y) == expected, (x, y)


def test_linear_scan_reset_equals_separate_pieces():
    a, b = torch.rand(1, 20, 2, dtype=torch.float64), torch.randn(1, 20, 2, dtype=torch.float64)
    resets = torch.zeros(1, 20, dtype=torch.bool)
    resets[0, 7] = True
    h = linear_scan(a, b, torch.randn(1, 2, dtype=torch.float64), resets)
    torch.testing.assert_close(h[:, 7:], linear_scan(a[:, 7:], b[:, 7:]))


def test_linear_scan_against_mambapy_pscan():
    pscan = pytest.importorskip("mambapy.pscan", reason="mambapy is in the test extra").pscan
    a = torch.rand(2, 64, 8, 4)
    b = torch.randn(2, 64, 8, 4)
    torch.testing.assert_close(linear_scan(a, b), pscan(a, b), atol=1e-4, rtol=1e-4)


def test_linear_scan_bad_input():
    with pytest.raises(ValueError, match="resets must have shape"):
        linear_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 3), resets=torch.zeros(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="initial_state"):
        linear_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 3), initial_state=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="unknown backend"):
        linear_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 3), backend="cuda")


# --------------------------------------------------------------------------- selective_scan


def _selective_inputs(dtype, groups, with_z, with_D, with_bias, with_state, with_resets, B=2, D=6, N=4, L=29):
    def leaf(*shape, positive=False):
        x = torch.rand(*shape, dtype=dtype) if positive else torch.randn(*shape, dtype=dtype)
        return x.requires_grad_()

    bc_shape = (B, N, L) if groups == 0 else (B, groups, N, L)
    return dict(
        u=leaf(B, D, L),
        delta=leaf(B, D, L, positive=True),
        A=(-torch.rand(D, N, dtype=dtype) - 0.1).requires_grad_(),
        B=leaf(*bc_shape),
        C=leaf(*bc_shape),
        D=leaf(D) if with_D else None,
        z=leaf(B, D, L) if with_z else None,
        delta_bias=leaf(D) if with_bias else None,
        initial_state=leaf(B, D, N) if with_state else None,
        resets=(torch.rand(B, L) < 0.15) if with_resets else None,
    )


CASES = list(itertools.product([0, 2], [False, True], [False, True], [False, True], [False, True], [False, True]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("groups,with_z,with_D,with_bias_softplus,with_state,with_resets", CASES[::3] + [CASES[-1]])
@pytest.mark.parametrize("chunk_elements", [1 << 21, 96])  # one chunk / many chunks
def test_selective_scan_matches_reference(
    dtype, groups, with_z, with_D, with_bias_softplus, with_state, with_resets, chunk_elements, monkeypatch
):
    monkeypatch.setattr(selective_scan_module, "_CHUNK_ELEMENTS", chunk_elements)
    inp = _selective_inputs(dtype, groups, with_z, with_D, with_bias_softplus, with_state, with_resets)
    kw = dict(delta_softplus=with_bias_softplus, return_last_state=True)
    ref = selective_scan(**inp, **kw, backend="reference")
    fast = selective_scan(**inp, **kw, backend="torch")
    for x, y in zip(fast, ref):
        torch.testing.assert_close(x, y, **TOL[dtype])
    leaves = list(inp.values())
    for g_fast, g_ref in zip(_grads(fast, leaves), _grads(ref, leaves)):
        torch.testing.assert_close(g_fast, g_ref, **TOL[dtype])


@pytest.mark.parametrize("invariant", ["B", "C", "BC"])
@pytest.mark.parametrize("groups", [0, 2])
@pytest.mark.parametrize("chunk_elements", [1 << 21, 96])
def test_selective_scan_time_invariant_B_C(invariant, groups, chunk_elements, monkeypatch):
    """B or C of shape (dim, N), as mamba_ssm's selective_scan_fn accepts: the torch path against the reference."""
    monkeypatch.setattr(selective_scan_module, "_CHUNK_ELEMENTS", chunk_elements)
    inp = _selective_inputs(torch.float64, groups, True, True, True, True, True)
    for name in invariant:
        inp[name] = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    kw = dict(delta_softplus=True, return_last_state=True)
    fast = selective_scan(**inp, **kw, backend="torch")
    ref = selective_scan(**inp, **kw, backend="reference")
    for x, y in zip(fast, ref):
        torch.testing.assert_close(x, y, **TOL[torch.float64])
    leaves = list(inp.values())
    for g_fast, g_ref in zip(_grads(fast, leaves), _grads(ref, leaves)):
        torch.testing.assert_close(g_fast, g_ref, **TOL[torch.float64])


def test_selective_scan_time_invariant_B_C_follow_the_definition():
    """The reference with B, C (dim, N) equals the reference with those matrices repeated per step as
    one group per channel, written out by hand."""
    inp = _selective_inputs(torch.float64, 0, False, False, False, False, False)
    B, C = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    y = selective_scan(**{**inp, "B": B, "C": C}, backend="reference")
    h = torch.zeros(2, 6, 4, dtype=torch.float64)
    for t in range(inp["u"].shape[-1]):
        dA = torch.exp(inp["delta"][..., t, None] * inp["A"])
        h = dA * h + (inp["delta"][..., t] * inp["u"][..., t])[..., None] * B
        torch.testing.assert_close(y[..., t], (h * C).sum(-1))


@pytest.mark.parametrize("groups", [0, 2])
@pytest.mark.parametrize("chunk_elements", [1 << 21, 96])
def test_selective_scan_channels_last_inputs(groups, chunk_elements, monkeypatch):
    """u, delta, B, C given as (batch, L, channels) memory seen through a transpose, as S6 passes them:
    same outputs and gradients as the reference, and y comes back in the same layout."""
    monkeypatch.setattr(selective_scan_module, "_CHUNK_ELEMENTS", chunk_elements)
    inp = _selective_inputs(torch.float64, groups, True, True, True, True, True)
    for name in ("u", "delta", "B", "C", "z"):
        stored = inp[name].detach().transpose(-1, -2).contiguous().requires_grad_()
        inp[name], inp[name + "_stored"] = stored.transpose(-1, -2), stored
    assert inp["u"].stride(1) == 1
    fast = selective_scan(**{k: v for k, v in inp.items() if not k.endswith("_stored")}, delta_softplus=True,
                          return_last_state=True, backend="torch")
    ref = selective_scan(**{k: v for k, v in inp.items() if not k.endswith("_stored")}, delta_softplus=True,
                         return_last_state=True, backend="reference")
    assert fast[0].stride(1) == 1
    for x, y in zip(fast, ref):
        torch.testing.assert_close(x, y, **TOL[torch.float64])
    leaves = [v for k, v in inp.items() if k.endswith("_stored")] + [inp["A"], inp["initial_state"]]
    for g_fast, g_ref in zip(_grads(fast, leaves), _grads(ref, leaves)):
        torch.testing.assert_close(g_fast, g_ref, **TOL[torch.float64])


@pytest.mark.parametrize("channels_last", [False, True])
def test_selective_scan_inference_path_matches_reference(channels_last, monkeypatch):
    """Without autograd the torch backend keeps no chunk-start states: same outputs and last state."""
    monkeypatch.setattr(selective_scan_module, "_CHUNK_ELEMENTS", 96)
    inp = _selective_inputs(torch.float64, 2, True, True, True, True, True)
    if channels_last:
        for name in ("u", "delta", "B", "C", "z"):
            inp[name] = inp[name].detach().transpose(-1, -2).contiguous().transpose(-1, -2)
    with torch.no_grad():
        fast = selective_scan(**inp, delta_softplus=True, return_last_state=True, backend="torch")
        ref = selective_scan(**inp, delta_softplus=True, return_last_state=True, backend="reference")
    for x, y in zip(fast, ref):
        torch.testing.assert_close(x, y, **TOL[torch.float64])


def test_selective_scan_gradcheck():
    inp = _selective_inputs(torch.float64, 2, True, True, True, True, True, B=1, D=4, N=2, L=7)
    names = [k for k, v in inp.items() if isinstance(v, torch.Tensor) and v.requires_grad]
    fixed = {k: v for k, v in inp.items() if k not in names}

    def fn(*args):
        return selective_scan(**dict(zip(names, args)), **fixed, delta_softplus=True, return_last_state=True)

    assert torch.autograd.gradcheck(fn, tuple(inp[k] for k in names))


def test_selective_scan_state_carry_and_step():
    inp = _selective_inputs(torch.float64, 0, True, True, True, True, False)
    full, last = selective_scan(**inp, delta_softplus=True, return_last_state=True)
    cut = 11
    part = {k: (v[..., :cut] if k in ("u", "delta", "z", "B", "C") else v) for k, v in inp.items()}
    rest = {k: (v[..., cut:] if k in ("u", "delta", "z", "B", "C") else v) for k, v in inp.items()}
    y1, s1 = selective_scan(**part, delta_softplus=True, return_last_state=True)
    rest["initial_state"] = s1
    y2, s2 = selective_scan(**rest, delta_softplus=True, return_last_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], -1), full)
    torch.testing.assert_close(s2, last)
    h = inp["initial_state"]
    for t in range(inp["u"].shape[-1]):
        y_t, h = selective_step(
            h, inp["u"][..., t], inp["delta"][..., t], inp["A"], inp["B"][..., t], inp["C"][..., t],
            inp["D"], inp["z"][..., t], inp["delta_bias"], True,
        )
        torch.testing.assert_close(y_t, full[..., t])
    torch.testing.assert_close(h, last)


def test_selective_scan_bad_shapes_and_backend():
    inp = _selective_inputs(torch.float32, 0, False, False, False, False, False)
    with pytest.raises(ValueError, match="A must be"):
        selective_scan(**{**inp, "A": inp["A"][:, :, None]})
    with pytest.raises(ValueError, match="B must be"):
        selective_scan(**{**inp, "B": inp["B"][:, :-1]})
    with pytest.raises(ValueError, match="same number of groups"):
        selective_scan(**{**inp, "B": inp["B"].view(2, 1, 4, -1), "C": inp["C"].view(2, 1, 4, -1).expand(2, 2, 4, -1)})
    with pytest.raises(RuntimeError, match="mamba_ssm"):
        selective_scan(**inp, backend="mamba_ssm")


def test_selective_scan_env_override(monkeypatch):
    inp = _selective_inputs(torch.float64, 0, False, False, False, True, False)
    monkeypatch.setenv("SEQSSM_BACKEND", "reference")
    y_env = selective_scan(**inp)
    monkeypatch.setenv("SEQSSM_BACKEND", "torch")
    torch.testing.assert_close(selective_scan(**inp), y_env)


@pytest.mark.gpu
def test_mamba_ssm_backend_matches_reference_on_cuda():
    pytest.importorskip("mamba_ssm", reason="mamba_ssm (the [cuda] extra) is not installed")
    inp = _selective_inputs(torch.float32, 0, True, True, True, False, False)
    inp = {k: (v.detach().cuda() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    ref = selective_scan(**inp, delta_softplus=True, backend="reference")
    fast = selective_scan(**inp, delta_softplus=True, backend="mamba_ssm")
    torch.testing.assert_close(fast, ref, atol=1e-3, rtol=1e-3)
    # A time-invariant B passes through to mamba_ssm's kernel (float32, like A).
    inp["B"] = torch.randn(6, 4, device="cuda")
    ref = selective_scan(**inp, delta_softplus=True, backend="reference")
    fast = selective_scan(**inp, delta_softplus=True, backend="mamba_ssm")
    torch.testing.assert_close(fast, ref, atol=1e-3, rtol=1e-3)
