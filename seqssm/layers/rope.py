"""Rotary positional embedding (RoPE) on feature pairs, in the efficient form of Ulbaek 2024 thesis, eq. 83.

Token k's features (x_1, x_2), (x_3, x_4), ... are rotated by the angles k θ_1, k θ_2, ... with
θ_i = base^(-2(i-1)/d):  RoPE(x_k) = x_k ⊗ cos(k θ) + rot(x_k) ⊗ sin(k θ),  rot(x) = (-x_2, x_1, -x_4, x_3, ...),
each angle repeated for the two features of its pair. Options (Ulbaek 2024 thesis, 14.3.2): the base (10 or 10000),
a trainable θ, and a normalisation that scales the angles so that the rotation between the first and
the last token of a `normalize_len`-token sequence is exactly π for the fastest-turning pair.
The normalisation length is fixed at construction, not read from the input, so RoPE stays causal
(usable in `step`) and a sequence's result does not depend on the padding after it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from seqssm.layers.base import check_sizes
from seqssm.ops.rotary import rotary_table


def rope_positions(start: torch.Tensor, length: int, resets: torch.Tensor | None = None,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Token positions (B, L) long: start (B,) + the number of valid steps before t, restarting from 0 at every
    reset (resets (B, L) bool). Masked steps (mask (B, L) False) do not count, so padding moves no position."""
    t = torch.arange(length, device=start.device)
    valid = None if mask is None else mask.long()
    before = t.expand(start.shape[0], -1) if valid is None else valid.cumsum(1) - valid
    pos = start[:, None] + before
    if resets is not None:
        last = torch.where(resets, t, torch.full_like(t, -1)).cummax(dim=1).values
        pos = torch.where(last >= 0, before - before.gather(1, last.clamp(min=0)), pos)
    return pos


class RoPE(nn.Module):
    """Rotate feature pairs of x (..., L, dim) by position-proportional angles: x -> RoPE(x), same shape."""

    def __init__(self, dim: int, base: float = 10000.0, trainable: bool = False, normalize_len: int | None = None):
        super().__init__()
        check_sizes("RoPE", minimum=2, dim=dim)
        if dim % 2:
            raise ValueError(f"RoPE rotates feature pairs; dim must be even, got {dim}")
        if normalize_len is not None and normalize_len < 2:
            raise ValueError(f"normalize_len must be at least 2 (a first and a last token), got {normalize_len}")
        self.dim, self.base, self.normalize_len = dim, float(base), normalize_len
        theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        if trainable:
            self.theta = nn.Parameter(theta.float())
        else:
            self.register_buffer("theta", theta.float(), persistent=False)
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin (positions, dim) for a fixed θ

    @property
    def trainable(self) -> bool:
        return isinstance(self.theta, nn.Parameter)

    def frequencies(self, dtype=torch.float64) -> torch.Tensor:
        """The angle per position step of each pair (dim/2,), normalisation included."""
        theta = self.theta.to(dtype)
        if self.normalize_len is None:
            return theta
        return theta * (math.pi / ((self.normalize_len - 1) * theta.abs().max()))

    def angles(self, positions: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
        """positions (...) long -> angles (..., dim/2)."""
        return positions.to(dtype).unsqueeze(-1) * self.frequencies(dtype)

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype, step: bool = False):
        """cos and sin of the angles, each (..., dim) with every angle repeated for its pair. step: the positions of
        one step, (B,)."""
        if self.trainable:
            ang = self.angles(positions, torch.promote_types(dtype, torch.float32)).repeat_interleave(2, dim=-1)
            return ang.cos().to(dtype), ang.sin().to(dtype)
        if step or torch.compiler.is_compiling():
            # The table's size follows the largest position, read on the CPU: a value a graph cannot branch on, and
            # on CUDA a wait for the device that keeps a decoding step out of a CUDA graph. Compute the rows.
            return self._fixed_cos_sin(positions, dtype)
        needed = int(positions.max()) + 1 if positions.numel() else 1
        cache = self._cache
        if cache is None or cache[0].shape[0] < needed or cache[0].device != positions.device or cache[0].dtype != dtype:
            size = max(needed, 2 * cache[0].shape[0] if cache is not None else 0)
            cache = self._cache = self._fixed_cos_sin(torch.arange(size, device=positions.device), dtype)
        return cache[0][positions], cache[1][positions]

    def _fixed_cos_sin(self, positions: torch.Tensor, dtype: torch.dtype):
        """`_cos_sin` for a fixed θ, from angles in float64 (`seqssm.ops.rotary.rotary_table`)."""
        cos, sin = rotary_table(positions, self.frequencies(torch.float64))
        return cos.to(dtype), sin.to(dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, dim) [or (B, dim) with positions (B,)], positions (B, L) or (L,) long (default 0..L-1) -> rotated x."""
        if positions is None:
            positions = torch.arange(x.shape[-2], device=x.device)
        cos, sin = self._cos_sin(positions, x.dtype, step=x.ndim == 2)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack([-x2, x1], dim=-1).flatten(-2)
        return x * cos + rotated * sin

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base:g}, trainable={self.trainable}, normalize_len={self.normalize_len}"
