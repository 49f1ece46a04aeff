"""Triton kernels of the linear and selective scans; `seqssm.ops.triton_scan` launches them.

This file is loaded by `triton_scan._kernels` once per mode (compiled, or interpreted on CPU
under TRITON_INTERPRET=1) as its own module, since Triton fixes the mode when it decorates.
For the same reason the kernels call only builtins of triton.language, none of its @jit
helpers (tl.sum, tl.zeros, tl.cdiv, tl.sigmoid), which carry the mode triton was imported in.

Every program owns one batch row and a block of channels (a 1-D grid, so no grid limit of the y
and z axes applies). The linear scan and the selective backward walk time in chunks of BLOCK_T steps:
inside a chunk the recurrence h_t = a_t h_{t-1} + b_t is one `tl.associative_scan` of (a, b) pairs
under affine composition along the time axis of a 2-D tile, a reset being a = 0; between chunks the
state is carried in registers. The selective forward takes one step at a time (its docstring says why).
Accumulation is in ACC (float32, or float64 for float64 inputs).

Offsets: a time index times a stride can pass 2^31 on long sequences, so each chunk's start is
a 64-bit scalar offset and only the offsets inside one tile (at most a block of channels times
a chunk of steps, which the launcher checks) are 32-bit.
"""

import triton
import triton.language as tl


@triton.jit
def _sum(x, axis: tl.constexpr):
    # tl.sum itself is a @triton.jit function decorated when triton is imported, in that process's mode;
    # tl.reduce with its combine works in both modes (and the interpreter sums with numpy).
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def _affine(a1, b1, a2, b2):
    # (a1, b1) then (a2, b2): h -> a2 (a1 h + b1) + b2.
    return a1 * a2, b1 * a2 + b2


@triton.jit
def _affine_complex(ar1, ai1, br1, bi1, ar2, ai2, br2, bi2):
    return (
        ar1 * ar2 - ai1 * ai2,
        ar1 * ai2 + ai1 * ar2,
        br1 * ar2 - bi1 * ai2 + br2,
        br1 * ai2 + bi1 * ar2 + bi2,
    )


@triton.jit
def _row(x, rows, row, axis: tl.constexpr):
    # The slice of a register tile at index `row` along `axis` (a masked sum: tiles cannot be indexed).
    return _sum(tl.where(rows == row, x, 0.0), axis=axis)


LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _exp2(x, FAST: tl.constexpr):
    # 2^x. Compiled float32 kernels take the special-function unit's approximation directly (denormals flush
    # to zero, as under CUDA's --use_fast_math): tl.exp2 wraps it in a range fix-up of three more
    # instructions, and the scans spend most of their time in exponentials.
    if FAST:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.exp2(x)


@triton.jit
def _sigmoid(x, FAST: tl.constexpr):
    return 1.0 / (1.0 + _exp2(-x * LOG2E, FAST))


@triton.jit
def _log2(x, FAST: tl.constexpr):
    # log2(x), the special-function unit's approximation in compiled float32 kernels (as _exp2).
    if FAST:
        return tl.inline_asm_elementwise("lg2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.log2(x)


@triton.jit
def _softplus(x, FAST: tl.constexpr):
    # log1p(exp(x)) with Goldberg's correction, as accurate as log1p where exp(x) is tiny; x above 20 passes.
    z = _exp2(tl.minimum(x, 20.0) * LOG2E, FAST)
    w = 1.0 + z
    log1p = tl.where(w == 1.0, z, _log2(w, FAST) * LN2 * (z / (w - 1.0)))
    return tl.where(x > 20.0, x, log1p)


# ----------------------------------------------------------------------------------- linear scan
# a, b, h are (batch, L, F) with strides in elements of the tensors the kernels get: a real tensor as is, a complex64
# one as int64 words (one per element), a complex128 one as its real view (the imaginary part one element after the
# real one). Grid: batch x feature blocks of BLOCK_F, flattened.
#
# Each program walks its features' whole sequence, BLOCK_T steps at a time, in one warp (the autotuner's configs).
# Its tiles are (features, steps), and their features are contiguous (a complex64 element being one word), so
# Triton puts the lanes along the features: each thread holds all BLOCK_T steps of its features (a lane spans
# BLOCK_F / 32 of them, and a feature's steps split over lanes where BLOCK_F is narrower than the warp's row). A
# tile's scan then runs sequentially in registers with at most two shuffle levels, and no shared memory or barrier;
# the loads of the next tiles are issued STAGES - 1 tiles ahead. With few rows (an RL update: 8 x 128 features),
# the narrow blocks give more programs. A complex128 tile's features are 2 reals apart, as uncontiguous as its
# steps: which axis gets the lanes is then triton's tie-break (the features under 3.6, the steps under 3.9).


@triton.jit
def _load_complex(ptr, off, mask, ACC: tl.constexpr):
    # (real, imaginary part) of the complex elements at off: one 64-bit word each where ptr is int64 (complex64's
    # packed view, off in complex elements), else two reals side by side (off in real elements).
    if ptr.dtype.element_ty == tl.int64:
        word = tl.load(ptr + off, mask=mask, other=0)
        re = (word & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
        im = (word >> 32).to(tl.uint32).to(tl.float32, bitcast=True)
    else:
        re = tl.load(ptr + off, mask=mask, other=0.0).to(ACC)
        im = tl.load(ptr + off + 1, mask=mask, other=0.0).to(ACC)
    return re, im


@triton.jit
def _store_complex(ptr, off, re, im, mask):
    # The inverse of _load_complex.
    if ptr.dtype.element_ty == tl.int64:
        tl.store(ptr + off, re.to(tl.uint32, bitcast=True).to(tl.int64)
                 | (im.to(tl.uint32, bitcast=True).to(tl.int64) << 32), mask=mask)
    else:
        tl.store(ptr + off, re.to(ptr.dtype.element_ty), mask=mask)
        tl.store(ptr + off + 1, im.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _linear_block(h0_ptr, feat, s_0b, s_0f, COMPLEX: tl.constexpr, HAS_H0: tl.constexpr,
                  BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr, ACC: tl.constexpr):
    # This program's batch row (int64), features (BLOCK_F,) and their mask, a tile's steps (1, BLOCK_T), and
    # h0 (real, imaginary part) of its features, zeros where absent.
    pid = tl.program_id(0)
    n_fblocks = (feat + BLOCK_F - 1) // BLOCK_F
    pid_b = (pid // n_fblocks).to(tl.int64)
    offs_f = (pid % n_fblocks) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask_f = offs_f < feat
    h0_r = tl.full([BLOCK_F], 0.0, ACC)
    h0_i = tl.full([BLOCK_F], 0.0, ACC)
    if HAS_H0:
        if COMPLEX:
            h0_r, h0_i = _load_complex(h0_ptr, pid_b * s_0b + offs_f * s_0f, mask_f, ACC)
        else:
            h0_r = tl.load(h0_ptr + pid_b * s_0b + offs_f * s_0f, mask=mask_f, other=0.0).to(ACC)
    return pid_b, offs_f, mask_f, tl.arange(0, BLOCK_T)[None, :], h0_r, h0_i


@triton.jit
def _tile_mask(mask_f, t, length, MASKED: tl.constexpr):
    # (features, steps) mask of a tile whose steps are t: the features' alone in a tile wholly inside the sequence.
    if MASKED:
        return mask_f[:, None] & (t < length)
    else:
        return tl.broadcast_to(mask_f[:, None], (mask_f.shape[0], t.shape[1]))


@triton.jit
def _feature_a(a_ptr, offs_f, mask_f, s_af, COMPLEX: tl.constexpr, A_PER_FEATURE: tl.constexpr, ACC: tl.constexpr):
    # a (real, imaginary part) of each feature (BLOCK_F,) when it is the same at every batch row and step (S5's):
    # loaded once, then broadcast over each tile's steps instead of loaded with it. Zeros otherwise (unused).
    a_r = tl.full([offs_f.shape[0]], 0.0, ACC)
    a_i = tl.full([offs_f.shape[0]], 0.0, ACC)
    if A_PER_FEATURE:
        if COMPLEX:
            a_r, a_i = _load_complex(a_ptr, offs_f * s_af, mask_f, ACC)
        else:
            a_r = tl.load(a_ptr + offs_f * s_af, mask=mask_f, other=0.0).to(ACC)
    return a_r, a_i


@triton.jit
def _linear_fwd_tile(a_ptr, b_ptr, resets_ptr, h_ptr, pid_b, mask_f, steps, tile_a, tile_b, tile_h, start, length,
                     carry_r, carry_i, fa_r, fa_i, s_ab, s_at, s_bb, s_bt, s_rb, s_rt, s_hb, s_ht,
                     COMPLEX: tl.constexpr, HAS_RESETS: tl.constexpr, A_PER_FEATURE: tl.constexpr,
                     MASKED: tl.constexpr, BLOCK_T: tl.constexpr, ACC: tl.constexpr):
    # One tile of steps start.. (MASKED: it may pass the end) from the carried state -> the state after it. tile_*:
    # the 32-bit offsets of a tile's elements from its first step, the same for every tile; fa_*: `_feature_a`.
    t0 = tl.cast(start, tl.int64)
    mask = _tile_mask(mask_f, start + steps, length, MASKED)
    a_off = a_ptr + (pid_b * s_ab + t0 * s_at) + tile_a
    b_off = b_ptr + (pid_b * s_bb + t0 * s_bt) + tile_b
    h_off = h_ptr + (pid_b * s_hb + t0 * s_ht) + tile_h
    # Steps past the end are (a, b) = (1, 0): they keep the last state in the tile's last step (a per feature
    # there only changes outputs that are not stored, in the last tile). The carried state enters through the
    # first step's b (b_0 + a_0 h): then the scan's running products of a go unused, and where a thread holds all
    # of a feature's steps they are not computed at all (they were, for every element, wherever a varies: resets).
    if A_PER_FEATURE:
        ar = tl.broadcast_to(fa_r[:, None], mask.shape)
        ai = tl.broadcast_to(fa_i[:, None], mask.shape)
    elif COMPLEX:
        ar, ai = _load_complex(a_off, 0, mask, ACC)
        ar = tl.where(mask, ar, 1.0)
    else:
        ar = tl.load(a_off, mask=mask, other=1.0).to(ACC)
    if COMPLEX:
        br, bi = _load_complex(b_off, 0, mask, ACC)
    else:
        br = tl.load(b_off, mask=mask, other=0.0).to(ACC)
    if HAS_RESETS:
        r_off = resets_ptr + pid_b * s_rb + t0 * s_rt + steps * s_rt
        if MASKED:
            reset = tl.load(r_off, mask=start + steps < length, other=0) != 0
        else:
            reset = tl.load(r_off) != 0
        ar = tl.where(reset, 0.0, ar)
        if COMPLEX:
            ai = tl.where(reset, 0.0, ai)
    if COMPLEX:
        br += tl.where(steps == 0, ar * carry_r[:, None] - ai * carry_i[:, None], 0.0)
        bi += tl.where(steps == 0, ar * carry_i[:, None] + ai * carry_r[:, None], 0.0)
        _, _, hr, hi = tl.associative_scan((ar, ai, br, bi), axis=1, combine_fn=_affine_complex)
        _store_complex(h_off, 0, hr, hi, mask)
        carry_i = _row(hi, steps, BLOCK_T - 1, 1)
    else:
        br += tl.where(steps == 0, ar * carry_r[:, None], 0.0)
        _, hr = tl.associative_scan((ar, br), axis=1, combine_fn=_affine)
        tl.store(h_off, hr.to(h_ptr.dtype.element_ty), mask=mask)
    return _row(hr, steps, BLOCK_T - 1, 1), carry_i


@triton.jit
def linear_scan_fwd(
    a_ptr, b_ptr, resets_ptr, h0_ptr, h_ptr,
    length, feat, tune_rows, tune_length,
    s_ab, s_at, s_af, s_bb, s_bt, s_bf, s_rb, s_rt, s_hb, s_ht, s_hf, s_0b, s_0f,
    COMPLEX: tl.constexpr, HAS_RESETS: tl.constexpr, HAS_H0: tl.constexpr, A_PER_FEATURE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr, STAGES: tl.constexpr, ACC: tl.constexpr,
):
    pid_b, offs_f, mask_f, steps, carry_r, carry_i = _linear_block(h0_ptr, feat, s_0b, s_0f, COMPLEX,
                                                                   HAS_H0, BLOCK_T, BLOCK_F, ACC)
    fa_r, fa_i = _feature_a(a_ptr, offs_f, mask_f, s_af, COMPLEX, A_PER_FEATURE, ACC)
    tile_a = offs_f[:, None] * s_af + steps * s_at
    tile_b = offs_f[:, None] * s_bf + steps * s_bt
    tile_h = offs_f[:, None] * s_hf + steps * s_ht
    # The tiles wholly inside the sequence without a time mask, then the one that passes its end.
    full = length // BLOCK_T * BLOCK_T
    for start in tl.range(0, full, BLOCK_T, num_stages=STAGES):
        carry_r, carry_i = _linear_fwd_tile(a_ptr, b_ptr, resets_ptr, h_ptr, pid_b, mask_f, steps, tile_a, tile_b,
                                            tile_h, start, length, carry_r, carry_i, fa_r, fa_i, s_ab, s_at, s_bb,
                                            s_bt, s_rb, s_rt, s_hb, s_ht, COMPLEX, HAS_RESETS, A_PER_FEATURE, False,
                                            BLOCK_T, ACC)
    if full < length:
        _linear_fwd_tile(a_ptr, b_ptr, resets_ptr, h_ptr, pid_b, mask_f, steps, tile_a, tile_b, tile_h, full, length,
                         carry_r, carry_i, fa_r, fa_i, s_ab, s_at, s_bb, s_bt, s_rb, s_rt, s_hb, s_ht,
                         COMPLEX, HAS_RESETS, A_PER_FEATURE, True, BLOCK_T, ACC)


@triton.jit
def _linear_bwd_tile(a_ptr, resets_ptr, h_ptr, gh_ptr, ga_ptr, gb_ptr, pid_b, mask_f, back, tile_a, tile_h, start,
                     length, carry_r, carry_i, sum_r, sum_i, h0_r, h0_i, fa_r, fa_i, s_ab, s_at, s_rb, s_rt, s_hb,
                     s_ht, COMPLEX: tl.constexpr, HAS_RESETS: tl.constexpr, A_PER_FEATURE: tl.constexpr,
                     MASKED: tl.constexpr, BLOCK_T: tl.constexpr, ACC: tl.constexpr):
    # One tile of steps start.. (MASKED: it holds t = 0, where h_{t-1} is h0, or passes the end), its columns `back`
    # running backwards in time, from g at the step after it -> g at its first step, and grad a summed over the
    # tile's steps added to sum_r, sum_i (with A_PER_FEATURE, a read from fa_*; else grad a is stored per step).
    t0 = tl.cast(start, tl.int64)
    t = start + back
    mask = _tile_mask(mask_f, t, length, MASKED)
    a1_off = a_ptr + (pid_b * s_ab + t0 * s_at + s_at) + tile_a
    h_off = (pid_b * s_hb + t0 * s_ht) + tile_h
    hp_off = h_ptr + (pid_b * s_hb + t0 * s_ht - s_ht) + tile_h
    # conj(a_{t+1}); 0 past the end, where no later state feeds back (a per feature there multiplies a g of 0: gh is
    # 0 past the end and nothing enters after it).
    if MASKED:
        nxt = mask_f[:, None] & (t + 1 < length)
        has_prev = mask & (t >= 1)
    else:
        nxt = mask
        has_prev = mask
    if A_PER_FEATURE:
        ar = tl.broadcast_to(fa_r[:, None], mask.shape)
        ai = -tl.broadcast_to(fa_i[:, None], mask.shape)
    elif COMPLEX:
        ar, ai = _load_complex(a1_off, 0, nxt, ACC)
        ai = -ai
    else:
        ar = tl.load(a1_off, mask=nxt, other=0.0).to(ACC)
    if COMPLEX:
        gr, gi = _load_complex(gh_ptr, h_off, mask, ACC)
        hpr, hpi = _load_complex(hp_off, 0, has_prev, ACC)
        if MASKED:
            hpi = tl.where(t == 0, h0_i[:, None], hpi)
    else:
        gr = tl.load(gh_ptr + h_off, mask=mask, other=0.0).to(ACC)
        hpr = tl.load(hp_off, mask=has_prev, other=0.0).to(ACC)
    if MASKED:
        hpr = tl.where(t == 0, h0_r[:, None], hpr)
    if HAS_RESETS:
        r_off = resets_ptr + pid_b * s_rb + t0 * s_rt + back * s_rt
        if MASKED:
            reset_next = tl.load(r_off + s_rt, mask=t + 1 < length, other=0) != 0
            reset = tl.load(r_off, mask=t < length, other=0) != 0
        else:
            reset_next = tl.load(r_off + s_rt) != 0
            reset = tl.load(r_off) != 0
        ar = tl.where(reset_next, 0.0, ar)
    if COMPLEX:
        if HAS_RESETS:
            ai = tl.where(reset_next, 0.0, ai)
        first = back == BLOCK_T - 1  # the latest step, where the carry enters (as in the forward's first step)
        gr += tl.where(first, ar * carry_r[:, None] - ai * carry_i[:, None], 0.0)
        gi += tl.where(first, ar * carry_i[:, None] + ai * carry_r[:, None], 0.0)
        _, _, gr, gi = tl.associative_scan((ar, ai, gr, gi), axis=1, combine_fn=_affine_complex)
        # g conj(h_{t-1})
        gar = gr * hpr + gi * hpi
        gai = gi * hpr - gr * hpi
        if HAS_RESETS:
            gar = tl.where(reset, 0.0, gar)
            gai = tl.where(reset, 0.0, gai)
        _store_complex(gb_ptr, h_off, gr, gi, mask)
        if A_PER_FEATURE:
            sum_r += _sum(gar, axis=1)
            sum_i += _sum(gai, axis=1)
        else:
            _store_complex(ga_ptr, h_off, gar, gai, mask)
        carry_i = _row(gi, back, 0, 1)
    else:
        gr += tl.where(back == BLOCK_T - 1, ar * carry_r[:, None], 0.0)
        _, gr = tl.associative_scan((ar, gr), axis=1, combine_fn=_affine)
        gar = gr * hpr
        if HAS_RESETS:
            gar = tl.where(reset, 0.0, gar)
        tl.store(gb_ptr + h_off, gr.to(gb_ptr.dtype.element_ty), mask=mask)
        if A_PER_FEATURE:
            sum_r += _sum(gar, axis=1)
        else:
            tl.store(ga_ptr + h_off, gar.to(ga_ptr.dtype.element_ty), mask=mask)
    # (The sums of grad a: past the end and outside the features g and h_{t-1} are 0, so they need no mask.)
    return _row(gr, back, 0, 1), carry_i, sum_r, sum_i


@triton.jit
def linear_scan_bwd(
    a_ptr, resets_ptr, h0_ptr, h_ptr, gh_ptr, ga_ptr, gb_ptr, gh0_ptr,
    length, feat, tune_rows, tune_length,
    s_ab, s_at, s_af, s_rb, s_rt, s_hb, s_ht, s_hf, s_0b, s_0f,
    COMPLEX: tl.constexpr, HAS_RESETS: tl.constexpr, HAS_H0: tl.constexpr, A_PER_FEATURE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr, STAGES: tl.constexpr, ACC: tl.constexpr,
):
    """Adjoint g_t = gh_t + conj(a_{t+1}) g_{t+1} by a scan of 2-D (feature, time) tiles from the end; grad
    a_t = g_t conj(h_{t-1}) (0 where reset), grad b_t = g_t, grad h0 = g_0 conj(a_0). gh, gb share h's strides;
    so does ga, unless A_PER_FEATURE (a the same at every batch row and step, strides 0): then ga is a contiguous
    (batch, F) in the accumulation dtype, each row grad a summed over that row's steps."""
    pid_b, offs_f, mask_f, steps, h0_r, h0_i = _linear_block(h0_ptr, feat, s_0b, s_0f, COMPLEX, HAS_H0,
                                                             BLOCK_T, BLOCK_F, ACC)
    fa_r, fa_i = _feature_a(a_ptr, offs_f, mask_f, s_af, COMPLEX, A_PER_FEATURE, ACC)
    # A tile's columns run backwards in time, so that a forward scan along them is the reverse scan: Triton
    # compiles `reverse=True` as a forward scan between reversals of its operands and results, 5 shuffles per
    # register each (sm_90 SASS, scripts/kernel_sass.py).
    back = BLOCK_T - 1 - steps
    n_chunks = (length + BLOCK_T - 1) // BLOCK_T
    # g at the first step of the tile after the current one, and grad a's sums (A_PER_FEATURE).
    carry_r = tl.full([BLOCK_F], 0.0, ACC)
    carry_i = tl.full([BLOCK_F], 0.0, ACC)
    sum_r = tl.full([BLOCK_F], 0.0, ACC)
    sum_i = tl.full([BLOCK_F], 0.0, ACC)
    # The last tile (it may pass the end), the tiles between without a time mask, then the first (h_{-1}).
    last = (n_chunks - 1) * BLOCK_T
    tile_a = offs_f[:, None] * s_af + back * s_at
    tile_h = offs_f[:, None] * s_hf + back * s_ht
    carry_r, carry_i, sum_r, sum_i = _linear_bwd_tile(
        a_ptr, resets_ptr, h_ptr, gh_ptr, ga_ptr, gb_ptr, pid_b, mask_f, back, tile_a, tile_h, last, length,
        carry_r, carry_i, sum_r, sum_i, h0_r, h0_i, fa_r, fa_i, s_ab, s_at, s_rb, s_rt, s_hb, s_ht,
        COMPLEX, HAS_RESETS, A_PER_FEATURE, True, BLOCK_T, ACC)
    for i in tl.range(2, n_chunks, num_stages=STAGES):
        carry_r, carry_i, sum_r, sum_i = _linear_bwd_tile(
            a_ptr, resets_ptr, h_ptr, gh_ptr, ga_ptr, gb_ptr, pid_b, mask_f, back, tile_a, tile_h,
            (n_chunks - i) * BLOCK_T, length, carry_r, carry_i, sum_r, sum_i, h0_r, h0_i, fa_r, fa_i, s_ab, s_at,
            s_rb, s_rt, s_hb, s_ht, COMPLEX, HAS_RESETS, A_PER_FEATURE, False, BLOCK_T, ACC)
    if n_chunks > 1:
        carry_r, carry_i, sum_r, sum_i = _linear_bwd_tile(
            a_ptr, resets_ptr, h_ptr, gh_ptr, ga_ptr, gb_ptr, pid_b, mask_f, back, tile_a, tile_h, 0, length,
            carry_r, carry_i, sum_r, sum_i, h0_r, h0_i, fa_r, fa_i, s_ab, s_at, s_rb, s_rt, s_hb, s_ht,
            COMPLEX, HAS_RESETS, A_PER_FEATURE, True, BLOCK_T, ACC)
    if A_PER_FEATURE:
        if COMPLEX:
            # a complex row: one word per feature when packed, else two reals
            if ga_ptr.dtype.element_ty == tl.int64:
                _store_complex(ga_ptr, pid_b * feat + offs_f, sum_r, sum_i, mask_f)
            else:
                _store_complex(ga_ptr, (pid_b * feat + offs_f) * 2, sum_r, sum_i, mask_f)
        else:
            tl.store(ga_ptr + pid_b * feat + offs_f, sum_r.to(ga_ptr.dtype.element_ty), mask=mask_f)
    if HAS_H0:
        # grad h0 = g_0 conj(a_0), a_0 zeroed by a reset at t = 0.
        a0_off = pid_b * s_ab + offs_f * s_af
        h0_off = pid_b * s_0b + offs_f * s_0f
        if COMPLEX:
            a0r, a0i = _load_complex(a_ptr, a0_off, mask_f, ACC)
        else:
            a0r = tl.load(a_ptr + a0_off, mask=mask_f, other=0.0).to(ACC)
        if HAS_RESETS:
            reset0 = tl.load(resets_ptr + pid_b * s_rb) != 0
            a0r = tl.where(reset0, 0.0, a0r)
            if COMPLEX:
                a0i = tl.where(reset0, 0.0, a0i)
        if COMPLEX:
            _store_complex(gh0_ptr, h0_off, carry_r * a0r + carry_i * a0i, carry_i * a0r - carry_r * a0i, mask_f)
        else:
            tl.store(gh0_ptr + h0_off, (carry_r * a0r).to(gh0_ptr.dtype.element_ty), mask=mask_f)


# -------------------------------------------------------------------------------- selective scan
# u, delta, z (batch, dim, L) and B, C with any strides (the launcher passes u, delta, z time-contiguous, B and C
# state-contiguous to the forward and time-contiguous to the backward). A variable B is (batch, groups, N, L), an
# invariant one (dim, N); strides of absent axes are 0. y and the gradients of u, delta, z are contiguous (batch,
# dim, L) in their tensors' dtypes; states and the other gradients are in ACC. Grid: batch x groups x channel
# blocks of BLOCK_D within a group of e = dim / groups channels, flattened.
#
# The backward's tiles are 2-D, (channels, time), BLOCK_T steps long (the launcher's chunk, at most 64). Triton
# lays such a tile out with several consecutive steps in each thread, so `tl.associative_scan` runs those
# sequentially in registers and only the threads' totals go through warp shuffles, as mamba_ssm's CUDA
# kernel does; a tile of one warp needs no shared memory or barrier. The state index n is a loop inside
# each chunk, so registers do not grow with N. What is carried per (channel, n) across
# chunks lives in the kernel's (batch, dim, N) outputs ("slots"), each read and written by its own
# program only; a single chunk with no initial state (HAS_CARRY false) reads none.

@triton.jit
def _program(dim, e, BLOCK_D: tl.constexpr):
    # (batch row, group, first channel d0 (both int64: they scale strides as large as L), channels d,
    # offsets from d0 (BLOCK_D,), their mask).
    pid = tl.program_id(0)
    n_dblocks = (e + BLOCK_D - 1) // BLOCK_D
    block = pid % n_dblocks
    rest = pid // n_dblocks
    groups = dim // e
    offs_d = tl.arange(0, BLOCK_D)
    d0 = (rest % groups) * e + block * BLOCK_D
    return tl.cast(rest // groups, tl.int64), rest % groups, tl.cast(d0, tl.int64), d0 + offs_d, offs_d, \
        block * BLOCK_D + offs_d < e


@triton.jit
def _load_dt(delta_ptr, base, tile_dt, mask, bias, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
             ACC: tl.constexpr, FAST: tl.constexpr):
    # (Δ after bias and softplus, 0 where masked; Δ before softplus, for its derivative) on one tile.
    raw = tl.load(delta_ptr + base + tile_dt, mask=mask, other=0.0).to(ACC)
    if HAS_BIAS:
        raw += bias[:, None]
    dt = raw
    if SOFTPLUS:
        dt = _softplus(raw, FAST)
    return tl.where(mask, dt, 0.0), raw


@triton.jit
def _bc_column(ptr, base, d, n, rows, s_d, s_n, s_t, mask_d, mask_t, VARIABLE: tl.constexpr, ACC: tl.constexpr):
    # State n of B or C on (BLOCK_D, BLOCK_T) tiles: a variable one from its chunk at `base` (the same for every
    # channel), an invariant one (the same at every step). The variable one is loaded through pointers broadcast
    # over the channels, not loaded as one row and broadcast after: the row's own layout (two steps in each of
    # 32 lanes) would cost a layout change in registers for every state.
    if VARIABLE:
        shape: tl.constexpr = (d.shape[0], rows.shape[0])
        col = tl.load(tl.broadcast_to(ptr + base + tl.cast(n, tl.int64) * s_n + rows[None, :] * s_t, shape),
                      mask=tl.broadcast_to(mask_t[None, :], shape), other=0.0).to(ACC)
    else:
        col = tl.load(ptr + d * s_d + n * s_n, mask=mask_d, other=0.0).to(ACC)[:, None]
    return col


@triton.jit
def _state_inputs(n, A_ptr, B_ptr, C_ptr, B_base, C_base, slot_ptr, d, slots, rows, mask_d, mask_t,
                  s_Ad, s_An, s_Bd, s_Bn, s_Bt, s_Cd, s_Cn, s_Ct, B_VARIABLE: tl.constexpr, C_VARIABLE: tl.constexpr,
                  HAS_SLOT: tl.constexpr, ACC: tl.constexpr):
    # What state n needs: A_n (BLOCK_D,), its B and C columns, and its slot of slot_ptr (BLOCK_D,; zeros
    # without HAS_SLOT). (Loading them one state ahead costs two tiles of registers; other programs on the
    # multiprocessor hide their latency instead.)
    A_n = tl.load(A_ptr + d * s_Ad + n * s_An, mask=mask_d, other=0.0).to(ACC)
    B_n = _bc_column(B_ptr, B_base, d, n, rows, s_Bd, s_Bn, s_Bt, mask_d, mask_t, B_VARIABLE, ACC)
    C_n = _bc_column(C_ptr, C_base, d, n, rows, s_Cd, s_Cn, s_Ct, mask_d, mask_t, C_VARIABLE, ACC)
    slot = tl.full([A_n.shape[0]], 0.0, ACC)
    if HAS_SLOT:
        slot = tl.load(slot_ptr + slots + n, mask=mask_d, other=0.0).to(ACC)
    return A_n, B_n, C_n, slot


@triton.jit
def _bc_grad(ptr, bc_off, slots, n, length, rows, mask_d, mask_t, terms, VARIABLE: tl.constexpr,
             READ_SLOTS: tl.constexpr):
    # The gradient of state n of B or C from its (BLOCK_D, BLOCK_T) terms. A variable one sums over the
    # channels into (batch, groups, N, L) at bc_off (atomic: channel blocks add up; relaxed, as nothing
    # reads it before the kernel ends); an invariant one sums over time and comes back (added to its slot
    # with READ_SLOTS), for the caller to store after the barrier.
    total = _sum(terms, axis=1)
    if VARIABLE:
        # Added from the tile's first row, through a (BLOCK_D, BLOCK_T) tile of pointers: a row of its own would
        # take a layout change in registers.
        first = tl.arange(0, terms.shape[0])[:, None] == 0
        shape: tl.constexpr = terms.shape
        tl.atomic_add(tl.broadcast_to(ptr + bc_off + tl.cast(n, tl.int64) * length + rows[None, :], shape),
                      tl.broadcast_to(_sum(terms, axis=0)[None, :], shape), mask=first & mask_t[None, :],
                      sem="relaxed")
    elif READ_SLOTS:
        total += tl.load(ptr + slots + n, mask=mask_d, other=0.0)
    return total


@triton.jit
def _decay(dt, A2_n, reset, HAS_RESETS: tl.constexpr, FAST: tl.constexpr):
    # exp(Δ A_n) = 2^(Δ A_n log2 e) on the tile, 0 where the state resets. Masked steps have Δ = 0: exp = 1.
    dA = _exp2(dt * A2_n[:, None], FAST)
    if HAS_RESETS:
        dA = tl.where(reset[None, :], 0.0, dA)
    return dA


@triton.jit
def _chunk_inputs(u_ptr, delta_ptr, resets_ptr, bias, pid_b, d0, offs_d, t0, rows, mask_d, mask_t,
                  s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_rb, s_rt, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
                  HAS_RESETS: tl.constexpr, ACC: tl.constexpr, FAST: tl.constexpr):
    # u, Δ, Δ before softplus (BLOCK_D, BLOCK_T) and resets (BLOCK_T,) of the chunk starting at t0 (int64).
    mask = mask_d[:, None] & mask_t[None, :]
    u = tl.load(u_ptr + pid_b * s_ub + d0 * s_ud + t0 * s_ut + offs_d[:, None] * s_ud + rows[None, :] * s_ut,
                mask=mask, other=0.0).to(ACC)
    dt, raw = _load_dt(delta_ptr, pid_b * s_db + d0 * s_dd + t0 * s_dt, offs_d[:, None] * s_dd + rows[None, :] * s_dt,
                       mask, bias, HAS_BIAS, SOFTPLUS, ACC, FAST)
    reset = mask_t
    if HAS_RESETS:
        reset = tl.load(resets_ptr + pid_b * s_rb + t0 * s_rt + rows * s_rt, mask=mask_t, other=0) != 0
    return u, dt, raw, reset


@triton.jit
def _gate(z_ptr, pid_b, d0, t0, offs_d, rows, mask, s_zb, s_zd, s_zt, FAST: tl.constexpr, ACC: tl.constexpr):
    # z and sigmoid(z) on the chunk's tile: the output is multiplied by silu(z) = z sigmoid(z).
    z = tl.load(z_ptr + pid_b * s_zb + d0 * s_zd + t0 * s_zt + offs_d[:, None] * s_zd + rows[None, :] * s_zt,
                mask=mask, other=0.0).to(ACC)
    return z, _sigmoid(z, FAST)


@triton.jit
def _scan_grad(gy_ptr, gy_off, z_ptr, pid_b, d0, t0, offs_d, rows, mask, s_zb, s_zd, s_zt, HAS_Z: tl.constexpr,
               FAST: tl.constexpr, ACC: tl.constexpr):
    # The gradient of the scan's output y (before the gate) on the chunk's tile: dL/d(output) silu(z).
    gy = tl.load(gy_ptr + gy_off, mask=mask, other=0.0).to(ACC)
    if HAS_Z:
        z, gate = _gate(z_ptr, pid_b, d0, t0, offs_d, rows, mask, s_zb, s_zd, s_zt, FAST, ACC)
        gy = gy * z * gate
    return gy


@triton.jit
def _per_channel(ptr, d, mask_d, HAS: tl.constexpr, ACC: tl.constexpr):
    # A (dim,) parameter on this program's channels (BLOCK_D,), zeros when absent.
    value = tl.full([d.shape[0]], 0.0, ACC)
    if HAS:
        value = tl.load(ptr + d, mask=mask_d, other=0.0).to(ACC)
    return value


@triton.jit
def _store_column(ptr, slots, n, tile, rows, column, mask_d):
    # Stores one column of a (BLOCK_D, BLOCK_T) tile into slots n, taken out by a masked sum over the time axis
    # (a few shuffles: a store of the whole tile, predicated off but for the column, would take a layout change).
    tl.store(ptr + slots + n, _row(tile, rows[None, :], column, 1), mask=mask_d)


@triton.jit
def selective_scan_fwd(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, resets_ptr, h0_ptr, y_ptr, starts_ptr, last_ptr,
    summary_ptr, dim, e, length, n_state, tune_rows, tune_length,
    s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_zb, s_zd, s_zt, s_Ad, s_An,
    s_Bb, s_Bg, s_Bd, s_Bn, s_Bt, s_Cb, s_Cg, s_Cd, s_Cn, s_Ct, s_rb, s_rt, s_ob, s_od, segment,
    B_VARIABLE: tl.constexpr, C_VARIABLE: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
    HAS_RESETS: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_H0: tl.constexpr,
    WRITE_LAST: tl.constexpr, STORE_STARTS: tl.constexpr, SUMMARY: tl.constexpr, CHUNK: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr, ACC: tl.constexpr, FAST: tl.constexpr,
):
    """y = (Σ_n C_n h_n + D u) silu(z) (batch, dim, L), strides (s_ob, s_od, 1), in y's dtype.

    Every program holds the state of its BLOCK_D channels, all N of it, as a (BLOCK_D, BLOCK_N) tile in registers
    and takes one step at a time: h = exp(Δ A) h + Δ B u, y = Σ_n C h. There is no scan within a segment: the
    batch rows, channels and states give the GPU many independent recurrences, and each step's loads are issued
    STAGES - 1 steps ahead. B and C come state-contiguous ((batch, groups, L, N) memory), which also lays the tile
    out with a few states in each thread and the channels across lanes.

    Time is cut into segments of `segment` steps (a multiple of CHUNK), the grid's second axis, so that few rows
    still make enough programs. With SUMMARY a program walks its segment from zero (segment 0 from h0) and writes
    what the segment does to a state entering it, h -> decay h + end, to summary_ptr (batch, segments - 1,
    2, dim, N): end, and decay = exp(A Σ Δ), 0 after a reset. Without SUMMARY a program folds the summaries of the
    segments before its own into its starting state (h0 for the first) and writes y; with STORE_STARTS the state
    entering every chunk of CHUNK steps (the backward's) goes to starts (batch, chunks, dim, N); with WRITE_LAST
    the last segment's final state goes to last (batch, dim, N). h0 (batch, dim, N) is read with HAS_H0.
    tune_rows and tune_length are read by the autotuner's key only."""
    pid_b, pid_g, d0, d, offs_d, mask_d = _program(dim, e, BLOCK_D)
    seg = tl.program_id(1)
    segments = tl.num_programs(1) + SUMMARY  # the summary pass has no program for the last segment
    n = tl.arange(0, BLOCK_N)[None, :]
    mask_n = n < n_state
    mask_dn = mask_d[:, None] & mask_n
    A2 = tl.load(A_ptr + d[:, None] * s_Ad + n * s_An, mask=mask_dn, other=0.0).to(ACC) * LOG2E
    bias = _per_channel(bias_ptr, d, mask_d, HAS_BIAS, ACC)
    D = _per_channel(D_ptr, d, mask_d, HAS_D, ACC)
    if not B_VARIABLE:
        B = tl.load(B_ptr + d[:, None] * s_Bd + n * s_Bn, mask=mask_dn, other=0.0).to(ACC)
    if not C_VARIABLE:
        C = tl.load(C_ptr + d[:, None] * s_Cd + n * s_Cn, mask=mask_dn, other=0.0).to(ACC)
    # This program's (channel, n) in a (batch, dim, N) tensor, in its row of chunk starts, and in the summaries.
    chan_state = offs_d[:, None] * n_state + n
    state_off = (pid_b * dim + d0) * n_state + chan_state
    starts_row = starts_ptr + pid_b * ((length + CHUNK - 1) // CHUNK) * dim * n_state + d0 * n_state + chan_state
    summary_row = summary_ptr + pid_b * (segments - 1) * 2 * dim * n_state + d0 * n_state + chan_state
    h = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)
    if HAS_H0:
        h = tl.where(seg == 0, tl.load(h0_ptr + state_off, mask=mask_dn, other=0.0).to(ACC), 0.0)
    if not SUMMARY:
        for j in range(0, seg):
            slot = summary_row + tl.cast(j, tl.int64) * 2 * dim * n_state
            h = tl.load(slot + dim * n_state, mask=mask_dn, other=0.0) * h + tl.load(slot, mask=mask_dn, other=0.0)
    t_begin = seg * segment
    t_end = tl.minimum(t_begin + segment, length)
    dt_sum = tl.full([BLOCK_D], 0.0, ACC)
    cleared = seg < 0  # a reset within the segment (summary pass)
    u_row = u_ptr + pid_b * s_ub + d0 * s_ud + offs_d * s_ud
    dt_row = delta_ptr + pid_b * s_db + d0 * s_dd + offs_d * s_dd
    z_row = z_ptr + pid_b * s_zb + d0 * s_zd + offs_d * s_zd
    y_row = y_ptr + pid_b * s_ob + d0 * s_od + offs_d * s_od
    B_row = B_ptr + pid_b * s_Bb + pid_g * s_Bg + n * s_Bn
    C_row = C_ptr + pid_b * s_Cb + pid_g * s_Cg + n * s_Cn
    for t in tl.range(t_begin, t_end, num_stages=STAGES):
        t64 = tl.cast(t, tl.int64)
        if STORE_STARTS and not SUMMARY:
            if t % CHUNK == 0:
                tl.store(starts_row + tl.cast(t // CHUNK, tl.int64) * dim * n_state, h, mask=mask_dn)
        u = tl.load(u_row + t64 * s_ut, mask=mask_d, other=0.0).to(ACC)
        dt = tl.load(dt_row + t64 * s_dt, mask=mask_d, other=0.0).to(ACC)
        if HAS_BIAS:
            dt += bias
        if SOFTPLUS:
            dt = _softplus(dt, FAST)
        if B_VARIABLE:
            B = tl.load(B_row + t64 * s_Bt, mask=mask_n, other=0.0).to(ACC)
        dA = _exp2(dt[:, None] * A2, FAST)
        if HAS_RESETS:
            reset = tl.load(resets_ptr + pid_b * s_rb + t64 * s_rt) != 0
            dA = tl.where(reset, 0.0, dA)
            if SUMMARY:
                cleared = cleared | reset
        h = dA * h + (dt * u)[:, None] * B
        if SUMMARY:
            dt_sum += dt
        else:
            if C_VARIABLE:
                C = tl.load(C_row + t64 * s_Ct, mask=mask_n, other=0.0).to(ACC)
            y = _sum(h * C, axis=1)
            if HAS_D:
                y += u * D
            if HAS_Z:
                z = tl.load(z_row + t64 * s_zt, mask=mask_d, other=0.0).to(ACC)
                y *= z * _sigmoid(z, FAST)
            tl.store(y_row + t64, y.to(y_ptr.dtype.element_ty), mask=mask_d)
    if SUMMARY:
        slot = summary_row + tl.cast(seg, tl.int64) * 2 * dim * n_state
        tl.store(slot, h, mask=mask_dn)
        decay = _exp2(dt_sum[:, None] * A2, FAST)
        if HAS_RESETS:
            decay = tl.where(cleared, 0.0, decay)
        tl.store(slot + dim * n_state, decay, mask=mask_dn)
    elif WRITE_LAST:
        if t_end == length:
            tl.store(last_ptr + state_off, h, mask=mask_dn)


@triton.jit
def selective_scan_bwd(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, resets_ptr, starts_ptr, gy_ptr,
    gu_ptr, gdelta_ptr, gz_ptr, gA_ptr, gB_ptr, gC_ptr, gD_ptr, gbias_ptr, gh_ptr,
    dim, e, length, n_state, tune_rows, tune_length,
    s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_zb, s_zd, s_zt, s_Ad, s_An,
    s_Bb, s_Bg, s_Bd, s_Bn, s_Bt, s_Cb, s_Cg, s_Cd, s_Cn, s_Ct, s_rb, s_rt, s_ob, s_od, s_gb, s_gd, s_gt,
    B_VARIABLE: tl.constexpr, C_VARIABLE: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
    HAS_RESETS: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_CARRY: tl.constexpr,
    READ_SLOTS: tl.constexpr, WRITE_GRAD_CARRY: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
    ACC: tl.constexpr, FAST: tl.constexpr,
):
    """Walk the chunks backwards; per state n, recompute the chunk's states from its stored start, then the
    adjoint g_t = C_t gy_t + dA_{t+1} g_{t+1} by a reverse scan over the time axis of the 2-D tile, where
    gy = dL/dy silu(z). With x = g_t dA_t h_{t-1} = g_t (h_t - ΔBu_t): grad A = Σ x Δ, grad Δ = Σ_n x A +
    u Σ_n g B, grad u = Δ Σ_n g B + D gy, grad B = Σ_d g Δ u, grad C = Σ_d gy h, grad D = Σ_t gy u,
    grad z = dL/dy (Σ_n C h + D u) silu'(z).

    Per-state values that outlive a chunk live in the (batch, dim, N) outputs, not in registers: gh holds
    the adjoint of the state at the end of the current chunk (written with WRITE_GRAD_CARRY: more than one
    chunk, or an initial state, whose gradient it ends as), gA and invariant gB, gC sum over chunks. With
    READ_SLOTS (more than one chunk, or a used last state) the caller fills gh with the last state's gradient
    or zeros and zeroes the sums, and each chunk adds to what the slots hold; without, they are only
    written. Each slot belongs to one program; a barrier between reading and writing it orders its threads. Variable B, C gradients are (batch, groups, N, L)
    sums over channel blocks (atomic adds); grad A, D, the Δ bias and invariant B, C gradients are per
    batch row, summed by the caller. The gradients of u, Δ (before its bias) and z are (batch, dim, L) with
    strides (s_ob, s_od, 1), in their tensors' dtypes; dL/d(output) is read with strides (s_gb, s_gd, s_gt)."""
    pid_b, pid_g, d0, d, offs_d, mask_d = _program(dim, e, BLOCK_D)
    slots = (pid_b * dim + d0) * n_state + offs_d * n_state  # + n: this program's (channel, n) slots
    bias = _per_channel(bias_ptr, d, mask_d, HAS_BIAS, ACC)
    D = _per_channel(D_ptr, d, mask_d, HAS_D, ACC)
    grad_D = tl.full([BLOCK_D], 0.0, ACC)
    grad_bias = tl.full([BLOCK_D], 0.0, ACC)
    n_chunks = (length + BLOCK_T - 1) // BLOCK_T
    rows = tl.arange(0, BLOCK_T)
    for i in range(n_chunks):
        c = n_chunks - 1 - i
        t0 = tl.cast(c * BLOCK_T, tl.int64)
        mask_t = c * BLOCK_T + rows < length
        mask = mask_d[:, None] & mask_t[None, :]
        u, dt, raw, reset = _chunk_inputs(
            u_ptr, delta_ptr, resets_ptr, bias, pid_b, d0, offs_d, t0, rows, mask_d, mask_t,
            s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_rb, s_rt, HAS_BIAS, SOFTPLUS, HAS_RESETS, ACC, FAST)
        # Δ and resets one step later inside the chunk; Δ = 0 (so dA_{t+1} = 1) in the last row and past the
        # end, where the carry enters.
        _, dt_next, _, reset_next = _chunk_inputs(
            u_ptr, delta_ptr, resets_ptr, bias, pid_b, d0, offs_d, t0 + 1, rows, mask_d,
            (rows < BLOCK_T - 1) & (c * BLOCK_T + rows + 1 < length),
            s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_rb, s_rt, HAS_BIAS, SOFTPLUS, HAS_RESETS, ACC, FAST)
        out_off = pid_b * s_ob + d0 * s_od + t0 + offs_d[:, None] * s_od + rows[None, :]
        gy_off = pid_b * s_gb + d0 * s_gd + t0 * s_gt + offs_d[:, None] * s_gd + rows[None, :] * s_gt
        gy = _scan_grad(gy_ptr, gy_off, z_ptr, pid_b, d0, t0, offs_d, rows, mask, s_zb, s_zd, s_zt, HAS_Z, FAST, ACC)
        grad_D += _sum(gy * u, axis=1)
        dtu = dt * u
        gBu = tl.full([BLOCK_D, BLOCK_T], 0.0, ACC)  # Σ_n g B
        gdt = tl.full([BLOCK_D, BLOCK_T], 0.0, ACC)  # Σ_n x A
        y = tl.full([BLOCK_D, BLOCK_T], 0.0, ACC)  # Σ_n C h, for grad z
        B_base = pid_b * s_Bb + pid_g * s_Bg + t0 * s_Bt
        C_base = pid_b * s_Cb + pid_g * s_Cg + t0 * s_Ct
        bc_off = ((pid_b * (dim // e) + pid_g) * n_state) * length + t0
        starts = starts_ptr + ((pid_b * n_chunks + c) * dim + d0) * n_state + offs_d * n_state
        if READ_SLOTS:
            tl.debug_barrier()  # the last chunk's writes to the slots are seen by every thread
        # Each value is used as soon as it exists, so that few tiles are live at once (registers, not
        # arithmetic, bound this kernel). Past the end Δ = 0, so no masking of g is needed: every term it
        # enters there is multiplied by Δ, by gy (0) or stored under the mask.
        for n in range(n_state):
            A_n, B_n, C_n, carry = _state_inputs(
                n, A_ptr, B_ptr, C_ptr, B_base, C_base, gh_ptr, d, slots, rows, mask_d, mask_t,
                s_Ad, s_An, s_Bd, s_Bn, s_Bt, s_Cd, s_Cn, s_Ct, B_VARIABLE, C_VARIABLE, READ_SLOTS, ACC)
            gA_n = tl.full([BLOCK_D], 0.0, ACC)
            if READ_SLOTS:
                gA_n = tl.load(gA_ptr + slots + n, mask=mask_d, other=0.0)
            dBu = dtu * B_n
            dA = _decay(dt, A_n * LOG2E, reset, HAS_RESETS, FAST)
            prod, hs = tl.associative_scan((dA, dBu), axis=1, combine_fn=_affine)
            if HAS_CARRY:
                hs += prod * tl.load(starts + n, mask=mask_d, other=0.0)[:, None]
            if HAS_Z:
                y += hs * C_n
            gC_n = _bc_grad(gC_ptr, bc_off, slots, n, length, rows, mask_d, mask_t, hs * gy, C_VARIABLE, READ_SLOTS)
            hs -= dBu  # now dA_t h_{t-1}
            # The reverse scan runs on a 2-D tile, the case Triton's own tests cover (the gpu tests check it). The
            # carry (the adjoint entering from the next chunk) joins the last step's term, where dA_{t+1} is 1: then
            # the scan's running products go unused, and Triton drops their reversal back into time order.
            gC_in = C_n * gy
            if READ_SLOTS:
                gC_in += tl.where(rows[None, :] == BLOCK_T - 1, carry[:, None], 0.0)
            _, g = tl.associative_scan((_decay(dt_next, A_n * LOG2E, reset_next, HAS_RESETS, FAST), gC_in),
                                       axis=1, combine_fn=_affine, reverse=True)
            x = g * hs
            gdt += x * A_n[:, None]
            gBu += g * B_n
            gB_n = _bc_grad(gB_ptr, bc_off, slots, n, length, rows, mask_d, mask_t, g * dtu, B_VARIABLE, READ_SLOTS)
            gA_n += _sum(x * dt, axis=1)
            if READ_SLOTS:
                tl.debug_barrier()  # every thread has read the slots of n before any is written
            if WRITE_GRAD_CARRY:
                # The adjoint of the state before this chunk: dA_0 g_0 (0 after a reset at the chunk's start).
                _store_column(gh_ptr, slots, n, dA * g, rows, 0, mask_d)
            tl.store(gA_ptr + slots + n, gA_n, mask=mask_d)
            if not B_VARIABLE:
                tl.store(gB_ptr + slots + n, gB_n, mask=mask_d)
            if not C_VARIABLE:
                tl.store(gC_ptr + slots + n, gC_n, mask=mask_d)
        # u and Δ before softplus loaded again rather than held through the loop over states (Δ itself is held,
        # so the Δ recomputed here goes unused and is not computed).
        u, _, raw, _ = _chunk_inputs(
            u_ptr, delta_ptr, resets_ptr, bias, pid_b, d0, offs_d, t0, rows, mask_d, mask_t,
            s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_rb, s_rt, HAS_BIAS, SOFTPLUS, HAS_RESETS, ACC, FAST)
        if HAS_Z:
            # z and dL/d(output) loaded again rather than held through the loop over states.
            gout = tl.load(gy_ptr + gy_off, mask=mask, other=0.0).to(ACC)
            z, gate = _gate(z_ptr, pid_b, d0, t0, offs_d, rows, mask, s_zb, s_zd, s_zt, FAST, ACC)
            # silu'(z) = sigmoid(z) (1 + z (1 - sigmoid(z)))
            tl.store(gz_ptr + out_off, (gout * (y + D[:, None] * u) * gate * (1.0 + z * (1.0 - gate)))
                     .to(gz_ptr.dtype.element_ty), mask=mask)
        gdt += u * gBu
        if SOFTPLUS:
            gdt = gdt * _sigmoid(raw, FAST)
        gdt = tl.where(mask, gdt, 0.0)
        grad_bias += _sum(gdt, axis=1)
        tl.store(gu_ptr + out_off, (dt * gBu + D[:, None] * gy).to(gu_ptr.dtype.element_ty), mask=mask)
        tl.store(gdelta_ptr + out_off, gdt.to(gdelta_ptr.dtype.element_ty), mask=mask)
    row = pid_b * dim + d
    if HAS_D:
        tl.store(gD_ptr + row, grad_D, mask=mask_d)
    if HAS_BIAS:
        tl.store(gbias_ptr + row, grad_bias, mask=mask_d)


@triton.jit
def selective_step_fwd(
    h_ptr, u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, y_ptr, out_ptr,
    dim, n, per_group, n_dblocks,
    s_hb, s_hd, s_hn, s_ub, s_ud, s_db, s_dd, s_ad, s_an, s_bb, s_bg, s_bn, s_cb, s_cg, s_cn, s_zb, s_zd,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # One decoding step of the selective scan. A program owns one batch row and BLOCK_D channels with all N
    # states: h' = exp(Δ A) h + Δ B u, y = <C, h'> + D u, times silu(z); float32 throughout. h' goes to a new
    # (batch, dim, N) tensor `out`, contiguous. Channel d reads B and C of its group d // per_group.
    pid = tl.program_id(0)
    pid_b = tl.cast(pid // n_dblocks, tl.int64)
    d = (pid % n_dblocks) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d = d < dim
    mask = mask_d[:, None] & (offs_n < n)[None, :]
    g = d // per_group
    u = tl.load(u_ptr + pid_b * s_ub + d * s_ud, mask=mask_d, other=0.0).to(tl.float32)
    dt = tl.load(delta_ptr + pid_b * s_db + d * s_dd, mask=mask_d, other=0.0).to(tl.float32)
    if HAS_BIAS:
        dt += tl.load(bias_ptr + d, mask=mask_d, other=0.0).to(tl.float32)
    if SOFTPLUS:
        dt = _softplus(dt, False)
    A = tl.load(A_ptr + d[:, None] * s_ad + offs_n[None, :] * s_an, mask=mask, other=0.0).to(tl.float32)
    B = tl.load(B_ptr + pid_b * s_bb + g[:, None] * s_bg + offs_n[None, :] * s_bn, mask=mask, other=0.0)
    C = tl.load(C_ptr + pid_b * s_cb + g[:, None] * s_cg + offs_n[None, :] * s_cn, mask=mask, other=0.0)
    h = tl.load(h_ptr + pid_b * s_hb + d[:, None] * s_hd + offs_n[None, :] * s_hn, mask=mask, other=0.0)
    # Past N (masked): A = 0 gives decay 1 on h = 0, and B = C = 0 add nothing.
    h = tl.exp(dt[:, None] * A) * h.to(tl.float32) + (dt * u)[:, None] * B.to(tl.float32)
    y = _sum(h * C.to(tl.float32), axis=1)
    if HAS_D:
        y += tl.load(D_ptr + d, mask=mask_d, other=0.0).to(tl.float32) * u
    if HAS_Z:
        z = tl.load(z_ptr + pid_b * s_zb + d * s_zd, mask=mask_d, other=0.0).to(tl.float32)
        y = y * z / (1.0 + tl.exp(-z))
    tl.store(y_ptr + pid_b * dim + d, y.to(y_ptr.dtype.element_ty), mask=mask_d)
    tl.store(out_ptr + pid_b * dim * n + d[:, None] * n + offs_n[None, :], h, mask=mask)


@triton.jit
def conv1d_step_fwd(
    x_ptr, state_ptr, w_ptr, bias_ptr, y_ptr, out_ptr,
    dim, width, n_dblocks,
    s_xb, s_xd, s_sb, s_sd, s_sk, s_wd, s_wk,
    HAS_BIAS: tl.constexpr, SILU: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # One decoding step of the causal depthwise conv. A program owns one batch row and BLOCK_D channels: the window
    # (the K-1 carried inputs, then x_t) times the taps, plus the bias, through SiLU with SILU; float32 throughout.
    # The window's last K-1 entries go to a new (batch, dim, K-1) tensor `out`, contiguous, in out's dtype.
    pid = tl.program_id(0)
    pid_b = tl.cast(pid // n_dblocks, tl.int64)
    d = (pid % n_dblocks) * BLOCK_D + tl.arange(0, BLOCK_D)
    k = tl.arange(0, BLOCK_K)
    mask_d = d < dim
    window = tl.load(state_ptr + pid_b * s_sb + d[:, None] * s_sd + k[None, :] * s_sk,
                     mask=mask_d[:, None] & (k < width - 1)[None, :], other=0.0)
    window = window.to(x_ptr.dtype.element_ty).to(tl.float32)  # the state in x_t's dtype, as the torch path reads it
    x = tl.load(x_ptr + pid_b * s_xb + d * s_xd, mask=mask_d, other=0.0).to(tl.float32)
    window = tl.where((k == width - 1)[None, :], x[:, None], window)
    taps = tl.load(w_ptr + d[:, None] * s_wd + k[None, :] * s_wk, mask=mask_d[:, None] & (k < width)[None, :],
                   other=0.0).to(tl.float32)
    y = _sum(window * taps, axis=1)
    if HAS_BIAS:
        y += tl.load(bias_ptr + d, mask=mask_d, other=0.0).to(tl.float32)
    if SILU:
        y = y / (1.0 + tl.exp(-y))
    tl.store(y_ptr + pid_b * dim + d, y.to(y_ptr.dtype.element_ty), mask=mask_d)
    # Entry k of the window (k >= 1) is entry k - 1 of the next state.
    tl.store(out_ptr + pid_b * dim * (width - 1) + d[:, None] * (width - 1) + (k - 1)[None, :],
             window.to(out_ptr.dtype.element_ty), mask=mask_d[:, None] & (k >= 1)[None, :] & (k < width)[None, :])


@triton.jit
def _conv_taps(x_ptr, w_ptr, x_base, d, t, s_xd, s_xl, s_wd, s_wk, mask_d, length, SHIFT: tl.constexpr,
               WIDTH: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr):
    # The depthwise convolution without its bias at times t + SHIFT: Σ_j w[d, j] x[d, t + SHIFT - (WIDTH-1) + j], x
    # zero before 0 and from `length` on, in float32 (BLOCK_D, BLOCK_L).
    acc = tl.full((BLOCK_D, BLOCK_L), 0.0, tl.float32)
    for j in tl.static_range(WIDTH):
        src = t + (SHIFT - (WIDTH - 1) + j)
        w = tl.load(w_ptr + d * s_wd + j * s_wk, mask=mask_d, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + x_base + d[:, None] * s_xd + src[None, :] * s_xl,
                    mask=mask_d[:, None] & ((src >= 0) & (src < length))[None, :], other=0.0)
        acc += w[:, None] * x.to(tl.float32)
    return acc


@triton.jit
def conv1d_fwd(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    dim, length, n_dblocks, n_lblocks,
    s_xb, s_xd, s_xl, s_yb, s_yd, s_yl, s_wd, s_wk,
    HAS_BIAS: tl.constexpr, SILU: tl.constexpr, WIDTH: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr,
):
    # The causal depthwise conv of a (BLOCK_D, BLOCK_L) tile of one batch row: the taps read the tile and the WIDTH-1
    # steps before it (from cache but for the tile itself), plus the bias, through SiLU with SILU; float32 inside, y in
    # y's dtype with y's strides.
    pid = tl.program_id(0)
    pid_b = tl.cast(pid // (n_dblocks * n_lblocks), tl.int64)
    rest = pid % (n_dblocks * n_lblocks)
    d = (rest // n_lblocks) * BLOCK_D + tl.arange(0, BLOCK_D)
    t = (rest % n_lblocks) * BLOCK_L + tl.arange(0, BLOCK_L)
    mask_d = d < dim
    v = _conv_taps(x_ptr, w_ptr, pid_b * s_xb, d, t, s_xd, s_xl, s_wd, s_wk, mask_d, length, 0, WIDTH, BLOCK_D,
                   BLOCK_L)
    if HAS_BIAS:
        v += tl.load(bias_ptr + d, mask=mask_d, other=0.0).to(tl.float32)[:, None]
    if SILU:
        v = v / (1.0 + tl.exp(-v))
    tl.store(y_ptr + pid_b * s_yb + d[:, None] * s_yd + t[None, :] * s_yl, v.to(y_ptr.dtype.element_ty),
             mask=mask_d[:, None] & (t < length)[None, :])


@triton.jit
def conv1d_bwd(
    x_ptr, w_ptr, bias_ptr, gy_ptr, gx_ptr, gw_ptr, gb_ptr,
    dim, length, n_dblocks, n_groups, tiles_per_group,
    s_xb, s_xd, s_xl, s_gb, s_gd, s_gl, s_gxb, s_gxd, s_gxl, s_wd, s_wk,
    HAS_BIAS: tl.constexpr, SILU: tl.constexpr, WIDTH: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    # The gradients of `conv1d_fwd`. A program owns one batch row, BLOCK_D channels and a group of tiles_per_group
    # consecutive (BLOCK_D, BLOCK_L) tiles. With dv the gradient at the conv's output (before SiLU: dy times SiLU's
    # derivative at the recomputed pre-activation), dx[t] = Σ_j w[j] dv[t + WIDTH-1 - j] reads dv up to WIDTH-1 steps
    # past the tile, recomputed there rather than kept. The weight's and the bias's sums over the group,
    # Σ_t dv[t] x[t - (WIDTH-1) + j] and Σ_t dv[t], go to row (batch row, group) of float32 (rows, dim, WIDTH) and
    # (rows, dim) buffers, which the launcher sums in a fixed order (no atomics: the same gradients every run).
    pid = tl.program_id(0)
    pid_b = tl.cast(pid // (n_dblocks * n_groups), tl.int64)
    rest = pid % (n_dblocks * n_groups)
    group = rest % n_groups
    d = (rest // n_groups) * BLOCK_D + tl.arange(0, BLOCK_D)
    k = tl.arange(0, BLOCK_W)
    mask_d = d < dim
    x_base = pid_b * s_xb
    if HAS_BIAS:
        bias = tl.load(bias_ptr + d, mask=mask_d, other=0.0).to(tl.float32)[:, None]
    grad_w = tl.full((BLOCK_D, BLOCK_W), 0.0, tl.float32)
    grad_b = tl.full((BLOCK_D,), 0.0, tl.float32)
    for i in range(tiles_per_group):
        t = (group * tiles_per_group + i) * BLOCK_L + tl.arange(0, BLOCK_L)
        grad_x = tl.full((BLOCK_D, BLOCK_L), 0.0, tl.float32)
        for s in tl.static_range(WIDTH):  # dv at t + s, which tap WIDTH-1-s carries back to t
            ts = t + s
            dv = tl.load(gy_ptr + pid_b * s_gb + d[:, None] * s_gd + ts[None, :] * s_gl,
                         mask=mask_d[:, None] & (ts < length)[None, :], other=0.0).to(tl.float32)
            if SILU:
                v = _conv_taps(x_ptr, w_ptr, x_base, d, t, s_xd, s_xl, s_wd, s_wk, mask_d, length, s, WIDTH, BLOCK_D,
                               BLOCK_L)
                if HAS_BIAS:
                    v += bias
                gate = 1.0 / (1.0 + tl.exp(-v))
                dv = dv * gate * (1.0 + v * (1.0 - gate))
            w = tl.load(w_ptr + d * s_wd + (WIDTH - 1 - s) * s_wk, mask=mask_d, other=0.0).to(tl.float32)
            grad_x += w[:, None] * dv
            if s == 0:  # the tile's own dv: its terms of the weight's and the bias's sums
                for j in tl.static_range(WIDTH):
                    src = t - (WIDTH - 1) + j
                    x = tl.load(x_ptr + x_base + d[:, None] * s_xd + src[None, :] * s_xl,
                                mask=mask_d[:, None] & ((src >= 0) & (src < length))[None, :], other=0.0)
                    grad_w += tl.where((k == j)[None, :], _sum(dv * x.to(tl.float32), axis=1)[:, None], 0.0)
                grad_b += _sum(dv, axis=1)
        tl.store(gx_ptr + pid_b * s_gxb + d[:, None] * s_gxd + t[None, :] * s_gxl,
                 grad_x.to(gx_ptr.dtype.element_ty), mask=mask_d[:, None] & (t < length)[None, :])
    row = (pid_b * n_groups + group) * dim + d
    tl.store(gw_ptr + row[:, None] * WIDTH + k[None, :], grad_w, mask=mask_d[:, None] & (k < WIDTH)[None, :])
    if HAS_BIAS:
        tl.store(gb_ptr + row, grad_b, mask=mask_d)
