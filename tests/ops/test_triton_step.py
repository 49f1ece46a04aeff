"""The Triton backends of the decoding steps, `selective_step` (one fused step of S6) and `causal_conv1d_step` (the
Mamba blocks' conv window, taps, bias and SiLU), against their torch paths in float64 on the same inputs: outputs and
next state over shapes, groups and every optional input, 16-bit inputs, strided views, gradients, the custom ops under
opcheck and torch.compile. On CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set per test); the `gpu`
variants run the same cases compiled on CUDA."""

import pytest
import torch

from seqssm.errors import InputShapeError
from seqssm.ops import causal_conv1d_step, selective_step
from seqssm.ops.backend import Call, choose
from seqssm.ops.conv1d import _causal_conv1d_step_torch
from seqssm.ops.selective import _selective_step_torch

pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
from seqssm.ops.triton_step import causal_conv1d_step_triton, selective_step_triton  # noqa: E402
from .helpers import assert_one_graph_as_eager  # noqa: E402

NAMES = ("h", "u_t", "delta_t", "A", "B_t", "C_t", "D", "z_t", "delta_bias")
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=5e-3, rtol=5e-3),
       torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def _inputs(device, batch, dim, n, groups=0, dtype=torch.float32, with_d=True, with_z=True, with_bias=True, seed=0):
    """u_t, delta_t, z_t, B_t, C_t in `dtype` (B_t, C_t (batch, N) for groups 0, else (batch, groups, N)); h, A, D
    and delta_bias float32, as S6 passes them."""
    g = torch.Generator().manual_seed(seed)

    def t(*shape, dtype_=torch.float32):
        return torch.randn(*shape, generator=g).to(device, dtype_)

    bc = (batch, n) if groups == 0 else (batch, groups, n)
    return dict(h=t(batch, dim, n), u_t=t(batch, dim, dtype_=dtype), delta_t=t(batch, dim, dtype_=dtype) * 0.5,
                A=-torch.rand(dim, n, generator=g).to(device) - 0.1, B_t=t(*bc, dtype_=dtype), C_t=t(*bc, dtype_=dtype),
                D=t(dim) if with_d else None, z_t=t(batch, dim, dtype_=dtype) if with_z else None,
                delta_bias=t(dim) * 0.3 if with_bias else None)


def _check(inp, softplus, tol):
    y, h = selective_step(**inp, delta_softplus=softplus, backend="triton")
    assert y.dtype == inp["u_t"].dtype and h.dtype == torch.float32 and h.is_contiguous()
    y_ref, h_ref = _selective_step_torch(**{k: v.double() if v is not None else None for k, v in inp.items()},
                                         delta_softplus=softplus)
    torch.testing.assert_close(y.double(), y_ref, **tol)
    torch.testing.assert_close(h.double(), h_ref, **tol)


def _assert_gradients_match(fast_step, torch_step, inp: dict, device, **flags):
    """The gradients of fast_step(**inp, **flags) for every input of `inp` (all leaves), through each of its outputs
    under one random cotangent, equal torch_step's, to float32's tolerance."""
    leaves = list(inp.values())
    outs = {name: step(**inp, **flags) for name, step in (("fast", fast_step), ("torch", torch_step))}
    cot = [torch.randn(t.shape, generator=torch.Generator().manual_seed(1)).to(device) for t in outs["torch"]]
    grads = {name: torch.autograd.grad(out, leaves, cot) for name, out in outs.items()}
    for name, fast, ref in zip(inp, grads["fast"], grads["torch"]):
        torch.testing.assert_close(fast, ref, **TOL[torch.float32], msg=lambda m: f"d{name}: {m}")


# (batch, dim, N, groups): dims that are not powers of two, one group, several, and one per channel (the reference
# scan's time-invariant B and C).
SHAPES = [(1, 3, 1, 0), (2, 10, 5, 2), (3, 40, 16, 4), (2, 7, 3, 7), (1, 24, 16, 1), (2, 33, 12, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("with_d, with_z, with_bias, softplus",
                         [(True, True, True, True), (False, False, False, False), (True, False, True, False),
                          (False, True, False, True)], ids=["all", "none", "D+bias", "z+softplus"])
def test_step_matches_the_torch_path_in_float64(device, shape, with_d, with_z, with_bias, softplus):
    batch, dim, n, groups = shape
    inp = _inputs(device, batch, dim, n, groups, with_d=with_d, with_z=with_z, with_bias=with_bias)
    _check(inp, softplus, TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_step_takes_16_bit_inputs(device, dtype):
    _check(_inputs(device, 2, 40, 16, 2, dtype=dtype), True, TOL[dtype])


def test_step_reads_strided_views(device):
    """S6's Δ, B and C are slices of one projection, the state a transposed view: the kernel reads their strides."""
    inp = _inputs(device, 3, 12, 6)
    proj = torch.randn(3, 12 + 2 * 6, device=device)
    inp.update(delta_t=proj[:, :12], B_t=proj[:, 12:18], C_t=proj[:, 18:])
    inp["h"] = inp["h"].transpose(1, 2).contiguous().transpose(1, 2)
    assert not inp["h"].is_contiguous()
    _check(inp, True, TOL[torch.float32])


def test_step_gradients_are_the_torch_paths(device):
    """Gradients through the op (its backward recomputes the torch path) for every input, through y and the state."""
    inp = {k: v.requires_grad_() for k, v in _inputs(device, 2, 10, 5, 2).items()}
    _assert_gradients_match(selective_step_triton, _selective_step_torch, {k: inp[k] for k in NAMES}, device,
                            delta_softplus=True)


def test_step_takes_batch_zero(device):
    y, h = selective_step(**_inputs(device, 0, 6, 4), delta_softplus=True, backend="triton")
    assert y.shape == (0, 6) and h.shape == (0, 6, 4)


def test_step_refuses_wrong_shapes():
    inp = _inputs("cpu", 2, 6, 4, groups=2)
    with pytest.raises(InputShapeError, match="B_t must be"):
        selective_step(**{**inp, "B_t": inp["B_t"][..., :3]})
    with pytest.raises(InputShapeError, match="groups dividing dim=6"):
        selective_step(**{**inp, "B_t": torch.zeros(2, 4, 4), "C_t": torch.zeros(2, 4, 4)})
    with pytest.raises(InputShapeError, match="h must be"):
        selective_step(**{**inp, "h": inp["h"][:1]})


def test_step_op_passes_opcheck(device):
    """The schema, fake implementation, autograd registration and AOT dispatch of the op."""
    inp = {k: v.requires_grad_() if v is not None else None
           for k, v in _inputs(device, 2, 10, 5, 2, with_z=False).items()}
    torch.library.opcheck(torch.ops.seqssm.selective_step_triton.default, (*(inp[k] for k in NAMES), True))


def test_step_traces_into_one_graph(device):
    """torch.compile(fullgraph=True) over two decoding steps: no graph break, outputs and gradients as eager."""
    inp = {k: v.requires_grad_() for k, v in _inputs(device, 2, 10, 5, 2).items()}

    def two_steps(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias):
        y1, h = selective_step(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, True, backend="triton")
        y2, h = selective_step(h, y1, delta_t, A, B_t, C_t, D, z_t, delta_bias, True, backend="triton")
        return y2.square().sum() + h.sum()

    leaves = [inp[k] for k in NAMES]
    assert_one_graph_as_eager(two_steps, leaves, leaves)


# ------------------------------------------------------------------------------------------------ the conv step


def _conv_inputs(device, batch, dim, width, dtype=torch.float32, with_bias=True, seed=0):
    """x_t, state (batch, dim, width - 1) in `dtype`; weight (dim, width) and bias float32, as a float32 block holds
    them."""
    g = torch.Generator().manual_seed(seed)

    def t(*shape, dtype_=torch.float32):
        return torch.randn(*shape, generator=g).to(device, dtype_)

    return dict(x_t=t(batch, dim, dtype_=dtype), state=t(batch, dim, width - 1, dtype_=dtype), weight=t(dim, width),
                bias=t(dim) if with_bias else None)


def _check_conv(inp, silu, tol):
    y, state = causal_conv1d_step(**inp, silu=silu, backend="triton")
    y_ref, state_ref = _causal_conv1d_step_torch(**inp, silu=silu)
    assert y.dtype == y_ref.dtype and state.dtype == inp["x_t"].dtype and state.shape == state_ref.shape
    as64 = {k: v.double() if v is not None else None for k, v in inp.items()}
    as64["state"] = inp["state"].to(inp["x_t"].dtype).double()  # the state as both paths read it
    y64, state64 = _causal_conv1d_step_torch(**as64, silu=silu)
    torch.testing.assert_close(y.double(), y64, **tol)
    torch.testing.assert_close(state, state_ref)  # a copy of inputs: exact


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("with_bias, silu", [(True, True), (False, False), (True, False), (False, True)],
                         ids=["bias+silu", "none", "bias", "silu"])
def test_conv_step_matches_the_torch_path_in_float64(device, width, with_bias, silu):
    """Kernel widths 1 to 5 (5 tiles a block of 8 taps), over channel blocks that do not divide dim (8 per program
    interpreted, 128 compiled)."""
    _check_conv(_conv_inputs(device, 3, 21 if device.type == "cpu" else 300, width, with_bias=with_bias), silu,
                TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_step_takes_16_bit_inputs(device, dtype):
    inp = _conv_inputs(device, 2, 40, 4, dtype=dtype)
    _check_conv(inp, True, TOL[dtype])
    inp.update(weight=inp["weight"].to(dtype), bias=inp["bias"].to(dtype))  # a 16-bit block: y in that dtype
    _check_conv(inp, True, TOL[dtype])


def test_conv_step_reads_strided_views(device):
    """The Mamba block's x_t is the first half of in_proj's output, the taps a view of the conv's (dim, 1, K)
    weight, and a state the window slice of a torch step."""
    inp = _conv_inputs(device, 3, 12, 4)
    xz = torch.randn(3, 24, device=device)
    window = torch.randn(3, 12, 4, device=device)
    weight = torch.randn(12, 1, 4, device=device)
    inp.update(x_t=xz[:, :12], state=window[..., 1:], weight=weight[:, 0])
    assert not (inp["x_t"].is_contiguous() or inp["state"].is_contiguous())
    _check_conv(inp, True, TOL[torch.float32])


def test_conv_step_gradients_are_the_torch_paths(device):
    """Gradients through the op (its backward recomputes the torch path) for every input, through y and the state."""
    inp = {k: v.requires_grad_() for k, v in _conv_inputs(device, 2, 10, 4).items()}
    _assert_gradients_match(causal_conv1d_step_triton, _causal_conv1d_step_torch, inp, device, silu=True)


def test_conv_step_takes_batch_zero(device):
    y, state = causal_conv1d_step(**_conv_inputs(device, 0, 6, 4), silu=True, backend="triton")
    assert y.shape == (0, 6) and state.shape == (0, 6, 3)


def test_conv_step_refuses_wrong_shapes():
    inp = _conv_inputs("cpu", 2, 6, 4)
    with pytest.raises(InputShapeError, match=r"state must be \(batch, dim, K-1\) = \(2, 6, 3\)"):
        causal_conv1d_step(**{**inp, "state": inp["state"][..., :2]})
    with pytest.raises(InputShapeError, match="need x_t"):
        causal_conv1d_step(**{**inp, "weight": inp["weight"][:5]})
    with pytest.raises(InputShapeError, match="bias must be"):
        causal_conv1d_step(**{**inp, "bias": inp["bias"][:5]})


@pytest.mark.parametrize("op", ["selective_step", "causal_conv1d_step"])
def test_auto_takes_the_kernel_on_cuda_and_torch_elsewhere(monkeypatch, op):
    """Decoding (S6.step_projected, the Mamba blocks' conv step) calls both steps on "auto": CUDA gets the fused
    kernel, CPU and float64 the torch path; the Triton backend refuses CPU tensors outside the interpreter."""
    kernel, torch_path, step, inputs = {
        "selective_step": (selective_step_triton, _selective_step_torch, selective_step,
                           lambda: _inputs("cpu", 1, 3, 2)),
        "causal_conv1d_step": (causal_conv1d_step_triton, _causal_conv1d_step_torch, causal_conv1d_step,
                               lambda: _conv_inputs("cpu", 1, 3, 4)),
    }[op]
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("SEQSSM_BACKEND", raising=False)
    half = (torch.bfloat16, torch.float32)
    assert choose(op, "auto", Call(torch.device("cuda"), half)) is kernel
    assert choose(op, "auto", Call(torch.device("cuda"), (torch.float64,))) is torch_path
    assert choose(op, "auto", Call(torch.device("cpu"), half)) is torch_path
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        step(**inputs(), backend="triton")


def test_conv_step_op_passes_opcheck(device):
    inp = {k: v.requires_grad_() for k, v in _conv_inputs(device, 2, 10, 4).items()}
    torch.library.opcheck(torch.ops.seqssm.causal_conv1d_step_triton.default, (*inp.values(), True))


def test_conv_step_traces_into_one_graph(device):
    """torch.compile(fullgraph=True) over two conv steps: no graph break, outputs and gradients as eager."""
    inp = {k: v.requires_grad_() for k, v in _conv_inputs(device, 2, 10, 4).items()}

    def two_steps(x_t, state, weight, bias):
        y1, state = causal_conv1d_step(x_t, state, weight, bias, True, backend="triton")
        y2, state = causal_conv1d_step(y1, state, weight, bias, True, backend="triton")
        return y2.square().sum() + state.sum()

    leaves = list(inp.values())
    assert_one_graph_as_eager(two_steps, leaves, leaves)
