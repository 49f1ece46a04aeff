"""Krylov sequences A^j v by repeated squaring (the LSSL kernel, Gu et al. 2021)."""

from __future__ import annotations

import torch

from seqssm.ops.checks import check_floating, check_length


def krylov(A: torch.Tensor, v: torch.Tensor, L: int) -> torch.Tensor:
    """Rows A^j v for j < L: A (..., N, N), v (..., N) -> (..., L, N), by repeated squaring (log2 L matmuls)."""
    check_floating("krylov", allow_complex=True, A=A, v=v)
    L = check_length("krylov", L)
    K, power = v.unsqueeze(-2), A
    while K.shape[-2] < L:
        K = torch.cat([K, K @ power.mT], dim=-2)  # rows A^(m + j) v = A^m (A^j v), m = current length
        if K.shape[-2] < L:
            power = power @ power
    return K[..., :L, :]
