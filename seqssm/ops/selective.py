"""Selective scan (S6), with the signature and semantics of mamba_ssm's `selective_scan_fn`,
plus an initial state and in-sequence resets.

For each channel d and state index n, with Δ = softplus(delta + delta_bias) when asked:
    h_t = exp(Δ_t A) * h_{t-1} + Δ_t B_t u_t        (zero-order hold on A, Euler on B)
    y_t = <C_t, h_t> + D u_t,  then  y_t * silu(z_t)
`resets[b, t]` zeroes h before step t. Shapes: u, delta, z (batch, dim, L); A (dim, N);
B, C (batch, N, L), (batch, groups, N, L) or time-invariant (dim, N); D, delta_bias (dim,);
initial_state (batch, dim, N).

Backends (registered in `seqssm.ops.backend`): "reference" is the sequential definition; "torch"
walks the sequence in chunks whose (batch, chunk, dim, N) intermediates are recomputed in the
backward pass instead of stored, so memory stays a small fraction of one (batch, L, dim, N)
tensor; "triton" (`seqssm.ops.triton_scan`) does the same in Triton kernels; "mamba_ssm" calls
mamba_ssm's CUDA kernel (no initial state or resets there).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from seqssm.errors import InputShapeError
from seqssm.ops.backend import (
    CUDA, NEVER, Backend, Call, choose, mamba_selective_scan, mamba_ssm_missing, register, triton_device_check,
    triton_missing,
)
from seqssm.ops.checks import check_flags, check_floating
from seqssm.ops.layout import is_channels_last

# Elements per thread of one chunk's (chunk, batch, dim, N) buffers: large enough that each op
# amortises its dispatch cost, small enough that the four buffers stay in a core's L2 cache.
_CHUNK_ELEMENTS = 1 << 17


def _check_shapes(u, delta, A, B, C, D, z, delta_bias, initial_state, resets):
    if u.ndim != 3 or delta.shape != u.shape:
        raise InputShapeError(f"selective_scan: u and delta must both be (batch, dim, L); "
                              f"got {tuple(u.shape)} and {tuple(delta.shape)}")
    batch, dim, length = u.shape
    if A.ndim != 2 or A.shape[0] != dim:
        raise InputShapeError(f"selective_scan: A must be (dim, N) = ({dim}, N), got {tuple(A.shape)}")
    if A.is_complex():
        raise ValueError("selective_scan supports real A only")
    n = A.shape[1]
    for name, M in (("B", B), ("C", C)):
        ok = (M.ndim == 2 and M.shape == (dim, n)) or (M.ndim == 3 and M.shape == (batch, n, length)) or (
            M.ndim == 4 and M.shape[0] == batch and M.shape[2:] == (n, length) and dim % M.shape[1] == 0
        )
        if not ok:
            raise InputShapeError(
                f"selective_scan: {name} must be (batch, N, L) = ({batch}, {n}, {length}), (batch, groups, N, L) "
                f"with groups dividing dim={dim}, or time-invariant (dim, N) = ({dim}, {n}); got {tuple(M.shape)}"
            )
    if B.ndim == 4 and C.ndim == 4 and B.shape[1] != C.shape[1]:
        raise InputShapeError(f"selective_scan: B and C must have the same number of groups, "
                              f"got {B.shape[1]} and {C.shape[1]}")
    for name, v in (("D", D), ("delta_bias", delta_bias)):
        if v is not None and v.shape != (dim,):
            raise InputShapeError(f"selective_scan: {name} must be (dim,) = ({dim},), got {tuple(v.shape)}")
    if z is not None and z.shape != u.shape:
        raise InputShapeError(f"selective_scan: z must be (batch, dim, L) like u, got {tuple(z.shape)}")
    if initial_state is not None and initial_state.shape != (batch, dim, n):
        raise InputShapeError(f"selective_scan: initial_state must be (batch, dim, N) = ({batch}, {dim}, {n}), "
                              f"got {tuple(initial_state.shape)}")
    check_flags("selective_scan", "resets", resets, batch, length)


def _finish(y, u, D, z, out_dtype):
    if D is not None:
        y = y + u * D.unsqueeze(-1)
    if z is not None:
        y = y * F.silu(z)
    return y.to(out_dtype)


def _prepare_delta(delta, delta_bias, delta_softplus, compute):
    delta = delta.to(compute)
    if delta_bias is not None:
        delta = delta + delta_bias.to(compute).unsqueeze(-1)
    return F.softplus(delta) if delta_softplus else delta


def selective_step(h, u_t, delta_t, A, B_t, C_t, D=None, z_t=None, delta_bias=None, delta_softplus=False):
    """One step of the selective scan: h (batch, dim, N), u_t, delta_t, z_t (batch, dim), A (dim, N),
    B_t, C_t (batch, N) or (batch, groups, N) -> (y_t (batch, dim), next h)."""
    check_floating("selective_step", h=h, u_t=u_t, delta_t=delta_t, A=A, B_t=B_t, C_t=C_t, D=D, z_t=z_t,
                   delta_bias=delta_bias)
    batch, dim = u_t.shape
    n = A.shape[1]
    out_dtype = u_t.dtype
    compute = torch.promote_types(u_t.dtype, torch.float32)
    delta_t = _prepare_delta(delta_t.unsqueeze(-1), delta_bias, delta_softplus, compute).squeeze(-1)
    groups = B_t.shape[1] if B_t.ndim == 3 else 1
    B_t = B_t.to(compute).view(batch, groups, 1, n)
    C_t = C_t.to(compute).view(batch, groups, 1, n)
    shape = (batch, groups, dim // groups)
    u_g, delta_g = u_t.to(compute).view(shape), delta_t.view(shape)
    h = h.to(compute).view(*shape, n)
    h = torch.exp(delta_g.unsqueeze(-1) * A.to(compute).view(groups, dim // groups, n)) * h
    h = torch.addcmul(h, (delta_g * u_g).unsqueeze(-1), B_t)
    y = (h * C_t).sum(-1).reshape(batch, dim)
    z_t = None if z_t is None else z_t.unsqueeze(-1)
    y = _finish(y.unsqueeze(-1), u_t.to(compute).unsqueeze(-1), D, z_t, out_dtype).squeeze(-1)
    return y, h.reshape(batch, dim, n)


def _per_channel(M: torch.Tensor, batch: int, dim: int, length: int) -> torch.Tensor:
    """B or C (dim, N), (batch, N, L) or (batch, groups, N, L) -> (batch, dim, N, L), channel d's own."""
    if M.ndim == 2:
        return M[None, :, :, None].expand(batch, dim, M.shape[1], length)
    if M.ndim == 3:
        return M.unsqueeze(1).expand(batch, dim, *M.shape[1:])
    return M.repeat_interleave(dim // M.shape[1], dim=1)


def selective_scan_reference(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None,
):
    """The sequential definition: a loop of `selective_step` (see the module docstring for shapes)."""
    _check_shapes(u, delta, A, B, C, D, z, delta_bias, initial_state, resets)
    batch, dim, length = u.shape
    compute = torch.promote_types(u.dtype, torch.float32)
    h = u.new_zeros(batch, dim, A.shape[1], dtype=compute) if initial_state is None else initial_state
    if B.ndim == 2 or C.ndim == 2:
        # A time-invariant B or C belongs to each channel: make both per channel (one group each).
        B, C = (_per_channel(M, batch, dim, length) for M in (B, C))
    # unbind gives per-step views whose backward is one stack, not L full-size scatters.
    zs = z.unbind(-1) if z is not None else [None] * length
    steps = zip(u.unbind(-1), delta.unbind(-1), B.unbind(-1), C.unbind(-1), zs)
    ys = []
    for t, (u_t, delta_t, B_t, C_t, z_t) in enumerate(steps):
        if resets is not None:
            h = h * (~resets[:, t]).to(h.dtype).view(batch, 1, 1)
        y_t, h = selective_step(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, delta_softplus)
        ys.append(y_t)
    y = torch.stack(ys, dim=-1)
    return (y, h.to(y.dtype)) if return_last_state else y


class _ChunkBuffers:
    """(chunk, b, g, N, e) buffers allocated once per call and reused by every chunk, with their
    per-step views made once: indexing a tensor each step costs as much as the step's arithmetic."""

    def __init__(self, like: torch.Tensor, chunk: int, state: tuple, names: tuple):
        for name in names:
            buf = like.new_empty(chunk, *state)
            setattr(self, name, buf)
            setattr(self, name + "_t", buf.unbind(0))


class _Invariant(NamedTuple):
    """A time-invariant B or C inside the torch path, as (g, N, e): the same at every step and batch row."""

    value: torch.Tensor


def _contract_state(M, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Σ_N M x into out (n, b, g, 1, e): M a chunk of a variable B or C (n, b, g, N) or an _Invariant;
    x (n, b, g, N, e)."""
    if isinstance(M, _Invariant):
        return torch.sum(x * M.value, -2, keepdim=True, out=out)
    return torch.matmul(M.unsqueeze(-2), x, out=out)


def _grad_bc(grad, a: torch.Tensor, x: torch.Tensor) -> None:
    """Gradient of B or C from Σ_e a x, a (n, b, g, 1, e), x (n, b, g, N, e): into a variable one's chunk
    view grad (n, b, g, 1, N), or summed over steps and batch rows into an _Invariant accumulator."""
    if isinstance(grad, _Invariant):
        grad.value.add_((a * x).sum((0, 1)))
    else:
        torch.matmul(a, x.transpose(-1, -2), out=grad)


def _chunk_states(buf, n, delta, du, A, B, keep, start):
    """Discretise and scan one chunk of n steps into buf.dA and buf.h, time-major:
    delta, du (n, b, g, 1, e); A (g, N, e); B (n, b, g, N) or _Invariant; keep (n, b) or None;
    start (b, g, N, e). Returns dA = exp(delta A) (0 where the state resets) and h, the state after
    each step, both (n, b, g, N, e) views of the buffers."""
    dA, h = buf.dA[:n], buf.h[:n]
    torch.mul(delta, A, out=dA).exp_()
    if keep is not None:
        dA.mul_(keep.view(*keep.shape, 1, 1, 1))
    torch.mul(du, B.value if isinstance(B, _Invariant) else B.unsqueeze(-1), out=h)
    prev = start
    for dA_t, h_t in zip(buf.dA_t[:n], buf.h_t[:n]):
        prev = h_t.addcmul_(dA_t, prev)
    return dA, h


def _time_major(x: torch.Tensor) -> torch.Tensor:
    """x (b, ..., L) -> contiguous (L, b, ...), copying as little as its memory layout allows."""
    perm = (x.ndim - 1, *range(x.ndim - 1))
    viewed = x.permute(perm)
    if viewed.stride(-1) == 1 or not x.is_contiguous():
        # Channels-last memory (as S6 passes its (b, L, d) activations): whole rows copy, or nothing
        # at all at batch 1.
        return viewed.contiguous()
    # A 2-D transpose of a contiguous tensor takes torch's cache-blocked copy, several times faster
    # than copying an N-d permuted view.
    return x.reshape(-1, x.shape[-1]).t().contiguous().view(viewed.shape)


def _from_time_major(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """x contiguous (L, b, ...) -> (b, ..., L): a free view when the caller's tensors are channels-last,
    else contiguous, so that the output keeps the memory layout of the input."""
    viewed = x.permute(*range(1, x.ndim), 0)
    if channels_last:
        return viewed
    return x.reshape(x.shape[0], -1).t().contiguous().view(viewed.shape)


def _chunks(chunk: int, *tensors):
    """Zip of each tensor's consecutive `chunk`-step views along dim 0 (None or an _Invariant is the same
    for every chunk)."""
    length = next(t for t in tensors if isinstance(t, torch.Tensor)).shape[0]
    count = -(-length // chunk)
    return zip(*(t.split(chunk) if isinstance(t, torch.Tensor) else [t] * count for t in tensors))


def _bc_inside(M: torch.Tensor, length: int, batch: int, groups: int, n_state: int):
    """B or C as the torch path uses it: variable (b, g, N, L) -> time-major (L, b, g, N); time-invariant
    (dim, N) -> _Invariant (g, N, e)."""
    if M.ndim == 2:
        return _Invariant(M.view(groups, -1, n_state).transpose(-1, -2).contiguous())
    return _time_major(M).view(length, batch, groups, n_state)


def _as_state(M) -> torch.Tensor:
    """A chunk of B or C broadcastable against states (n, b, g, N, e)."""
    return M.value if isinstance(M, _Invariant) else M.unsqueeze(-1)


def _selective_forward(u, delta, A, B, C, h0, keep, chunk, store_starts):
    """The chunked forward of `_SelectiveScan` (same arguments) -> y (L, b, dim), last state (b, dim, N),
    the time-major inputs (u, delta, A, B, C, keep) and, with store_starts, every chunk's start state."""
    batch, dim, length = u.shape
    groups, n_state = _groups(B, C), A.shape[1]
    e = dim // groups
    u, delta = (_time_major(x).view(length, batch, groups, 1, e) for x in (u, delta))
    B, C = (_bc_inside(M, length, batch, groups, n_state) for M in (B, C))
    A = A.reshape(groups, e, n_state).transpose(-1, -2).contiguous()
    keep = None if keep is None else keep.t().contiguous()
    state = (batch, groups, n_state, e)
    chunk = min(chunk, length)
    du = delta * u
    buf = _ChunkBuffers(u, chunk, state, ("dA", "h"))
    # The state entering each chunk: all of them for backward, else one slot that outlives the chunk.
    starts = u.new_empty(-(-length // chunk) if store_starts else 1, *state)
    y = torch.empty_like(u)
    prev = h0.reshape(batch, groups, e, n_state).transpose(-1, -2)
    for i, (delta_c, du_c, B_c, C_c, keep_c, y_c) in enumerate(_chunks(chunk, delta, du, B, C, keep, y)):
        n = delta_c.shape[0]
        start = starts[i if store_starts else 0].copy_(prev)
        _, h = _chunk_states(buf, n, delta_c, du_c, A, B_c, keep_c, start)
        _contract_state(C_c, h, out=y_c)
        prev = h[n - 1]
    last = prev.transpose(-1, -2).reshape(batch, dim, n_state)
    return y.view(length, batch, dim), last, (u, delta, A, B, C, keep), starts


def _groups(B: torch.Tensor, C: torch.Tensor) -> int:
    """Groups of the variable one of B, C given as (b, g, N, L) or (dim, N); 1 when both are time-invariant."""
    return next((M.shape[1] for M in (B, C) if M.ndim == 4), 1)


class _SelectiveScan(torch.autograd.Function):
    """u, delta (b, dim, L); A (dim, N); B, C (b, g, N, L) or time-invariant (dim, N); h0 (b, dim, N);
    keep (b, L) or None -> y (b, dim, L), last state (b, dim, N).

    Inside, tensors are time-major with the state index before the channel, e = dim / g:
    (L, b, g, 1, e) for u and delta, (L, b, g, N) for B and C, (b, g, N, e) for a state. Then every
    per-step slice is one contiguous block and every reduction over N or over channels is a
    contiguous matrix product. Only chunk-start states are kept for backward; all
    (chunk, b, g, N, e) work happens in a few buffers allocated once per call."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, h0, keep, chunk):
        ctx.channels_last = [is_channels_last(x) for x in (u, delta, B, C)]
        y, last, inputs, starts = _selective_forward(u, delta, A, B, C, h0, keep, chunk, store_starts=True)
        ctx.invariant = [isinstance(M, _Invariant) for M in inputs[3:5]]
        ctx.save_for_backward(*(x.value if isinstance(x, _Invariant) else x for x in inputs), starts)
        ctx.chunk = min(chunk, u.shape[-1])
        return _from_time_major(y, ctx.channels_last[0]), last

    @staticmethod
    def backward(ctx, grad_y, grad_last):
        u, delta, A, B, C, keep, starts = ctx.saved_tensors
        B, C = (_Invariant(M) if inv else M for M, inv in zip((B, C), ctx.invariant))
        chunk = ctx.chunk
        length, batch, groups, _, e = u.shape
        n_state = A.shape[1]
        grad_y = _time_major(grad_y).view(u.shape)
        du = delta * u
        grad_du, grad_delta = torch.empty_like(u), torch.empty_like(u)
        # Chunk views (L, b, g, 1, N) of variable gradients; sums over steps and rows for invariant ones.
        grad_B, grad_C = (
            _Invariant(torch.zeros_like(M.value)) if isinstance(M, _Invariant) else torch.empty_like(M).unsqueeze(-2)
            for M in (B, C)
        )
        buf = _ChunkBuffers(u, chunk, starts.shape[1:], ("dA", "h", "g", "grad_A"))
        buf.grad_A.zero_()  # per-slot sums of g * delta over chunks, reduced once at the end
        # Adjoint of the state after the current chunk, carried backwards across chunks.
        if grad_last is None:
            g_next = torch.zeros_like(starts[0])
        else:
            g_next = grad_last.reshape(batch, groups, e, n_state).transpose(-1, -2).contiguous()
        pieces = _chunks(chunk, delta, du, B, C, keep, grad_y, grad_C, grad_B, grad_du, grad_delta)
        for i, (delta_c, du_c, B_c, C_c, keep_c, gy, grad_C_c, grad_B_c, grad_du_c, grad_delta_c) in reversed(
            list(enumerate(pieces))
        ):
            n = delta_c.shape[0]
            dA, h = _chunk_states(buf, n, delta_c, du_c, A, B_c, keep_c, starts[i])
            g_c = buf.g[:n]
            # Adjoint g_t = C_t gy_t + dA_{t+1} g_{t+1}; the chunk's last step receives g_next.
            torch.mul(_as_state(C_c), gy, out=g_c)
            g_c[n - 1] += g_next
            for t in range(n - 2, -1, -1):
                buf.g_t[t].addcmul_(buf.dA_t[t + 1], buf.g_t[t + 1])
            _grad_bc(grad_C_c, gy, h)
            _grad_bc(grad_B_c, du_c, g_c)
            _contract_state(B_c, g_c, out=grad_du_c)
            g_next = dA[0] * g_c[0]  # adjoint of the state before this chunk
            # d loss / d (delta A) = g_t * h_{t-1} * dA_t, in place: g is spent.
            g_c[1:].mul_(h[:-1])
            g_c[0].mul_(starts[i])
            g_c.mul_(dA)
            buf.grad_A[:n].addcmul_(g_c, delta_c)
            torch.sum(g_c.mul_(A), -2, keepdim=True, out=grad_delta_c)
        grad_A = buf.grad_A.sum((0, 1))
        grad_delta.addcmul_(grad_du, u)
        grad_u = grad_du.mul_(delta)
        dim = groups * e
        grad_u, grad_delta = (_from_time_major(g.view(length, batch, dim), last)
                              for g, last in zip((grad_u, grad_delta), ctx.channels_last))
        grad_B, grad_C = (
            g.value.transpose(-1, -2).reshape(dim, n_state) if isinstance(g, _Invariant)
            else _from_time_major(g.squeeze(-2), last)
            for g, last in zip((grad_B, grad_C), ctx.channels_last[2:])
        )
        return (
            grad_u, grad_delta, grad_A.transpose(-1, -2).reshape(dim, n_state), grad_B, grad_C,
            g_next.transpose(-1, -2).reshape(batch, dim, n_state), None, None,
        )


def _selective_scan_torch(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None,
):
    out_dtype = u.dtype
    compute = torch.promote_types(u.dtype, torch.float32)
    batch, dim, length = u.shape
    n = A.shape[1]
    B, C = (M.unsqueeze(1) if M.ndim == 3 else M for M in (B, C))
    u_c = u.to(compute)
    delta = _prepare_delta(delta, delta_bias, delta_softplus, compute)
    h0 = u_c.new_zeros(batch, dim, n) if initial_state is None else initial_state.to(compute)
    keep = None if resets is None else (~resets.to(torch.bool)).to(compute)
    chunk = max(1, _CHUNK_ELEMENTS * torch.get_num_threads() // (batch * dim * n))
    args = (u_c, delta, A.to(compute), B.to(compute), C.to(compute), h0, keep, chunk)
    if torch.is_grad_enabled() and any(x.requires_grad for x in args[:6]):
        y, last = _SelectiveScan.apply(*args)
    else:  # inference: no chunk-start states to keep
        y, last, _, _ = _selective_forward(*args, store_starts=False)
        y = _from_time_major(y, is_channels_last(u_c))
    y = _finish(y, u_c, D, z, out_dtype)
    return (y, last.to(y.dtype)) if return_last_state else y


def _selective_scan_mamba(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None,
):
    selective_scan_fn, _ = mamba_selective_scan()
    out = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
    if not return_last_state:
        return out
    y, last = out
    return y, last.to(u.dtype)  # mamba_ssm keeps it in float32; every backend returns u's dtype


class _SelectiveDetail(NamedTuple):
    """What backends' checks read of a selective_scan call: its tensors, and whether the last state it
    returns may need a gradient (asked for, with autograd recording)."""

    u: torch.Tensor
    delta: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None
    z: torch.Tensor | None
    delta_bias: torch.Tensor | None
    last_state_grad: bool


def _mamba_ssm_check(call: Call) -> str | None:
    """mamba_ssm's kernel takes u, delta, z and a variable B, C in one dtype, and float32 A, D, delta_bias
    and time-invariant B, C; its last state carries no gradient."""
    u, delta, A, B, C, D, z, delta_bias, last_state_grad = call.detail
    if last_state_grad:
        return "its last state carries no gradient (its backward ignores one)"
    if any(x is not None and x.dtype != u.dtype for x in (delta, z)):
        return "it needs u, delta and z in one dtype"
    for name, M in (("B", B), ("C", C)):
        if M.dtype != (u.dtype if M.ndim > 2 else torch.float32):
            return f"it needs a variable {name} in u's dtype and a time-invariant one in float32"
    if any(x is not None and x.dtype != torch.float32 for x in (A, D, delta_bias)):
        return "it needs A, D and delta_bias in float32"
    return None


def selective_scan(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None, backend: str = "auto",
):
    """S6 selective scan: u, delta (batch, dim, L) -> y (batch, dim, L) [, last state (batch, dim, N)].

    Same arguments as mamba_ssm's `selective_scan_fn`, plus `initial_state` (batch, dim, N) and
    `resets` (batch, L) bool (True at t zeroes the state before step t). backend: one of
    `backends("selective_scan")` ("auto", "reference", "mamba_ssm", "triton", "torch"). Inputs follow
    `seqssm.ops.checks`: floating point only, y in u's dtype; empty u gives empty y and the state unchanged.
    """
    check_floating("selective_scan", u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias,
                   initial_state=initial_state)
    _check_shapes(u, delta, A, B, C, D, z, delta_bias, initial_state, resets)
    resets = check_flags("selective_scan", "resets", resets, u.shape[0], u.shape[2])
    if u.numel() == 0:
        y = torch.zeros_like(u)
        if not return_last_state:
            return y
        last = u.new_zeros(*u.shape[:2], A.shape[1]) if initial_state is None else initial_state.to(u.dtype)
        return y, last
    floats = (u, delta, A, B, C, D, z, delta_bias, initial_state)
    last_state_grad = return_last_state and torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in floats)
    call = Call(
        u.device, tuple(x.dtype for x in floats if x is not None), initial_state is not None, resets is not None,
        detail=_SelectiveDetail(u, delta, A, B, C, D, z, delta_bias, last_state_grad),
    )
    return choose("selective_scan", backend, call)(
        u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state,
        initial_state=initial_state, resets=resets,
    )


_HALF_OR_SINGLE = frozenset({torch.float16, torch.bfloat16, torch.float32})
register(Backend("selective_scan", "reference", selective_scan_reference, auto_devices=NEVER))
register(Backend("selective_scan", "mamba_ssm", _selective_scan_mamba, devices=CUDA, auto_devices=CUDA,
                 dtypes=_HALF_OR_SINGLE, initial_state=False, resets=False, available=mamba_ssm_missing,
                 check=_mamba_ssm_check))
register(Backend("selective_scan", "triton", "seqssm.ops.triton_scan:selective_scan_triton",
                 devices=frozenset({"cuda", "cpu"}), auto_devices=CUDA, available=triton_missing,
                 check=triton_device_check))
register(Backend("selective_scan", "torch", _selective_scan_torch))
