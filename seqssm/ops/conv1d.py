"""Causal depthwise 1-d convolution (the Mamba block's short conv), with a carried state and resets.

    y[b, d, t] = bias[d] + Σ_k weight[d, k] x[b, d, t - (K - 1) + k]

where inputs before t = 0 come from `initial_state` (batch, dim, K - 1) (zeros when None) and a
reset at t (resets[b, t] = True) hides every input before t from outputs at t and after.
Backends: "reference" runs the recurrence step by step; "torch" sums K shifted copies of the
left-padded input (resets mask the taps), on CPU and on CUDA; on CUDA "auto" prefers the
`causal_conv1d` package when it is installed and the call has neither an initial state nor resets (through
the custom op of `seqssm.ops.cuda_packages`), then "triton" for such calls (`seqssm.ops.triton_conv`: one kernel
each way, as the package's). Both return y in x's dtype. `causal_conv1d_step`, one step of decoding, has "torch" (a few
torch ops) and, "auto" on CUDA, "triton" (one kernel: window, taps, bias and SiLU, as causal_conv1d's
`causal_conv1d_update` does).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from seqssm.errors import InputShapeError
from seqssm.ops.backend import (
    CUDA, NEVER, Backend, Call, causal_conv1d_package, choose, register, triton_device_check, triton_missing
)
from seqssm.ops.checks import check_flags, check_floating
from seqssm.ops.cuda_packages import package_conv
from seqssm.ops.layout import is_channels_last


def _check(x, weight, bias, initial_state, resets):
    if x.ndim != 3 or weight.ndim != 2 or weight.shape[0] != x.shape[1]:
        raise InputShapeError(f"causal_conv1d: need x (batch, dim, L) and weight (dim, K); "
                              f"got {tuple(x.shape)} and {tuple(weight.shape)}")
    batch, dim, length = x.shape
    if bias is not None and bias.shape != (dim,):
        raise InputShapeError(f"causal_conv1d: bias must be (dim,) = ({dim},), got {tuple(bias.shape)}")
    if initial_state is not None and initial_state.shape != (batch, dim, weight.shape[1] - 1):
        expected = (batch, dim, weight.shape[1] - 1)
        raise InputShapeError(f"causal_conv1d: initial_state must be (batch, dim, K-1) = {expected}, "
                              f"got {tuple(initial_state.shape)}")
    check_flags("causal_conv1d", "resets", resets, batch, length)


def _source_mask(resets: torch.Tensor | None, length: int, k: int, device) -> torch.Tensor | None:
    """(batch, L, K) bool: may output t read tap k (source index t - (K-1) + k, negative = initial state)?"""
    if resets is None:
        return None
    t = torch.arange(length, device=device)
    # Index of the latest reset at or before t, or -K (before any initial-state entry) if none.
    last = torch.where(resets, t, torch.full_like(t, -k)).cummax(dim=1).values
    source = t[:, None] - (k - 1) + torch.arange(k, device=device)
    return source[None] >= last[:, :, None]


def _final_state(xp: torch.Tensor, resets: torch.Tensor | None, k: int) -> torch.Tensor:
    """The last K-1 inputs of the padded sequence xp, those before the last reset zeroed."""
    state = xp[..., xp.shape[-1] - (k - 1):]
    if resets is None or k == 1:
        return state
    length = xp.shape[-1] - (k - 1)
    mask = _source_mask(resets, length, k, xp.device)[:, -1, 1:]  # the taps output L would read from before L
    return state * mask[:, None, :].to(state.dtype)


def causal_conv1d_reference(x, weight, bias=None, initial_state=None, resets=None, return_final_state=False,
                            silu=False):
    """The definition, one step at a time (a reset zeroes the carried inputs before its step):
    x (batch, dim, L), weight (dim, K) -> y (batch, dim, L), through SiLU with `silu` [, state (batch, dim, K-1)]."""
    _check(x, weight, bias, initial_state, resets)
    batch, dim, length = x.shape
    state = x.new_zeros(batch, dim, weight.shape[1] - 1) if initial_state is None else initial_state.to(x.dtype)
    ys = []
    for t in range(length):
        if resets is not None:
            state = state * (~resets[:, t]).to(x.dtype)[:, None, None]
        y_t, state = _causal_conv1d_step_torch(x[..., t], state, weight, bias, silu)
        ys.append(y_t)
    y = torch.stack(ys, -1) if ys else torch.zeros_like(x)
    return (y, state) if return_final_state else y


def with_final_state(y: torch.Tensor, x: torch.Tensor, k: int, return_final_state: bool):
    """y, or (y, the last K-1 inputs of x (batch, dim, K-1), zeros before t = 0) with return_final_state: the
    result of a backend that takes no initial state and no resets."""
    return (y, _final_state(F.pad(x, (k - 1, 0)), None, k)) if return_final_state else y


def _causal_conv1d_package(x, weight, bias=None, initial_state=None, resets=None, return_final_state=False,
                           silu=False):
    return with_final_state(package_conv(x, weight, bias, silu), x, weight.shape[1], return_final_state)


def _causal_conv1d_torch(x, weight, bias=None, initial_state=None, resets=None, return_final_state=False,
                         silu=False):
    length, k = x.shape[-1], weight.shape[1]
    # Work in the input's memory order: a channels-last x (a transposed (batch, L, dim) tensor, as the
    # Mamba block passes it) is convolved along dim 1 of that tensor, and y keeps the layout.
    channels_last = is_channels_last(x)
    seq = x.transpose(1, 2) if channels_last else x
    time_dim = 1 if channels_last else 2
    pad = x.new_zeros(x.shape[0], x.shape[1], k - 1) if initial_state is None else initial_state
    pad = pad.to(x.dtype)
    xp = torch.cat([pad.transpose(1, 2) if channels_last else pad, seq], dim=time_dim)
    # A sum of K shifted, scaled copies: with K = 4 this is as fast as F.conv1d forward on large
    # inputs and far faster on small ones and in the backward pass (measured on CPU: depthwise
    # conv1d backward took >10x longer at (16, 232, 1024)); masking a tap implements resets.
    # On CUDA it is the path with a state and resets (the RL updates, chained scans): K + 2 elementwise
    # kernels whatever L is, against the scans' time loops a small cost, and exact; cuDNN's depthwise
    # conv1d cannot mask taps per step. Plain training calls go to the package or the Triton kernels.
    mask = _source_mask(resets, length, k, x.device)
    y = None
    for j in range(k):
        w = weight[:, j] if channels_last else weight[:, j, None]
        if mask is not None:
            w = w * (mask[:, :, j, None] if channels_last else mask[:, None, :, j]).to(x.dtype)
        tap = xp.narrow(time_dim, j, length)
        y = tap * w if y is None else y.addcmul(tap, w)
    if bias is not None:
        y = y + (bias if channels_last else bias[:, None])
    if silu:
        y = F.silu(y)
    if channels_last:
        y, xp = y.transpose(1, 2), xp.transpose(1, 2)
    return (y, _final_state(xp, resets, k)) if return_final_state else y


def causal_conv1d(x, weight, bias=None, initial_state=None, resets=None, return_final_state=False, silu: bool = False,
                  backend: str = "auto"):
    """Causal depthwise conv: x (batch, dim, L), weight (dim, K), bias (dim,), initial_state (batch, dim, K-1),
    resets (batch, L) bool -> y (batch, dim, L), through SiLU with `silu` (the Mamba blocks' activation: the
    causal_conv1d package applies it inside its kernels, forward and backward) [, final state (batch, dim, K-1)].
    backend: one of `backends("causal_conv1d")`. Inputs follow `seqssm.ops.checks`: floating point only;
    an empty x gives an empty y and the state unchanged (a batch-0 state for batch 0)."""
    check_floating("causal_conv1d", x=x, weight=weight, bias=bias, initial_state=initial_state)
    _check(x, weight, bias, initial_state, resets)
    resets = check_flags("causal_conv1d", "resets", resets, x.shape[0], x.shape[2])
    if x.numel() == 0:
        y = x.new_zeros(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype))
        if not return_final_state:
            return y
        state = x.new_zeros(*x.shape[:2], weight.shape[1] - 1) if initial_state is None else initial_state.to(x.dtype)
        return y, state
    floats = (x, weight, bias, initial_state)
    call = Call(x.device, tuple(t.dtype for t in floats if t is not None), initial_state is not None,
                resets is not None, detail=(x, weight))
    return choose("causal_conv1d", backend, call)(x, weight, bias, initial_state, resets, return_final_state, silu)


def _check_step(x_t, state, weight, bias):
    """Refuse shapes `causal_conv1d_step` cannot take (its kernel reads by them unchecked) with InputShapeError."""
    if x_t.ndim != 2 or weight.ndim != 2 or weight.shape[0] != x_t.shape[1]:
        raise InputShapeError(f"causal_conv1d_step: need x_t (batch, dim) and weight (dim, K); "
                              f"got {tuple(x_t.shape)} and {tuple(weight.shape)}")
    expected = (x_t.shape[0], x_t.shape[1], weight.shape[1] - 1)
    if state.shape != expected:
        raise InputShapeError(f"causal_conv1d_step: state must be (batch, dim, K-1) = {expected}, got "
                              f"{tuple(state.shape)}")
    if bias is not None and bias.shape != (x_t.shape[1],):
        raise InputShapeError(f"causal_conv1d_step: bias must be (dim,) = ({x_t.shape[1]},), got {tuple(bias.shape)}")


def _causal_conv1d_step_torch(x_t, state, weight, bias=None, silu=False):
    window = torch.cat([state.to(x_t.dtype), x_t.unsqueeze(-1)], dim=-1)
    y = (window * weight).sum(-1)
    if bias is not None:
        y = y + bias
    return (F.silu(y) if silu else y), window[..., 1:]


def causal_conv1d_step(x_t, state, weight, bias=None, silu: bool = False, *, backend: str = "auto"):
    """One step: x_t (batch, dim), state (batch, dim, K-1), weight (dim, K), bias (dim,) -> (y_t (batch, dim), next
    state (batch, dim, K-1) in x_t's dtype); y_t = SiLU(conv) with `silu` (the Mamba blocks' activation), in the
    promoted dtype of x_t, weight and bias. backend: one of `backends("causal_conv1d_step")`; "auto" takes the Triton
    kernel (one launch per step) on CUDA for float16 / bfloat16 / float32."""
    check_floating("causal_conv1d_step", x_t=x_t, state=state, weight=weight, bias=bias)
    _check_step(x_t, state, weight, bias)
    if x_t.numel() == 0:  # no kernel to launch: the torch path gives the empty results
        return _causal_conv1d_step_torch(x_t, state, weight, bias, silu)
    call = Call(x_t.device, tuple(t.dtype for t in (x_t, state, weight, bias) if t is not None))
    return choose("causal_conv1d_step", backend, call)(x_t, state, weight, bias, silu)


def _causal_conv1d_package_check(call: Call) -> str | None:
    """What the package's kernel requires (its own checks raise mid-model otherwise): widths 2 to 4, x
    contiguous along time or along channels, and channels-last x with channels and strides in multiples of 8."""
    x, weight = call.detail
    width = weight.shape[1]
    if not 2 <= width <= 4:
        return f"it takes kernel widths 2 to 4, not {width}"
    if x.stride(2) != 1 and x.stride(1) != 1:
        return f"it needs x contiguous along time or along channels, got strides {tuple(x.stride())}"
    if x.stride(2) != 1 and (x.shape[1] % 8 or x.stride(0) % 8 or x.stride(2) % 8):
        return (f"channels-last x needs channels and strides in multiples of 8, got {x.shape[1]} channels and "
                f"strides {tuple(x.stride())}")
    if weight.dtype not in (x.dtype, torch.float32):
        return f"it needs the weight in x's dtype or float32, got {weight.dtype} for {x.dtype}"
    return None


def _causal_conv1d_triton_check(call: Call) -> str | None:
    """What the Triton kernels require: offsets inside one batch row of x below 2^31 (they are 32-bit)."""
    x, _ = call.detail
    reason = triton_device_check(call)
    if reason is None and sum((n - 1) * abs(s) for n, s in zip(x.shape[1:], x.stride()[1:])) >= 2**31:
        reason = f"one batch row of x spans 2^31 elements or more (shape {tuple(x.shape)}, strides {x.stride()})"
    return reason


_HALF_AND_FLOAT = frozenset({torch.float16, torch.bfloat16, torch.float32})
register(Backend("causal_conv1d", "reference", causal_conv1d_reference, auto_devices=NEVER))
register(Backend("causal_conv1d", "causal_conv1d", _causal_conv1d_package, devices=CUDA, auto_devices=CUDA,
                 dtypes=_HALF_AND_FLOAT, initial_state=False, resets=False,
                 available=lambda: causal_conv1d_package()[1], check=_causal_conv1d_package_check))
register(Backend("causal_conv1d", "triton", "seqssm.ops.triton_conv:causal_conv1d_triton",
                 devices=frozenset({"cuda", "cpu"}), auto_devices=CUDA, dtypes=_HALF_AND_FLOAT, initial_state=False,
                 resets=False, available=triton_missing, check=_causal_conv1d_triton_check))
register(Backend("causal_conv1d", "torch", _causal_conv1d_torch))
register(Backend("causal_conv1d_step", "triton", "seqssm.ops.triton_step:causal_conv1d_step_triton",
                 devices=frozenset({"cuda", "cpu"}), auto_devices=CUDA,
                 dtypes=_HALF_AND_FLOAT, available=triton_missing, check=triton_device_check))
register(Backend("causal_conv1d_step", "torch", _causal_conv1d_step_torch))
