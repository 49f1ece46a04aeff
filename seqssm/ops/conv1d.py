"""Causal depthwise 1-d convolution (the Mamba block's short conv), with a carried state and resets.

    y[b, d, t] = bias[d] + Σ_k weight[d, k] x[b, d, t - (K - 1) + k]

where inputs before t = 0 come from `initial_state` (batch, dim, K - 1) (zeros when None) and a
reset at t (resets[b, t] = True) hides every input before t from outputs at t and after.
Backends: "reference" runs the recurrence step by step; "torch" sums K shifted copies of the
left-padded input (resets mask the taps); on CUDA "auto" uses the `causal_conv1d` package when it
is installed and the call has neither an initial state nor resets.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from seqssm.ops.backend import _log_choice, extension_imports
from seqssm.ops.layout import is_channels_last


def has_causal_conv1d() -> bool:
    """True when the `causal_conv1d` CUDA package imports."""
    return extension_imports("causal_conv1d", "causal_conv1d")


def _check(x, weight, bias, initial_state, resets):
    if x.ndim != 3 or weight.ndim != 2 or weight.shape[0] != x.shape[1]:
        raise ValueError(f"need x (batch, dim, L) and weight (dim, K); got {tuple(x.shape)} and {tuple(weight.shape)}")
    batch, dim, length = x.shape
    if bias is not None and bias.shape != (dim,):
        raise ValueError(f"bias must be (dim,) = ({dim},), got {tuple(bias.shape)}")
    if initial_state is not None and initial_state.shape != (batch, dim, weight.shape[1] - 1):
        expected = (batch, dim, weight.shape[1] - 1)
        raise ValueError(f"initial_state must be (batch, dim, K-1) = {expected}, got {tuple(initial_state.shape)}")
    if resets is not None and resets.shape != (batch, length):
        raise ValueError(f"resets must be (batch, L) = ({batch}, {length}), got {tuple(resets.shape)}")


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


def causal_conv1d_reference(x, weight, bias=None, initial_state=None, resets=None, return_final_state=False):
    """The definition, one step at a time (a reset zeroes the carried inputs before its step):
    x (batch, dim, L), weight (dim, K) -> y (batch, dim, L) [, state (batch, dim, K-1)]."""
    _check(x, weight, bias, initial_state, resets)
    batch, dim, length = x.shape
    state = x.new_zeros(batch, dim, weight.shape[1] - 1) if initial_state is None else initial_state.to(x.dtype)
    ys = []
    for t in range(length):
        if resets is not None:
            state = state * (~resets[:, t]).to(x.dtype)[:, None, None]
        y_t, state = causal_conv1d_step(x[..., t], state, weight, bias)
        ys.append(y_t)
    y = torch.stack(ys, -1) if ys else torch.zeros_like(x)
    return (y, state) if return_final_state else y


def causal_conv1d(x, weight, bias=None, initial_state=None, resets=None, return_final_state=False, backend: str = "auto"):
    """Causal depthwise conv: x (batch, dim, L), weight (dim, K), bias (dim,), initial_state (batch, dim, K-1),
    resets (batch, L) bool -> y (batch, dim, L) [, final state (batch, dim, K-1)]."""
    _check(x, weight, bias, initial_state, resets)
    if backend == "reference":
        return causal_conv1d_reference(x, weight, bias, initial_state, resets, return_final_state)
    if backend not in ("auto", "torch"):
        raise ValueError(f"unknown backend {backend!r} for causal_conv1d; choose 'auto', 'torch' or 'reference'")
    length, k = x.shape[-1], weight.shape[1]
    if backend == "auto" and initial_state is None and resets is None and x.is_cuda and has_causal_conv1d():
        _log_choice("causal_conv1d", "causal_conv1d")
        from causal_conv1d import causal_conv1d_fn

        y = causal_conv1d_fn(x, weight, bias)
        return (y, _final_state(F.pad(x, (k - 1, 0)), None, k)) if return_final_state else y
    _log_choice("causal_conv1d", "torch")
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
    if channels_last:
        y, xp = y.transpose(1, 2), xp.transpose(1, 2)
    return (y, _final_state(xp, resets, k)) if return_final_state else y


def causal_conv1d_step(x_t, state, weight, bias=None):
    """One step: x_t (batch, dim), state (batch, dim, K-1) -> (y_t (batch, dim), next state)."""
    window = torch.cat([state.to(x_t.dtype), x_t.unsqueeze(-1)], dim=-1)
    y = (window * weight).sum(-1)
    if bias is not None:
        y = y + bias
    return y, window[..., 1:]
