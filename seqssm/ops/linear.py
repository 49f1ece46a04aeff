"""First-order linear recurrence h_t = a_t * h_{t-1} + b_t, the primitive under S4D's recurrent
form, S5, minGRU and the Kalman layer.

Implementations with one signature, registered as backends (`seqssm.ops.backend`):
- `linear_scan_reference`: the sequential definition, one step per time index.
- `linear_scan_torch`: a chunked scan. The sequence is cut into K chunks that are scanned
  side by side (T steps on (B, K, F) slices instead of L steps on (B, F) slices), then the chunk
  carries are propagated and folded in with the chunk-local cumulative products of `a`.
  Its backward is the same scan run in reverse on conj(a), so autograd stores only the inputs
  and the output, never per-step graph nodes. Forward and backward are custom ops
  (`torch.ops.seqssm.linear_scan_chunked[_backward]`), which torch.compile keeps whole.
- `seqssm.ops.triton_scan.linear_scan_triton`: Triton kernels, each feature's steps scanned in one thread (CUDA).
Resets (B, L) are applied by zeroing a_t, which is exactly "zero the state before step t".
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from seqssm.errors import InputShapeError
from seqssm.ops.backend import (
    COMPLEX, CUDA, NEVER, REAL, Backend, Call, choose, register, triton_device_check, triton_missing,
)
from seqssm.ops.checks import check_flags, check_floating
from seqssm.ops.custom import OpCaller

# Elements per time slice above which scanning chunks side by side stops paying off: past this
# size one step is bandwidth-bound already, so the plain sequential loop is the fastest.
_SLICE_TARGET = 1 << 12


def _broadcast_shape(x: torch.Size, y: torch.Size) -> torch.Size:
    """The broadcast of two shapes; RuntimeError where they do not broadcast."""
    if torch.compiler.is_compiling():
        return torch.broadcast_shapes(x, y)  # symbolic sizes, decided without guards
    # torch.broadcast_shapes runs its symbolic-shape reference in eager too: about 40 us a call, twice per scan
    # (the op's checks and the backend's), most of a linear_scan call's host time before its kernel.
    sizes = []
    for i in range(1, max(len(x), len(y)) + 1):
        m, n = (x[-i] if i <= len(x) else 1), (y[-i] if i <= len(y) else 1)
        if m != n and m != 1 and n != 1:
            raise RuntimeError(f"size {m} against {n} at dimension {-i}")
        sizes.append(n if m == 1 else m)
    return torch.Size(sizes[::-1])


def broadcast_inputs(a: torch.Tensor, b: torch.Tensor, initial_state, resets):
    """Check the inputs and bring a, b to one dtype and b's broadcast shape (a as an expanded view)
    -> (a, b, initial_state); resets are only checked."""
    if b.ndim < 2:
        raise InputShapeError(f"linear_scan: b must be (batch, L, ...), got {tuple(b.shape)}")
    dtype = torch.promote_types(a.dtype, b.dtype)
    try:
        shape = _broadcast_shape(a.shape, b.shape)
    except RuntimeError as err:
        raise InputShapeError(f"linear_scan: a {tuple(a.shape)} does not broadcast against b {tuple(b.shape)}") from err
    a = a.to(dtype).expand(shape)
    b = b.to(dtype).expand(shape)
    batch, length = shape[:2]
    check_flags("linear_scan", "resets", resets, batch, length)
    if initial_state is not None:
        if initial_state.shape != (batch, *shape[2:]):
            raise InputShapeError(f"linear_scan: initial_state must have shape (batch, ...) = {(batch, *shape[2:])}, "
                                  f"got {tuple(initial_state.shape)}")
        initial_state = initial_state.to(dtype)
    return a, b, initial_state


def _prepare(a: torch.Tensor, b: torch.Tensor, initial_state, resets):
    """`broadcast_inputs`, then resets applied by zeroing a where they are set."""
    a, b, initial_state = broadcast_inputs(a, b, initial_state, resets)
    if resets is not None:
        keep = ~resets.to(device=a.device, dtype=torch.bool)
        a = a * keep.view(*keep.shape, *([1] * (a.ndim - 2))).to(a.dtype)
    return a, b, initial_state


def linear_scan_reference(a, b, initial_state=None, resets=None):
    """h_t = a_t * h_{t-1} + b_t over dim 1, as a plain loop; a, b (B, L, ...), returns h (B, L, ...)."""
    a, b, h = _prepare(a, b, initial_state, resets)
    if h is None:
        h = torch.zeros_like(b[:, 0])
    states = []
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        states.append(h)
    return torch.stack(states, dim=1)


def _scan_forward(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None, reverse: bool = False) -> torch.Tensor:
    """The chunked scan, no autograd: a, b (B, L, F) with equal shapes, h0 (B, F) or None.

    reverse=True runs h_t = a_t * h_{t+1} + b_t from the end (h0 then follows the last step).
    """
    batch, length, feat = b.shape
    chunks = max(1, min(length // 4, _SLICE_TARGET // max(1, batch * feat)))
    if chunks <= 1:
        out = torch.empty_like(b)
        order = range(length - 1, -1, -1) if reverse else range(length)
        prev = h0
        for t in order:
            if prev is None:
                out[:, t] = b[:, t]
            else:
                torch.addcmul(b[:, t], a[:, t], prev, out=out[:, t])
            prev = out[:, t]
        return out
    if reverse:
        return _scan_forward(a.flip(1), b.flip(1), h0).flip(1)
    steps = math.ceil(length / chunks)
    pad = chunks * steps - length
    if pad:
        # Padding with a = 1, b = 0 at the end leaves every real state unchanged.
        a = torch.cat([a, a.new_ones(batch, pad, feat)], dim=1)
        b = torch.cat([b, b.new_zeros(batch, pad, feat)], dim=1)
    a = a.reshape(batch, chunks, steps, feat)
    b = b.reshape(batch, chunks, steps, feat)
    out = torch.empty_like(b)
    out[:, :, 0] = b[:, :, 0]
    for t in range(1, steps):
        torch.addcmul(b[:, :, t], a[:, :, t], out[:, :, t - 1], out=out[:, :, t])
    decay = torch.cumprod(a, dim=2)  # exact even where a reset put a zero
    carry = torch.empty_like(out[:, :, 0])
    prev = h0 if h0 is not None else torch.zeros_like(carry[:, 0])
    for k in range(chunks):
        carry[:, k] = prev
        prev = torch.addcmul(out[:, k, -1], decay[:, k, -1], prev)
    out.addcmul_(decay, carry.unsqueeze(2))
    return out.reshape(batch, chunks * steps, feat)[:, :length]


def chunked_forward(a: Tensor, b: Tensor, h0: Optional[Tensor]) -> Tensor:
    """The chunked scan as a differentiable custom op: a, b (B, L, F) of one dtype, h0 (B, F) or None -> h
    (B, L, F), contiguous. torch.compile keeps it whole (dynamo would unroll its loops)."""
    return _scan_forward(a, b, h0).contiguous()


linear_scan_chunked_op = torch.library.custom_op("seqssm::linear_scan_chunked", mutates_args=())(chunked_forward)


@linear_scan_chunked_op.register_fake
def _(a, b, h0):
    return torch.empty_like(b, memory_format=torch.contiguous_format)


def chunked_backward(a: Tensor, h: Tensor, h0: Optional[Tensor], grad_h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of `chunked_forward`'s a, b and h0 from those of h (its output), without recomputation."""
    # Adjoint recurrence g_t = grad_h_t + conj(a_{t+1}) g_{t+1}, run as a forward scan on
    # time-reversed tensors. For complex tensors PyTorch's gradients are conjugate Wirtinger. Conjugates are
    # physical: inside a compiled graph this op would read a lazy conj() view unconjugated (torch 2.13).
    a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1).conj_physical()
    g = _scan_forward(a_next, grad_h.contiguous(), None, reverse=True).contiguous()
    h_prev = torch.cat([(h0 if h0 is not None else torch.zeros_like(h[:, 0])).unsqueeze(1), h[:, :-1]], dim=1)
    return g * h_prev.conj_physical(), g, g[:, 0] * a[:, 0].conj_physical()


linear_scan_chunked_backward_op = torch.library.custom_op("seqssm::linear_scan_chunked_backward",
                                                          mutates_args=())(chunked_backward)


@linear_scan_chunked_backward_op.register_fake
def _(a, h, h0, grad_h):
    return torch.empty_like(h), torch.empty_like(h), h.new_empty(h.shape[0], h.shape[2])


def _save_for_backward(ctx, inputs, output):
    a, _, h0 = inputs
    ctx.save_for_backward(a, output, h0)


def _backward(ctx, grad_h):
    a, h, h0 = ctx.saved_tensors
    grad_a, grad_b, grad_h0 = _chunked_backward_call(a, h, h0, grad_h)
    return grad_a, grad_b, None if h0 is None else grad_h0


_chunked_backward_call = OpCaller(linear_scan_chunked_backward_op, chunked_backward)
linear_scan_chunked = OpCaller(linear_scan_chunked_op, chunked_forward, _save_for_backward, _backward)


def linear_scan_torch(a, b, initial_state=None, resets=None):
    """Chunked parallel scan with a recomputation-free adjoint; same contract as the reference."""
    a, b, h0 = _prepare(a, b, initial_state, resets)
    shape = b.shape
    flat = (shape[0], shape[1], -1)
    a = a.reshape(flat)  # copies only where `a` was broadcast
    b = b.reshape(flat)
    h0 = h0.reshape(shape[0], -1) if h0 is not None else None
    return linear_scan_chunked(a, b, h0).reshape(shape)


def linear_scan(a, b, initial_state=None, resets=None, backend: str = "auto"):
    """h_t = a_t * h_{t-1} + b_t over dim 1.

    a, b: (batch, L, ...) real or complex, `a` broadcastable to `b`; initial_state (batch, ...)
    or None (zeros); resets (batch, L) bool, True at t zeroes the state before step t.
    Returns every state h (batch, L, ...) in the promoted dtype of a and b. backend: one of
    `backends("linear_scan")`. Inputs follow `seqssm.ops.checks`: floating or complex, empty in, empty out.
    """
    check_floating("linear_scan", allow_complex=True, a=a, b=b, initial_state=initial_state)
    _, h_like, _ = broadcast_inputs(a, b, initial_state, resets)
    resets = check_flags("linear_scan", "resets", resets, *h_like.shape[:2])
    if h_like.numel() == 0:
        return torch.zeros(h_like.shape, dtype=h_like.dtype, device=h_like.device)
    call = Call(b.device, (a.dtype, b.dtype), initial_state is not None, resets is not None)
    return choose("linear_scan", backend, call)(a, b, initial_state, resets)


register(Backend("linear_scan", "reference", linear_scan_reference, auto_devices=NEVER, dtypes=REAL | COMPLEX))
register(Backend("linear_scan", "triton", "seqssm.ops.triton_scan:linear_scan_triton", devices=frozenset({"cuda", "cpu"}),
                 auto_devices=CUDA, dtypes=REAL | COMPLEX, available=triton_missing, check=triton_device_check))
register(Backend("linear_scan", "torch", linear_scan_torch, dtypes=REAL | COMPLEX))
