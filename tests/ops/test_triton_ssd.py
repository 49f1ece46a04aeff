"""The Triton backend of the SSD scan against the sequential reference in float64 on the same inputs: outputs and
every gradient (x, Δ, A, B, C, D, initial state) through y and the last state. On CPU the kernels run in Triton's
interpreter (TRITON_INTERPRET=1, set per test); the `gpu` variants run the same cases compiled on CUDA."""

import pytest
import torch

from seqssm.ops.backend import Call, choose
from seqssm.ops.ssd import ssd_reference, ssd_scan

pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
from seqssm.ops.triton_ssd import SSD_MAX_TILE, ssd_segment, ssd_tile  # noqa: E402
from .helpers import assert_one_graph_as_eager  # noqa: E402

NAMES = ("x", "dt", "A", "B", "C", "D", "initial_state")
# float32 kernels against float64: sums of a few dozen terms, whose products are float32 in the interpreter and take
# tf32 operands compiled (10-bit mantissas, as mamba_ssm's SSD kernels' float32 dots), rounding the inputs as well
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=2e-2, rtol=2e-2),
       torch.bfloat16: dict(atol=8e-2, rtol=8e-2)}
TF32 = dict(atol=5e-2, rtol=5e-2)


def _f32(device):
    return TOL[torch.float32] if device.type == "cpu" else TF32


def _inputs(device, length, heads=4, p=3, groups=2, n=5, dtype=torch.float32, with_d=True, with_state=True,
            seed=0):
    """Leaves on `device`: x, B, C in `dtype`; Δ, A, D and the initial state float32 (the Mamba-2 layer's)."""
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape, positive=False, dtype_=torch.float32):
        t = torch.rand(*shape, generator=g) if positive else torch.randn(*shape, generator=g)
        return t.to(device, dtype_).requires_grad_()

    b = 2
    return dict(x=leaf(b, length, heads, p, dtype_=dtype), dt=leaf(b, length, heads, positive=True),
                A=(-torch.rand(heads, generator=g) - 0.2).to(device).requires_grad_(),
                B=leaf(b, length, groups, n, dtype_=dtype), C=leaf(b, length, groups, n, dtype_=dtype),
                D=leaf(heads) if with_d else None, initial_state=leaf(b, heads, p, n) if with_state else None)


def _resets(length, chunk, device):
    """Random resets plus one at t = 0, one on the kernels' first chunk boundary and one on the first boundary
    between stored states."""
    resets = torch.rand(2, length, generator=torch.Generator().manual_seed(1)) < 0.15
    resets[0, 0] = True
    tile = ssd_tile(chunk, length, device.type == "cpu")
    for boundary in (tile, tile * ssd_segment(chunk, tile)):
        if length > boundary:
            resets[1, boundary] = True
    return resets.to(device)


def _check(inp, resets, chunk, tol):
    """Triton's y, last state and every gradient against the float64 reference on the same inputs."""
    fast = ssd_scan(**inp, resets=resets, chunk_size=chunk, backend="triton")
    assert fast[0].dtype == inp["x"].dtype and fast[1].dtype == torch.float32
    ref = ssd_reference(**{k: v.double() if v is not None else None for k, v in inp.items()}, resets=resets)
    for out, expected in zip(fast, ref):
        torch.testing.assert_close(out.double(), expected, **tol)
    cot = [torch.randn(t.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(t.device)
           for t in ref]
    names = [k for k in NAMES if inp[k] is not None]
    leaves = [inp[k] for k in names]
    grads = torch.autograd.grad(fast, leaves, [c.to(t.dtype) for c, t in zip(cot, fast)])
    grads_ref = torch.autograd.grad(ref, leaves, cot)
    for name, leaf, g, g_ref in zip(names, leaves, grads, grads_ref):
        assert g.dtype == leaf.dtype, name
        torch.testing.assert_close(g.double(), g_ref.double(), **tol, msg=lambda m: f"gradient of {name}: {m}")


# (L, chunk, groups, head_dim P, d_state N, D, initial state, resets)
CASES = [
    (19, 8, 2, 3, 5, True, True, True),  # L no multiple of the chunk, three chunks, a reset on a boundary
    (5, 8, 1, 6, 4, True, True, True),  # L shorter than a chunk; P over one channel block
    (16, 8, 2, 8, 8, False, False, False),  # no D, no initial state, no resets: powers of two throughout
    (20, 8, 1, 5, 7, True, False, True),
    # chunk 24: chunks of 16 steps, a state kept every 2 of them; L 45 ends inside the second kept state's first chunk
    (45, 24, 2, 3, 5, True, True, True),
    (53, 40, 1, 3, 3, False, False, True),  # a state kept every 3 chunks of 16; no D, no initial state
]


@pytest.mark.parametrize("length,chunk,groups,p,n,with_d,with_state,with_resets", CASES)
def test_ssd_triton_matches_the_recurrence(device, length, chunk, groups, p, n, with_d, with_state, with_resets):
    inp = _inputs(device, length, p=p, groups=groups, n=n, with_d=with_d, with_state=with_state)
    resets = _resets(length, chunk, device) if with_resets else None
    _check(inp, resets, chunk, _f32(device))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ssd_triton_half_inputs_compute_in_float32(device, dtype):
    inp = _inputs(device, 13, dtype=dtype)
    _check(inp, _resets(13, 8, device), 8, TOL[dtype])


def test_ssd_triton_gradient_through_the_last_state_alone(device):
    """A loss on the last state only: y's gradient reaches the backward as None; C and D get zeros."""
    inp = _inputs(device, 11)
    resets = _resets(11, 8, device)
    leaves = [inp[k] for k in NAMES]
    grads = [torch.autograd.grad(fn(**inp, resets=resets)[1].sum(), leaves, allow_unused=True)
             for fn in (lambda **kw: ssd_scan(**kw, chunk_size=8, backend="triton"), ssd_reference)]
    for name, g, g_ref in zip(NAMES, *grads):
        zero = torch.zeros_like(inp[name])
        torch.testing.assert_close(zero if g is None else g, zero if g_ref is None else g_ref, **_f32(device),
                                   msg=lambda m: f"gradient of {name}: {m}")


def test_ssd_triton_empty_and_the_chunk_tile(device):
    """L = 0 passes the initial state through; the kernels' chunk is a power of two up to SSD_MAX_TILE and the
    sequence, at least 16 when compiled (tl.dot's least side)."""
    inp = _inputs(device, 0)
    y, last = ssd_scan(**inp, backend="triton")
    assert y.shape == inp["x"].shape and torch.equal(last, inp["initial_state"])
    assert [ssd_tile(c, 1000, False) for c in (1, 8, 256)] == [16, 16, SSD_MAX_TILE]
    assert [ssd_tile(c, 5, True) for c in (1, 4, 8, 100)] == [1, 4, min(8, SSD_MAX_TILE), min(8, SSD_MAX_TILE)]
    assert [ssd_segment(c, 16) for c in (1, 16, 24, 256)] == [1, 1, 2, 16]  # chunks between kept states
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        ssd_tile(0, 10, True)


def test_auto_picks_triton_on_cuda_and_float64_falls_back(monkeypatch):
    """On CUDA "auto" picks triton for 16- and 32-bit inputs and "chunked" for float64; on CPU "chunked", and
    triton refuses CPU tensors without the interpreter."""
    from seqssm.ops import ssd

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("SEQSSM_BACKEND", raising=False)
    cuda = torch.device("cuda")
    assert choose("ssd", "auto", Call(cuda, (torch.bfloat16, torch.float32))).__name__ == "ssd_triton"
    assert choose("ssd", "auto", Call(cuda, (torch.float64,))) is ssd.ssd_chunked
    assert choose("ssd", "auto", Call(torch.device("cpu"), (torch.float32,))) is ssd.ssd_chunked
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        choose("ssd", "triton", Call(torch.device("cpu"), (torch.float32,)))
    with pytest.raises(RuntimeError, match="does not take torch.float64"):
        choose("ssd", "triton", Call(cuda, (torch.float64,)))


def _op_args(device, length=11):
    """The forward op's arguments: chunks of 4 steps (8 on CUDA is 16), a state kept every 2 chunks."""
    inp = _inputs(device, length)
    return (*(inp[k] for k in NAMES), _resets(length, 8, device), 4 if device.type == "cpu" else 16, 2, True)


def test_ssd_triton_ops_pass_opcheck(device):
    """The schema, fake implementations, autograd registration and AOT dispatch of the forward and backward ops."""
    args = _op_args(device)
    torch.library.opcheck(torch.ops.seqssm.ssd_triton.default, args)
    with torch.no_grad():
        y, last, states = torch.ops.seqssm.ssd_triton(*args)
    assert states.shape[1] == -(-11 // (args[8] * args[9]))  # one state per 2 chunks
    x, dt, A, B, C, D, _, resets = (t.detach() for t in args[:8])
    torch.library.opcheck(torch.ops.seqssm.ssd_triton_backward.default,
                          (torch.randn_like(y), torch.randn_like(last), x, dt, A, B, C, D, resets, states,
                           *args[8:10], True))


def test_ssd_triton_traces_into_one_graph(device):
    """torch.compile(fullgraph=True) over ssd_scan on Triton: no graph break, outputs and gradients as eager."""
    inp = _inputs(device, 11)
    resets = _resets(11, 4, device)

    def loss(x, dt, A, B, C, D, initial_state):
        y, last = ssd_scan(x, dt, A, B, C, D, initial_state, resets, chunk_size=4, backend="triton")
        return y.square().sum() + last.sum()

    leaves = [inp[k] for k in NAMES]
    assert_one_graph_as_eager(loss, leaves, leaves)
