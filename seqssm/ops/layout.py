"""Memory layouts of (batch, ..., L) sequence tensors, shared by the ops that keep their input's layout."""

from __future__ import annotations

import torch


def is_channels_last(x: torch.Tensor) -> bool:
    """Is x (b, ..., L) a view of channels-last memory: channels contiguous, time strided (a transposed
    (b, L, channels) tensor, as S6 and the Mamba block pass their activations)?"""
    return x.shape[-1] > 1 and x.stride(-1) != 1 and x.stride(-2) == 1
