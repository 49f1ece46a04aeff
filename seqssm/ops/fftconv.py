"""Causal long convolution by FFT (Ulbaek 2024 thesis, 6.5.1), in the layers' (batch, L, channels) layout."""

from __future__ import annotations

import torch

from seqssm.errors import InputShapeError
from seqssm.ops.checks import check_floating


def fft_conv(u: torch.Tensor, k: torch.Tensor, D: torch.Tensor | None = None) -> torch.Tensor:
    """Causal depthwise convolution: u (B, L, H), k (H, Lk) with Lk <= L, D (H) or None -> y (B, L, H).

    y[:, t, h] = Σ_{j <= t} k[h, j] u[:, t - j, h] + D[h] u[:, t, h]. Both signals are zero-padded
    to L + Lk so the circular FFT product holds no wrapped-around terms. Runs in the promoted
    real dtype of u and k, at least float32 (the FFT of half types is not supported on CPU), and
    returns y in that dtype. An empty u (B = 0 or L = 0) gives an empty y.
    """
    check_floating("fft_conv", u=u, k=k, D=D)
    if u.ndim != 3 or k.ndim != 2 or k.shape[0] != u.shape[2]:
        raise InputShapeError(f"fft_conv: need u (B, L, H) and k (H, Lk); got {tuple(u.shape)} and {tuple(k.shape)}")
    if D is not None and D.shape != (u.shape[2],):
        raise InputShapeError(f"fft_conv: D must be (H,) = ({u.shape[2]},), got {tuple(D.shape)}")
    L, Lk = u.shape[1], k.shape[-1]
    if Lk > L:
        raise InputShapeError(f"fft_conv: kernel length {Lk} exceeds the sequence length {L}")
    dtype = torch.promote_types(torch.promote_types(u.dtype, k.dtype), torch.float32)
    if u.numel() == 0:
        return u.new_zeros(u.shape, dtype=dtype)
    n = L + Lk
    u_f = torch.fft.rfft(u.to(dtype), n=n, dim=1)
    k_f = torch.fft.rfft(k.to(dtype), n=n, dim=-1).transpose(0, 1)  # (F, H)
    y = torch.fft.irfft(u_f * k_f, n=n, dim=1)[:, :L]
    if D is not None:
        y = y + u.to(dtype) * D.to(dtype)
    return y
