"""The "torch" backend of the selective scan: a chunked scan in plain PyTorch, as two custom ops.

    torch.ops.seqssm.selective_scan_chunked(u, delta, A, B, C, h0, keep, chunk, store_starts)
        -> y (b, dim, L), last state (b, dim, N), chunk-start states
    torch.ops.seqssm.selective_scan_chunked_backward(u, delta, A, B, C, keep, starts, grad_y, grad_last, chunk)
        -> gradients of u, delta, A, B, C, h0

u, delta (b, dim, L) with Δ already final (bias and softplus applied); A (dim, N); B, C (b, g, N, L) or
time-invariant (dim, N); h0 (b, dim, N); keep (b, L), 0 where a reset zeroes the state, or None; all in one
floating dtype. The forward op is differentiable (its backward is the second op), and torch.compile keeps
each op whole: its Python loops over chunks and steps never reach dynamo, which would unroll them.

Inside, tensors are time-major with the state index before the channel, e = dim / g:
(L, b, g, 1, e) for u and delta, (L, b, g, N) for B and C, (b, g, N, e) for a state. Then every
per-step slice is one contiguous block and every reduction over N or over channels is a
contiguous matrix product. The scan walks `chunk` steps at a time; only chunk-start states are kept
for backward, which recomputes each chunk's (chunk, b, g, N, e) intermediates in a few buffers
allocated once per call. Outputs keep the memory layout of the inputs they match (channels-last in,
channels-last out).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from seqssm.ops.custom import OpCaller
from seqssm.ops.layout import is_channels_last


class _ChunkBuffers:
    """(chunk, b, g, N, e) buffers allocated once per call and reused by every chunk, with their
    per-step views made once: indexing a tensor each step costs as much as the step's arithmetic."""

    def __init__(self, like: Tensor, chunk: int, state: tuple, names: tuple):
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
    """x contiguous (L, b, ...) -> (b, ..., L) in the caller's layout: a view of (b, L, ...) memory when the
    caller's tensors are channels-last (free at batch 1), else contiguous. One layout per input layout, the
    same in eager and in torch.compile's fake tensors, and never a mix of batch and time strides that would
    leave elementwise ops on it and on the inputs free to choose either layout."""
    if channels_last:
        return x.transpose(0, 1).contiguous().permute(0, *range(2, x.ndim), 1)
    return x.reshape(x.shape[0], -1).t().contiguous().view(*x.shape[1:], x.shape[0])


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


def _groups(B: torch.Tensor, C: torch.Tensor) -> int:
    """Groups of the variable one of B, C given as (b, g, N, L) or (dim, N); 1 when both are time-invariant."""
    return next((M.shape[1] for M in (B, C) if M.ndim == 4), 1)


def _inside(u, delta, A, B, C, keep):
    """The op's inputs in the layout inside (see the module docstring): u, delta (L, b, g, 1, e); A (g, N, e);
    B, C time-major (L, b, g, N) or _Invariant; keep (L, b) or None."""
    batch, dim, length = u.shape
    groups, n_state = _groups(B, C), A.shape[1]
    e = dim // groups
    u, delta = (_time_major(x).view(length, batch, groups, 1, e) for x in (u, delta))
    B, C = (_bc_inside(M, length, batch, groups, n_state) for M in (B, C))
    A = A.reshape(groups, e, n_state).transpose(-1, -2).contiguous()
    keep = None if keep is None else keep.t().contiguous()
    return u, delta, A, B, C, keep


def _chunk_count(length, chunk):
    """Chunks of at most `chunk` steps in a sequence of `length` (symbolic sizes welcome)."""
    return -(-length // torch.sym_min(chunk, length))


def _channel_major(x: Tensor, dim: int) -> Tensor:
    """A state-shaped tensor inside, (..., g, N, e), as the caller's contiguous (..., dim, N)."""
    return x.transpose(-1, -2).reshape(*x.shape[:-3], dim, x.shape[-2]).contiguous()


def _empty_from_time_major(like: Tensor, shape) -> Tensor:
    """An empty tensor of `shape` (b, ..., L) in the layout `_from_time_major` gives for inputs laid out as
    `like`: what the ops' fake implementations return."""
    if is_channels_last(like):
        return like.new_empty(shape[0], shape[-1], *shape[1:-1]).permute(0, *range(2, len(shape)), 1)
    return like.new_empty(shape)


def chunked_forward(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, h0: Tensor,
                    keep: Optional[Tensor], chunk: int, store_starts: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The chunked forward (see the module docstring) -> y (b, dim, L), last state (b, dim, N), and the state
    entering each chunk (chunks, b, g, N, e) with store_starts (what backward needs), else one slot."""
    batch, dim, length = u.shape
    n_state, channels_last = A.shape[1], is_channels_last(u)
    u, delta, A, B, C, keep = _inside(u, delta, A, B, C, keep)
    groups, e = u.shape[2], u.shape[4]
    state = (batch, groups, n_state, e)
    chunk = min(chunk, length)
    du = delta * u
    buf = _ChunkBuffers(u, chunk, state, ("dA", "h"))
    # The state entering each chunk: all of them for backward, else one slot that outlives the chunk.
    starts = u.new_empty(_chunk_count(length, chunk) if store_starts else 1, *state)
    y = torch.empty_like(u)
    prev = h0.reshape(batch, groups, e, n_state).transpose(-1, -2)
    for i, (delta_c, du_c, B_c, C_c, keep_c, y_c) in enumerate(_chunks(chunk, delta, du, B, C, keep, y)):
        n = delta_c.shape[0]
        start = starts[i if store_starts else 0].copy_(prev)
        _, h = _chunk_states(buf, n, delta_c, du_c, A, B_c, keep_c, start)
        _contract_state(C_c, h, out=y_c)
        prev = h[n - 1]
    last = _channel_major(prev, dim)
    return _from_time_major(y.view(length, batch, dim), channels_last), last, starts


selective_scan_chunked_op = torch.library.custom_op("seqssm::selective_scan_chunked", mutates_args=())(chunked_forward)


@selective_scan_chunked_op.register_fake
def _(u, delta, A, B, C, h0, keep, chunk, store_starts):
    batch, dim, length = u.shape
    groups, n_state = _groups(B, C), A.shape[1]
    starts = u.new_empty(_chunk_count(length, chunk) if store_starts else 1, batch, groups, n_state, dim // groups)
    return _empty_from_time_major(u, u.shape), u.new_empty(batch, dim, n_state), starts


def chunked_backward(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, keep: Optional[Tensor], starts: Tensor,
    grad_y: Tensor, grad_last: Tensor, chunk: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients of `chunked_forward`'s inputs u, delta, A, B, C, h0 from those of y and the last state,
    with its chunk-start states `starts` (store_starts=True) and the same `chunk`: each chunk's states are
    recomputed from its start, then the adjoint runs backwards through it."""
    layouts = [is_channels_last(x) for x in (u, delta, B, C)]
    u, delta, A, B, C, keep = _inside(u, delta, A, B, C, keep)
    length, batch, groups, _, e = u.shape
    n_state = A.shape[1]
    chunk = min(chunk, length)
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
    grad_u, grad_delta = (_from_time_major(g.view(length, batch, dim), channels_last)
                          for g, channels_last in zip((grad_u, grad_delta), layouts))
    grad_B, grad_C = (
        _channel_major(g.value, dim) if isinstance(g, _Invariant)
        else _from_time_major(g.squeeze(-2), channels_last)
        for g, channels_last in zip((grad_B, grad_C), layouts[2:])
    )
    return grad_u, grad_delta, _channel_major(grad_A, dim), grad_B, grad_C, _channel_major(g_next, dim)


selective_scan_chunked_backward_op = torch.library.custom_op("seqssm::selective_scan_chunked_backward",
                                                             mutates_args=())(chunked_backward)


@selective_scan_chunked_backward_op.register_fake
def _(u, delta, A, B, C, keep, starts, grad_y, grad_last, chunk):
    grad_B, grad_C = (M.new_empty(M.shape) if M.ndim == 2 else _empty_from_time_major(M, M.shape) for M in (B, C))
    return (_empty_from_time_major(u, u.shape), _empty_from_time_major(delta, delta.shape), A.new_empty(A.shape),
            grad_B, grad_C, u.new_empty(grad_last.shape))


def _save_for_backward(ctx, inputs, output):
    u, delta, A, B, C, _, keep, chunk, store_starts = inputs
    if not store_starts:
        raise RuntimeError("selective_scan_chunked: gradients need the chunk-start states; call it with "
                           "store_starts=True when any input requires grad")
    ctx.save_for_backward(u, delta, A, B, C, keep, output[2])
    ctx.chunk = chunk
    # No zero gradients made for outputs that get none (the chunk states never do; the last state, in `forward`).
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_y, grad_last, _grad_starts):
    u, delta, A, B, C, keep, starts = ctx.saved_tensors
    if grad_y is None:
        grad_y = torch.zeros_like(u)
    if grad_last is None:
        grad_last = starts.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    grads = _chunked_backward_call(u, delta, A, B, C, keep, starts, grad_y, grad_last, ctx.chunk)
    return (*grads, None, None, None)


_chunked_backward_call = OpCaller(selective_scan_chunked_backward_op, chunked_backward)
selective_scan_chunked = OpCaller(selective_scan_chunked_op, chunked_forward, _save_for_backward, _backward)
