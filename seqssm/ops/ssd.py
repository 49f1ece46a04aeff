"""The state space duality (SSD) scan of Mamba-2 (Dao & Gu 2024, "Transformers are SSMs", sections 6-7).

Per head h, with a scalar A_h < 0, a state (head_dim P, d_state N) and B, C shared by the heads of a group:

    h_t = exp(Δ_t A) h_{t-1} + Δ_t x_t B_t^T        y_t = h_t C_t + D x_t

A reset at t zeroes h_{t-1} first (packed sequences, RL episodes). `ssd_reference` runs the recurrence one step
at a time; `ssd_chunked` is the SSD form: within a chunk of Q steps the output is a masked (Q, Q) matrix of
decays times C B^T (matrix products), and chunks pass one state each to the next. `triton`
(`seqssm.ops.triton_ssd`) runs the same form in Triton kernels, the state of each head in registers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seqssm.ops.backend import (
    CUDA, NEVER, REAL, Backend, Call, choose, register, triton_device_check, triton_missing,
)
from seqssm.ops.checks import check_flags, check_floating

SSD_CHUNK = 64


def _check(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None, initial_state: Tensor | None,
           where: str) -> tuple[int, int]:
    """Shapes of an SSD call -> (groups, heads per group); a ValueError names the first that does not fit."""
    check_floating(where, x=x, dt=dt, A=A, B=B, C=C, D=D, initial_state=initial_state)
    if x.ndim != 4:
        raise ValueError(f"{where}: x must be (batch, L, heads, head_dim), got shape {tuple(x.shape)}")
    b, length, heads, p = x.shape
    if dt.shape != (b, length, heads):
        raise ValueError(f"{where}: dt must be (batch, L, heads) = {(b, length, heads)}, got {tuple(dt.shape)}")
    if A.shape != (heads,):
        raise ValueError(f"{where}: A must be (heads,) = ({heads},), got {tuple(A.shape)}")
    if B.ndim != 4 or B.shape[:2] != (b, length) or C.shape != B.shape:
        raise ValueError(f"{where}: B and C must both be (batch, L, groups, d_state) with batch {b} and L {length}, "
                         f"got {tuple(B.shape)} and {tuple(C.shape)}")
    groups = B.shape[2]
    if heads % groups:
        raise ValueError(f"{where}: {heads} heads do not split into {groups} groups; choose groups dividing heads")
    if D is not None and D.shape != (heads,):
        raise ValueError(f"{where}: D must be (heads,) = ({heads},), got {tuple(D.shape)}")
    if initial_state is not None and initial_state.shape != (b, heads, p, B.shape[3]):
        raise ValueError(f"{where}: initial_state must be (batch, heads, head_dim, d_state) = "
                         f"{(b, heads, p, B.shape[3])}, got {tuple(initial_state.shape)}")
    return groups, heads // groups


def _heads(M: Tensor, per_group: int) -> Tensor:
    """(..., groups, N) -> (..., heads, N): each group's B or C for each of its heads."""
    return M.repeat_interleave(per_group, dim=-2)


def _compute(*tensors: Tensor | None) -> torch.dtype:
    """The dtype the scan computes in: the promotion of its inputs, at least float32."""
    dtype = torch.float32
    for t in tensors:
        if t is not None:
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def ssd_reference(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None,
                  initial_state: Tensor | None = None, resets: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The recurrence one step at a time: x (b, L, H, P), Δ (b, L, H) > 0, A (H,), B, C (b, L, G, N), D (H,),
    initial_state (b, H, P, N), resets (b, L) bool -> (y (b, L, H, P) in x's dtype, last state (b, H, P, N) in
    the compute dtype)."""
    _check(x, dt, A, B, C, D, initial_state, "ssd_reference")
    resets = check_flags("ssd_reference", "resets", resets, x.shape[0], x.shape[1])
    dtype = _compute(x, dt, A, B, C, D, initial_state)
    b, length, heads, p = x.shape
    h = x.new_zeros(b, heads, p, B.shape[3], dtype=dtype) if initial_state is None else initial_state.to(dtype)
    ys = []
    for t in range(length):
        if resets is not None:
            h = h * (~resets[:, t]).to(dtype)[:, None, None, None]
        y_t, h = ssd_step(h, x[:, t], dt[:, t], A, B[:, t], C[:, t], D)
        ys.append(y_t)
    return (torch.stack(ys, dim=1) if ys else x.new_zeros(x.shape)), h


def ssd_chunked(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None,
                initial_state: Tensor | None = None, resets: Tensor | None = None,
                chunk_size: int = SSD_CHUNK) -> tuple[Tensor, Tensor]:
    """`ssd_reference` in the SSD form, chunks of `chunk_size` steps: the same arguments and results."""
    groups, per_group = _check(x, dt, A, B, C, D, initial_state, "ssd_chunked")
    resets = check_flags("ssd_chunked", "resets", resets, x.shape[0], x.shape[1])
    if chunk_size < 1:
        raise ValueError(f"ssd_chunked: chunk_size must be >= 1, got {chunk_size}")
    dtype = _compute(x, dt, A, B, C, D, initial_state)
    b, length, heads, p = x.shape
    n = B.shape[3]
    h = x.new_zeros(b, heads, p, n, dtype=dtype) if initial_state is None else initial_state.to(dtype)
    if length == 0:
        return x.new_zeros(x.shape), h
    q = min(chunk_size, length)
    pad = -length % q
    chunks = (length + pad) // q

    def split(t: Tensor) -> Tensor:  # (b, L, ...) -> (b, chunks, q, ...), zeros past the end
        t = F.pad(t, (0, 0) * (t.ndim - 2) + (0, pad))
        return t.reshape(b, chunks, q, *t.shape[2:])

    # Past the end Δ = 0 and x = 0: decay 1 and no input, so the last state is the last real step's.
    xs, dts = split(x.to(dtype)), split(dt.to(dtype))
    Bs, Cs = split(B.to(dtype)), split(C.to(dtype))
    log_decay = torch.cumsum(dts * A.to(dtype), dim=2)  # (b, c, q, H): log of the decay from the chunk's start
    if resets is None:
        seen = torch.zeros(b, chunks, q, dtype=torch.long, device=x.device)
    else:
        seen = torch.cumsum(split(resets.to(torch.long)), dim=2)  # resets in the chunk up to and including t
    # Step s reaches step t >= s of its chunk unless a reset lies in (s, t]; a state entering the chunk reaches t
    # unless one lies in [0, t]. Unreached pairs get -inf before exp: exp of their (positive) gap would overflow.
    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
    reach = causal & (seen[..., :, None] == seen[..., None, :])  # (b, c, t, s)
    gaps = log_decay[:, :, :, None, :] - log_decay[:, :, None, :, :]  # (b, c, t, s, H)
    decay = gaps.masked_fill(~reach[..., None], float("-inf")).exp()
    weighted = (dts[..., None] * xs)  # Δ_s x_s (b, c, q, H, P)
    # Within chunks: y_t = Σ_s (C_t · B_s) decay(t, s) Δ_s x_s, with C_t · B_s once per group
    scores = torch.einsum("bctgn,bcsgn->bctsg", Cs, Bs).repeat_interleave(per_group, dim=-1) * decay
    y = torch.einsum("bctsh,bcshp->bcthp", scores, weighted)
    # Each chunk's own contribution to the state at its end, and the decay of a state passing through it
    to_end = decay[:, :, -1]  # (b, c, s, H)
    # two-operand products throughout: einsum's own order for three can build a (b, c, q, H, P, N) intermediate
    own = torch.einsum("bcshp,bcshn->bchpn", to_end[..., None] * weighted, _heads(Bs, per_group))
    through = torch.exp(log_decay[:, :, -1]) * (seen[:, :, -1] == 0).to(dtype)[..., None]  # (b, c, H)
    entering = []
    # unbind once: indexing [:, c] in the loop would make its backward write a whole zero tensor per chunk
    for passing, added in zip(through.unbind(1), own.unbind(1)):  # chunks, not steps: L / chunk_size products
        entering.append(h)
        h = passing[:, :, None, None] * h + added
    from_start = torch.exp(log_decay) * (seen == 0).to(dtype)[..., None]  # (b, c, q, H)
    y = y + torch.einsum("bcthn,bchpn->bcthp", _heads(Cs, per_group), torch.stack(entering, 1)) * from_start[..., None]
    y = y.reshape(b, chunks * q, heads, p)[:, :length]
    if D is not None:
        y = y + x.to(dtype) * D.to(dtype)[:, None]
    return y.to(x.dtype), h


def ssd_step(state: Tensor, x_t: Tensor, dt_t: Tensor, A: Tensor, B_t: Tensor, C_t: Tensor,
             D: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One step: state (b, H, P, N), x_t (b, H, P), Δ_t (b, H), A (H,), B_t, C_t (b, G, N), D (H,) -> (y_t (b, H, P)
    in x_t's dtype, next state in the state's dtype)."""
    per_group = x_t.shape[1] // B_t.shape[1]
    dtype = _compute(state, x_t, dt_t, A, B_t, C_t, D)
    x_, dt_ = x_t.to(dtype), dt_t.to(dtype)
    B_, C_ = _heads(B_t.to(dtype), per_group), _heads(C_t.to(dtype), per_group)
    h = torch.exp(dt_ * A.to(dtype))[..., None, None] * state.to(dtype) + (dt_[..., None] * x_)[..., None] * B_[:, :, None]
    y = torch.einsum("bhpn,bhn->bhp", h, C_)
    if D is not None:
        y = y + x_ * D.to(dtype)[:, None]
    return y.to(x_t.dtype), h.to(state.dtype)


def ssd_scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None,
             initial_state: Tensor | None = None, resets: Tensor | None = None, chunk_size: int = SSD_CHUNK,
             backend: str = "auto") -> tuple[Tensor, Tensor]:
    """The SSD scan: x (b, L, H, P), Δ (b, L, H) > 0, A (H,), B, C (b, L, G, N), D (H,), initial_state (b, H, P, N),
    resets (b, L) bool (True at t zeroes the state before step t) -> (y (b, L, H, P) in x's dtype, last state
    (b, H, P, N) in the compute dtype, at least float32). backend: one of `backends("ssd")` ("auto": "triton" on
    CUDA, else "chunked"); chunk_size: steps per chunk of "chunked"; for "triton", the steps between the states its
    forward keeps for the backward (its own chunks are at most 16 steps)."""
    check_floating("ssd_scan", x=x, dt=dt, A=A, B=B, C=C, D=D, initial_state=initial_state)
    floats = (x, dt, A, B, C, D, initial_state)
    call = Call(x.device, tuple(t.dtype for t in floats if t is not None), initial_state is not None,
                resets is not None)
    fn = choose("ssd", backend, call)
    if fn is ssd_reference:
        return fn(x, dt, A, B, C, D, initial_state, resets)
    return fn(x, dt, A, B, C, D, initial_state, resets, chunk_size)


register(Backend("ssd", "reference", ssd_reference, auto_devices=NEVER))
# Triton computes in float32: a float64 input falls back to "chunked" on "auto".
register(Backend("ssd", "triton", "seqssm.ops.triton_ssd:ssd_triton", devices=frozenset({"cuda", "cpu"}),
                 auto_devices=CUDA, dtypes=REAL - {torch.float64}, available=triton_missing,
                 check=triton_device_check))
register(Backend("ssd", "chunked", ssd_chunked))
