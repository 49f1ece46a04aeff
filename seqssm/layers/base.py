"""The layer contract every causal primitive, block and stack in seqssm speaks.

    y = layer(x)                                  # (B, L, D) -> (B, L, D), zero initial state
    y, state = layer.scan(x, state, resets=None)  # continue from `state`; resets (B, L) bool
    y_t, state = layer.step(x_t, state)           # x_t (B, D): one recurrent step
    state = layer.initial_state(batch_size, device=..., dtype=...)

`resets[b, t] = True` zeroes the state of sequence b before step t is applied.
A state is a tensor or a (nested) tuple of tensors; its leading dimension is the batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

State = Any  # a tensor or a nested tuple / list of tensors


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
        self.scan()

    def initial_state(self, *args, **kwargs):
        self.scan()


def check_resets(resets: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """Validate a (B, L) bool resets mask; returns it as bool or None."""
    if resets is None:
        return None
    if resets.shape != (batch, length):
        raise ValueError(f"resets must have shape (batch, length) = ({batch}, {length}), got {tuple(resets.shape)}")
    return resets.to(torch.bool)
