"""The Triton backend of `linear_scan` and `selective_scan`: launchers around the kernels of
`seqssm.ops.triton_kernels`, registered as `torch.library` custom ops (forward and backward each one
op, with fake implementations), so that `torch.compile(fullgraph=True)` keeps them in its graph.

Both scans keep the torch path's memory: the linear scan's backward needs only its inputs and
output; the selective scan stores the state at the start of every chunk of up to 64 steps (none at
all for one chunk without an initial state) and recomputes each chunk's states in the backward pass.
On CPU tensors the kernels run in Triton's interpreter, which TRITON_INTERPRET=1 allows (the registry
refuses CPU tensors otherwise); it is slow and meant for tests.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from seqssm.ops.custom import OpCaller, needs_grad
from seqssm.ops.triton_loader import cdiv, kernels_for, launch, load_kernels, next_power_of_2

_KERNELS = "triton_kernels.py"  # the kernel file these launchers load (seqssm.ops.triton_loader)
from seqssm.ops.selective_chunked import _groups

# (BLOCK_F, BLOCK_T, STAGES) of the linear scan's one-warp tiles that the autotuner tries, by direction and for
# complex or real inputs. Both kinds load along the features as vectors (a complex64 element as one 64-bit word,
# `_linear_view`: 2 features a thread; 4 float32 reals), so a whole warp's row of features holds each feature's
# steps in one thread and the scan needs no shuffles: BLOCK_F 64 complex, 128 real. The narrower blocks split a
# feature's steps over lanes, for more programs where there are few rows (an RL update: 8 x 128 modes). sm_90 SASS
# of the S5 PPO update (complex64, scripts/kernel_sass.py), per (feature, step), the same under triton 3.6 and 3.9:
# forward 12.2 to 12.6 at 64 x 16 (16.6 to 17.1 with resets), backward 25.1 to 25.4 at 64 x 8 (31.4 to 31.8).
# The backward keeps about twice the forward's tiles live, with a 64-bit address per element for each tensor it
# reads and writes: at 16 complex elements a thread it spilled (sm_80 and sm_90) when each was two reals. A real
# float16 forward tile of 32 x 32 spilled under triton 3.6 (the compile check's full tier).
_LINEAR_TILES = {
    ("fwd", True): ((64, 16, 3), (64, 8, 3), (16, 16, 3), (8, 32, 3)),
    ("bwd", True): ((64, 8, 3), (64, 4, 3), (16, 16, 3), (8, 16, 3)),
    ("fwd", False): ((128, 8, 3), (64, 16, 3), (32, 16, 3)),
    ("bwd", False): ((128, 4, 3), (64, 8, 3), (32, 16, 3)),
}
# The longest tile of any config: a tile's 32-bit offsets must reach one step past it.
LINEAR_MAX_STEPS = max(t for tiles in _LINEAR_TILES.values() for _, t, _ in tiles)
# The selective backward walks time in chunks of a power of two steps, as long as the sequence, between these
# bounds; the chunk's start states, which the forward writes, are what it keeps, float32 (batch, dim, N) each.
# Measured on an H200 (mamba-130m widths, bf16, forward + backward, autotuned tiles, when the forward was a
# chunked scan too; docs/gpu.md): chunks of 1024 took 7.3 ms, 512 5.7, 256 5.7, 128 4.9, 64 4.5, 32 4.9. Long
# chunks keep more consecutive steps in each thread, but their programs span several warps, whose scans meet in
# shared memory behind barriers; a 64-step chunk of one or two channels is one warp, scanned with shuffles alone.
SELECTIVE_MAX_CHUNK = 64
_SELECTIVE_MIN_CHUNK = 16
# Elements of each (channels, chunk) tile per thread that the backward's autotuner tries: it holds about 15
# tiles (two scans, three accumulators), which at 8 elements per thread is more than ptxas's budget. With float32
# inputs ("wide") at 4 over 8 warps it spilled 8 bytes on sm_80 under triton 3.6 (the check on an H100), so those
# stop at 2. (Tiles addressed by 64-bit chunk bases plus 32-bit offsets kept 4 free of spills, but made the bf16
# backward about 8% slower on the H100.)
_BACKWARD_PER_THREAD = {False: (2, 4), True: (2,)}
# ((channel, n) pairs per thread, STAGES, warps) of the forward's tiles that the autotuner tries. At 16 pairs a
# thread a step takes 15 to 16 instructions per pair (sm_90 SASS, scripts/kernel_sass.py; the chunked scan it
# replaced took 23 to 37 per (channel, step) and state); at 32 the tile needs more registers than ptxas's budget,
# and at 16 over one warp without loads ahead it spills at N = 64 (the compile check's full tier). Where rows x
# channels are few (an RL update, 8 x 128 channels: 64 one-warp programs at 8 pairs), each program's step is the
# time: 4 pairs a thread take 123 instructions a step for 128 programs, against 198 for 8 pairs and 242 for 16.
# The last tile issues loads three steps ahead: on the H200 a step took about 450 ns with loads one step ahead,
# the wait of a load, not its arithmetic; untimed yet, the autotuner times it beside the others (no spills, at
# most 134 registers at N = 16 on sm_80 and sm_90 under triton 3.9).
_FORWARD_TILES = ((8, 1, 1), (16, 2, 1), (16, 2, 2), (16, 2, 4), (4, 2, 1), (16, 4, 1))
# A program walks its channels' steps one at a time, so its time is the sequence's length times a step's latency
# (about 450 ns on an H200, docs/gpu.md: loads in flight, not arithmetic), and with few rows a multiprocessor holds
# too few programs to overlap those waits (2 x 1536 channels at L 8192: 96 programs for 132 multiprocessors).
# Cutting time into segments multiplies the programs; a first pass summarises each segment as an affine map of
# the state entering it, and each program of the second folds the maps before its segment into its start. The
# first pass costs about half a step (no C, no y); segments of at least four chunks keep the fold short.
_FORWARD_PROGRAMS_PER_MULTIPROCESSOR = 8
_SEGMENT_MIN_CHUNKS = 4
# Registers per thread the selective kernels may use (ptxas's .maxnreg), capped so that a block of 512
# threads still fits the register file. Given no budget, ptxas squeezes a kernel that needs a little over
# 96 or 128 registers down to that count and spills a few bytes to do it.
SELECTIVE_MAX_REGISTERS = 168
_REGISTER_FILE = 65536
# The offsets inside one tile are 32-bit (chunk starts are 64-bit): the launchers refuse strides whose
# tile would reach past this.
_INT32_MAX = 2**31 - 1


def backward_configs(block_t: int, wide: bool = False) -> list[tuple[int, int]]:
    """(BLOCK_D, num_warps) pairs the autotuner of the selective backward tries for chunks of `block_t` steps of
    16-bit inputs (`wide`: 32-bit or wider): those holding the elements per thread of _BACKWARD_PER_THREAD."""
    pairs = []
    for warps in (1, 2, 4, 8):
        for per_thread in _BACKWARD_PER_THREAD[wide]:
            block_d, rest = divmod(per_thread * 32 * warps, block_t)
            if not rest and 1 <= block_d <= 16:
                pairs.append((block_d, warps))
    return pairs


def forward_configs(block_n: int) -> list[tuple[int, int, int]]:
    """(BLOCK_D, STAGES, num_warps) triples the autotuner of the selective forward tries for BLOCK_N states: each
    thread holds the state of so many (channel, n) pairs (_FORWARD_TILES), and loads run STAGES - 1 steps ahead."""
    triples = []
    for per_thread, stages, warps in _FORWARD_TILES:
        block_d = max(1, per_thread * 32 * warps // block_n)
        if (block_d, stages, warps) not in triples:
            triples.append((block_d, stages, warps))
    return triples


def forward_segments(programs: int, length: int, multiprocessors: int) -> int:
    """Segments of time the selective forward cuts a sequence of `length` into, for `programs` programs (rows x
    channel blocks of 16 pairs a thread) per segment on a device of `multiprocessors`: doubled while there are
    fewer than _FORWARD_PROGRAMS_PER_MULTIPROCESSOR programs a multiprocessor and each segment keeps at least
    _SEGMENT_MIN_CHUNKS chunks."""
    chunks = _chunks(length)
    segments = 1
    while (programs * segments < _FORWARD_PROGRAMS_PER_MULTIPROCESSOR * multiprocessors
           and chunks >= 2 * segments * _SEGMENT_MIN_CHUNKS):
        segments *= 2
    return segments


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; an H100's 132 elsewhere, so that the interpreter and the compile
    check (meta tensors) take the paths of a GPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def _forward_segment(u: Tensor, groups: int, n: int) -> int:
    """Steps per segment of the selective forward on u (batch, dim, L): a multiple of the chunk (`forward_segments`)."""
    batch, dim, length = u.shape
    block_d = max(1, 16 * 32 // next_power_of_2(n))
    programs = batch * groups * cdiv(dim // groups, block_d)
    segments = forward_segments(programs, length, _multiprocessors(u.device))
    return cdiv(_chunks(length), segments) * selective_chunk(length)


def _tuned(name: str, configs: list, key: list[str], **autotune):
    """The compiled kernel `name` under an autotuner over `configs`, keyed by the launch's shape arguments `key`."""
    kernel = getattr(load_kernels(_KERNELS, False), name)
    if os.environ.get("SEQSSM_TRITON_AUTOTUNE", "1") == "0":
        # One config, run untimed: tests on a GPU compile many small variants, each config a compile.
        configs = configs[:1]
    return triton.autotune(configs, key=key, **autotune)(kernel)


# The best selective block depends on how many programs there are (rows x channels) and how long each walks.
_SELECTIVE_KEY = ["tune_rows", "e", "n_state", "tune_length"]


def _max_registers(warps: int) -> int:
    return min(SELECTIVE_MAX_REGISTERS, _REGISTER_FILE // (32 * warps) // 8 * 8)


@functools.lru_cache(maxsize=None)
def _forward_tuned(block_n: int):
    """The selective forward for BLOCK_N states (it writes only its own outputs: tuning restores nothing); the
    summary pass is tuned apart from the pass that writes y."""
    return _tuned("selective_scan_fwd",
                  [triton.Config({"BLOCK_D": d, "STAGES": s}, num_warps=w, maxnreg=_max_registers(w))
                   for d, s, w in forward_configs(block_n)], _SELECTIVE_KEY + ["SUMMARY"])


@functools.lru_cache(maxsize=None)
def _backward_tuned(block_t: int, wide: bool):
    """The selective backward for chunks of block_t steps; tuning zeroes or restores the buffers it adds into."""
    return _tuned("selective_scan_bwd", [triton.Config({"BLOCK_D": d}, num_warps=w, maxnreg=_max_registers(w))
                                         for d, w in backward_configs(block_t, wide)], _SELECTIVE_KEY,
                  reset_to_zero=["gA_ptr", "gB_ptr", "gC_ptr"], restore_value=["gh_ptr"])


def _acc(dtype: torch.dtype):
    return tl.float64 if dtype in (torch.float64, torch.complex128) else tl.float32


def _linear_view(x: Tensor | None) -> Tensor | None:
    """x as the linear kernels read it: a complex64 tensor as one int64 word per element, strides in elements (the
    features of a contiguous one then have stride 1, which Triton's layouts key on, so each thread holds its
    features' steps under every triton release; as two reals side by side the features are 2 apart, a tie with the
    steps that triton 3.6 and 3.9 break in opposite directions, 3.9 putting the lanes on the steps); complex128 as
    its real view; a real tensor as is."""
    if x is not None and x.dtype == torch.complex64:
        return x.view(torch.int64)
    return torch.view_as_real(x) if x is not None and x.is_complex() else x


def _check_tile_offsets(op: str, **extents: int) -> None:
    """Each extent is the largest 32-bit offset a tile of that tensor reaches from its chunk's start."""
    for name, extent in extents.items():
        if extent > _INT32_MAX:
            raise ValueError(
                f"{op}: the strides of {name} put one tile of the Triton kernel {extent} elements wide, past "
                f"32-bit offsets; make {name} contiguous along time or use backend='torch'"
            )


def _empty(like: Tensor) -> Tensor:
    """The stand-in for an absent output of a custom op (ops return tensors only)."""
    return like.new_empty(0)


# ----------------------------------------------------------------------------------- linear scan


@functools.lru_cache(maxsize=None)
def _linear_tuned(direction: str, complex_: bool):
    """The compiled linear kernel of `direction` under an autotuner over the tiles for complex or real inputs,
    keyed by the launch's shape (it writes every element of its outputs, so tuning needs no restore)."""
    return _tuned(f"linear_scan_{direction}", [triton.Config({"BLOCK_F": f, "BLOCK_T": t, "STAGES": s}, num_warps=1)
                                               for f, t, s in _LINEAR_TILES[direction, complex_]],
                  ["feat", "tune_rows", "tune_length"])


def _per_feature(a: Tensor) -> bool:
    """Whether the op's a (B or 1, L or 1, F) is one value per feature: the kernels then read it once per feature
    and the backward sums its gradient per batch row."""
    return a.shape[0] == a.shape[1] == 1


def _linear_launch(direction, a, b, h0, resets, h, grad_a=None, grad_b=None, grad_h0=None):
    kernels, interpret = kernels_for(_KERNELS, b.device)
    batch, length, feat = b.shape
    complex_ = b.is_complex()
    a_r, h_r, h0_r = _linear_view(a), _linear_view(h), _linear_view(h0)
    # a's size-1 batch and time axes are read with stride 0 (broadcast).
    a_strides = tuple(0 if a.shape[i] == 1 else a_r.stride(i) for i in (0, 1)) + (a_r.stride(2),)
    h0_strides = (h0_r.stride(0), h0_r.stride(1)) if h0 is not None else (0, 0)
    r_strides = (resets.stride(0), resets.stride(1)) if resets is not None else (0, 0)
    _check_tile_offsets("linear_scan", **{
        name: (LINEAR_MAX_STEPS + 1) * abs(strides[1]) + feat * abs(strides[2]) + 1
        for name, strides in (("a", a_strides), ("b", _linear_view(b).stride()), ("h", h_r.stride()))
    })
    flags = dict(COMPLEX=complex_, HAS_RESETS=resets is not None, HAS_H0=h0 is not None, ACC=_acc(b.dtype),
                 A_PER_FEATURE=_per_feature(a))
    if interpret:
        kernel = getattr(kernels, f"linear_scan_{direction}")
        # The first tile the autotuner tries (its loads ahead mean nothing here).
        block_f, block_t, _ = _LINEAR_TILES[direction, complex_][0]
        flags.update(BLOCK_F=block_f, BLOCK_T=block_t, STAGES=1)
        grid = (batch * cdiv(feat, flags["BLOCK_F"]),)
    else:
        kernel = _linear_tuned(direction, complex_)
        grid = lambda meta: (batch * cdiv(feat, meta["BLOCK_F"]),)  # noqa: E731
    # tune_rows and tune_length key the autotuner: the batch, and L to the next power of two.
    sizes = (length, feat, batch, next_power_of_2(length))
    # An input stands for absent optional tensors (never read; an output there could be overwritten by the
    # interpreter's copy-back of the unused alias).
    dummy = a_r
    if direction == "fwd":
        b_r = _linear_view(b)
        launch(kernel, grid,
               a_r, b_r, resets if resets is not None else dummy, h0_r if h0 is not None else dummy, h_r,
               *sizes, *a_strides, *b_r.stride()[:3], *r_strides, *h_r.stride()[:3], *h0_strides, **flags)
    else:
        gh_r, ga_r, gb_r = _linear_view(b), _linear_view(grad_a), _linear_view(grad_b)
        launch(kernel, grid,
               a_r, resets if resets is not None else dummy, h0_r if h0 is not None else dummy, h_r, gh_r, ga_r,
               gb_r, _linear_view(grad_h0) if grad_h0 is not None else dummy,
               *sizes, *a_strides, *r_strides, *h_r.stride()[:3], *h0_strides, **flags)


def linear_forward(a, b, h0, resets):
    """The forward op's implementation (the compile check calls it on meta tensors): a (B or 1, L or 1, F) (any
    strides; a size-1 axis is broadcast), b (B, L, F), h0 (B, F) or None, resets (B, L) bool or None -> h
    (B, L, F), all of one real or complex dtype."""
    h = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    _linear_launch("fwd", a, b, h0, resets, h)
    return h


def linear_backward(grad_h, a, h0, resets, h):
    """The backward op's implementation -> (grad a (a's shape), grad b, grad h0 (empty without h0)). An a of one
    value per feature (1, 1, F), S5's, has its gradient summed over time inside the kernel, into one row per
    batch row (accumulation dtype), not written out for every step and reduced after."""
    grad_h = grad_h.contiguous()
    batch, _, feat = h.shape
    per_feature = _per_feature(a)
    if per_feature:
        rows = torch.empty(batch, feat, dtype=torch.promote_types(h.dtype, torch.float32), device=h.device)
    else:
        rows = torch.empty_like(h)
    grad_b = torch.empty_like(h)
    grad_h0 = torch.empty_like(h0) if h0 is not None else _empty(h)
    _linear_launch("bwd", a, grad_h, h0, resets, h, rows, grad_b, grad_h0 if h0 is not None else None)
    if per_feature:
        grad_a = rows.sum(0).to(a.dtype).view(a.shape)
    else:
        broadcast = [i for i in (0, 1) if a.shape[i] == 1 and h.shape[i] > 1]
        grad_a = rows.sum(broadcast, keepdim=True) if broadcast else rows
    return grad_a, grad_b, grad_h0


@torch.library.custom_op("seqssm::linear_scan_triton", mutates_args=())
def _linear_scan_op(a: Tensor, b: Tensor, h0: Tensor | None, resets: Tensor | None) -> Tensor:
    """`linear_forward` as an op."""
    return linear_forward(a, b, h0, resets)


@_linear_scan_op.register_fake
def _(a, b, h0, resets):
    return torch.empty(b.shape, dtype=b.dtype, device=b.device)


@torch.library.custom_op("seqssm::linear_scan_triton_backward", mutates_args=())
def _linear_scan_backward_op(grad_h: Tensor, a: Tensor, h0: Tensor | None, resets: Tensor | None,
                             h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`linear_backward` as an op."""
    return linear_backward(grad_h, a, h0, resets, h)


@_linear_scan_backward_op.register_fake
def _(grad_h, a, h0, resets, h):
    return torch.empty_like(a), torch.empty_like(h), torch.empty_like(h0) if h0 is not None else _empty(h)


def _linear_setup(ctx, inputs, output):
    a, _, h0, resets = inputs
    ctx.save_for_backward(a, h0, resets, output)


def _linear_backward(ctx, grad_h):
    a, h0, resets, h = ctx.saved_tensors
    grad_a, grad_b, grad_h0 = _linear_scan_backward(grad_h, a, h0, resets, h)
    return grad_a, grad_b, grad_h0 if h0 is not None else None, None


_linear_scan_backward = OpCaller(_linear_scan_backward_op, linear_backward)
_linear_scan = OpCaller(_linear_scan_op, linear_forward, _linear_setup, _linear_backward)


def linear_scan_triton(a, b, initial_state=None, resets=None):
    """Triton `linear_scan`: same contract as the reference (a broadcastable to b (batch, L, ...))."""
    from seqssm.ops.linear import broadcast_inputs

    expanded, b, h0 = broadcast_inputs(a, b, initial_state, resets)
    shape = b.shape
    flat = (shape[0], shape[1], -1)
    # An a the same at every batch row and step (S5's) goes in as (1, 1, F): its gradient is then summed inside
    # the backward kernel. Any other is expanded; the kernels index (batch, L, F) with strides, so a broadcast a
    # stays a view wherever it can.
    if all(size == 1 for size in a.shape[:max(0, a.ndim - len(shape) + 2)]):
        a = a.to(b.dtype).expand(1, 1, *shape[2:]).reshape(1, 1, -1)
    else:
        a = expanded.reshape(flat)
    b = b.reshape(flat)
    if b.is_complex() and (a.stride(-1) != 1 or b.stride(-1) != 1):
        a, b = a.contiguous(), b.contiguous()  # features contiguous: see _linear_view
    h0 = h0.reshape(shape[0], -1).contiguous() if h0 is not None else None
    resets = resets.to(device=b.device, dtype=torch.bool) if resets is not None else None
    return _linear_scan(a, b, h0, resets).reshape(shape)


# --------------------------------------------------------------------------------- selective scan


def selective_chunk(length: int) -> int:
    """Steps per chunk of the selective scan for sequences of `length`."""
    return min(SELECTIVE_MAX_CHUNK, max(_SELECTIVE_MIN_CHUNK, next_power_of_2(length)))


def _chunks(length):
    """How many chunks a sequence of `length` (an int, or a symbolic one while compiling) is cut into."""
    return (length + SELECTIVE_MAX_CHUNK - 1) // SELECTIVE_MAX_CHUNK


def _bc_layout(M: Tensor):
    """(variable, strides (batch, group, channel, N, time)) of B or C given as (batch, N, L),
    (batch, groups, N, L) or time-invariant (dim, N)."""
    if M.ndim == 2:
        return False, (0, 0, M.stride(0), M.stride(1), 0)
    if M.ndim == 3:
        return True, (M.stride(0), 0, 0, M.stride(1), M.stride(2))
    return True, (M.stride(0), M.stride(1), 0, M.stride(2), M.stride(3))


def _selective_launch(direction, u, delta, A, B, C, D, z, delta_bias, resets, softplus, flags, *buffers,
                      out: Tensor, grad_y: Tensor | None = None, segment: int | None = None, segments: int = 1):
    """Launch the selective kernel of `direction` on the tensors and the buffers it writes: the shared sizes,
    strides and constexpr flags come from the inputs; `flags` adds the direction's own. `out` is one of the
    (batch, dim, L) outputs, all laid out alike (`_out_like`); the backward reads `grad_y` with its own
    strides; the forward runs `segments` programs along time, `segment` steps each. The autotuner picks
    BLOCK_D of compiled kernels; the interpreter gets a small fixed block, its cost being per element."""
    kernels, interpret = kernels_for(_KERNELS, u.device)
    batch, dim, length = u.shape
    n = A.shape[1]
    groups = _groups(B, C)
    e = dim // groups
    block_t = selective_chunk(length)
    b_var, b_strides = _bc_layout(B)
    c_var, c_strides = _bc_layout(C)
    acc = _acc(torch.promote_types(u.dtype, torch.float32))
    flags = dict(B_VARIABLE=b_var, C_VARIABLE=c_var, HAS_BIAS=delta_bias is not None, SOFTPLUS=softplus,
                 HAS_RESETS=resets is not None, HAS_D=D is not None, HAS_Z=z is not None, ACC=acc,
                 FAST=not interpret and acc == tl.float32, **flags)
    wide = u.element_size() >= 4
    block_n = next_power_of_2(n)
    if direction == "fwd":
        flags.update(CHUNK=block_t, BLOCK_N=block_n)
        block_d = max(d for d, _, _ in forward_configs(block_n))
    else:
        flags.update(BLOCK_T=block_t)
        block_d = max(d for d, _ in backward_configs(block_t, wide) + [(4, 1)])
    if interpret:
        kernel = getattr(kernels, f"selective_scan_{direction}")
        # A small fixed tile: the interpreter's cost is per element.
        flags["BLOCK_D"] = min(4, next_power_of_2(e))
        if direction == "fwd":
            flags["STAGES"] = 1
        grid = (batch * groups * cdiv(e, flags["BLOCK_D"]), segments)
    else:
        kernel = _forward_tuned(block_n) if direction == "fwd" else _backward_tuned(block_t, wide)
        grid = lambda meta: (batch * groups * cdiv(e, meta["BLOCK_D"]), segments)  # noqa: E731
    steps = block_t + 1  # the backward reads Δ and resets one step past the chunk
    z_strides = z.stride() if z is not None else (0, 0, 0)
    _check_tile_offsets("selective_scan", **{
        "u": block_d * abs(u.stride(1)) + steps * abs(u.stride(2)),
        "delta": block_d * abs(delta.stride(1)) + steps * abs(delta.stride(2)),
        "z": block_d * abs(z_strides[1]) + steps * abs(z_strides[2]),
        "y and the gradients of u, delta, z": block_d * abs(out.stride(1)) + steps,
        "the gradient of y": 0 if grad_y is None else block_d * abs(grad_y.stride(1)) + steps * abs(grad_y.stride(2)),
    })
    r_strides = resets.stride() if resets is not None else (0, 0)
    # tune_rows and tune_length key the autotuner: rows of programs, and the steps each walks to the next power of
    # two (a forward's segment, a backward's sequence).
    walk = length if segment is None else segment
    sizes = (dim, e, length, n, batch * groups * segments, next_power_of_2(walk))
    strides = (*u.stride(), *delta.stride(), *z_strides, *A.stride(), *b_strides, *c_strides, *r_strides)
    # u stands for absent optional tensors and empty buffers (never read or written). The autotuner's in-place
    # zeroing and restoring (the backward's, `_backward_tuned`) touch only buffers that are never empty: on u they
    # would bump the version of a tensor autograd saved, and its backward would fail.
    tensors = [x if x is not None and x.numel() else u for x in (u, delta, A, B, C, D, z, delta_bias, resets, *buffers)]
    strides += (out.stride(0), out.stride(1)) + (() if grad_y is None else grad_y.stride())
    launch(kernel, grid, *tensors, *sizes, *strides, *(() if segment is None else (segment,)), **flags)


def _compute(u: Tensor) -> torch.dtype:
    return torch.promote_types(u.dtype, torch.float32)


def _out_like(u: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """An uninitialised (batch, dim, L) output laid out as u is where u is dense (the Mamba block's (dim, batch, L)
    memory, say, so that its matmuls need no copy), else contiguous; the kernels take u time-contiguous."""
    return torch.empty_like(u, dtype=dtype)


def selective_forward(u, delta, A, B, C, D, z, delta_bias, initial_state, resets, softplus, return_last_state,
                       store_starts):
    """The forward op's implementation (the compile check calls it on meta tensors): u, delta, z (b, dim, L); A (dim, N); B, C variable or time-invariant; D, delta_bias (dim,); initial_state
    (b, dim, N); resets (b, L) bool -> y = (scan + D u) silu(z) (b, dim, L) in u's dtype; the last state
    (b, dim, N) in the compute dtype (float32, or float64 for float64 u), empty unless return_last_state; and,
    with store_starts, the state entering every chunk (b, chunks, dim, N) for the backward pass (empty where
    the backward needs none: one chunk and no initial state)."""
    batch, dim, length = u.shape
    n = A.shape[1]
    compute = _compute(u)
    chunks = _chunks(length)
    carry = initial_state is not None or chunks > 1
    y = _out_like(u)
    h0 = initial_state.contiguous() if initial_state is not None else _empty(u)
    last = torch.empty(batch, dim, n if return_last_state else 0, dtype=compute, device=u.device)
    starts = torch.empty(batch, chunks if store_starts and carry else 0, dim, n, dtype=compute, device=u.device)
    segment = _forward_segment(u, _groups(B, C), n)
    segments = cdiv(length, segment) if length else 1
    # What each segment but the last does to the state entering it: (end, decay) pairs (`selective_scan_fwd`).
    summary = torch.empty(batch, segments - 1, 2, dim, n, dtype=compute, device=u.device)
    if segments > 1:
        _selective_launch("fwd", u, delta, A, B, C, None, None, delta_bias, resets, softplus,
                          dict(HAS_H0=initial_state is not None, WRITE_LAST=False, STORE_STARTS=False,
                               SUMMARY=True),
                          h0, y, starts, last, summary, out=y, segment=segment, segments=segments - 1)
    _selective_launch("fwd", u, delta, A, B, C, D, z, delta_bias, resets, softplus,
                      dict(HAS_H0=initial_state is not None, WRITE_LAST=return_last_state,
                           STORE_STARTS=store_starts and carry, SUMMARY=False),
                      h0, y, starts, last, summary, out=y, segment=segment, segments=segments)
    return y, last if return_last_state else _empty(last), starts


@torch.library.custom_op("seqssm::selective_scan_triton", mutates_args=())
def _selective_scan_op(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None, z: Tensor | None,
    delta_bias: Tensor | None, initial_state: Tensor | None, resets: Tensor | None, softplus: bool,
    return_last_state: bool, store_starts: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """`selective_forward` as an op."""
    return selective_forward(u, delta, A, B, C, D, z, delta_bias, initial_state, resets, softplus,
                             return_last_state, store_starts)


@_selective_scan_op.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, initial_state, resets, softplus, return_last_state, store_starts):
    batch, dim, length = u.shape
    compute = _compute(u)
    chunks = _chunks(length)
    carry = initial_state is not None or chunks > 1
    y = _out_like(u)
    last = u.new_empty(batch, dim, A.shape[1], dtype=compute) if return_last_state else u.new_empty(0, dtype=compute)
    starts = u.new_empty(batch, chunks if store_starts and carry else 0, dim, A.shape[1], dtype=compute)
    return y, last, starts


def selective_backward(grad_y, grad_last, u, delta, A, B, C, D, z, delta_bias, resets, starts, softplus,
                       has_initial_state):
    """The backward op's implementation: the gradients of `selective_forward` -> (u, delta, A, B, C, D, z,
    delta_bias, initial state), each in its input's dtype, empty for an absent input."""
    batch, dim, length = u.shape
    n = A.shape[1]
    groups = _groups(B, C)
    compute = _compute(u)
    chunks = _chunks(length)
    # The kernel reads the gradient with its strides, channels-last from out_proj's backward say, but not an
    # expanded view (of y.sum(), say): tiles would overlap.
    if 0 in grad_y.stride():
        grad_y = grad_y.contiguous()
    # The forward reads B, C state-contiguous (kernel_layout); the backward's tiles walk them along time.
    B, C = (M.contiguous() if M.ndim > 2 else M for M in (B, C))
    grad_u, grad_delta = _out_like(u), _out_like(u, delta.dtype)
    grad_z = _out_like(u, z.dtype) if z is not None else _empty(u)
    per_row = (batch, dim, n)
    read_slots = chunks > 1 or grad_last is not None
    # The kernel carries the state's adjoint in grad_h0 (from the last state's gradient, or zeros when the
    # last state was not used) and accumulates grad A and invariant grad B, C in place.
    new = torch.zeros if read_slots else torch.empty
    if grad_last is not None:
        grad_h0 = grad_last.to(compute, copy=True).contiguous()
    else:
        grad_h0 = new(per_row, dtype=compute, device=u.device)
    grad_A = new(per_row, dtype=compute, device=u.device)
    grad_B, grad_C = (
        torch.zeros(batch, groups, n, length, dtype=compute, device=u.device) if M.ndim > 2
        else new(per_row, dtype=compute, device=u.device) for M in (B, C)
    )
    grad_D = torch.empty(batch, dim, dtype=compute, device=u.device)
    grad_bias = torch.empty(batch, dim, dtype=compute, device=u.device)
    _selective_launch("bwd", u, delta, A, B, C, D, z, delta_bias, resets, softplus,
                      dict(HAS_CARRY=has_initial_state or chunks > 1, READ_SLOTS=read_slots,
                           WRITE_GRAD_CARRY=has_initial_state or chunks > 1),
                      starts, grad_y, grad_u, grad_delta, grad_z, grad_A, grad_B, grad_C, grad_D, grad_bias, grad_h0,
                      out=grad_u, grad_y=grad_y)
    grad_B, grad_C = ((g.view(M.shape) if M.ndim > 2 else g.sum(0)).to(M.dtype) for g, M in ((grad_B, B), (grad_C, C)))
    return (
        grad_u, grad_delta, grad_A.sum(0).to(A.dtype), grad_B, grad_C,
        grad_D.sum(0).to(D.dtype) if D is not None else _empty(u), grad_z,
        grad_bias.sum(0).to(delta_bias.dtype) if delta_bias is not None else _empty(u),
        grad_h0 if has_initial_state else _empty(u),
    )


@torch.library.custom_op("seqssm::selective_scan_triton_backward", mutates_args=())
def _selective_scan_backward_op(
    grad_y: Tensor, grad_last: Tensor | None, u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
    D: Tensor | None, z: Tensor | None, delta_bias: Tensor | None, resets: Tensor | None, starts: Tensor,
    softplus: bool, has_initial_state: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`selective_backward` as an op."""
    return selective_backward(grad_y, grad_last, u, delta, A, B, C, D, z, delta_bias, resets, starts, softplus,
                              has_initial_state)


@_selective_scan_backward_op.register_fake
def _(grad_y, grad_last, u, delta, A, B, C, D, z, delta_bias, resets, starts, softplus, has_initial_state):
    compute = _compute(u)
    absent = u.new_empty(0)
    return (
        _out_like(u), _out_like(u, delta.dtype), torch.empty_like(A),
        torch.empty_like(B), torch.empty_like(C), torch.empty_like(D) if D is not None else absent,
        _out_like(u, z.dtype) if z is not None else absent,
        torch.empty_like(delta_bias) if delta_bias is not None else absent,
        u.new_empty(u.shape[0], u.shape[1], A.shape[1], dtype=compute) if has_initial_state else absent,
    )


def _selective_setup(ctx, inputs, output):
    u, delta, A, B, C, D, z, delta_bias, initial_state, resets, softplus, _, _ = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, resets, output[2])
    ctx.softplus, ctx.has_initial_state = softplus, initial_state is not None
    # An unused last state then reaches backward as None, and the kernel skips its gradient.
    ctx.set_materialize_grads(False)


def _selective_backward(ctx, grad_y, grad_last, _):
    u, delta, A, B, C, D, z, delta_bias, resets, starts = ctx.saved_tensors
    if grad_y is None:  # only the last state was used
        grad_y = torch.zeros_like(u)
    if grad_last is not None and grad_last.numel() == 0:
        grad_last = None
    grads = _selective_scan_backward(
        grad_y, grad_last, u, delta, A, B, C, D, z, delta_bias, resets, starts, ctx.softplus, ctx.has_initial_state)
    present = (u, delta, A, B, C, D, z, delta_bias, ctx.has_initial_state or None)
    return (*(g if x is not None else None for g, x in zip(grads, present)), None, None, None, None)


_selective_scan_backward = OpCaller(_selective_scan_backward_op, selective_backward)
_selective_scan = OpCaller(_selective_scan_op, selective_forward, _selective_setup, _selective_backward)


def kernel_layout(u, delta, z, B, C):
    """u, delta, z, B, C as the forward kernel reads them best: time-contiguous u, Δ and z, and B, C (small: no
    channel axis) in the compute dtype and state-contiguous ((..., L, N) memory), so that each step's states are
    one vector load."""
    u, delta, z = (x.contiguous() if x is not None and x.stride(-1) != 1 else x for x in (u, delta, z))
    # one copy, not a cast that keeps B's strides and then a second copy to make it contiguous
    B, C = (M.transpose(-1, -2).to(_compute(u), memory_format=torch.contiguous_format).transpose(-1, -2)
            if M.ndim > 2 else M for M in (B, C))
    return u, delta, z, B, C


def selective_scan_triton(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None,
):
    """Triton `selective_scan` (same arguments and results as the reference), D and z applied in the kernel."""
    resets = resets.to(device=u.device, dtype=torch.bool) if resets is not None else None
    u, delta, z, B, C = kernel_layout(u, delta, z, B, C)
    store_starts = needs_grad((u, delta, A, B, C, D, z, delta_bias, initial_state))
    y, last, _ = _selective_scan(u, delta, A, B, C, D, z, delta_bias, initial_state, resets, delta_softplus,
                                 return_last_state, store_starts)
    return (y, last.to(y.dtype)) if return_last_state else y
