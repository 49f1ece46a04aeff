"""The Triton backend of `causal_conv1d` (the Mamba blocks' conv, bias and SiLU in one kernel each way) against the
torch path in float64 on the same inputs: outputs and gradients over widths, the three layouts the
layers pass (time-contiguous, the Mamba block's (dim, batch, L) memory on CUDA, channels-last), bias and SiLU,
16-bit inputs, a final state, the backend's choice and refusals, the custom ops under opcheck and torch.compile.
On CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set per test); the `gpu` variants run the same
cases compiled on CUDA, at sizes that take several tiles each way there."""

import types

import pytest
import torch

from seqssm.ops import causal_conv1d, causal_conv1d_reference
from seqssm.ops.backend import Call, choose
from seqssm.ops.conv1d import _causal_conv1d_torch, _causal_conv1d_triton_check

pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
from seqssm.ops.triton_conv import causal_conv1d_triton  # noqa: E402
from .helpers import assert_one_graph_as_eager  # noqa: E402

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=5e-3, rtol=5e-3),
       torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def _x(device, batch, dim, length, layout="contiguous", dtype=torch.float32, seed=0):
    """x (batch, dim, L) in `layout`: "contiguous"; "block", a view of (dim, batch, L) memory (the Mamba block's
    on CUDA); "channels_last", a transposed (batch, L, dim) tensor; "strided", every other step of a longer one."""
    g = torch.Generator().manual_seed(seed)
    if layout == "strided":
        return torch.randn(batch, dim, 2 * length, generator=g).to(device, dtype)[..., ::2]
    order = {"contiguous": (0, 1, 2), "block": (1, 0, 2), "channels_last": (0, 2, 1)}[layout]
    shape = (batch, dim, length)
    memory = torch.randn(*(shape[i] for i in order), generator=g).to(device, dtype)
    return memory.permute(*(order.index(i) for i in range(3)))


def _sizes(device):
    # Interpreted tiles are 4 x 8 (8 x 4 channels-last), compiled 16 x 128 (128 x 16, backward 8 x 128, 64 x 8): dims
    # and lengths that leave partial tiles either way, and backward programs of several tiles (more tiles along L
    # than the backward's groups: 2 interpreted, 64 compiled).
    return (2, 10, 21) if device.type == "cpu" else (3, 300, 9000)


def _check(x, weight, bias, silu, tol):
    """Values and the gradients of x, weight and bias equal the torch path's in float64 (the reference's, tested
    against it, takes L steps); y and x's gradient are laid out as torch.empty_like(x) (as x where x is dense), in
    x's dtype."""
    leaves = [t.detach().requires_grad_() for t in (x, weight, bias) if t is not None]
    x_, w_, b_ = leaves if bias is not None else (*leaves, None)
    y = causal_conv1d(x_, w_, b_, silu=silu, backend="triton")
    like = torch.empty_like(x)
    assert y.dtype == x.dtype and y.stride() == like.stride()
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    xr, wr, br = ref_leaves if bias is not None else (*ref_leaves, None)
    y_ref = _causal_conv1d_torch(xr, wr, br, silu=silu)
    torch.testing.assert_close(y.double(), y_ref, **tol)
    cot = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(x.device, y.dtype)
    grads = torch.autograd.grad(y, leaves, cot)
    grads_ref = torch.autograd.grad(y_ref, ref_leaves, cot.double())
    # The weight's and the bias's gradients are float32 sums over batch x L terms: their rounding grows with the
    # square root of that count (3 x 9000 terms in the gpu variants), x's gradient sums WIDTH terms.
    terms = (x.shape[0] * x.shape[2]) ** 0.5
    for name, g, g_ref in zip("xwb", grads, grads_ref):
        assert g.dtype == dict(x=x, w=weight, b=bias)[name].dtype
        tol_ = tol if name == "x" else dict(atol=tol["atol"] * terms, rtol=tol["rtol"])
        torch.testing.assert_close(g.double(), g_ref, **tol_, msg=lambda m: f"d{name}: {m}")
    assert grads[0].stride() == like.stride()


@pytest.mark.parametrize("layout", ["contiguous", "block", "channels_last"])
@pytest.mark.parametrize("width, with_bias, silu", [(4, True, True), (4, False, False), (3, True, False),
                                                    (1, False, True), (5, True, True)])
def test_conv_matches_the_torch_path_in_float64(device, layout, width, with_bias, silu):
    """Widths 1 to 5 (the block's 4 among them), with and without bias and SiLU, in each layout, over tiles that do
    not divide dim or L."""
    batch, dim, length = _sizes(device)
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(dim, width, generator=g).to(device)
    bias = torch.randn(dim, generator=g).to(device) if with_bias else None
    _check(_x(device, batch, dim, length, layout), weight, bias, silu, TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_takes_16_bit_inputs(device, dtype):
    """A 16-bit x with float32 taps (mixed precision: autocast's activations, the block's parameters) and a 16-bit
    block: y and x's gradient in x's dtype, computed in float32."""
    batch, dim, length = _sizes(device)
    g = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(dim, 4, generator=g).to(device), torch.randn(dim, generator=g).to(device)
    x = _x(device, batch, dim, length, "block", dtype)
    _check(x, weight, bias, True, TOL[dtype])
    _check(x, weight.to(dtype), bias.to(dtype), True, TOL[dtype])


def test_conv_reads_a_strided_x(device):
    """x with no dense layout (every other step): y and x's gradient come contiguous."""
    batch, dim, length = _sizes(device)
    weight, bias = torch.randn(dim, 4, device=device), torch.randn(dim, device=device)
    _check(_x(device, batch, dim, length, "strided"), weight, bias, True, TOL[torch.float32])


def test_conv_takes_an_expanded_gradient_and_gives_the_final_state(device):
    """The gradient of y.sum() (an expanded view) and return_final_state: the last K-1 inputs, zeros before t = 0."""
    x = _x(device, 2, 6, 2).requires_grad_()
    weight = torch.randn(6, 4, device=device, requires_grad=True)
    y, state = causal_conv1d(x, weight, return_final_state=True, silu=True, backend="triton")
    y_ref, state_ref = causal_conv1d_reference(x, weight, return_final_state=True, silu=True)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(state, state_ref)
    grads = torch.autograd.grad(y.sum(), [x, weight])
    for g, g_ref in zip(grads, torch.autograd.grad(y_ref.sum(), [x, weight])):
        torch.testing.assert_close(g, g_ref)


def test_conv_takes_batch_zero_and_length_zero(device):
    weight = torch.randn(5, 4, device=device, requires_grad=True)
    for shape in ((0, 5, 7), (2, 5, 0)):
        y = causal_conv1d(torch.randn(*shape, device=device), weight, silu=True, backend="triton")
        assert y.shape == shape


def test_auto_takes_the_kernel_on_cuda_without_the_package(monkeypatch):
    """`auto` on CUDA: the causal_conv1d package where it loads, else the Triton kernels; the torch path for float64,
    an initial state or resets, and on CPU. The kernels refuse a batch row spanning 2^31 elements (32-bit offsets)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("SEQSSM_BACKEND", raising=False)
    monkeypatch.setattr("seqssm.ops.conv1d.causal_conv1d_package", lambda: (None, "causal_conv1d is not installed"))
    x = torch.empty(2, 8, 16, device="meta")
    weight = torch.empty(8, 4, device="meta")

    def chosen(device, dtype=torch.bfloat16, state=False, resets=False, detail=(x, weight)):
        return choose("causal_conv1d", "auto", Call(torch.device(device), (dtype, torch.float32), state, resets,
                                                    detail=detail))

    assert chosen("cuda") is causal_conv1d_triton
    assert chosen("cuda", torch.float64) is _causal_conv1d_torch
    assert chosen("cuda", state=True) is _causal_conv1d_torch
    assert chosen("cuda", resets=True) is _causal_conv1d_torch
    assert chosen("cpu") is _causal_conv1d_torch
    huge = types.SimpleNamespace(shape=(1, 2, 2**20), stride=lambda: (2**32, 2**31, 1))
    call = Call(torch.device("cuda"), (torch.bfloat16,), detail=(huge, weight))
    assert "2^31" in _causal_conv1d_triton_check(call)
    assert chosen("cuda", detail=(huge, weight)) is _causal_conv1d_torch
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        causal_conv1d(torch.randn(1, 3, 4), torch.randn(3, 4), backend="triton")


def test_conv_ops_pass_opcheck(device):
    x = _x(device, 2, 6, 9, "block").requires_grad_()
    weight = torch.randn(6, 4, device=device, requires_grad=True)
    bias = torch.randn(6, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.seqssm.causal_conv1d_triton.default, (x, weight, bias, True))
    grad_y = torch.randn(2, 6, 9, device=device)
    torch.library.opcheck(torch.ops.seqssm.causal_conv1d_triton_backward.default,
                          (x.detach(), weight.detach(), bias.detach(), grad_y, True))


def test_conv_traces_into_one_graph(device):
    """torch.compile(fullgraph=True) over two convs: no graph break, outputs and gradients as eager."""
    x = _x(device, 2, 6, 9, "block").requires_grad_()
    weight = torch.randn(6, 4, device=device, requires_grad=True)
    bias = torch.randn(6, device=device, requires_grad=True)

    def two_convs(x, weight, bias):
        y = causal_conv1d(x, weight, bias, silu=True, backend="triton")
        return causal_conv1d(y, weight, bias, silu=True, backend="triton").square().sum()

    assert_one_graph_as_eager(two_convs, [x, weight, bias], [x, weight, bias])
