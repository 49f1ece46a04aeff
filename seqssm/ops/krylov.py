"""Krylov sequences A^j v by repeated squaring (the LSSL kernel, Gu et al. 2021)."""

from __future__ import annotations

import torch

from seqssm.ops.checks import check_floating, check_length


def squarings(A: torch.Tensor, L: int) -> list[torch.Tensor]:
    """A^(2^k) for every 2^k < L: A (..., N, N) -> the powers `krylov` multiplies by, to share between calls."""
    powers = [A]
    while 2 ** len(powers) < L:
        powers.append(powers[-1] @ powers[-1])
    return powers


def apply_power(powers: list[torch.Tensor], p: int, v: torch.Tensor) -> torch.Tensor:
    """A^p v from squarings(A, L) with p < 2^len(powers): v (..., N) broadcast against A (..., N, N)."""
    if p >= 2 ** len(powers):
        raise ValueError(f"apply_power: A^{p} needs more than the {len(powers)} squarings given")
    for k, power in enumerate(powers):
        if p >> k & 1:
            v = (power @ v.unsqueeze(-1)).squeeze(-1)
    return v


def krylov(A: torch.Tensor, v: torch.Tensor, L: int, powers: list[torch.Tensor] | None = None) -> torch.Tensor:
    """Rows A^j v for j < L: A (..., N, N), v (..., N) -> (..., L, N), by repeated squaring (log2 L matmuls);
    `powers`: squarings(A, L), when the caller has them."""
    check_floating("krylov", allow_complex=True, A=A, v=v)
    L = check_length("krylov", L)
    K = v.unsqueeze(-2)
    for power in powers if powers is not None else squarings(A, L):
        if K.shape[-2] >= L:
            break
        K = torch.cat([K, K @ power.mT], dim=-2)  # rows A^(m + j) v = A^m (A^j v), m = current length
    return K[..., :L, :]
