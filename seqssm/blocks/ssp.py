"""An SSP with rotary positional embedding on its inputs (Ulbaek 2024 thesis, 14.3), speaking the layer contract."""

from __future__ import annotations

import torch
from torch import nn

from seqssm.layers.base import SequenceLayer
from seqssm.layers.rope import RoPE, rope_positions
from seqssm.layers.s6 import S6

ROPE_TARGETS = ("x", "B", "C", "delta")


class RotarySSP(SequenceLayer):
    """RoPE then an SSP: x (B, L, D) -> (B, L, D); state (SSP state, next position (B,) long).

    `targets` says which SSP inputs see RoPE(x) rather than x: for S6 any non-empty subset of
    ("x", "B", "C", "delta") (Ulbaek 2024 thesis, 14.3.2: the sequence itself, or only the projections that
    make B, C or Δ); for S4 / S4D only ("x",). Default: all of them, i.e. RoPE right before the SSP.
    Positions restart from 0 at a reset, so a reset hides the token count before it too.
    """

    def __init__(
        self,
        layer: nn.Module,
        base: float = 10000.0,
        trainable: bool = False,
        normalize_len: int | None = None,
        targets=None,
    ):
        super().__init__()
        selective = isinstance(layer, S6)
        allowed = ROPE_TARGETS if selective else ("x",)
        targets = tuple(allowed if targets is None else targets)
        if not targets or any(t not in allowed for t in targets):
            raise ValueError(f"RoPE targets for {type(layer).__name__} must be a non-empty subset of {allowed}, got {targets}")
        self.layer, self.targets, self.d_model = layer, targets, layer.d_model
        self.rope = RoPE(layer.d_model, base=base, trainable=trainable, normalize_len=normalize_len)
        # Only a partial S6 subset needs the scan rebuilt here; otherwise the layer runs on RoPE(x).
        self._split = selective and set(targets) != set(ROPE_TARGETS)

    def _s6_inputs(self, x: torch.Tensor, xr: torch.Tensor):
        """u, Δ (before bias), B, C for the S6 layer, each from x or RoPE(x) as `targets` says."""
        plain = self.layer.project(x) if {"delta", "B", "C"} - set(self.targets) else None
        rotated = self.layer.project(xr) if {"delta", "B", "C"} & set(self.targets) else None
        delta, B, C = ((rotated if name in self.targets else plain)[i] for i, name in enumerate(("delta", "B", "C")))
        return (xr if "x" in self.targets else x), delta, B, C

    def _forward(self, x: torch.Tensor, lengths=None) -> torch.Tensor:
        if self._split:
            return self._scan(x, None, None, None)[0]
        return self.layer(self.rope(x))  # the SSP's own fast zero-state path (e.g. S4D's FFT)

    def initial_state(self, batch_size: int, device=None, dtype=None):
        """(SSP zero state, zero positions (batch_size,) long)."""
        device = device or self.rope.theta.device
        inner = self.layer.initial_state(batch_size, device=device, dtype=dtype)
        return inner, torch.zeros(batch_size, dtype=torch.long, device=device)

    def _scan(self, x, state, resets, mask):
        """x (B, L, D), state or None, resets / mask (B, L) -> (y (B, L, D), (SSP state, next position)).

        Positions count valid steps only: a masked step neither moves the position nor sees RoPE's effect.
        """
        batch, length, _ = x.shape
        inner, start = (None, torch.zeros(batch, dtype=torch.long, device=x.device)) if state is None else state
        pos = rope_positions(start, length, resets, mask)
        xr = self.rope(x, pos)
        if not self._split:
            y, inner = self.layer.scan(xr, inner, resets, mask)
        else:
            u, delta, B, C = (t.transpose(1, 2) for t in self._s6_inputs(x, xr))
            y, inner = self.layer.scan_projected(u, delta, B, C, inner, resets, mask)
            y = y.transpose(1, 2)
        return y, (inner, pos[:, -1] + (1 if mask is None else mask[:, -1].long()))

    def _step(self, x_t, state):
        inner, pos = state
        xr = self.rope(x_t, pos)
        if not self._split:
            y, inner = self.layer.step(xr, inner)
        else:
            y, inner = self.layer.step_projected(*self._s6_inputs(x_t, xr), inner)
        return y, (inner, pos + 1)
