"""The layer contract every causal primitive, block and stack in seqssm speaks.

    y = layer(x)                                  # (B, L, D) -> (B, L, D), zero initial state
    y, state = layer.scan(x, state, resets=None)  # continue from `state`; resets (B, L) bool
    y_t, state = layer.step(x_t, state)           # x_t (B, D): one recurrent step
    state = layer.initial_state(batch_size, device=..., dtype=...)

`resets[b, t] = True` zeroes the state of sequence b before step t is applied.
A state is a tensor or a (nested) tuple of tensors; its leading dimension is the batch.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable

import torch
from torch import nn

State = Any  # a tensor or a nested tuple / list of tensors

_frozen = threading.local()


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.scan(x, None)
        return y

    def scan(self, x: torch.Tensor, state: State = None, resets: torch.Tensor | None = None):
        """x (B, L, D), state from `initial_state` or a previous call (None: zeros) -> (y, final state)."""
        raise NotImplementedError

    def step(self, x_t: torch.Tensor, state: State):
        """x_t (B, D), state -> (y_t (B, D), next state)."""
        raise NotImplementedError

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        """The zero state for `batch_size` sequences."""
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


def check_resets(resets: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """Validate a (B, L) bool resets mask; returns it as bool or None."""
    if resets is None:
        return None
    if resets.shape != (batch, length):
        raise ValueError(f"resets must have shape (batch, length) = ({batch}, {length}), got {tuple(resets.shape)}")
    return resets.to(torch.bool)


def check_mask(mask: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """Validate a (B, L) bool mask, True = valid step; returns it as bool or None."""
    if mask is None:
        return None
    if mask.shape != (batch, length):
        raise ValueError(f"mask must have shape (batch, length) = ({batch}, {length}), got {tuple(mask.shape)}")
    return mask.to(torch.bool)


def mask_recurrence(mask: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor, resets: torch.Tensor | None = None):
    """Skip masked steps of h_t = a_t h_{t-1} + b_t: -> (a, b, resets), a_t = 1, b_t = 0, no reset where mask is False.

    mask (B, L) bool, True = valid; a broadcastable to b (B, L, ...). A skipped step passes the state
    through unchanged, which is the masked associative operator of seed 002 section 4.3 written on
    the elements instead of the operator: on a right-padded batch every running state, the final one
    included, is the state after the sequence's last valid step. Resets on skipped steps are dropped
    so that padding can never clear a state. mask None returns the inputs as they are.
    """
    if mask is None:
        return a, b, resets
    m = mask.to(b.device).view(*mask.shape, *([1] * (b.ndim - 2)))
    a = torch.where(m, a, torch.ones((), dtype=a.dtype, device=a.device))
    b = torch.where(m, b, torch.zeros((), dtype=b.dtype, device=b.device))
    if resets is not None:
        resets = resets & mask.to(resets.device)
    return a, b, resets


def mask_outputs(mask: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
    """Zero the outputs y (B, L, ...) of masked steps (mask (B, L) False), so padding never leaks into losses."""
    if mask is None:
        return y
    return y.masked_fill(~mask.to(y.device).view(*mask.shape, *([1] * (y.ndim - 2))), 0)
