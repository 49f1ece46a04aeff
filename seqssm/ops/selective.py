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
tensor (`seqssm.ops.selective_chunked`); "triton" (`seqssm.ops.triton_scan`) does the same in Triton kernels;
"mamba_ssm" calls mamba_ssm's CUDA kernels (no initial state or resets there; `seqssm.ops.cuda_packages`).
`selective_step`, one step of decoding, has its own: "torch" (a few torch ops) and "triton"
(`seqssm.ops.triton_step`, one fused kernel, as mamba_ssm's `selective_state_update`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from seqssm.errors import InputShapeError
from seqssm.ops.backend import (
    CUDA, NEVER, Backend, Call, choose, mamba_ssm_missing, register, triton_device_check, triton_missing,
)
from seqssm.ops.checks import check_flags, check_floating
from seqssm.ops.cuda_packages import mamba_scan
from seqssm.ops.selective_chunked import selective_scan_chunked

# Elements per thread of one chunk's (chunk, batch, dim, N) buffers: large enough that each op
# amortises its dispatch cost, small enough that the four buffers stay in a core's L2 cache.
_CHUNK_ELEMENTS = 1 << 17
# Steps per chunk at least, whatever the state's size: a chunk of one step stores every state for the backward
# (a copy of (batch, dim, N) per step, and L of them kept). Measured on this project's 2-core CPU (mamba-s6
# training steps, N 16 and 64, d_inner 128 to 512, batch 16 and 32), chunks of 4 took 0.67-0.90x the time of
# the chunks of 1 or 2 that the element budget gave; 16 was slower again.
_MIN_CHUNK = 4


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


def _check_step_shapes(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias):
    """Refuse shapes `selective_step` cannot take (the kernel reads by them unchecked) with InputShapeError."""
    if u_t.ndim != 2 or delta_t.shape != u_t.shape or (z_t is not None and z_t.shape != u_t.shape):
        raise InputShapeError(f"selective_step: u_t, delta_t and z_t must be (batch, dim); got "
                              f"{tuple(u_t.shape)}, {tuple(delta_t.shape)}"
                              + ("" if z_t is None else f" and {tuple(z_t.shape)}"))
    batch, dim = u_t.shape
    if A.ndim != 2 or A.shape[0] != dim:
        raise InputShapeError(f"selective_step: A must be (dim, N) = ({dim}, N), got {tuple(A.shape)}")
    n = A.shape[1]
    if h.shape != (batch, dim, n):
        raise InputShapeError(f"selective_step: h must be (batch, dim, N) = ({batch}, {dim}, {n}), "
                              f"got {tuple(h.shape)}")
    for name, M in (("B_t", B_t), ("C_t", C_t)):
        if not ((M.ndim == 2 and M.shape == (batch, n))
                or (M.ndim == 3 and M.shape[0] == batch and M.shape[2] == n and M.shape[1] > 0
                    and dim % M.shape[1] == 0)):
            raise InputShapeError(f"selective_step: {name} must be (batch, N) = ({batch}, {n}) or (batch, groups, N) "
                                  f"with groups dividing dim={dim}; got {tuple(M.shape)}")
    if B_t.shape != C_t.shape:
        raise InputShapeError(f"selective_step: B_t and C_t must have one shape, got {tuple(B_t.shape)} and "
                              f"{tuple(C_t.shape)}")
    for name, v in (("D", D), ("delta_bias", delta_bias)):
        if v is not None and v.shape != (dim,):
            raise InputShapeError(f"selective_step: {name} must be (dim,) = ({dim},), got {tuple(v.shape)}")


def _selective_step_torch(h, u_t, delta_t, A, B_t, C_t, D=None, z_t=None, delta_bias=None, delta_softplus=False):
    """`selective_step` in torch ops: the "torch" backend, and the definition the reference scan loops over."""
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


def selective_step(h, u_t, delta_t, A, B_t, C_t, D=None, z_t=None, delta_bias=None, delta_softplus=False, *,
                   backend: str = "auto"):
    """One step of the selective scan: h (batch, dim, N), u_t, delta_t, z_t (batch, dim), A (dim, N),
    B_t, C_t (batch, N) or (batch, groups, N) -> (y_t (batch, dim) in u_t's dtype, next h (batch, dim, N) in
    float32, or float64 for float64 u_t). backend: one of `backends("selective_step")` ("auto", "triton",
    "torch"); "auto" takes the fused Triton kernel on CUDA."""
    check_floating("selective_step", h=h, u_t=u_t, delta_t=delta_t, A=A, B_t=B_t, C_t=C_t, D=D, z_t=z_t,
                   delta_bias=delta_bias)
    _check_step_shapes(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias)
    floats = (h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias)
    call = Call(u_t.device, tuple(x.dtype for x in floats if x is not None))
    return choose("selective_step", backend, call)(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, delta_softplus)


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
    """The sequential definition: a loop of `selective_step`'s torch path (see the module docstring for shapes)."""
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
        y_t, h = _selective_step_torch(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, delta_softplus)
        ys.append(y_t)
    y = torch.stack(ys, dim=-1)
    return (y, h.to(y.dtype)) if return_last_state else y


@torch.compiler.assume_constant_result
def _threads() -> int:
    """torch's intra-op threads, which size the torch path's chunks (a constant to torch.compile)."""
    return torch.get_num_threads()


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
    chunk = max(_MIN_CHUNK, _CHUNK_ELEMENTS * _threads() // (batch * dim * n))
    args = (u_c, delta, A.to(compute), B.to(compute), C.to(compute), h0)
    store_starts = torch.is_grad_enabled() and any(x.requires_grad for x in args)  # inference keeps none
    y, last, _ = selective_scan_chunked(*args, keep, chunk, store_starts)
    y = _finish(y, u_c, D, z, out_dtype)
    return (y, last.to(y.dtype)) if return_last_state else y


def _selective_scan_mamba(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None,
):
    y, last, _, _ = mamba_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
    # mamba_ssm keeps the last state in float32; every backend returns u's dtype.
    return (y, last.to(u.dtype)) if return_last_state else y


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
register(Backend("selective_step", "triton", "seqssm.ops.triton_step:selective_step_triton",
                 devices=frozenset({"cuda", "cpu"}), auto_devices=CUDA, dtypes=_HALF_OR_SINGLE,
                 available=triton_missing, check=triton_device_check))
register(Backend("selective_step", "torch", _selective_step_torch))
