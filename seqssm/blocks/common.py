"""Pieces shared by the blocks: the SSP factory, norms, feature-wise dropout, per-sequence flips."""

from __future__ import annotations

import torch
from torch import nn

from seqssm.layers.base import SequenceLayer
from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s6 import S6

SSPS = ("s4", "s4d", "s6")


def make_ssp(kind: str, d_model: int, d_state: int, dt_rank: int | None = None, **kwargs) -> nn.Module:
    """A sequence primitive over d_model channels: "s4" (DPLR), "s4d" (diagonal) or "s6" (selective)."""
    if kind == "s6":
        return S6(d_model, d_state, dt_rank=dt_rank if dt_rank is not None else "auto", **kwargs)
    if kind == "s4d":
        return S4D(d_model, d_state, **kwargs)
    if kind == "s4":
        return S4(d_model, d_state, **kwargs)
    raise ValueError(f"unknown SSP {kind!r}; choose one of {SSPS}")


def make_norm(d_model: int, rms: bool, eps: float = 1e-5) -> nn.Module:
    """RMSNorm (rms=True) or LayerNorm over the last dimension."""
    return nn.RMSNorm(d_model, eps=eps) if rms else nn.LayerNorm(d_model, eps=eps)


class FeatureDropout(nn.Module):
    """Dropout of whole features: x (B, L, D), the same features zeroed at every position (thesis 12.1.3)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty(x.shape[0], *([1] * (x.ndim - 2)), x.shape[-1], device=x.device, dtype=x.dtype)
        return x * keep.bernoulli_(1.0 - self.p) / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class WrapperBlock(SequenceLayer):
    """A causal block around one inner sequence layer: y = _finish(x, inner(x)) in forward, scan and step
    alike, x (B, L, d) -> (B, L, d); the state is the inner layer's. Subclasses give `inner` and `_finish`."""

    causal = True
    inner: nn.Module

    def _finish(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d) -> (B, L, d); `lengths` is accepted for a uniform block interface (causal: unused)."""
        return self._finish(x, self.inner(x))

    def scan(self, x, state=None, resets=None):
        y, state = self.inner.scan(x, state, resets)
        return self._finish(x, y), state

    def step(self, x_t, state):
        y, state = self.inner.step(x_t, state)
        return self._finish(x_t, y), state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return self.inner.initial_state(batch_size, device=device, dtype=dtype)


def flip_within_lengths(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """Reverse each sequence of x (B, L, D) within its own length (B,); padding positions stay put.

    Its own inverse. With lengths None the whole tensor is flipped.
    """
    if lengths is None:
        return x.flip(1)
    t = torch.arange(x.shape[1], device=x.device)
    lengths = lengths.to(x.device)
    index = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))
