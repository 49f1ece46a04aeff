"""Checks only a GPU can make, run first by scripts/gpu_check.sh: Triton's reverse associative scan in the
exact tile shapes and warp counts of the selective backward (a wrong order would corrupt gradients
silently), every tile of the selective forward's autotuner (the tests run one, untuned), and the scans at shapes
whose offsets pass 2^31 elements, against the same kernels on a small copy of a slice."""

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
import triton.language as tl  # noqa: E402

from seqssm.ops import linear_scan, selective_scan  # noqa: E402
from seqssm.ops import triton_scan  # noqa: E402
from seqssm.ops.triton_scan import SELECTIVE_MAX_CHUNK, backward_configs  # noqa: E402

pytestmark = pytest.mark.gpu


@triton.jit
def _affine(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@triton.jit
def _reverse_affine_scan(a_ptr, b_ptr, out_ptr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr):
    offs = tl.arange(0, BLOCK_D)[:, None] * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
    _, g = tl.associative_scan((tl.load(a_ptr + offs), tl.load(b_ptr + offs)), axis=1, combine_fn=_affine,
                               reverse=True)
    tl.store(out_ptr + offs, g)


@pytest.mark.parametrize("block_d,warps", backward_configs(SELECTIVE_MAX_CHUNK))
def test_reverse_scan_of_a_2d_tile_runs_backwards_in_time(block_d, warps):
    """g_t = b_t + a_{t+1} g_{t+1}, the adjoint recurrence, as a loop in float64 (the combine is not
    commutative, so a scan in the wrong order or direction fails)."""
    torch.manual_seed(0)
    a = torch.rand(block_d, SELECTIVE_MAX_CHUNK, device="cuda") * 0.5 + 0.5
    b = torch.randn(block_d, SELECTIVE_MAX_CHUNK, device="cuda")
    out = torch.empty_like(b)
    _reverse_affine_scan[(1,)](a, b, out, BLOCK_D=block_d, BLOCK_T=SELECTIVE_MAX_CHUNK, num_warps=warps)
    # The scan pairs element t with the product of a up to and including t, from the end: g_t = b_t + a_t g_{t+1}.
    expected = torch.empty_like(b, dtype=torch.float64)
    g = torch.zeros(block_d, dtype=torch.float64, device="cuda")
    for t in range(SELECTIVE_MAX_CHUNK - 1, -1, -1):
        g = b[:, t].double() + a[:, t].double() * g
        expected[:, t] = g
    torch.testing.assert_close(out.double(), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("tile", triton_scan._FORWARD_TILES)
@pytest.mark.parametrize("n", [16, 64])
def test_every_forward_tile_matches_the_torch_path(monkeypatch, tile, n):
    """The forward under each ((channel, n) pairs per thread, stages, warps) the autotuner may pick, with state in
    and out, resets, a channel count no block divides and the chunk starts it writes for the backward, against
    the torch path: outputs and the gradients that pass through those starts."""
    monkeypatch.setattr(triton_scan, "_FORWARD_TILES", (tile,))
    triton_scan._forward_tuned.cache_clear()
    torch.manual_seed(0)
    b, d, length = 3, 200, 2 * SELECTIVE_MAX_CHUNK + 7

    def leaf(*shape, shift=0.0, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale + shift).requires_grad_()

    args = (leaf(b, d, length), leaf(b, d, length, shift=-1.0), (-torch.rand(d, n, device="cuda") - 0.2).requires_grad_(),
            leaf(b, n, length), leaf(b, n, length), leaf(d), leaf(b, d, length), leaf(d, scale=0.1))
    kwargs = dict(delta_softplus=True, return_last_state=True, initial_state=leaf(b, d, n),
                  resets=torch.rand(b, length, device="cuda") < 0.05)
    results = {}
    try:
        for backend in ("triton", "torch"):
            y, last = selective_scan(*args, **kwargs, backend=backend)
            grads = torch.autograd.grad(y.square().sum() + last.sum(), [args[0], args[2], kwargs["initial_state"]])
            results[backend] = (y, last, *grads)
    finally:
        triton_scan._forward_tuned.cache_clear()
    for name, fast, ref in zip(("y", "last state", "grad u", "grad A", "grad h0"), results["triton"], results["torch"]):
        torch.testing.assert_close(fast, ref, atol=2e-3, rtol=2e-3, msg=lambda m: f"{name}: {m}")


def test_selective_gradients_match_the_torch_path_on_cuda():
    """Every gradient of a chained scan (initial state, resets, a used last state) against the torch path."""
    torch.manual_seed(0)
    b, d, n, length = 2, 40, 16, 3 * SELECTIVE_MAX_CHUNK + 5

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).requires_grad_()

    inputs = dict(u=leaf(b, d, length), delta=leaf(b, d, length, scale=0.5), A=(-torch.rand(d, n, device="cuda") - 0.2)
                  .requires_grad_(), B=leaf(b, n, length), C=leaf(b, n, length), D=leaf(d), z=leaf(b, d, length),
                  delta_bias=leaf(d), initial_state=leaf(b, d, n))
    resets = torch.rand(b, length, device="cuda") < 0.05
    grads = {}
    for backend in ("triton", "torch"):
        y, last = selective_scan(**inputs, delta_softplus=True, return_last_state=True, resets=resets, backend=backend)
        grads[backend] = torch.autograd.grad((y.square().sum() + last.sum()), list(inputs.values()))
    for name, g_fast, g_ref in zip(inputs, grads["triton"], grads["torch"]):
        torch.testing.assert_close(g_fast, g_ref, atol=2e-3, rtol=2e-3, msg=lambda m: f"grad {name}: {m}")


def _free_gib():
    free, _ = torch.cuda.mem_get_info()
    return free / 2**30


@pytest.mark.slow
def test_linear_scan_past_2_31_elements_per_batch_row():
    """S4D with resets at H=1024 x N=64 states and L=32768: one batch row is 2^31 elements, so time index
    times stride passes int32. The last features against the same kernel on a small copy of them."""
    length, feat = 32768, 1024 * 64
    if _free_gib() < 30:
        pytest.skip(f"needs about 30 GiB of free GPU memory, {_free_gib():.0f} GiB free")
    torch.manual_seed(0)
    a = torch.rand(1, length, feat, device="cuda").mul_(0.1).add_(0.9)
    x = torch.randn(1, length, feat, device="cuda")
    resets = torch.rand(1, length, device="cuda") < 0.01
    h = linear_scan(a, x, resets=resets, backend="triton")
    tail = slice(feat - 40, feat)
    expected = linear_scan(a[..., tail].contiguous(), x[..., tail].contiguous(), resets=resets, backend="triton")
    torch.testing.assert_close(h[..., tail], expected)
    del a, x, h


@pytest.mark.slow
def test_selective_scan_past_2_31_elements_per_tensor():
    """u past 2^31 elements (mamba widths at L = 1.25M): the last channels against the same kernel on a copy."""
    b, d, n, length = 1, 2048, 16, 2**20 + 2**18
    if _free_gib() < 40:
        pytest.skip(f"needs about 40 GiB of free GPU memory, {_free_gib():.0f} GiB free")
    torch.manual_seed(0)
    u = torch.randn(b, d, length, device="cuda", dtype=torch.bfloat16)
    delta = torch.randn(b, d, length, device="cuda", dtype=torch.bfloat16)
    A, bias = -torch.rand(d, n, device="cuda") - 0.5, torch.randn(d, device="cuda")
    B, C = (torch.randn(b, n, length, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    resets = torch.rand(b, length, device="cuda") < 1e-3
    with torch.no_grad():
        y, last = selective_scan(u, delta, A, B, C, delta_bias=bias, delta_softplus=True, return_last_state=True,
                                 resets=resets, backend="triton")
        ch = slice(d - 8, d)
        y_ref, last_ref = selective_scan(u[:, ch].contiguous(), delta[:, ch].contiguous(), A[ch], B, C,
                                         delta_bias=bias[ch], delta_softplus=True, return_last_state=True,
                                         resets=resets, backend="triton")
    torch.testing.assert_close(y[:, ch], y_ref)
    torch.testing.assert_close(last[:, ch], last_ref)
