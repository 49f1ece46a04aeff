"""Triton kernels of the linear and selective scans; `seqssm.ops.triton_scan` launches them.

This file is loaded by `triton_scan._kernels` once per mode (compiled, or interpreted on CPU
under TRITON_INTERPRET=1) as its own module, since Triton fixes the mode when it decorates.
For the same reason the kernels call only builtins of triton.language, none of its @jit
helpers (tl.sum, tl.zeros, tl.cdiv, tl.sigmoid), which carry the mode triton was imported in.

Every program owns one batch row and a block of channels and walks time in chunks of BLOCK_T
steps: inside a chunk the recurrence h_t = a_t h_{t-1} + b_t is one `tl.associative_scan` of
(a, b) pairs under affine composition, a reset being a = 0; between chunks the state is carried
in registers. Accumulation is in ACC (float32, or float64 for float64 inputs).
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
def _row(x, rows, row: tl.constexpr, axis: tl.constexpr):
    # The slice of a register tile at index `row` along `axis` (a masked sum: tiles cannot be indexed).
    return _sum(tl.where(rows == row, x, 0.0), axis=axis)


@triton.jit
def _softplus(x):
    # log1p(exp(x)) with Goldberg's correction, as accurate as log1p where exp(x) is tiny; x above 20 passes.
    z = tl.exp(tl.minimum(x, 20.0))
    w = 1.0 + z
    log1p = tl.where(w == 1.0, z, tl.log(w) * (z / (w - 1.0)))
    return tl.where(x > 20.0, x, log1p)


# ----------------------------------------------------------------------------------- linear scan
# a, b, h are (batch, L, F) with strides in real elements; complex tensors come as their real views,
# the imaginary part one element after the real one.


@triton.jit
def _linear_block(h0_ptr, feat, s_0b, s_0f, COMPLEX: tl.constexpr, HAS_H0: tl.constexpr,
                  BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr, ACC: tl.constexpr):
    # This program's batch row, features (BLOCK_F,) and their mask, chunk rows (BLOCK_T, 1), and h0
    # (real, imaginary part) of its features, zeros where absent.
    pid_b = tl.program_id(0).to(tl.int64)
    offs_f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask_f = offs_f < feat
    h0_r = tl.full([BLOCK_F], 0.0, ACC)
    h0_i = tl.full([BLOCK_F], 0.0, ACC)
    if HAS_H0:
        h0_r = tl.load(h0_ptr + pid_b * s_0b + offs_f * s_0f, mask=mask_f, other=0.0).to(ACC)
        if COMPLEX:
            h0_i = tl.load(h0_ptr + pid_b * s_0b + offs_f * s_0f + 1, mask=mask_f, other=0.0).to(ACC)
    return pid_b, offs_f, mask_f, tl.arange(0, BLOCK_T)[:, None], h0_r, h0_i


@triton.jit
def linear_scan_fwd(
    a_ptr, b_ptr, resets_ptr, h0_ptr, h_ptr,
    length, feat,
    s_ab, s_at, s_af, s_bb, s_bt, s_bf, s_rb, s_rt, s_hb, s_ht, s_hf, s_0b, s_0f,
    COMPLEX: tl.constexpr, HAS_RESETS: tl.constexpr, HAS_H0: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr, ACC: tl.constexpr,
):
    pid_b, offs_f, mask_f, rows, carry_r, carry_i = _linear_block(h0_ptr, feat, s_0b, s_0f, COMPLEX, HAS_H0,
                                                                  BLOCK_T, BLOCK_F, ACC)
    for start in range(0, length, BLOCK_T):
        t = start + tl.arange(0, BLOCK_T)
        mask = (t < length)[:, None] & mask_f[None, :]
        a_off = a_ptr + pid_b * s_ab + t[:, None] * s_at + offs_f[None, :] * s_af
        b_off = b_ptr + pid_b * s_bb + t[:, None] * s_bt + offs_f[None, :] * s_bf
        h_off = h_ptr + pid_b * s_hb + t[:, None] * s_ht + offs_f[None, :] * s_hf
        # Steps past the end are (a, b) = (1, 0): they keep the last state in the chunk's last row.
        ar = tl.load(a_off, mask=mask, other=1.0).to(ACC)
        br = tl.load(b_off, mask=mask, other=0.0).to(ACC)
        if HAS_RESETS:
            reset = tl.load(resets_ptr + pid_b * s_rb + t * s_rt, mask=t < length, other=0) != 0
            ar = tl.where(reset[:, None], 0.0, ar)
        if COMPLEX:
            ai = tl.load(a_off + 1, mask=mask, other=0.0).to(ACC)
            bi = tl.load(b_off + 1, mask=mask, other=0.0).to(ACC)
            if HAS_RESETS:
                ai = tl.where(reset[:, None], 0.0, ai)
            ar, ai, br, bi = tl.associative_scan((ar, ai, br, bi), axis=0, combine_fn=_affine_complex)
            hr = ar * carry_r[None, :] - ai * carry_i[None, :] + br
            hi = ar * carry_i[None, :] + ai * carry_r[None, :] + bi
            tl.store(h_off, hr.to(h_ptr.dtype.element_ty), mask=mask)
            tl.store(h_off + 1, hi.to(h_ptr.dtype.element_ty), mask=mask)
            carry_r = _row(hr, rows, BLOCK_T - 1, 0)
            carry_i = _row(hi, rows, BLOCK_T - 1, 0)
        else:
            ar, br = tl.associative_scan((ar, br), axis=0, combine_fn=_affine)
            hr = ar * carry_r[None, :] + br
            tl.store(h_off, hr.to(h_ptr.dtype.element_ty), mask=mask)
            carry_r = _row(hr, rows, BLOCK_T - 1, 0)


@triton.jit
def linear_scan_bwd(
    a_ptr, resets_ptr, h0_ptr, h_ptr, gh_ptr, ga_ptr, gb_ptr, gh0_ptr,
    length, feat,
    s_ab, s_at, s_af, s_rb, s_rt, s_hb, s_ht, s_hf, s_0b, s_0f,
    COMPLEX: tl.constexpr, HAS_RESETS: tl.constexpr, HAS_H0: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr, ACC: tl.constexpr,
):
    """Adjoint g_t = gh_t + conj(a_{t+1}) g_{t+1} by a reverse scan; grad a_t = g_t conj(h_{t-1}) (0 where
    reset), grad b_t = g_t, grad h0 = g_0 conj(a_0). gh, ga, gb share h's strides."""
    pid_b, offs_f, mask_f, rows, h0_r, h0_i = _linear_block(h0_ptr, feat, s_0b, s_0f, COMPLEX, HAS_H0,
                                                            BLOCK_T, BLOCK_F, ACC)
    # g at the first step of the chunk after the current one.
    carry_r = tl.full([BLOCK_F], 0.0, ACC)
    carry_i = tl.full([BLOCK_F], 0.0, ACC)
    n_chunks = (length + BLOCK_T - 1) // BLOCK_T
    for i in range(n_chunks):
        t = (n_chunks - 1 - i) * BLOCK_T + tl.arange(0, BLOCK_T)
        valid = t < length
        mask = valid[:, None] & mask_f[None, :]
        nxt = (t + 1 < length)[:, None] & mask_f[None, :]
        a1_off = a_ptr + pid_b * s_ab + (t + 1)[:, None] * s_at + offs_f[None, :] * s_af
        h_off = pid_b * s_hb + t[:, None] * s_ht + offs_f[None, :] * s_hf
        hp_off = h_ptr + pid_b * s_hb + (t - 1)[:, None] * s_ht + offs_f[None, :] * s_hf
        first = (t == 0)[:, None]
        has_prev = ((t >= 1) & valid)[:, None] & mask_f[None, :]
        # conj(a_{t+1}); 0 past the end, where no later state feeds back.
        ar = tl.load(a1_off, mask=nxt, other=0.0).to(ACC)
        gr = tl.load(gh_ptr + h_off, mask=mask, other=0.0).to(ACC)
        if HAS_RESETS:
            reset_next = tl.load(resets_ptr + pid_b * s_rb + (t + 1) * s_rt, mask=t + 1 < length, other=0) != 0
            ar = tl.where(reset_next[:, None], 0.0, ar)
            reset = tl.load(resets_ptr + pid_b * s_rb + t * s_rt, mask=valid, other=0) != 0
        hpr = tl.where(first, h0_r[None, :], tl.load(hp_off, mask=has_prev, other=0.0).to(ACC))
        if COMPLEX:
            ai = -tl.load(a1_off + 1, mask=nxt, other=0.0).to(ACC)
            gi = tl.load(gh_ptr + h_off + 1, mask=mask, other=0.0).to(ACC)
            if HAS_RESETS:
                ai = tl.where(reset_next[:, None], 0.0, ai)
            pr, pi, gr, gi = tl.associative_scan((ar, ai, gr, gi), axis=0, combine_fn=_affine_complex, reverse=True)
            gr, gi = gr + pr * carry_r[None, :] - pi * carry_i[None, :], gi + pr * carry_i[None, :] + pi * carry_r[None, :]
            hpi = tl.where(first, h0_i[None, :], tl.load(hp_off + 1, mask=has_prev, other=0.0).to(ACC))
            # g conj(h_{t-1})
            gar = gr * hpr + gi * hpi
            gai = gi * hpr - gr * hpi
            if HAS_RESETS:
                gar = tl.where(reset[:, None], 0.0, gar)
                gai = tl.where(reset[:, None], 0.0, gai)
            tl.store(gb_ptr + h_off + 1, gi.to(gb_ptr.dtype.element_ty), mask=mask)
            tl.store(ga_ptr + h_off + 1, gai.to(ga_ptr.dtype.element_ty), mask=mask)
            carry_i = _row(gi, rows, 0, 0)
        else:
            pr, gr = tl.associative_scan((ar, gr), axis=0, combine_fn=_affine, reverse=True)
            gr = gr + pr * carry_r[None, :]
            gar = gr * hpr
            if HAS_RESETS:
                gar = tl.where(reset[:, None], 0.0, gar)
        tl.store(gb_ptr + h_off, gr.to(gb_ptr.dtype.element_ty), mask=mask)
        tl.store(ga_ptr + h_off, gar.to(ga_ptr.dtype.element_ty), mask=mask)
        carry_r = _row(gr, rows, 0, 0)
    if HAS_H0:
        # grad h0 = g_0 conj(a_0), a_0 zeroed by a reset at t = 0.
        a0r = tl.load(a_ptr + pid_b * s_ab + offs_f * s_af, mask=mask_f, other=0.0).to(ACC)
        if HAS_RESETS:
            a0r = tl.where(tl.load(resets_ptr + pid_b * s_rb) != 0, 0.0, a0r)
        if COMPLEX:
            a0i = tl.load(a_ptr + pid_b * s_ab + offs_f * s_af + 1, mask=mask_f, other=0.0).to(ACC)
            if HAS_RESETS:
                a0i = tl.where(tl.load(resets_ptr + pid_b * s_rb) != 0, 0.0, a0i)
            tl.store(gh0_ptr + pid_b * s_0b + offs_f * s_0f, (carry_r * a0r + carry_i * a0i).to(gh0_ptr.dtype.element_ty),
                     mask=mask_f)
            tl.store(gh0_ptr + pid_b * s_0b + offs_f * s_0f + 1,
                     (carry_i * a0r - carry_r * a0i).to(gh0_ptr.dtype.element_ty), mask=mask_f)
        else:
            tl.store(gh0_ptr + pid_b * s_0b + offs_f * s_0f, (carry_r * a0r).to(gh0_ptr.dtype.element_ty), mask=mask_f)


# -------------------------------------------------------------------------------- selective scan
# u, delta (batch, dim, L) and B, C with any strides. A variable B is (batch, groups, N, L), an
# invariant one (dim, N); strides of absent axes are 0. y, states, gradients: contiguous, in ACC.
# Grid: (batch, groups, channel blocks of BLOCK_D within a group of e = dim / groups channels).


@triton.jit
def _load_dt(delta_ptr, bias, off, mask, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, ACC: tl.constexpr):
    # (Δ after bias and softplus, 0 where masked; Δ before softplus, for its derivative)
    raw = tl.load(delta_ptr + off, mask=mask, other=0.0).to(ACC)
    if HAS_BIAS:
        raw += bias[:, None]
    dt = raw
    if SOFTPLUS:
        dt = _softplus(raw)
    return tl.where(mask, dt, 0.0), raw


@triton.jit
def _load_bc(ptr, pid_b, pid_g, d, offs_n, t, mask_n, mask_t, s_b, s_g, s_d, s_n, s_t, invariant,
             VARIABLE: tl.constexpr, ACC: tl.constexpr):
    # B or C as a (channels, N, time) broadcastable tile: variable (1, N, T), invariant (D, N, 1).
    if VARIABLE:
        off = pid_b * s_b + pid_g * s_g + offs_n[:, None] * s_n + t[None, :] * s_t
        return tl.load(ptr + off, mask=mask_n[:, None] & mask_t[None, :], other=0.0).to(ACC)[None, :, :]
    return invariant[:, :, None]


@triton.jit
def _block(A_ptr, B_ptr, C_ptr, bias_ptr, dim, e, n_state, s_Ad, s_An, s_Bd, s_Bn, s_Cd, s_Cn,
           B_VARIABLE: tl.constexpr, C_VARIABLE: tl.constexpr, HAS_BIAS: tl.constexpr,
           BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    # This program's batch row, group, channels d (BLOCK_D,) and states (BLOCK_N,) with their masks and
    # offsets into (batch, dim, N) states, and its parameters: A (D, N), Δ bias (D,), time-invariant B, C
    # (D, N), zeros where absent. Padded states have A = 0 and B = C = 0: they stay 0 and add nothing.
    pid_b = tl.program_id(0).to(tl.int64)
    pid_g = tl.program_id(1)
    offs_e = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_e < e
    d = pid_g * e + offs_e
    offs_n = tl.arange(0, BLOCK_N)
    mask_n = offs_n < n_state
    mask_dn = mask_d[:, None] & mask_n[None, :]
    chan_off = d[:, None] * n_state + offs_n[None, :]
    A = tl.load(A_ptr + d[:, None] * s_Ad + offs_n[None, :] * s_An, mask=mask_dn, other=0.0).to(ACC)
    bias = tl.full([BLOCK_D], 0.0, ACC)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + d, mask=mask_d, other=0.0).to(ACC)
    B_inv = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)
    if not B_VARIABLE:
        B_inv = tl.load(B_ptr + d[:, None] * s_Bd + offs_n[None, :] * s_Bn, mask=mask_dn, other=0.0).to(ACC)
    C_inv = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)
    if not C_VARIABLE:
        C_inv = tl.load(C_ptr + d[:, None] * s_Cd + offs_n[None, :] * s_Cn, mask=mask_dn, other=0.0).to(ACC)
    state_off = pid_b * dim * n_state + chan_off
    return pid_b, pid_g, d, offs_n, mask_d, mask_n, mask_dn, chan_off, state_off, A, bias, B_inv, C_inv


@triton.jit
def _discretize(delta_ptr, resets_ptr, A, bias, pid_b, d, t, mask_d, mask_t, s_db, s_dd, s_dt, s_rb, s_rt,
                HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, HAS_RESETS: tl.constexpr, ACC: tl.constexpr):
    # (dA = exp(Δ A) (D, N, T), 0 where the state resets; Δ and Δ before softplus (D, T)) at steps t;
    # masked steps have Δ = 0, dA = 1.
    dt, raw = _load_dt(delta_ptr, bias, pid_b * s_db + d[:, None] * s_dd + t[None, :] * s_dt,
                       mask_d[:, None] & mask_t[None, :], HAS_BIAS, SOFTPLUS, ACC)
    dA = tl.exp(dt[:, None, :] * A[:, :, None])
    if HAS_RESETS:
        reset = tl.load(resets_ptr + pid_b * s_rb + t * s_rt, mask=mask_t, other=0) != 0
        dA = tl.where(reset[None, None, :], 0.0, dA)
    return dA, dt, raw


@triton.jit
def _chunk_states(u_ptr, delta_ptr, B_ptr, resets_ptr, A, bias, B_inv, h, pid_b, pid_g, d, offs_n, t,
                  mask_d, mask_n, mask_t, s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_Bb, s_Bg, s_Bd, s_Bn, s_Bt,
                  s_rb, s_rt, B_VARIABLE: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
                  HAS_RESETS: tl.constexpr, ACC: tl.constexpr):
    # Discretise and scan one chunk from its start state h (D, N) -> u, Δ, Δ before softplus (D, T),
    # dA, B (broadcastable), ΔBu and the states h_t, each (D, N, T).
    u = tl.load(u_ptr + pid_b * s_ub + d[:, None] * s_ud + t[None, :] * s_ut,
                mask=mask_d[:, None] & mask_t[None, :], other=0.0).to(ACC)
    dA, dt, raw = _discretize(delta_ptr, resets_ptr, A, bias, pid_b, d, t, mask_d, mask_t, s_db, s_dd, s_dt,
                              s_rb, s_rt, HAS_BIAS, SOFTPLUS, HAS_RESETS, ACC)
    Bt = _load_bc(B_ptr, pid_b, pid_g, d, offs_n, t, mask_n, mask_t, s_Bb, s_Bg, s_Bd, s_Bn, s_Bt, B_inv,
                  B_VARIABLE, ACC)
    dBu = (dt * u)[:, None, :] * Bt
    prod, hs = tl.associative_scan((dA, dBu), axis=2, combine_fn=_affine)
    return u, dt, raw, dA, Bt, dBu, prod * h[:, :, None] + hs


@triton.jit
def selective_scan_fwd(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, bias_ptr, resets_ptr, h0_ptr, y_ptr, starts_ptr, last_ptr,
    dim, e, length, n_state,
    s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_Ad, s_An,
    s_Bb, s_Bg, s_Bd, s_Bn, s_Bt, s_Cb, s_Cg, s_Cd, s_Cn, s_Ct, s_rb, s_rt,
    B_VARIABLE: tl.constexpr, C_VARIABLE: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
    HAS_RESETS: tl.constexpr, HAS_H0: tl.constexpr, STORE_STARTS: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, ACC: tl.constexpr,
):
    pid_b, pid_g, d, offs_n, mask_d, mask_n, mask_dn, chan_off, state_off, A, bias, B_inv, C_inv = _block(
        A_ptr, B_ptr, C_ptr, bias_ptr, dim, e, n_state, s_Ad, s_An, s_Bd, s_Bn, s_Cd, s_Cn,
        B_VARIABLE, C_VARIABLE, HAS_BIAS, BLOCK_D, BLOCK_N, ACC)
    h = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)
    if HAS_H0:
        h = tl.load(h0_ptr + state_off, mask=mask_dn, other=0.0).to(ACC)
    n_chunks = (length + BLOCK_T - 1) // BLOCK_T
    times = tl.arange(0, BLOCK_T)[None, None, :]
    for c in range(n_chunks):
        if STORE_STARTS:
            tl.store(starts_ptr + (pid_b * n_chunks + c) * dim * n_state + chan_off, h, mask=mask_dn)
        t = c * BLOCK_T + tl.arange(0, BLOCK_T)
        mask_t = t < length
        _, _, _, _, _, _, hs = _chunk_states(
            u_ptr, delta_ptr, B_ptr, resets_ptr, A, bias, B_inv, h, pid_b, pid_g, d, offs_n, t, mask_d, mask_n,
            mask_t, s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_Bb, s_Bg, s_Bd, s_Bn, s_Bt, s_rb, s_rt,
            B_VARIABLE, HAS_BIAS, SOFTPLUS, HAS_RESETS, ACC)
        Ct = _load_bc(C_ptr, pid_b, pid_g, d, offs_n, t, mask_n, mask_t, s_Cb, s_Cg, s_Cd, s_Cn, s_Ct, C_inv,
                      C_VARIABLE, ACC)
        y = _sum(hs * Ct, axis=1)
        tl.store(y_ptr + (pid_b * dim + d[:, None]) * length + t[None, :], y, mask=mask_d[:, None] & mask_t[None, :])
        # Steps past the end have dA = 1, ΔBu = 0: the last row holds the state after the last real step.
        h = _row(hs, times, BLOCK_T - 1, 2)
    tl.store(last_ptr + state_off, h, mask=mask_dn)


@triton.jit
def selective_scan_bwd(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, bias_ptr, resets_ptr, starts_ptr, gy_ptr, glast_ptr,
    gu_ptr, gdelta_ptr, gA_ptr, gB_ptr, gC_ptr, gh0_ptr,
    dim, e, length, n_state, groups,
    s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_Ad, s_An,
    s_Bb, s_Bg, s_Bd, s_Bn, s_Bt, s_Cb, s_Cg, s_Cd, s_Cn, s_Ct, s_rb, s_rt,
    B_VARIABLE: tl.constexpr, C_VARIABLE: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
    HAS_RESETS: tl.constexpr, HAS_GLAST: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, ACC: tl.constexpr,
):
    """Walk the chunks backwards: recompute the chunk's states from its stored start, then the adjoint
    g_t = C_t gy_t + dA_{t+1} g_{t+1} by a reverse scan. With x = g_t dA_t h_{t-1} = g_t (h_t - ΔBu_t):
    grad A = Σ x Δ, grad Δ = Σ_n x A + u Σ_n g B, grad u = Δ Σ_n g B, grad B = Σ_d g Δ u, grad C = Σ_d gy h.
    Variable B, C gradients are (batch, groups, N, L) sums over channel blocks (atomic adds); grad A and
    invariant B, C gradients are per batch row (batch, dim, N), summed by the caller."""
    pid_b, pid_g, d, offs_n, mask_d, mask_n, mask_dn, chan_off, state_off, A, bias, B_inv, C_inv = _block(
        A_ptr, B_ptr, C_ptr, bias_ptr, dim, e, n_state, s_Ad, s_An, s_Bd, s_Bn, s_Cd, s_Cn,
        B_VARIABLE, C_VARIABLE, HAS_BIAS, BLOCK_D, BLOCK_N, ACC)
    carry = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)  # adjoint of the state at the end of the current chunk
    if HAS_GLAST:
        carry = tl.load(glast_ptr + state_off, mask=mask_dn, other=0.0).to(ACC)
    gA = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)
    gB_inv = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)
    gC_inv = tl.full([BLOCK_D, BLOCK_N], 0.0, ACC)
    n_chunks = (length + BLOCK_T - 1) // BLOCK_T
    rows = tl.arange(0, BLOCK_T)
    times = rows[None, None, :]
    for i in range(n_chunks):
        c = n_chunks - 1 - i
        h = tl.load(starts_ptr + (pid_b * n_chunks + c) * dim * n_state + chan_off, mask=mask_dn, other=0.0)
        t = c * BLOCK_T + rows
        mask_t = t < length
        mask_dt = mask_d[:, None] & mask_t[None, :]
        u, dt, raw, dA, Bt, dBu, hs = _chunk_states(
            u_ptr, delta_ptr, B_ptr, resets_ptr, A, bias, B_inv, h, pid_b, pid_g, d, offs_n, t, mask_d, mask_n,
            mask_t, s_ub, s_ud, s_ut, s_db, s_dd, s_dt, s_Bb, s_Bg, s_Bd, s_Bn, s_Bt, s_rb, s_rt,
            B_VARIABLE, HAS_BIAS, SOFTPLUS, HAS_RESETS, ACC)
        # dA_{t+1} inside the chunk; 1 in its last row and past the end, where the carry enters.
        dA_next, _, _ = _discretize(delta_ptr, resets_ptr, A, bias, pid_b, d, t + 1, mask_d,
                                    (rows < BLOCK_T - 1) & (t + 1 < length), s_db, s_dd, s_dt, s_rb, s_rt,
                                    HAS_BIAS, SOFTPLUS, HAS_RESETS, ACC)
        Ct = _load_bc(C_ptr, pid_b, pid_g, d, offs_n, t, mask_n, mask_t, s_Cb, s_Cg, s_Cd, s_Cn, s_Ct, C_inv,
                      C_VARIABLE, ACC)
        gy = tl.load(gy_ptr + (pid_b * dim + d[:, None]) * length + t[None, :], mask=mask_dt, other=0.0).to(ACC)
        # Triton's reverse scan is flip(scan(flip)), the same order as the interpreter's (the gpu tests check it).
        prod, g = tl.associative_scan((dA_next, Ct * gy[:, None, :]), axis=2, combine_fn=_affine, reverse=True)
        g = tl.where(mask_dt[:, None, :], g + prod * carry[:, :, None], 0.0)
        carry = _row(dA * g, times, 0, 2)
        x = g * (hs - dBu)
        gA += _sum(x * dt[:, None, :], axis=2)
        gBu = _sum(g * Bt, axis=1)
        gdt = _sum(x * A[:, :, None], axis=1) + u * gBu
        if SOFTPLUS:
            gdt = gdt * (1.0 / (1.0 + tl.exp(-raw)))
        out_off = (pid_b * dim + d[:, None]) * length + t[None, :]
        tl.store(gu_ptr + out_off, dt * gBu, mask=mask_dt)
        tl.store(gdelta_ptr + out_off, gdt, mask=mask_dt)
        gB_t = g * (dt * u)[:, None, :]
        gC_t = hs * gy[:, None, :]
        bc_off = ((pid_b * groups + pid_g) * n_state + offs_n[:, None]) * length + t[None, :]
        bc_mask = mask_n[:, None] & mask_t[None, :]
        if B_VARIABLE:
            tl.atomic_add(gB_ptr + bc_off, _sum(gB_t, axis=0), mask=bc_mask)
        else:
            gB_inv += _sum(gB_t, axis=2)
        if C_VARIABLE:
            tl.atomic_add(gC_ptr + bc_off, _sum(gC_t, axis=0), mask=bc_mask)
        else:
            gC_inv += _sum(gC_t, axis=2)
    tl.store(gh0_ptr + state_off, carry, mask=mask_dn)
    tl.store(gA_ptr + state_off, gA, mask=mask_dn)
    if not B_VARIABLE:
        tl.store(gB_ptr + state_off, gB_inv, mask=mask_dn)
    if not C_VARIABLE:
        tl.store(gC_ptr + state_off, gC_inv, mask=mask_dn)
