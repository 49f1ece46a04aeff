"""The ops' eager route (`seqssm.ops.custom.OpCaller`): the same functions as the custom op, without the dispatcher,
so the same outputs and gradients bit for bit; the op itself wherever a call is traced or transformed."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from seqssm.ops import causal_conv1d, causal_conv1d_step, custom, linear_scan, selective_scan, selective_step
from seqssm.ops.linear import linear_scan_chunked, linear_scan_chunked_op
from seqssm.ops.rotary import rotary_table
from seqssm.ops.ssd import ssd_scan


def _selective(backend):
    g = torch.Generator().manual_seed(0)
    b, d, n, length = 2, 4, 3, 9
    u, delta, z = (torch.randn(b, d, length, dtype=torch.float64, generator=g) for _ in range(3))
    B, C = (torch.randn(b, n, length, dtype=torch.float64, generator=g) for _ in range(2))
    A = -torch.rand(d, n, dtype=torch.float64, generator=g) - 0.5
    D, bias = torch.randn(d, dtype=torch.float64, generator=g), torch.randn(d, dtype=torch.float64, generator=g)
    h0 = torch.randn(b, d, n, dtype=torch.float64, generator=g)
    resets = torch.rand(b, length, generator=g) < 0.2
    inputs = [u, delta, A, B, C, D, z, bias, h0]

    def run(u, delta, A, B, C, D, z, bias, h0):
        y, last = selective_scan(u, delta, A, B, C, D, z, bias, True, True, initial_state=h0, resets=resets,
                                 backend=backend)
        return y, last
    return run, inputs


def _linear(backend):
    g = torch.Generator().manual_seed(1)
    a = 0.9 * torch.rand(2, 7, 3, dtype=torch.float64, generator=g)
    b, h0 = torch.randn(2, 7, 3, dtype=torch.float64, generator=g), torch.randn(2, 3, dtype=torch.float64, generator=g)
    resets = torch.rand(2, 7, generator=g) < 0.3
    return (lambda a, b, h0: (linear_scan(a, b, h0, resets, backend=backend),)), [a, b, h0]


def _conv(backend):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 11, generator=g)  # float32: the Triton conv takes no float64
    weight, bias = torch.randn(4, 4, generator=g), torch.randn(4, generator=g)
    return (lambda x, w, c: (causal_conv1d(x, w, c, silu=True, backend=backend),)), [x, weight, bias]


def _ssd(backend):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 10, 2, 4, generator=g)
    dt = torch.rand(1, 10, 2, generator=g) + 0.1
    A = -torch.rand(2, generator=g) - 0.5
    B, C = torch.randn(1, 10, 1, 8, generator=g), torch.randn(1, 10, 1, 8, generator=g)
    return (lambda x, dt, A, B, C: ssd_scan(x, dt, A, B, C, chunk_size=4, backend=backend)), [x, dt, A, B, C]


def _steps(backend):
    """A decoding step of each kind: the selective step and the conv step (float32: the Triton steps take no float64)."""
    g = torch.Generator().manual_seed(4)
    b, d, n = 2, 4, 3
    h, A = torch.randn(b, d, n, generator=g), -torch.rand(d, n, generator=g) - 0.5
    u, delta, z = (torch.randn(b, d, generator=g) for _ in range(3))
    B, C = torch.randn(b, n, generator=g), torch.randn(b, n, generator=g)
    state, weight = torch.randn(b, d, 3, generator=g), torch.randn(d, 4, generator=g)

    def run(h, u, delta, A, B, C, z, state, weight):
        y, h_next = selective_step(h, u, delta, A, B, C, None, z, None, True, backend=backend)
        y_conv, state_next = causal_conv1d_step(u, state, weight, silu=True, backend=backend)
        return y, h_next, y_conv, state_next
    return run, [h, u, delta, A, B, C, z, state, weight]


CASES = {
    "selective triton": (_selective, "triton"), "selective torch": (_selective, "torch"),
    "linear triton": (_linear, "triton"), "linear torch": (_linear, "torch"),
    "conv triton": (_conv, "triton"), "ssd triton": (_ssd, "triton"), "steps triton": (_steps, "triton"),
}


def _outputs_and_grads(run, inputs):
    leaves = [t.clone().requires_grad_() for t in inputs]
    outputs = run(*leaves)
    weights = [torch.randn(o.shape, dtype=o.dtype, generator=torch.Generator().manual_seed(i))
               for i, o in enumerate(outputs)]
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), leaves)
    return [o.detach() for o in outputs], list(grads)


@pytest.mark.parametrize("case", CASES)
def test_the_eager_route_equals_the_op(case, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    build, backend = CASES[case]
    run, inputs = build(backend)
    routes = []
    real_traced = custom.traced
    monkeypatch.setattr(custom, "traced", lambda args: routes.append(real_traced(args)) or routes[-1])
    direct = _outputs_and_grads(run, inputs)
    assert routes and not any(routes), "the eager call must take the direct route"
    monkeypatch.setattr(custom, "traced", lambda args: True)
    through_op = _outputs_and_grads(run, inputs)
    for got, want in zip(direct[0] + direct[1], through_op[0] + through_op[1]):
        assert torch.equal(got, want)


def test_the_eager_route_equals_the_op_under_autocast(monkeypatch):
    """Autocast stays on inside both routes: the torch path's products run in bfloat16 either way."""
    run, inputs = _selective("torch")

    def autocast_run(*args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return run(*args)

    inputs = [t.float() for t in inputs]
    direct = _outputs_and_grads(autocast_run, inputs)
    monkeypatch.setattr(custom, "traced", lambda args: True)
    through_op = _outputs_and_grads(autocast_run, inputs)
    for got, want in zip(direct[0] + direct[1], through_op[0] + through_op[1]):
        assert torch.equal(got, want)


def test_an_eager_call_names_its_op_in_the_graph():
    a, b = (torch.rand(2, 5, 3, dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert type(linear_scan_chunked(a, b, None).grad_fn).__name__ == "linear.chunked_forwardBackward"
    assert "seqssm_linear_scan_chunked" in type(linear_scan_chunked_op(a, b, None).grad_fn).__name__


def test_a_double_backward_fails_as_the_op_does():
    a, b = (torch.rand(2, 5, 3, dtype=torch.float64, requires_grad=True) for _ in range(2))
    for scan in (linear_scan_chunked, linear_scan_chunked_op):
        grad_b, = torch.autograd.grad(scan(a, b, None).sum(), b, create_graph=True)
        with pytest.raises(RuntimeError, match="linear_scan_chunked_backward.default but no autograd formula"):
            torch.autograd.grad(grad_b.sum(), a)


def test_traced_calls_go_through_the_op():
    plain = torch.rand(2, 3)
    assert not custom.traced((plain, None, 3))
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(plain)
        assert custom.traced((fake,))
        cos, sin = rotary_table(torch.arange(4), torch.rand(2, dtype=torch.float64))  # the op's fake implementation
        assert cos.shape == (4, 4) and type(cos).__name__ == "FakeTensor"
    seen = []
    torch.func.vmap(lambda x: seen.append(custom.traced((x,))) or x)(plain)
    assert seen == [True]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):  # not a dispatch mode: still eager
        assert not custom.traced((plain,))
    a, b = torch.rand(1, 4, 2, dtype=torch.float64), torch.rand(1, 4, 2, dtype=torch.float64)
    graph = torch.jit.trace(lambda a, b: linear_scan_chunked(a, b, None), (a, b)).graph
    assert "seqssm::linear_scan_chunked" in str(graph)  # the op, not the ops of its body


def test_a_caller_needs_both_setup_and_backward():
    with pytest.raises(ValueError, match="give both setup and backward"):
        custom.OpCaller(linear_scan_chunked_op, lambda *a: a, setup=lambda *a: None)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_an_eager_mamba_model_reaches_no_op_through_the_dispatcher(backend, monkeypatch):
    """Every op call of a Mamba stack goes through its OpCaller: no autograd node of the model's graph is a custom
    op's (those name themselves GeneratedBackwardFor_seqssm_...)."""
    from seqssm.models import SequenceModel, model_config

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("SEQSSM_BACKEND", backend)
    torch.manual_seed(0)
    model = SequenceModel(model_config("mamba-s6", vocab_size=16, d_model=8, n_layers=2, d_state=4, dropout=0.0))
    loss = model(torch.randint(0, 16, (2, 6))).square().mean()
    names, stack, seen = [], [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    assert "triton_scan.selective_forwardBackward" in names if backend == "triton" else (
        "selective_chunked.chunked_forwardBackward" in names)
    assert not [n for n in names if n.startswith("GeneratedBackwardFor_seqssm")]
