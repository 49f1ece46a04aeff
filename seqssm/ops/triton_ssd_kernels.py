"""Triton kernels of Mamba-2's SSD scan (Dao & Gu 2024, "Transformers are SSMs", sections 6-7); `seqssm.ops.triton_ssd`
launches them. Like triton_kernels.py this file is loaded once per mode (`seqssm.ops.triton_loader`), so the kernels
call only builtins of triton.language, none of its @jit helpers (tl.sum, tl.cumsum, tl.zeros), which carry the mode
triton was imported in.

The chunk's matrix products take their operands in DOT (bfloat16 or float16 for 16-bit inputs, as mamba_ssm's
kernels do; float32 otherwise, as tf32 on tensor cores) and sum in float32.

A program owns one batch row, one head and BLOCK_P of its head_dim channels, and walks the sequence in chunks of
BLOCK_Q steps with the (BLOCK_P, BLOCK_N) state in float32 registers. With cum_t = Σ_{s<=t} Δ_s A the log decay
from the chunk's start, each chunk is

    y = ((C B^T) ∘ decay) (Δ x) + (C h^T) ∘ from_start + D x        h <- through h + ((Δ x) ∘ to_end)^T B

decay(t, s) = exp(cum_t - cum_s) for s <= t when no reset lies in (s, t] (0 otherwise, through -inf before exp: the
gap of an unreached pair can be positive and overflow); from_start_t = exp(cum_t) unless a reset lies in [0, t];
to_end_s = decay(last, s); through = from_start_last. The forward stores the state entering every segment of
seg_chunks chunks (float32). The backward is two kernels, each holding one (BLOCK_P, BLOCK_N) state tile: `ssd_bwd_dh`
walks the whole sequence in reverse carrying dL/dh (dx, dB, dD and the terms of dΔ, dA that need dL/dh), and
`ssd_bwd_h`, one program per segment, walks it forward from the stored state carrying h (dC and the terms that need
h). dL/d(a chunk's total log decay), <dL/dh, h> at its end, needs both: `ssd_bwd_dh` writes it at every kept state,
each kernel its half of its change across every chunk, and the launcher sums them.

Offsets: a chunk's first step is a 64-bit scalar; the offsets inside one tile are 32-bit.
"""

import triton
import triton.language as tl


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _dot(a, b, DOT: tl.constexpr):
    # Operands in DOT (the 16-bit inputs' own dtype, or float32 as tf32), sums in float32.
    return tl.dot(a.to(DOT), b.to(DOT), out_dtype=tl.float32)


@triton.jit
def _chunk(x_ptr, dt_ptr, B_ptr, C_ptr, resets_ptr, A, pid_b, head, group, t0, length, head_dim, d_state,
           offs_q, offs_p, offs_n, s_xb, s_xt, s_xh, s_xp, s_db, s_dt, s_dh, s_bb, s_bt, s_bg, s_bn,
           s_cb, s_ct, s_cg, s_cn, s_rb, s_rt, HAS_RESETS: tl.constexpr, BLOCK_Q: tl.constexpr, DOT: tl.constexpr):
    # One chunk's inputs, x and Δ in float32, B and C in DOT, (zeros past the end: Δ = 0 there is decay 1 and no input) and its decays.
    mask_q = t0 + offs_q < length
    mask_x = mask_q[:, None] & (offs_p < head_dim)[None, :]
    mask_bc = mask_q[:, None] & (offs_n < d_state)[None, :]
    x = tl.load(x_ptr + pid_b * s_xb + head * s_xh + t0 * s_xt + offs_q[:, None] * s_xt + offs_p[None, :] * s_xp,
                mask=mask_x, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + pid_b * s_db + head * s_dh + t0 * s_dt + offs_q * s_dt, mask=mask_q, other=0.0).to(tl.float32)
    Bm = tl.load(B_ptr + pid_b * s_bb + group * s_bg + t0 * s_bt + offs_q[:, None] * s_bt + offs_n[None, :] * s_bn,
                 mask=mask_bc, other=0.0).to(DOT)
    Cm = tl.load(C_ptr + pid_b * s_cb + group * s_cg + t0 * s_ct + offs_q[:, None] * s_ct + offs_n[None, :] * s_cn,
                 mask=mask_bc, other=0.0).to(DOT)
    a = dt * A
    cum = tl.associative_scan(a, 0, _add)
    total = tl.reduce(a, 0, _add)
    if HAS_RESETS:
        r = tl.load(resets_ptr + pid_b * s_rb + t0 * s_rt + offs_q * s_rt, mask=mask_q, other=0).to(tl.int32)
    else:
        r = tl.full([BLOCK_Q], 0, tl.int32)
    seen = tl.associative_scan(r, 0, _add)  # resets in the chunk up to and including t
    seen_last = tl.reduce(r, 0, _add)
    reach = (offs_q[:, None] >= offs_q[None, :]) & (seen[:, None] == seen[None, :])
    decay = tl.exp(tl.where(reach, cum[:, None] - cum[None, :], float("-inf")))
    from_start = tl.where(seen == 0, tl.exp(cum), 0.0)
    to_end = tl.where(seen == seen_last, tl.exp(total - cum), 0.0)
    through = tl.where(seen_last == 0, tl.exp(total), 0.0)
    return x, dt, Bm, Cm, decay, from_start, to_end, through, mask_q, mask_x, mask_bc


@triton.jit
def _program(heads, per_group, n_pblocks, BLOCK_P: tl.constexpr):
    # This program's batch row (int64), head, group, channel block and its offsets, and its flat (b, head) index.
    pid = tl.program_id(0)
    row = pid // n_pblocks
    pid_b = (row // heads).to(tl.int64)
    head = row % heads
    offs_p = (pid % n_pblocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    return pid, pid_b, head, head // per_group, offs_p, row


@triton.jit
def _state_offsets(row, offs_p, offs_n, head_dim, d_state):
    # Offsets and mask of this program's block in a (rows, P, N) float32 state, rows being (batch, head) pairs
    # or (batch, chunk, head) triples.
    mask = (offs_p < head_dim)[:, None] & (offs_n < d_state)[None, :]
    return row.to(tl.int64) * head_dim * d_state + offs_p[:, None] * d_state + offs_n[None, :], mask


@triton.jit
def ssd_fwd(
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h0_ptr, resets_ptr, y_ptr, states_ptr, last_ptr,
    length, heads, head_dim, d_state, per_group, n_pblocks, n_chunks, seg_chunks, n_segs,
    s_xb, s_xt, s_xh, s_xp, s_db, s_dt, s_dh, s_bb, s_bt, s_bg, s_bn, s_cb, s_ct, s_cg, s_cn, s_rb, s_rt,
    HAS_D: tl.constexpr, HAS_H0: tl.constexpr, HAS_RESETS: tl.constexpr, STORE_STATES: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr,
):
    """y (b, L, H, P) contiguous, the state entering every segment of seg_chunks chunks (b, segments, H, P, N) and
    the last state (b, H, P, N), both float32 contiguous; x, Δ, B, C and resets are read with their strides."""
    pid, pid_b, head, group, offs_p, row = _program(heads, per_group, n_pblocks, BLOCK_P)
    offs_q = tl.arange(0, BLOCK_Q)
    offs_n = tl.arange(0, BLOCK_N)
    A = tl.load(A_ptr + head).to(tl.float32)
    D = 0.0
    if HAS_D:
        D = tl.load(D_ptr + head).to(tl.float32)
    state_off, state_mask = _state_offsets(row, offs_p, offs_n, head_dim, d_state)
    h = tl.full([BLOCK_P, BLOCK_N], 0.0, tl.float32)
    if HAS_H0:
        h = tl.load(h0_ptr + state_off, mask=state_mask, other=0.0).to(tl.float32)
    y_base = y_ptr + pid_b * length * heads * head_dim + head * head_dim
    for c in range(0, n_chunks):
        t0 = tl.cast(c, tl.int64) * BLOCK_Q
        x, dt, Bm, Cm, decay, from_start, to_end, through, mask_q, mask_x, _ = _chunk(
            x_ptr, dt_ptr, B_ptr, C_ptr, resets_ptr, A, pid_b, head, group, t0, length, head_dim, d_state,
            offs_q, offs_p, offs_n, s_xb, s_xt, s_xh, s_xp, s_db, s_dt, s_dh, s_bb, s_bt, s_bg, s_bn,
            s_cb, s_ct, s_cg, s_cn, s_rb, s_rt, HAS_RESETS, BLOCK_Q, DOT)
        if STORE_STATES:
            if c % seg_chunks == 0:
                seg_row = (pid_b * n_segs + c // seg_chunks) * heads + head
                tl.store(states_ptr + seg_row * head_dim * d_state + offs_p[:, None] * d_state + offs_n[None, :], h,
                         mask=state_mask)
        xdt = x * dt[:, None]
        scores = _dot(Cm, tl.trans(Bm), DOT) * decay
        y = _dot(scores, xdt, DOT)
        y += _dot(Cm, tl.trans(h), DOT) * from_start[:, None]
        if HAS_D:
            y += D * x
        y_off = y_base + t0 * heads * head_dim + offs_q[:, None] * (heads * head_dim) + offs_p[None, :]
        tl.store(y_off, y.to(y_ptr.dtype.element_ty), mask=mask_x)
        h = through * h + _dot(tl.trans(xdt * to_end[:, None]), Bm, DOT)
    tl.store(last_ptr + state_off, h, mask=state_mask)


@triton.jit
def ssd_bwd_dh(
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, resets_ptr, states_ptr, gy_ptr, glast_ptr,
    gx_ptr, gdt_ptr, gB_ptr, gA_ptr, gD_ptr, gh0_ptr, own_ptr, kept_ptr,
    length, heads, head_dim, d_state, per_group, n_groups, n_pblocks, n_chunks, seg_chunks, n_segs,
    s_xb, s_xt, s_xh, s_xp, s_db, s_dt, s_dh, s_bb, s_bt, s_bg, s_bn, s_cb, s_ct, s_cg, s_cn, s_rb, s_rt,
    s_gb, s_gt, s_gh, s_gp,
    HAS_D: tl.constexpr, HAS_H0: tl.constexpr, HAS_RESETS: tl.constexpr, HAS_GLAST: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr,
):
    """The backward's reverse walk, carrying dL/dh from dL/dy (read with its strides) and dL/d(last state): dx
    (b, L, H, P) contiguous; dB (b, L, G, N) and this half of dΔ (b, L, H), float32, added atomically; per program
    partial sums of dA and dD; d(initial state) (b, H, P, N) float32; per program and chunk <dL/dh, the chunk's own
    input to the state> (programs, chunks), and per program and kept state (b, segments, H, P, N) <dL/dh, h> there
    (programs, segments), float32."""
    pid, pid_b, head, group, offs_p, row = _program(heads, per_group, n_pblocks, BLOCK_P)
    offs_q = tl.arange(0, BLOCK_Q)
    offs_n = tl.arange(0, BLOCK_N)
    A = tl.load(A_ptr + head).to(tl.float32)
    D = 0.0
    if HAS_D:
        D = tl.load(D_ptr + head).to(tl.float32)
    state_off, state_mask = _state_offsets(row, offs_p, offs_n, head_dim, d_state)
    gh = tl.full([BLOCK_P, BLOCK_N], 0.0, tl.float32)  # dL/d(the state leaving the chunk)
    if HAS_GLAST:
        gh = tl.load(glast_ptr + state_off, mask=state_mask, other=0.0).to(tl.float32)
    gA = tl.full([], 0.0, tl.float32)
    gD = tl.full([], 0.0, tl.float32)
    gx_base = gx_ptr + pid_b * length * heads * head_dim + head * head_dim
    bc_base = pid_b * length * n_groups * d_state + group * d_state
    for i in range(0, n_chunks):
        c = n_chunks - 1 - i
        t0 = tl.cast(c, tl.int64) * BLOCK_Q
        x, dt, Bm, Cm, decay, from_start, to_end, through, mask_q, mask_x, mask_bc = _chunk(
            x_ptr, dt_ptr, B_ptr, C_ptr, resets_ptr, A, pid_b, head, group, t0, length, head_dim, d_state,
            offs_q, offs_p, offs_n, s_xb, s_xt, s_xh, s_xp, s_db, s_dt, s_dh, s_bb, s_bt, s_bg, s_bn,
            s_cb, s_ct, s_cg, s_cn, s_rb, s_rt, HAS_RESETS, BLOCK_Q, DOT)
        gy = tl.load(gy_ptr + pid_b * s_gb + head * s_gh + t0 * s_gt + offs_q[:, None] * s_gt
                     + offs_p[None, :] * s_gp, mask=mask_x, other=0.0).to(tl.float32)
        xdt = x * dt[:, None]
        scores = _dot(Cm, tl.trans(Bm), DOT) * decay
        g_scores = _dot(gy, tl.trans(xdt), DOT)
        # The state passed on, through ∘ h + ((Δ x) ∘ to_end)^T B: its second term's gradients
        b_gh = _dot(Bm, tl.trans(gh), DOT)
        gxdt = _dot(tl.trans(scores), gy, DOT) + to_end[:, None] * b_gh
        g_own = tl.reduce(xdt * b_gh, 1, _add) * to_end  # dL/d(to_end) ∘ to_end
        gB = _dot(tl.trans(g_scores * decay), Cm, DOT)
        gB += _dot(xdt * to_end[:, None], gh, DOT)
        # dL/dcum_t from the decays within the chunk (each exp(cum_t - cum_s) adds its gradient to t and takes it
        # from s) and from to_end = exp(total - cum); dL/dtotal is the launcher's (ssd_backward)
        g_decay = g_scores * scores
        g_cum = tl.reduce(g_decay, 1, _add) - tl.reduce(g_decay, 0, _add) - g_own
        # dL/d(Δ_k A) = Σ_{t>=k} dL/dcum_t
        g_a = tl.reduce(g_cum, 0, _add) - tl.associative_scan(g_cum, 0, _add) + g_cum
        gdt = tl.reduce(gxdt * x, 1, _add) + g_a * A
        gA += tl.reduce(g_a * dt, 0, _add)
        gx = gxdt * dt[:, None]
        if HAS_D:
            gx += D * gy
            gD += tl.reduce(tl.reduce(gy * x, 1, _add), 0, _add)
        rows = t0 + offs_q
        tl.store(gx_base + t0 * heads * head_dim + offs_q[:, None] * (heads * head_dim) + offs_p[None, :],
                 gx.to(gx_ptr.dtype.element_ty), mask=mask_x)
        tl.atomic_add(gdt_ptr + pid_b * length * heads + rows * heads + head, gdt, mask=mask_q, sem="relaxed")
        tl.atomic_add(gB_ptr + bc_base + rows[:, None] * (n_groups * d_state) + offs_n[None, :], gB, mask=mask_bc,
                      sem="relaxed")
        tl.store(own_ptr + pid.to(tl.int64) * n_chunks + c, tl.reduce(g_own, 0, _add))
        gh = through * gh + _dot(tl.trans(gy * from_start[:, None]), Cm, DOT)
        if c % seg_chunks == 0:
            seg_row = (pid_b * n_segs + c // seg_chunks) * heads + head
            h = tl.load(states_ptr + seg_row * head_dim * d_state + offs_p[:, None] * d_state + offs_n[None, :],
                        mask=state_mask, other=0.0)
            tl.store(kept_ptr + pid.to(tl.int64) * n_segs + c // seg_chunks,
                     tl.reduce(tl.reduce(gh * h, 1, _add), 0, _add))
    tl.store(gA_ptr + pid, gA)
    if HAS_D:
        tl.store(gD_ptr + pid, gD)
    if HAS_H0:
        tl.store(gh0_ptr + state_off, gh, mask=state_mask)


@triton.jit
def ssd_bwd_h(
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, resets_ptr, states_ptr, gy_ptr, gdt_ptr, gC_ptr, gA_ptr, read_ptr,
    length, heads, head_dim, d_state, per_group, n_groups, n_pblocks, n_chunks, seg_chunks, n_segs,
    s_xb, s_xt, s_xh, s_xp, s_db, s_dt, s_dh, s_bb, s_bt, s_bg, s_bn, s_cb, s_ct, s_cg, s_cn, s_rb, s_rt,
    s_gb, s_gt, s_gh, s_gp,
    HAS_RESETS: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT: tl.constexpr,
):
    """The backward's forward walk over one stored state's seg_chunks chunks (grid axis 1), carrying h from the
    stored state (b, segments, H, P, N) float32: dC (b, L, G, N) and this half of dΔ (b, L, H), float32, added
    atomically; per (segment, program) partial sums of dA; per program and chunk <dL/dy's pull on the entering
    state, that state> (programs, chunks) float32."""
    pid, pid_b, head, group, offs_p, row = _program(heads, per_group, n_pblocks, BLOCK_P)
    seg = tl.program_id(1)
    offs_q = tl.arange(0, BLOCK_Q)
    offs_n = tl.arange(0, BLOCK_N)
    A = tl.load(A_ptr + head).to(tl.float32)
    state_mask = (offs_p < head_dim)[:, None] & (offs_n < d_state)[None, :]
    seg_row = (pid_b * n_segs + seg) * heads + head
    h = tl.load(states_ptr + seg_row * head_dim * d_state + offs_p[:, None] * d_state + offs_n[None, :],
                mask=state_mask, other=0.0)
    gA = tl.full([], 0.0, tl.float32)
    bc_base = pid_b * length * n_groups * d_state + group * d_state
    for c in range(seg * seg_chunks, tl.minimum(seg * seg_chunks + seg_chunks, n_chunks)):
        t0 = tl.cast(c, tl.int64) * BLOCK_Q
        x, dt, Bm, Cm, decay, from_start, to_end, through, mask_q, mask_x, mask_bc = _chunk(
            x_ptr, dt_ptr, B_ptr, C_ptr, resets_ptr, A, pid_b, head, group, t0, length, head_dim, d_state,
            offs_q, offs_p, offs_n, s_xb, s_xt, s_xh, s_xp, s_db, s_dt, s_dh, s_bb, s_bt, s_bg, s_bn,
            s_cb, s_ct, s_cg, s_cn, s_rb, s_rt, HAS_RESETS, BLOCK_Q, DOT)
        gy = tl.load(gy_ptr + pid_b * s_gb + head * s_gh + t0 * s_gt + offs_q[:, None] * s_gt
                     + offs_p[None, :] * s_gp, mask=mask_x, other=0.0).to(tl.float32)
        xdt = x * dt[:, None]
        # The state term y += (C h^T) ∘ from_start: its gradients, and the within-chunk term's for C
        gy_start = gy * from_start[:, None]
        g_read = tl.reduce(gy * _dot(Cm, tl.trans(h), DOT), 1, _add) * from_start  # dL/d(from_start) ∘ from_start
        gC = _dot(_dot(gy, tl.trans(xdt), DOT) * decay, Bm, DOT) + _dot(gy_start, h, DOT)
        g_a = tl.reduce(g_read, 0, _add) - tl.associative_scan(g_read, 0, _add) + g_read
        gA += tl.reduce(g_a * dt, 0, _add)
        rows = t0 + offs_q
        tl.atomic_add(gdt_ptr + pid_b * length * heads + rows * heads + head, g_a * A, mask=mask_q, sem="relaxed")
        tl.atomic_add(gC_ptr + bc_base + rows[:, None] * (n_groups * d_state) + offs_n[None, :], gC, mask=mask_bc,
                      sem="relaxed")
        tl.store(read_ptr + pid.to(tl.int64) * n_chunks + c, tl.reduce(g_read, 0, _add))
        h = through * h + _dot(tl.trans(xdt * to_end[:, None]), Bm, DOT)
    tl.store(gA_ptr + seg.to(tl.int64) * tl.num_programs(0) + pid, gA)
