"""The layer contract every causal primitive, block and stack in seqssm speaks, and the numerics they share.

    y = layer(x)                                   # (B, L, D) -> (B, L, D), zero initial state
    y, state = layer.scan(x, state, resets=None, mask=None)  # continue from `state`
    y_t, state = layer.step(x_t, state)            # x_t (B, D): one recurrent step
    state = layer.initial_state(batch_size, device=..., dtype=...)

`resets[b, t] = True` zeroes the state of sequence b before step t is applied. `mask[b, t] = False`
skips step t of sequence b: the state passes it unchanged, its output is zero and a reset on it is
dropped, so a right-padded batch gives every sequence the outputs and final state it has alone.
A state is a tensor or a (nested) tuple of tensors; its leading dimension is the batch.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable

import torch
from torch import nn

from seqssm.optim import SSM_LR_SCALE, tag_ssm

State = Any  # a tensor or a nested tuple / list of tensors

_frozen = threading.local()


def compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The real dtype SSM numerics run in: the promotion of `dtypes`, at least float32."""
    out = torch.float32
    for d in dtypes:
        out = torch.promote_types(out, d.to_real() if d.is_complex else d)
    return out


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    """complex128 for float64 (or complex128), else complex64."""
    return torch.complex128 if dtype in (torch.float64, torch.complex128) else torch.complex64


@contextlib.contextmanager
def full_precision(x: torch.Tensor, *like: torch.Tensor):
    """`with full_precision(x, param) as dtype:` autocast off on x's device; dtype = `compute_dtype` of x and `like`.

    The recurrences of SSM layers drift in bf16 / fp16 over long sequences, so scan and step run in at
    least float32 whatever the caller's autocast or module dtype.
    """
    with torch.autocast(device_type=x.device.type, enabled=False):
        yield compute_dtype(x.dtype, *(t.dtype for t in like))


def ssm_param(value: torch.Tensor, lr_scale: float = SSM_LR_SCALE) -> nn.Parameter:
    """An SSM parameter (A, B, C, Δ), tagged for `lr_scale` x the learning rate and no weight decay."""
    return tag_ssm(nn.Parameter(value.contiguous()), lr_scale)


@contextlib.contextmanager
def frozen_weights():
    """Inside this block the caller promises that no parameter changes (a rollout, generation): layers
    then build their discretised system once per dtype and reuse it in every `step` run without
    autograd, instead of rebuilding it (exponentials, dense inverses) at each step. The cache is
    dropped when the block ends. Nested blocks share the outermost one's cache."""
    if getattr(_frozen, "cache", None) is not None:
        yield
        return
    _frozen.cache = {}
    try:
        yield
    finally:
        _frozen.cache = None


def step_system(layer: nn.Module, build: Callable[[torch.dtype], Any], dtype: torch.dtype):
    """build(dtype): the layer's parameter-only system for `step`, cached inside `frozen_weights()` when
    autograd is off (with autograd on, every call rebuilds it so gradients reach the parameters)."""
    cache = getattr(_frozen, "cache", None)
    if cache is None or torch.is_grad_enabled():
        return build(dtype)
    key = (layer, dtype)
    if key not in cache:
        cache[key] = build(dtype)
    return cache[key]


class SequenceLayer(nn.Module):
    """Base class of causal sequence layers: x (B, L, D) -> y (B, L, D) with a recurrent state."""

    causal = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.scan(x, None)
        return y

    def scan(self, x: torch.Tensor, state: State = None, resets: torch.Tensor | None = None,
             mask: torch.Tensor | None = None):
        """x (B, L, D), state from `initial_state` or a previous call (None: zeros), resets / mask (B, L)
        bool -> (y (B, L, D), final state)."""
        raise NotImplementedError

    def step(self, x_t: torch.Tensor, state: State):
        """x_t (B, D), state -> (y_t (B, D), next state)."""
        raise NotImplementedError

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        """The zero state for `batch_size` sequences."""
        raise NotImplementedError

    # Channels before time, (B, D, L): the layout the Mamba block keeps between its in_proj and out_proj
    # (as mamba_ssm's does) and the one S6's kernels read. Layers that compute in it override these two;
    # the others see the (B, L, D) view of the same memory.

    def forward_channels_first(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D, L) -> y (B, D, L): `forward` with channels before time."""
        return self(x.transpose(1, 2)).transpose(1, 2)

    def scan_channels_first(self, x: torch.Tensor, state: State = None, resets: torch.Tensor | None = None,
                            mask: torch.Tensor | None = None):
        """x (B, D, L) -> (y (B, D, L), final state): `scan` with channels before time."""
        y, state = self.scan(x.transpose(1, 2), state, resets, mask)
        return y.transpose(1, 2), state


class ChannelsFirstLayer(SequenceLayer):
    """A layer that computes with channels before time: subclasses give `scan_channels_first` (and
    `forward_channels_first` where a zero-state path is faster); `forward` and `scan` are their (B, L, D) views."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_channels_first(x.transpose(1, 2)).transpose(1, 2)

    def forward_channels_first(self, x: torch.Tensor) -> torch.Tensor:
        return self.scan_channels_first(x)[0]

    def scan(self, x, state=None, resets=None, mask=None):
        y, state = self.scan_channels_first(x.transpose(1, 2), state, resets, mask)
        return y.transpose(1, 2), state

    def scan_channels_first(self, x, state=None, resets=None, mask=None):
        raise NotImplementedError


class NonCausalMixin:
    """For modules that see the whole sequence (bidirectional): only `__call__` is defined."""

    def scan(self, *args, **kwargs):
        raise NotImplementedError(
            f"{type(self).__name__} is bidirectional: its output at t depends on inputs after t, "
            "so it has no recurrent state to carry. Use a causal model for scan/step."
        )

    def step(self, *args, **kwargs):
        NonCausalMixin.scan(self)

    def initial_state(self, *args, **kwargs):
        NonCausalMixin.scan(self)


def _check_steps(name: str, flags: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    if flags is None:
        return None
    if flags.shape != (batch, length):
        raise ValueError(f"{name} must have shape (batch, length) = ({batch}, {length}), got {tuple(flags.shape)}")
    return flags.to(torch.bool)


def check_steps(x: torch.Tensor, resets: torch.Tensor | None, mask: torch.Tensor | None, time_dim: int = 1):
    """The preamble of every `scan`: resets and mask (B, L) checked against x (B, L, ...) (time at `time_dim`)
    -> (resets, mask) as bool or None, with resets on masked steps dropped (padding never clears a state)."""
    batch, length = x.shape[0], x.shape[time_dim]
    resets, mask = _check_steps("resets", resets, batch, length), _check_steps("mask", mask, batch, length)
    if resets is not None and mask is not None:
        resets = resets & mask
    return resets, mask


def _per_step(flags: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """flags (B, L) viewed to broadcast against like (B, L, ...)."""
    return flags.to(like.device).view(*flags.shape, *([1] * (like.ndim - 2)))


def mask_recurrence(mask: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor):
    """Skip masked steps of h_t = a_t h_{t-1} + b_t: -> (a, b) with a_t = 1, b_t = 0 where mask (B, L) is False.

    a broadcastable to b (B, L, ...). A skipped step passes the state through unchanged: the masked
    associative operator of "Uncertainty Representations in State-Space Layers for Deep RL under Partial
    Observability" (section 4.3), written on the elements instead of the operator. On a right-padded
    batch every running state, the final one included, is the state after the sequence's last valid
    step. mask None returns the inputs as they are.
    """
    if mask is None:
        return a, b
    m = _per_step(mask, b)
    a = torch.where(m, a, torch.ones((), dtype=a.dtype, device=a.device))
    b = torch.where(m, b, torch.zeros((), dtype=b.dtype, device=b.device))
    return a, b


def mask_outputs(mask: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
    """Zero the outputs y (B, L, ...) of masked steps (mask (B, L) False), so padding never leaks into losses."""
    if mask is None:
        return y
    return y.masked_fill(~_per_step(mask, y), 0)


def map_state(fn: Callable[..., Any], *states):
    """Apply fn leaf-wise to one or more states of the same structure (nested tuples / lists of tensors)."""
    first = states[0]
    if isinstance(first, (tuple, list)):
        return type(first)(map_state(fn, *parts) for parts in zip(*states))
    return fn(*states)


def where_state(keep: torch.Tensor, new: State, old: State) -> State:
    """Per sequence, `new` where keep (B,) bool is True, else `old`: a masked step leaves the state as it was."""
    def pick(n, o):
        return torch.where(keep.to(n.device).view(-1, *([1] * (n.ndim - 1))), n, o)

    return map_state(pick, new, old)
