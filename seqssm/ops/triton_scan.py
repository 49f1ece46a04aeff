"""The Triton backend of `linear_scan` and `selective_scan`: launchers and autograd Functions around
the kernels of `seqssm.ops.triton_kernels`.

Both scans keep the torch path's memory: the linear scan's backward needs only its inputs and
output; the selective scan stores the state at the start of every SELECTIVE_CHUNK steps and
recomputes each chunk's states in the backward pass. On CPU tensors the kernels run in Triton's
interpreter, which TRITON_INTERPRET=1 allows (the registry refuses CPU tensors otherwise); it is
slow and meant for tests.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch
import triton
import triton.language as tl

from seqssm.ops.backend import triton_interpreting
from seqssm.ops.selective import _finish, _groups

# Time steps per chunk. The selective scan keeps one float32 (batch, dim, N) state per chunk for the
# backward pass, N * 4 / 64 bytes per element of u: as much as a float16 u for N = 32. Scans inside a
# chunk are log-depth along the time axis of (channels, time) tiles; the state index is a loop, so a
# chunk's registers do not depend on N.
LINEAR_CHUNK = 32
SELECTIVE_CHUNK = 64
# Feature block of the linear scan: 32 float32 features are one 128-byte row of a (batch, L, F) tensor.
_LINEAR_BLOCK_F = 32
# (BLOCK_D, num_warps) tried by the selective scans' autotuners (compiled kernels): a program holds
# (BLOCK_D, SELECTIVE_CHUNK) tiles, BLOCK_D * SELECTIVE_CHUNK / (32 * num_warps) = 2 or 4 elements of
# each per thread. With 8 the backward kernel needs over 200 registers.
SELECTIVE_FWD_CONFIGS = [(4, 2), (8, 4), (16, 8), (4, 4), (8, 8)]
SELECTIVE_BWD_CONFIGS = [(4, 2), (8, 4), (2, 2), (4, 4), (8, 8)]
# Registers per thread the selective kernels may use (ptxas's .maxnreg). Given no budget, ptxas squeezes
# a kernel that needs a little over 96 or 128 registers down to that count and spills a few bytes to do
# it; with this one it allocates what the kernel needs (110-165 registers, docs/gpu.md) and spills none.
SELECTIVE_MAX_REGISTERS = 168
# The offsets inside one tile are 32-bit (chunk starts are 64-bit): the launchers refuse strides whose
# tile would reach past this.
_INT32_MAX = 2**31 - 1


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool):
    """The kernels module, compiled or interpreted. Triton fixes that choice when it decorates a function,
    so each mode loads triton_kernels.py as a module of its own: both can live in one process."""
    path = os.path.join(os.path.dirname(__file__), "triton_kernels.py")
    mode = "interpreted" if interpret else "compiled"
    spec = importlib.util.spec_from_file_location(f"seqssm.ops._triton_kernels_{mode}", path)
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        spec.loader.exec_module(module)
    if not interpret:
        def configs(pairs):
            return [triton.Config({"BLOCK_D": d}, num_warps=w, maxnreg=SELECTIVE_MAX_REGISTERS) for d, w in pairs]

        # The best block depends on how many programs there are (rows x channels) and how long each walks.
        # Tuning runs a kernel several times: the buffers it updates in place are restored or zeroed.
        key = ["tune_rows", "e", "n_state", "tune_length", "B_VARIABLE", "C_VARIABLE"]
        module.selective_scan_fwd = triton.autotune(
            configs(SELECTIVE_FWD_CONFIGS), key=key, restore_value=["last_ptr"])(module.selective_scan_fwd)
        module.selective_scan_bwd = triton.autotune(
            configs(SELECTIVE_BWD_CONFIGS), key=key, reset_to_zero=["gA_ptr", "gB_ptr", "gC_ptr"],
            restore_value=["gh_ptr"])(module.selective_scan_bwd)
    return module


def _for(device: torch.device):
    """The kernels for tensors on `device`: interpreted on CPU, and everywhere under TRITON_INTERPRET=1."""
    interpret = device.type == "cpu" or triton_interpreting()
    return _kernels(interpret), interpret


def _acc(dtype: torch.dtype):
    return tl.float64 if dtype in (torch.float64, torch.complex128) else tl.float32


def _real(x: torch.Tensor | None) -> torch.Tensor | None:
    return torch.view_as_real(x) if x is not None and x.is_complex() else x


def _check_tile_offsets(op: str, **extents: int) -> None:
    """Each extent is the largest 32-bit offset a tile of that tensor reaches from its chunk's start."""
    for name, extent in extents.items():
        if extent > _INT32_MAX:
            raise ValueError(
                f"{op}: the strides of {name} put one tile of the Triton kernel {extent} elements wide, past "
                f"32-bit offsets; make {name} contiguous along time or use backend='torch'"
            )


# ----------------------------------------------------------------------------------- linear scan


class _LinearScanTriton(torch.autograd.Function):
    """a (B, L, F) (any strides: broadcast a stays a stride-0 view), b (B, L, F), h0 (B, F) or None,
    resets (B, L) bool or None -> h (B, L, F), all of one real or complex dtype."""

    @staticmethod
    def forward(ctx, a, b, h0, resets):
        h = torch.empty(b.shape, dtype=b.dtype, device=b.device)
        _linear_launch("fwd", a, b, h0, resets, h)
        ctx.save_for_backward(a, h0, resets, h)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        a, h0, resets, h = ctx.saved_tensors
        grad_h = grad_h.contiguous()
        grad_a, grad_b = torch.empty_like(h), torch.empty_like(h)
        grad_h0 = torch.empty_like(h0) if h0 is not None else None
        _linear_launch("bwd", a, grad_h, h0, resets, h, grad_a, grad_b, grad_h0)
        return grad_a, grad_b, grad_h0, None


def _linear_launch(direction, a, b, h0, resets, h, grad_a=None, grad_b=None, grad_h0=None):
    kernels, interpret = _for(b.device)
    batch, length, feat = b.shape
    complex_ = b.is_complex()
    a_r, h_r, h0_r = _real(a), _real(h), _real(h0)
    h0_strides = (h0_r.stride(0), h0_r.stride(1)) if h0 is not None else (0, 0)
    r_strides = (resets.stride(0), resets.stride(1)) if resets is not None else (0, 0)
    block_f = min(_LINEAR_BLOCK_F, triton.next_power_of_2(feat))
    n_fblocks = triton.cdiv(feat, block_f)
    grid = (batch * n_fblocks,)
    _check_tile_offsets("linear_scan", **{
        name: (LINEAR_CHUNK + 1) * abs(x.stride(1)) + feat * abs(x.stride(2)) + 1
        for name, x in (("a", a_r), ("b", _real(b)), ("h", h_r))
    })
    flags = dict(COMPLEX=complex_, HAS_RESETS=resets is not None, HAS_H0=h0 is not None,
                 BLOCK_T=LINEAR_CHUNK, BLOCK_F=block_f, ACC=_acc(b.dtype))
    # An input stands for absent optional tensors (never read; an output there could be overwritten by the
    # interpreter's copy-back of the unused alias).
    dummy = a_r
    if direction == "fwd":
        b_r = _real(b)
        kernels.linear_scan_fwd[grid](
            a_r, b_r, resets if resets is not None else dummy, h0_r if h0 is not None else dummy, h_r,
            length, feat, n_fblocks, *a_r.stride()[:3], *b_r.stride()[:3], *r_strides, *h_r.stride()[:3], *h0_strides,
            **flags,
        )
    else:
        gh_r, ga_r, gb_r = _real(b), _real(grad_a), _real(grad_b)
        kernels.linear_scan_bwd[grid](
            a_r, resets if resets is not None else dummy, h0_r if h0 is not None else dummy, h_r, gh_r, ga_r, gb_r,
            _real(grad_h0) if grad_h0 is not None else dummy,
            length, feat, n_fblocks, *a_r.stride()[:3], *r_strides, *h_r.stride()[:3], *h0_strides, **flags,
        )


def linear_scan_triton(a, b, initial_state=None, resets=None):
    """Triton `linear_scan`: same contract as the reference (a broadcastable to b (batch, L, ...))."""
    from seqssm.ops.linear import broadcast_inputs

    a, b, h0 = broadcast_inputs(a, b, initial_state, resets)
    shape = b.shape
    flat = (shape[0], shape[1], -1)
    # The kernels index (batch, L, F) with strides: broadcast a stays a view wherever it can.
    a = a.reshape(flat)
    b = b.reshape(flat)
    if b.is_complex() and (a.stride(-1) != 1 or b.stride(-1) != 1):
        a, b = a.contiguous(), b.contiguous()  # view_as_real needs unit stride on the last dim
    h0 = h0.reshape(shape[0], -1).contiguous() if h0 is not None else None
    resets = resets.to(device=b.device, dtype=torch.bool) if resets is not None else None
    return _LinearScanTriton.apply(a, b, h0, resets).reshape(shape)


# --------------------------------------------------------------------------------- selective scan


def _bc_layout(M: torch.Tensor):
    """(variable, strides (batch, group, channel, N, time)) of B or C given as (batch, N, L),
    (batch, groups, N, L) or time-invariant (dim, N)."""
    if M.ndim == 2:
        return False, (0, 0, M.stride(0), M.stride(1), 0)
    if M.ndim == 3:
        return True, (M.stride(0), 0, 0, M.stride(1), M.stride(2))
    return True, (M.stride(0), M.stride(1), 0, M.stride(2), M.stride(3))


class _SelectiveScanTriton(torch.autograd.Function):
    """u, delta (b, dim, L); A (dim, N); B, C variable or time-invariant; delta_bias (dim,) or None;
    h0 (b, dim, N) or None; resets (b, L) bool or None -> y (b, dim, L) and last state (b, dim, N),
    both in the compute dtype (float32, or float64 for float64 u)."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, delta_bias, h0, resets, softplus):
        y, last, starts = _selective_forward(u, delta, A, B, C, delta_bias, h0, resets, softplus, store_starts=True)
        ctx.save_for_backward(u, delta, A, B, C, delta_bias, resets, starts)
        ctx.softplus, ctx.has_h0 = softplus, h0 is not None
        # An unused last state then reaches backward as None, and the kernel skips its gradient.
        ctx.set_materialize_grads(False)
        return y, last

    @staticmethod
    def backward(ctx, grad_y, grad_last):
        u, delta, A, B, C, delta_bias, resets, starts = ctx.saved_tensors
        batch, dim, length = u.shape
        n = A.shape[1]
        groups = _groups(B, C)
        compute = starts.dtype
        # Gradients may come as expanded views (of y.sum(), say): the kernel reads them contiguous.
        grad_y = (grad_y.to(compute).contiguous() if grad_y is not None
                  else starts.new_zeros(batch, dim, length))
        grad_u = torch.empty(batch, dim, length, dtype=compute, device=u.device)
        grad_delta = torch.empty_like(grad_u)
        per_row = (batch, dim, n)
        # The kernel carries the state's adjoint in grad_h0 (from the last state's gradient, or zeros when the
        # last state was not used) and accumulates grad A and invariant grad B, C in place.
        grad_h0 = grad_last.to(compute).contiguous().clone() if grad_last is not None else starts.new_zeros(per_row)
        grad_A = starts.new_zeros(per_row)
        grad_B, grad_C = (
            starts.new_zeros(batch, groups, n, length) if M.ndim > 2 else starts.new_zeros(per_row) for M in (B, C)
        )
        kernels, grid, sizes, strides, flags = _selective_launch(u, delta, A, B, C, delta_bias, resets, ctx.softplus)
        kernels.selective_scan_bwd[grid](
            u, delta, A, B, C, delta_bias if delta_bias is not None else u, resets if resets is not None else u,
            starts, grad_y, grad_u, grad_delta, grad_A, grad_B, grad_C, grad_h0, *sizes, *strides, **flags,
        )
        grad_B, grad_C = (
            (g.view(M.shape) if M.ndim > 2 else g.sum(0)).to(M.dtype) for g, M in ((grad_B, B), (grad_C, C))
        )
        grad_bias = grad_delta.sum((0, 2)).to(delta_bias.dtype) if delta_bias is not None else None
        return (
            grad_u.to(u.dtype), grad_delta.to(delta.dtype), grad_A.sum(0).to(A.dtype), grad_B, grad_C, grad_bias,
            grad_h0 if ctx.has_h0 else None, None, None,
        )


def _selective_launch(u, delta, A, B, C, delta_bias, resets, softplus):
    """What both selective kernels take: (kernels, grid, sizes, strides, constexpr flags). The autotuner
    picks BLOCK_D for compiled kernels; the interpreter gets a small fixed block, its cost being per
    element of the tiles."""
    kernels, interpret = _for(u.device)
    batch, dim, length = u.shape
    n = A.shape[1]
    groups = _groups(B, C)
    e = dim // groups
    b_var, b_strides = _bc_layout(B)
    c_var, c_strides = _bc_layout(C)
    compute = torch.promote_types(u.dtype, torch.float32)
    flags = dict(B_VARIABLE=b_var, C_VARIABLE=c_var, HAS_BIAS=delta_bias is not None, SOFTPLUS=softplus,
                 HAS_RESETS=resets is not None, BLOCK_T=SELECTIVE_CHUNK, ACC=_acc(compute))
    if interpret:
        flags["BLOCK_D"] = min(4, triton.next_power_of_2(e))
        grid = (batch * groups * triton.cdiv(e, flags["BLOCK_D"]),)
    else:
        grid = lambda meta: (batch * groups * triton.cdiv(e, meta["BLOCK_D"]),)  # noqa: E731
    block_d = max(d for d, _ in SELECTIVE_FWD_CONFIGS + SELECTIVE_BWD_CONFIGS)
    steps = SELECTIVE_CHUNK + 1  # the backward reads Δ and resets one step past the chunk
    _check_tile_offsets("selective_scan", **{
        "u": block_d * abs(u.stride(1)) + steps * abs(u.stride(2)),
        "delta": block_d * abs(delta.stride(1)) + steps * abs(delta.stride(2)),
        "y and its gradient (batch, dim, L)": block_d * length + steps,
    })
    r_strides = resets.stride() if resets is not None else (0, 0)
    # tune_rows and tune_length key the autotuner: rows of programs, and L to the next power of two.
    sizes = (dim, e, length, n, batch * groups, triton.next_power_of_2(length))
    strides = (*u.stride(), *delta.stride(), *A.stride(), *b_strides, *c_strides, *r_strides)
    return kernels, grid, sizes, strides, flags


def _selective_forward(u, delta, A, B, C, delta_bias, h0, resets, softplus, store_starts):
    batch, dim, length = u.shape
    n = A.shape[1]
    compute = torch.promote_types(u.dtype, torch.float32)
    y = torch.empty(batch, dim, length, dtype=compute, device=u.device)
    # The kernel carries the state in `last`, from h0 (or zeros) to the last state.
    last = (h0.to(compute, copy=True).contiguous() if h0 is not None
            else torch.zeros(batch, dim, n, dtype=compute, device=u.device))
    chunks = triton.cdiv(length, SELECTIVE_CHUNK)
    starts = torch.empty(batch, chunks if store_starts else 0, dim, n, dtype=compute, device=u.device)
    kernels, grid, sizes, strides, flags = _selective_launch(u, delta, A, B, C, delta_bias, resets, softplus)
    kernels.selective_scan_fwd[grid](
        u, delta, A, B, C, delta_bias if delta_bias is not None else u, resets if resets is not None else u,
        y, starts, last, *sizes, *strides, STORE_STARTS=store_starts, **flags,
    )
    return y, last, starts


def selective_scan_triton(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None,
):
    """Triton `selective_scan` (same arguments and results as the reference); D and z are applied after the scan."""
    resets = resets.to(device=u.device, dtype=torch.bool) if resets is not None else None
    # The kernels read time-contiguous tiles: a channels-last tile would need a layout change in registers
    # that costs about half again the backward kernel's registers (docs/gpu.md). mamba_ssm copies the same.
    scan_u, delta, B, C = (x.contiguous() if x.ndim > 2 and x.stride(-1) != 1 else x for x in (u, delta, B, C))
    args = (scan_u, delta, A, B, C, delta_bias, initial_state)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in args):
        y, last = _SelectiveScanTriton.apply(*args, resets, delta_softplus)
    else:  # inference: no chunk-start states to keep
        y, last, _ = _selective_forward(*args, resets, delta_softplus, store_starts=False)
    y = _finish(y, u.to(y.dtype), D, z, u.dtype)
    return (y, last.to(y.dtype)) if return_last_state else y
