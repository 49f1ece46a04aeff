"""The Triton backend of the SSD scan (`seqssm.ops.ssd`): launchers around the kernels of
`seqssm.ops.triton_ssd_kernels`, registered as `torch.library` custom ops (forward and backward each one op, with
fake implementations), so that `torch.compile(fullgraph=True)` keeps them in its graph.

The kernels walk the sequence in chunks of `ssd_tile(chunk_size)` steps (at most SSD_MAX_TILE: the (tile, tile)
decay matrix and the (tile, N) B and C live in registers beside the state) and keep the state entering every
`chunk_size` steps (rounded up to whole chunks, `ssd_segment`), float32 (batch, segments, H, P, N), for the backward
pass, which recomputes the states in between from it. The results do not depend on either length (the chunked form
is exact). On CPU tensors the kernels run in Triton's interpreter, which TRITON_INTERPRET=1 allows (the registry
refuses CPU tensors otherwise); it is slow and meant for tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor

from seqssm.ops.checks import check_flags
from seqssm.ops.custom import OpCaller, needs_grad
from seqssm.ops.triton_loader import cdiv, interpreted, kernels_for, launch, next_power_of_2

_KERNELS = "triton_ssd_kernels.py"  # the kernel file these launchers load (seqssm.ops.triton_loader)

# Steps per chunk of the kernels. A chunk's (tile, tile) decay and score matrices and its (tile, N) B, C and their
# gradients are register tiles beside the (BLOCK_P, N) state or its gradient. At mamba2-130m widths (P 64, N 128,
# BLOCK_P 16, 8 warps) the compile check (docs/gpu.md) finds no spills at 16 and spills at 32 steps (sm_90: the
# backward's reverse walk 12 bytes in bf16 and 336 in float32, the forward 32 in float32).
SSD_MAX_TILE = 16
# tl.dot needs every side of a tile to be at least 16 when compiled; the interpreter takes any power of two.
_MIN_DOT = 16
# Channels of head_dim per program: the (BLOCK_P, N) state and its gradient are two of the largest tiles. The
# interpreter's small block gives the tests several channel blocks per head.
_BLOCK_P = {False: 16, True: 4}
# The dtype of the chunks' matrix-product operands, by x's dtype (float32: tf32 on tensor cores).
_DOT = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}
# Warps per program, forward and backward: the one-kernel backward spilled over 4 warps (the compile check).
_WARPS = {"fwd": 8, "bwd": 8}


def ssd_tile(chunk_size: int, length: int, interpret: bool) -> int:
    """Steps per chunk of the kernels for `chunk_size` and sequences of `length`: a power of two, at most
    SSD_MAX_TILE and no longer than the sequence needs."""
    if chunk_size < 1:
        raise ValueError(f"ssd_scan: chunk_size must be >= 1, got {chunk_size}")
    # triton's, not triton_loader's plain-int helper: while torch.compile traces, length may be symbolic, and the
    # helper's bit_length specialises it (three lengths compiled three frames under dynamic=True; triton's, one).
    tile = min(SSD_MAX_TILE, triton.next_power_of_2(chunk_size), triton.next_power_of_2(max(length, 1)))
    return tile if interpret else max(tile, _MIN_DOT)


def ssd_segment(chunk_size: int, tile: int) -> int:
    """Chunks of `tile` steps between the states the forward keeps for the backward: `chunk_size` steps, rounded up
    to whole chunks."""
    return _chunks(chunk_size, tile)


def _blocks(p: int, n: int, interpret: bool) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_N): channel block of head_dim, and all of d_state, each a power of two."""
    floor = 1 if interpret else _MIN_DOT
    return max(floor, min(_BLOCK_P[interpret], next_power_of_2(p))), max(floor, next_power_of_2(n))


def _chunks(length, steps: int):
    """How many pieces of `steps` steps a sequence of `length` (an int, or a symbolic one while compiling) has."""
    return (length + steps - 1) // steps


def _launch_args(x, dt, B, C, resets, tile):
    """The kernels of this call, the grid axis of (batch, head, channel block) programs, the sizes, the strides
    and the flags every kernel shares."""
    kernels, interpret = kernels_for(_KERNELS, x.device)
    batch, length, heads, p = x.shape
    n = B.shape[3]
    block_p, block_n = _blocks(p, n, interpret)
    n_pblocks = cdiv(p, block_p)
    r_strides = resets.stride() if resets is not None else (0, 0)
    strides = (*x.stride(), *dt.stride(), *B.stride(), *C.stride(), *r_strides)
    # The interpreter's products are float32 (numpy), exact enough for the tests' float64 comparisons.
    dot = _DOT.get(x.dtype, tl.float32) if not interpret else tl.float32
    flags = dict(HAS_RESETS=resets is not None, BLOCK_Q=tile, BLOCK_P=block_p, BLOCK_N=block_n, DOT=dot)
    return kernels, batch * heads * n_pblocks, n_pblocks, strides, flags


def ssd_forward(x, dt, A, B, C, D, initial_state, resets, tile: int, seg_chunks: int, store_states: bool):
    """The forward op's implementation (the compile check calls it on meta tensors): x (b, L, H, P), Δ (b, L, H),
    A (H,), B, C (b, L, G, N), D (H,) or None, initial_state (b, H, P, N) or None, resets (b, L) bool or None ->
    (y (b, L, H, P) in x's dtype, the last state (b, H, P, N) float32, the state entering every segment of
    `seg_chunks` chunks of `tile` steps (b, segments, H, P, N) float32, empty unless store_states)."""
    batch, length, heads, p = x.shape
    groups, n = B.shape[2], B.shape[3]
    kernels, programs, n_pblocks, strides, flags = _launch_args(x, dt, B, C, resets, tile)
    n_chunks = _chunks(length, tile)
    n_segs = _chunks(n_chunks, seg_chunks)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    last = torch.empty(batch, heads, p, n, dtype=torch.float32, device=x.device)
    states = torch.empty(batch, n_segs if store_states else 0, heads, p, n, dtype=torch.float32, device=x.device)
    h0 = initial_state.contiguous() if initial_state is not None else None
    # x stands for absent optional tensors (never read or written).
    launch(kernels.ssd_fwd, (programs,), x, dt, A, B, C, D if D is not None else x, h0 if h0 is not None else x,
            resets if resets is not None else x, y, states if store_states else x, last, length, heads, p, n,
            heads // groups, n_pblocks, n_chunks, seg_chunks, n_segs, *strides, HAS_D=D is not None,
            HAS_H0=h0 is not None, STORE_STATES=store_states, num_warps=_WARPS["fwd"], **flags)
    return y, last, states


@torch.library.custom_op("seqssm::ssd_triton", mutates_args=())
def _ssd_op(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None, initial_state: Tensor | None,
            resets: Tensor | None, tile: int, seg_chunks: int, store_states: bool) -> tuple[Tensor, Tensor, Tensor]:
    """`ssd_forward` as an op."""
    return ssd_forward(x, dt, A, B, C, D, initial_state, resets, tile, seg_chunks, store_states)


@_ssd_op.register_fake
def _(x, dt, A, B, C, D, initial_state, resets, tile, seg_chunks, store_states):
    batch, length, heads, p = x.shape
    n = B.shape[3]
    segs = _chunks(length, tile * seg_chunks) if store_states else 0
    states = x.new_empty(batch, segs, heads, p, n, dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(batch, heads, p, n,
                                                                                  dtype=torch.float32), states


def ssd_backward(grad_y, grad_last, x, dt, A, B, C, D, resets, states, tile: int, seg_chunks: int,
                 has_initial_state: bool):
    """The backward op's implementation: the gradients of `ssd_forward` -> (x, Δ, A, B, C, D, initial state), each
    in its input's dtype (the initial state's: float32), empty for an absent input."""
    batch, length, heads, p = x.shape
    groups, n = B.shape[2], B.shape[3]
    kernels, programs, n_pblocks, strides, flags = _launch_args(x, dt, B, C, resets, tile)
    n_chunks, n_segs = _chunks(length, tile), states.shape[1]
    f32 = dict(dtype=torch.float32, device=x.device)
    grad_x = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    grad_dt = torch.zeros(batch, length, heads, **f32)
    grad_B = torch.zeros(batch, length, groups, n, **f32)
    grad_C = torch.zeros(batch, length, groups, n, **f32)
    grad_A = torch.empty(1 + n_segs, programs, **f32)  # the reverse walk's partial sums, then each segment's
    grad_D = torch.empty(programs, **f32)
    grad_h0 = torch.empty(batch, heads, p, n, **f32)
    own, read = torch.empty(programs, n_chunks, **f32), torch.empty(programs, n_chunks, **f32)
    kept = torch.empty(programs, n_segs, **f32)
    last = grad_last.contiguous() if grad_last is not None else None
    sizes = (length, heads, p, n, heads // groups, groups, n_pblocks, n_chunks)
    launch(kernels.ssd_bwd_dh, (programs,), x, dt, A, B, C, D if D is not None else x,
            resets if resets is not None else x, states, grad_y, last if last is not None else x, grad_x, grad_dt,
            grad_B, grad_A, grad_D, grad_h0, own, kept, *sizes, seg_chunks, n_segs, *strides, *grad_y.stride(),
            HAS_D=D is not None, HAS_H0=has_initial_state, HAS_GLAST=last is not None, num_warps=_WARPS["bwd"],
            **flags)
    launch(kernels.ssd_bwd_h, (programs, n_segs), x, dt, A, B, C, resets if resets is not None else x, states,
            grad_y, grad_dt, grad_C, grad_A[1:], read, *sizes, seg_chunks, n_segs, *strides, *grad_y.stride(),
            num_warps=_WARPS["bwd"], **flags)
    # dL/d(a chunk's total log decay) is <dL/dh, h> at the chunk's end. Across a chunk that inner product gains the
    # chunk's own input to the state (`own`) and loses dL/dy's pull on the entering state (`read`), so it is a
    # running sum from its value at the last kept state (`kept`); restarting there keeps float32's rounding of each
    # term from adding up over the whole sequence.
    change = F.pad(own - read, (0, n_segs * seg_chunks - n_chunks)).view(programs, n_segs, seg_chunks)
    phi = (change.double().cumsum(-1) + kept.double()[..., None]).view(programs, -1)[:, :n_chunks]
    phi = phi.view(batch, heads, n_pblocks, n_chunks).sum(2).float()  # (b, H, chunks)
    # Each step's Δ A adds to its chunk's total: dΔ gets phi A, dA gets phi Σ Δ over the chunk.
    grad_dt += phi.repeat_interleave(tile, -1)[..., :length].transpose(1, 2) * A.float()
    dt_sums = F.pad(dt.float(), (0, 0, 0, n_chunks * tile - length)).view(batch, n_chunks, tile, heads).sum(2)
    # The programs are (batch, head, channel block) in that order: dA and dD sum over batch and channel blocks.
    per_head = lambda g: g.view(-1, batch, heads, n_pblocks).sum((0, 1, 3))  # noqa: E731
    grad_A = per_head(grad_A) + (phi * dt_sums.transpose(1, 2)).sum((0, 2))
    return (grad_x, grad_dt.to(dt.dtype), grad_A.to(A.dtype), grad_B.to(B.dtype), grad_C.to(C.dtype),
            per_head(grad_D).to(D.dtype) if D is not None else x.new_empty(0),
            grad_h0 if has_initial_state else x.new_empty(0))


@torch.library.custom_op("seqssm::ssd_triton_backward", mutates_args=())
def _ssd_backward_op(grad_y: Tensor, grad_last: Tensor | None, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                     D: Tensor | None, resets: Tensor | None, states: Tensor, tile: int, seg_chunks: int,
                     has_initial_state: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`ssd_backward` as an op."""
    return ssd_backward(grad_y, grad_last, x, dt, A, B, C, D, resets, states, tile, seg_chunks, has_initial_state)


@_ssd_backward_op.register_fake
def _(grad_y, grad_last, x, dt, A, B, C, D, resets, states, tile, seg_chunks, has_initial_state):
    batch, _, heads, p = x.shape
    contiguous = dict(memory_format=torch.contiguous_format)
    return (torch.empty_like(x, **contiguous), torch.empty_like(dt, **contiguous), torch.empty_like(A),
            torch.empty_like(B, **contiguous), torch.empty_like(C, **contiguous),
            torch.empty_like(D) if D is not None else x.new_empty(0),
            x.new_empty(batch, heads, p, B.shape[3], dtype=torch.float32) if has_initial_state else x.new_empty(0))


def _setup(ctx, inputs, output):
    x, dt, A, B, C, D, initial_state, resets, tile, seg_chunks, _ = inputs
    ctx.save_for_backward(x, dt, A, B, C, D, resets, output[2])
    ctx.tile, ctx.seg_chunks, ctx.has_initial_state = tile, seg_chunks, initial_state is not None
    # An unused y or last state then reaches backward as None.
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_y, grad_last, _):
    x, dt, A, B, C, D, resets, states = ctx.saved_tensors
    if grad_y is None:  # only the last state was used
        grad_y = torch.zeros_like(x)
    elif 0 in grad_y.stride():  # an expanded view (of y.sum(), say): its tiles would overlap
        grad_y = grad_y.contiguous()
    grads = _ssd_backward_call(grad_y, grad_last, x, dt, A, B, C, D, resets, states, ctx.tile, ctx.seg_chunks,
                               ctx.has_initial_state)
    present = (x, dt, A, B, C, D, ctx.has_initial_state or None)
    return (*(g if t is not None else None for g, t in zip(grads, present)), None, None, None, None)


_ssd_backward_call = OpCaller(_ssd_backward_op, ssd_backward)
_ssd = OpCaller(_ssd_op, ssd_forward, _setup, _backward)


def ssd_triton(x, dt, A, B, C, D=None, initial_state=None, resets=None, chunk_size=64):
    """Triton `ssd_scan`: x (b, L, H, P), Δ (b, L, H), A (H,), B, C (b, L, G, N), D (H,), initial_state (b, H, P, N),
    resets (b, L) bool -> (y (b, L, H, P) in x's dtype, last state (b, H, P, N) float32), as `ssd_reference`."""
    from seqssm.ops.ssd import _check

    _check(x, dt, A, B, C, D, initial_state, "ssd_triton")
    batch, length = x.shape[:2]
    resets = check_flags("ssd_triton", "resets", resets, batch, length)
    tile = ssd_tile(chunk_size, length, interpreted(x.device))
    if batch == 0 or length == 0:
        last = (initial_state.to(torch.float32) if initial_state is not None
                else x.new_zeros(batch, x.shape[2], x.shape[3], B.shape[3], dtype=torch.float32))
        return x.new_zeros(x.shape), last
    resets = resets.to(device=x.device, dtype=torch.bool) if resets is not None else None
    A, D = A.contiguous(), D.contiguous() if D is not None else None  # the kernels read them one head apart
    store_states = needs_grad((x, dt, A, B, C, D, initial_state))
    y, last, _ = _ssd(x, dt, A, B, C, D, initial_state, resets, tile, ssd_segment(chunk_size, tile), store_states)
    return y, last
