"""The Triton backend of linear_scan and selective_scan against the sequential references: outputs and
every gradient. On CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set per test); the
`gpu` variants run the same cases compiled on CUDA."""

import pytest
import torch

from seqssm.ops import linear_scan, selective_scan

pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
from seqssm.ops import triton_scan  # noqa: E402
from seqssm.ops.triton_scan import LINEAR_MAX_STEPS, SELECTIVE_MAX_CHUNK  # noqa: E402
from .helpers import assert_one_graph_as_eager  # noqa: E402

TOL = {torch.float64: dict(atol=1e-10, rtol=1e-9), torch.float32: dict(atol=2e-4, rtol=2e-4),
       torch.float16: dict(atol=5e-3, rtol=5e-3)}


def _resets(batch, length, chunk, device):
    """Random resets plus one at t = 0 and one on the first chunk boundary."""
    resets = torch.rand(batch, length) < 0.15
    resets[0, 0] = True
    if length > chunk:
        resets[-1, chunk] = True
    return resets.to(device)


def _check(fast, ref, leaves, dtype):
    fast, ref = (fast,) if torch.is_tensor(fast) else fast, (ref,) if torch.is_tensor(ref) else ref
    for x, y in zip(fast, ref):
        torch.testing.assert_close(x, y, **TOL[dtype])
    # One random cotangent per output, so that the final state's gradient path is exercised too.
    cot = [torch.randn_like(y) for y in ref]
    leaves = [x for x in leaves if x is not None]
    for name, g_fast, g_ref in zip(range(len(leaves)), torch.autograd.grad(fast, leaves, cot),
                                   torch.autograd.grad(ref, leaves, cot)):
        torch.testing.assert_close(g_fast, g_ref, **TOL[dtype], msg=lambda m: f"gradient of leaf {name}: {m}")


# ----------------------------------------------------------------------------------- linear scan

LINEAR_CASES = [  # (dtype, L, broadcast a, initial state, resets)
    (torch.float64, 1, False, True, True),
    (torch.float64, 17, False, False, False),
    (torch.float64, LINEAR_MAX_STEPS + 1, True, True, True),
    (torch.complex128, 17, False, True, True),
    (torch.complex128, 17, True, False, True),
    (torch.complex128, LINEAR_MAX_STEPS + 1, True, True, True),
    (torch.complex64, 17, False, True, True),  # complex64 is read as one 64-bit word per element
    (torch.complex64, LINEAR_MAX_STEPS + 1, True, True, True),
    (torch.float16, LINEAR_MAX_STEPS + 1, False, True, True),
]


@pytest.mark.parametrize("dtype,length,broadcast,with_state,with_resets", LINEAR_CASES)
def test_linear_scan_triton_matches_reference(device, dtype, length, broadcast, with_state, with_resets):
    batch, feat = 2, 3
    a = 0.95 * torch.rand(1 if broadcast else batch, 1 if broadcast else length, feat, dtype=torch.float64)
    if dtype.is_complex:
        a = a * torch.exp(1j * torch.rand_like(a))
    a = a.to(device, dtype).requires_grad_()
    b = torch.randn(batch, length, feat, dtype=dtype, device=device, requires_grad=True)
    h0 = torch.randn(batch, feat, dtype=dtype, device=device, requires_grad=True) if with_state else None
    resets = _resets(batch, length, LINEAR_MAX_STEPS, device) if with_resets else None
    fast = linear_scan(a, b, h0, resets, backend="triton")
    if dtype == torch.float16:  # the reference in float32 on the same half inputs: Triton accumulates in float32
        ref = linear_scan(a.float(), b.float(), h0.float(), resets, backend="reference").half()
    else:
        ref = linear_scan(a, b, h0, resets, backend="reference")
    _check(fast, ref, [a, b, h0], {torch.complex128: torch.float64, torch.complex64: torch.float32}.get(dtype, dtype))


@pytest.mark.parametrize("dtype,index", [
    pytest.param(dtype, index, id=f"{dtype}-{index}") for dtype in (torch.float64, torch.complex128, torch.complex64)
    for index in range(len(triton_scan._LINEAR_TILES["fwd", dtype.is_complex]))])
def test_every_linear_tile_matches_the_reference(device, monkeypatch, dtype, index):
    """The kernels under each tile the autotuner may pick (on CPU the interpreter runs the first): a whole feature
    block and a partial one, sequences of one tile's end, a whole number of tiles, and past it; state in, resets,
    broadcast a; outputs and every gradient. complex128 (two reals an element) and complex64 (one 64-bit word) take
    the same tile code but for their loads and stores, so interpreted, where a tile is no layout, complex128 runs the
    first tile only."""
    if device.type == "cpu" and dtype == torch.complex128 and index:
        pytest.skip("interpreted, complex64 covers this tile's code; complex128 runs tile 0 (compiled: every tile)")
    tiles = {key: (configs[min(index, len(configs) - 1)],) for key, configs in triton_scan._LINEAR_TILES.items()}
    monkeypatch.setattr(triton_scan, "_LINEAR_TILES", tiles)
    triton_scan._linear_tuned.cache_clear()
    complex_ = dtype.is_complex
    feat = max(f for (_, c), ((f, _, _),) in tiles.items() if c == complex_) + 3
    steps = max(t for (_, c), ((_, t, _),) in tiles.items() if c == complex_)
    try:
        _check_tile_lengths(device, dtype, feat, steps, index)
    finally:
        triton_scan._linear_tuned.cache_clear()


def _check_tile_lengths(device, dtype, feat, steps, seed):
    torch.manual_seed(seed)
    for length in (steps - 1, 2 * steps, 2 * steps + 3):
        a = 0.95 * torch.rand(1, 1, feat, dtype=torch.float64)
        if dtype.is_complex:
            a = a * torch.exp(1j * torch.rand_like(a))
        a = a.to(device, dtype).requires_grad_()
        b = torch.randn(2, length, feat, dtype=dtype, device=device, requires_grad=True)
        h0 = torch.randn(2, feat, dtype=dtype, device=device, requires_grad=True)
        resets = _resets(2, length, steps, device)
        _check(linear_scan(a, b, h0, resets, backend="triton"), linear_scan(a, b, h0, resets, backend="reference"),
               [a, b, h0], torch.float32 if dtype == torch.complex64 else torch.float64)


def test_linear_scan_triton_trailing_dims(device):
    """(batch, L, H, P) with `a` broadcast over the batch and H: flattened to features, then back."""
    a = (0.9 * torch.rand(1, 9, 1, 4, dtype=torch.float64, device=device)).requires_grad_()
    b = torch.randn(2, 9, 3, 4, dtype=torch.float64, device=device, requires_grad=True)
    _check(linear_scan(a, b, backend="triton"), linear_scan(a, b, backend="reference"), [a, b], torch.float64)


# --------------------------------------------------------------------------------- selective scan

# (L ("chunk+1": one step past the selective scan's chunk), groups (0: B, C are (batch, N, L)), time-invariant ("", "B",
# "C", "BC"), initial state, resets, softplus + bias)
SELECTIVE_CASES = [
    (1, 0, "", True, True, True),
    (17, 0, "", False, False, False),
    (17, 2, "", True, True, True),
    ("chunk+1", 0, "", True, True, True),
    ("chunk+1", 0, "", False, False, True),
    ("chunk+1", 2, "B", True, True, True),
    (17, 2, "C", True, False, True),
    (17, 0, "BC", False, True, False),
]


def _selective_inputs(length, groups, invariant, with_state, dtype, device, batch=2, dim=4, n=4):
    def leaf(*shape, positive=False):
        x = torch.rand(*shape, dtype=dtype) if positive else torch.randn(*shape, dtype=dtype)
        return x.to(device).requires_grad_()

    bc = (batch, n, length) if groups == 0 else (batch, groups, n, length)
    return dict(
        u=leaf(batch, dim, length), delta=leaf(batch, dim, length, positive=True),
        A=(-torch.rand(dim, n, dtype=dtype) - 0.1).to(device).requires_grad_(),
        B=leaf(dim, n) if "B" in invariant else leaf(*bc), C=leaf(dim, n) if "C" in invariant else leaf(*bc),
        D=leaf(dim), z=leaf(batch, dim, length), delta_bias=leaf(dim),
        initial_state=leaf(batch, dim, n) if with_state else None,
    )


@pytest.mark.parametrize("length,groups,invariant,with_state,with_resets,softplus", SELECTIVE_CASES)
def test_selective_scan_triton_matches_reference(device, length, groups, invariant, with_state, with_resets, softplus):
    length = SELECTIVE_MAX_CHUNK + 1 if length == "chunk+1" else length
    _check_selective(device, length, groups, invariant, with_state, with_resets, softplus=softplus)


def _check_selective(device, length, groups, invariant, with_state, with_resets, softplus=True, return_last=True,
                     with_z=True):
    """The Triton selective scan against the reference in float64: outputs and every gradient."""
    inp = _selective_inputs(length, groups, invariant, with_state, torch.float64, device)
    if not softplus:
        inp["delta_bias"] = None
    if not with_z:
        inp["z"] = None
    resets = _resets(2, length, SELECTIVE_MAX_CHUNK, device) if with_resets else None
    kw = dict(delta_softplus=softplus, return_last_state=return_last, resets=resets)
    fast = selective_scan(**inp, **kw, backend="triton")
    ref = selective_scan(**inp, **kw, backend="reference")
    _check(fast, ref, list(inp.values()), torch.float64)


# (segment in chunks, L, groups, time-invariant, initial state, resets, return the last state, z)
SEGMENTED_CASES = [
    (1, 2 * SELECTIVE_MAX_CHUNK + 5, 0, "", True, True, True, True),  # a short last segment
    (2, 2 * SELECTIVE_MAX_CHUNK + 5, 2, "B", True, False, False, True),  # segments of two chunks
    (1, 2 * SELECTIVE_MAX_CHUNK, 0, "C", False, True, True, False),  # segments end where the sequence does
]


@pytest.mark.parametrize("chunks,length,groups,invariant,with_state,with_resets,return_last,with_z", SEGMENTED_CASES)
def test_selective_forward_in_time_segments_matches_reference(device, monkeypatch, chunks, length, groups, invariant,
                                                              with_state, with_resets, return_last, with_z):
    """The forward cut into time segments (each summarised by a first pass, then folded into the next segments'
    starting states) gives the reference's outputs, last state and, through the chunk starts it stores, gradients."""
    monkeypatch.setattr(triton_scan, "_forward_segment", lambda u, groups, n: chunks * SELECTIVE_MAX_CHUNK)
    launches, run = [], triton_scan.launch

    def launch(kernel, grid, *args, **kwargs):
        launches.append(kwargs.get("SUMMARY"))
        run(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(triton_scan, "launch", launch)
    _check_selective(device, length, groups, invariant, with_state, with_resets, return_last=return_last,
                     with_z=with_z)
    assert launches[:2] == [True, False]  # the summary pass ran, then the pass that writes y


def test_forward_segments_fill_the_device_and_keep_segments_long():
    """Few rows get more segments, until each multiprocessor has its programs or segments would get short."""
    from seqssm.ops.triton_scan import forward_segments

    assert forward_segments(programs=384, length=2048, multiprocessors=132) == 4  # 8 x 1536 channels
    assert forward_segments(programs=96, length=8192, multiprocessors=132) == 16  # 2 x 1536 channels
    assert forward_segments(programs=96, length=1024, multiprocessors=132) == 4  # 4 chunks a segment at least
    assert forward_segments(programs=4096, length=8192, multiprocessors=132) == 1  # rows enough
    assert forward_segments(programs=1, length=4 * SELECTIVE_MAX_CHUNK, multiprocessors=132) == 1  # too short


def test_triton_scans_take_expanded_gradients(device):
    """Loss = sum of the outputs: autograd hands the backward stride-0 gradients."""
    inp = _selective_inputs(17, 0, "", True, torch.float64, device)
    grads = [torch.autograd.grad(sum(o.sum() for o in selective_scan(**inp, return_last_state=True, backend=name)),
                                 list(inp.values())) for name in ("triton", "reference")]
    for g_fast, g_ref in zip(*grads):
        torch.testing.assert_close(g_fast, g_ref, **TOL[torch.float64])
    a = torch.rand(2, 17, 3, dtype=torch.float64, device=device, requires_grad=True)
    grads = [torch.autograd.grad(linear_scan(a, a, a[:, 0], backend=name).sum(), a) for name in ("triton", "reference")]
    torch.testing.assert_close(grads[0], grads[1], **TOL[torch.float64])


def test_selective_scan_triton_inference_and_channels_last(device):
    """No autograd (no chunk-start states kept) on channels-last inputs, as the S6 layer passes them."""
    length = SELECTIVE_MAX_CHUNK + 1
    inp = _selective_inputs(length, 2, "", True, torch.float64, device)
    inp = {k: v.detach() if v is not None else None for k, v in inp.items()}
    for name in ("u", "delta", "B", "C", "z"):
        inp[name] = inp[name].transpose(-1, -2).contiguous().transpose(-1, -2)
    resets = _resets(2, length, SELECTIVE_MAX_CHUNK, device)
    with torch.no_grad():
        fast = selective_scan(**inp, resets=resets, delta_softplus=True, return_last_state=True, backend="triton")
        ref = selective_scan(**inp, resets=resets, delta_softplus=True, return_last_state=True, backend="reference")
    for x, y in zip(fast, ref):
        torch.testing.assert_close(x, y, **TOL[torch.float64])


def _matrix_layout(x):
    """x (batch, dim, L) as a view of (dim, batch, L) memory: the Mamba block's layout on CUDA."""
    return x.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_(x.requires_grad)


def test_selective_scan_triton_keeps_the_mamba_block_layout(device):
    """u, Δ and z laid out as (dim, batch, L) matrices: y and the gradients of u, Δ, z come back in that layout
    (so that the block's matrix products need no copy), dL/dy is read channels-last as out_proj's backward
    gives it, and every value and gradient is the reference's; the op's fake implementation says the same."""
    length = SELECTIVE_MAX_CHUNK + 1
    inp = _selective_inputs(length, 0, "", True, torch.float64, device, batch=3)
    for name in ("u", "delta", "z"):
        inp[name] = _matrix_layout(inp[name])
    resets = _resets(3, length, SELECTIVE_MAX_CHUNK, device)
    kw = dict(delta_softplus=True, return_last_state=True, resets=resets)
    fast, last = selective_scan(**inp, **kw, backend="triton")
    ref = selective_scan(**inp, **kw, backend="reference")
    assert fast.stride() == inp["u"].stride()
    grad_y = torch.randn(3, length, 4, dtype=torch.float64, device=device).transpose(1, 2)  # channels-last
    leaves = list(v for v in inp.values() if v is not None)
    grads = torch.autograd.grad((fast, last), leaves, (grad_y, torch.ones_like(last)))
    grads_ref = torch.autograd.grad(ref, leaves, (grad_y, torch.ones_like(last)))
    torch.testing.assert_close((fast, last), ref, **TOL[torch.float64])
    for name, g, g_ref in zip(inp, grads, grads_ref):
        torch.testing.assert_close(g, g_ref, **TOL[torch.float64], msg=lambda m: f"gradient of {name}: {m}")
        if name in ("u", "delta", "z"):
            assert g.stride() == inp[name].stride(), name
    args = list(_op_args(device, length))
    args[0], args[1], args[6] = (_matrix_layout(t) for t in (args[0], args[1], args[6]))
    torch.library.opcheck(torch.ops.seqssm.selective_scan_triton.default, tuple(args))


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)])
def test_selective_scan_triton_half_inputs_accumulate_in_float32(device, dtype):
    """Half inputs, float32 parameters (as under bf16-mixed training): as the reference, which computes in float32."""
    if dtype == torch.bfloat16 and device.type == "cpu":
        pytest.skip("the Triton interpreter has no bfloat16 (numpy has none)")
    length = SELECTIVE_MAX_CHUNK + 1
    inp = _selective_inputs(length, 0, "", True, torch.float32, device)
    for name in ("u", "delta", "B", "C", "z"):
        inp[name] = inp[name].detach().to(dtype).requires_grad_()
    resets = _resets(2, length, SELECTIVE_MAX_CHUNK, device)
    kw = dict(resets=resets, delta_softplus=True, return_last_state=True)
    fast = selective_scan(**inp, **kw, backend="triton")
    ref = selective_scan(**inp, **kw, backend="reference")
    assert fast[0].dtype == dtype
    tol = dict(atol=2e-2, rtol=2e-2)
    for x, y in zip(fast, ref):
        torch.testing.assert_close(x.float(), y.float(), **tol)
    leaves = list(inp.values())
    cot = [torch.randn_like(y) for y in ref]
    for g_fast, g_ref in zip(torch.autograd.grad(fast, leaves, cot), torch.autograd.grad(ref, leaves, cot)):
        torch.testing.assert_close(g_fast.float(), g_ref.float(), **tol)


def test_triton_backend_refuses_cpu_tensors_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        linear_scan(torch.rand(1, 3, 2), torch.rand(1, 3, 2), backend="triton")
    inp = _selective_inputs(5, 0, "", False, torch.float32, "cpu")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        selective_scan(**inp, backend="triton")


@pytest.mark.parametrize("layer_name", ["S6", "S5"])
def test_layers_scan_on_the_triton_path(device, layer_name):
    """A layer built with backend="triton" scans (state, resets, mask) like the torch path: the layouts and
    dtypes the layers pass reach the kernels intact."""
    from seqssm.layers.s5 import S5
    from seqssm.layers.s6 import S6

    torch.manual_seed(0)
    make = (lambda b: S6(8, d_state=4, backend=b)) if layer_name == "S6" else (lambda b: S5(8, d_state=8, backend=b))
    fast, ref = make("triton").to(device), make("torch").to(device)
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(2, 17, 8, device=device)
    resets = _resets(2, 17, 8, device)
    mask = torch.ones(2, 17, dtype=torch.bool, device=device)
    mask[1, 12:] = False
    state = fast.initial_state(2, device=device)
    outs = [layer.scan(x, state, resets=resets, mask=mask) for layer in (fast, ref)]
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, **TOL[torch.float32])
    params = [list(layer.parameters()) for layer in (fast, ref)]
    grads = [torch.autograd.grad(out[0].square().sum(), p) for out, p in zip(outs, params)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **TOL[torch.float32])


def _op_args(device, length):
    """Arguments of the seqssm::selective_scan_triton op as selective_scan_triton passes them."""
    from seqssm.ops.triton_scan import kernel_layout

    inp = _selective_inputs(length, 0, "", True, torch.float64, device)
    u, delta, z, B, C = kernel_layout(inp["u"], inp["delta"], inp["z"], inp["B"], inp["C"])
    resets = _resets(2, length, SELECTIVE_MAX_CHUNK, device)
    return (u, delta, inp["A"], B, C, inp["D"], z, inp["delta_bias"], inp["initial_state"], resets, True, True, True)


def test_triton_scans_are_custom_ops_that_pass_opcheck(device):
    """The schema, fake implementations, autograd registration and AOT dispatch of both scans' ops."""
    torch.library.opcheck(torch.ops.seqssm.selective_scan_triton.default, _op_args(device, SELECTIVE_MAX_CHUNK + 1))
    b = torch.randn(2, 9, 3, dtype=torch.float64, device=device, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=torch.float64, device=device, requires_grad=True)
    # a per step, and per feature (its gradient summed in the kernel)
    for shape in ((2, 9, 3), (1, 1, 3)):
        a = torch.rand(*shape, dtype=torch.float64, device=device, requires_grad=True)
        torch.library.opcheck(torch.ops.seqssm.linear_scan_triton.default, (a, b, h0, _resets(2, 9, 4, device)))
    # the gradients of those a against the reference's, the op called directly
    for shape in ((1, 1, 3), (1, 9, 3), (2, 1, 3)):
        a = torch.rand(*shape, dtype=torch.float64, device=device, requires_grad=True)
        fast = torch.ops.seqssm.linear_scan_triton(a, b, h0, None)
        ref = linear_scan(a, b, h0, backend="reference")
        _check(fast, ref, [a, b, h0], torch.float64)


def test_triton_scans_trace_into_one_graph(device):
    """torch.compile(fullgraph=True) over the Triton scans: no graph break, and outputs and gradients as eager."""
    from seqssm.ops.triton_scan import linear_scan_triton, selective_scan_triton

    def loss(u, delta, A, B, C, D, z, delta_bias, h0, resets, a, b):
        y, last = selective_scan_triton(u, delta, A, B, C, D, z, delta_bias, True, True, initial_state=h0,
                                        resets=resets)
        return y.square().sum() + last.sum() + linear_scan_triton(a, b, h0[:, :, 0], resets).sum()

    args = list(_op_args(device, 17)[:10]) + [torch.rand(2, 17, 4, dtype=torch.float64, device=device),
                                              torch.randn(2, 17, 4, dtype=torch.float64, device=device)]
    leaves = [x for x in args if torch.is_tensor(x) and x.is_floating_point()]
    for x in leaves:
        x.requires_grad_()
    assert_one_graph_as_eager(loss, args, leaves)


@pytest.mark.parametrize("return_last", [False, True])
def test_selective_scan_triton_without_state_d_or_z(device, return_last):
    """One chunk, no initial state, D or z (the kernels then keep no slots), with and without the last state."""
    inp = _selective_inputs(17, 0, "", False, torch.float64, device)
    inp["D"] = inp["z"] = None
    kw = dict(delta_softplus=True, return_last_state=return_last)
    fast = selective_scan(**inp, **kw, backend="triton")
    ref = selective_scan(**inp, **kw, backend="reference")
    _check(fast, ref, list(inp.values()), torch.float64)


def test_selective_scan_triton_gradient_through_the_last_state_alone(device):
    """A loss on the last state only: y's gradient reaches the backward as None."""
    inp = _selective_inputs(SELECTIVE_MAX_CHUNK + 1, 0, "", True, torch.float64, device)
    leaves = [x for x in inp.values() if x is not None]
    grads = [torch.autograd.grad(selective_scan(**inp, delta_softplus=True, return_last_state=True,
                                                backend=name)[1].sum(), leaves, allow_unused=True)
             for name in ("triton", "reference")]
    for x, g_fast, g_ref in zip(leaves, *grads):  # C, D and z do not reach the last state: zero or no gradient
        zero = torch.zeros_like(x)
        torch.testing.assert_close(zero if g_fast is None else g_fast, zero if g_ref is None else g_ref,
                                   **TOL[torch.float64])


def _as_the_autotuner_does(kernel, grid, *args, **kwargs):
    """A launch treated as Triton's autotuner treats it while timing configs (nothing run): its `reset_to_zero`
    arguments zeroed and its `restore_value` ones copied back, each an in-place op on a torch tensor."""
    if hasattr(kernel, "configs"):
        named = dict(zip(kernel.arg_names, args))
        for name in kernel.reset_to_zero:
            named[name].zero_()
        for name in kernel.restore_value:
            named[name].copy_(named[name].clone())


@pytest.mark.parametrize("return_last,with_state", [(False, False), (True, False), (False, True)])
def test_selective_autotuning_touches_no_tensor_autograd_saved(monkeypatch, return_last, with_state):
    """The autotuner's in-place resets land on the kernels' own buffers, never on an input: on u (the stand-in for
    empty buffers) they bumped its version while the forward restored its last state in place, and the backward of
    anything that saved u failed (a Mamba block's x_proj, in a training step on the Triton backend)."""
    from seqssm.ops.triton_loader import recording

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    inp = _selective_inputs(SELECTIVE_MAX_CHUNK + 1, 0, "", with_state, torch.float32, torch.device("cpu"))
    u = inp.pop("u") * 1.0
    square = u * u  # saves u before the scan runs, as a Mamba block's x_proj saves the conv's output
    with recording(_as_the_autotuner_does):
        out = selective_scan(u, **inp, delta_softplus=True, return_last_state=return_last, backend="triton")
        y = out[0] if return_last else out
        (y.sum() + square.sum()).backward()  # raises if the forward's tuning bumped u's version
    assert inp["delta"].grad is not None and inp["A"].grad is not None
