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

    Causal for non-finite inputs too: an inf or NaN at u[b, t, h] makes y[b, t:, h] NaN and leaves every earlier
    output exact, as the recurrence does (the FFT alone would spread it to every position of the sequence).
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
    u = u.to(dtype)
    # On the CPU one sum tells whether u may hold a non-finite value (a finite sum that overflows only costs the
    # slower path). Compiled graphs and accelerators take that path always: branching on the sum would break the
    # graph, or wait for the device once per call, while the masking costs only elementwise passes there.
    if torch.compiler.is_compiling() or u.device.type != "cpu" or not torch.isfinite(u.sum()):
        return _causal_in_non_finite(u, k.to(dtype), None if D is None else D.to(dtype))
    return _fft_conv(u, k.to(dtype), D if D is None else D.to(dtype))


def _fft_conv(u: torch.Tensor, k: torch.Tensor, D: torch.Tensor | None) -> torch.Tensor:
    """`fft_conv` on checked inputs of one dtype."""
    L, n = u.shape[1], u.shape[1] + k.shape[-1]
    # Along the last axis of (B, H, L): the zero-padding writes u time-contiguous, so each transform is a batch of
    # contiguous rows. Along dim 1 of (B, L, H), cuFFT's batch (B, H) has no single stride, so torch copies the
    # padded signal once more first, and the CPU's transforms of strided rows were slower too.
    u_f = torch.fft.rfft(u.transpose(1, 2), n=n)
    y = torch.fft.irfft(u_f * torch.fft.rfft(k, n=n), n=n)[..., :L].transpose(1, 2)
    # y is back in (B, L, H) memory, as u is: the layers after the conv (activation, output linear, norm) and
    # their backward passes then read one layout; with y's (B, H, L) memory their elementwise ops read one operand
    # with a stride of L (GELU's backward took 20x its forward's time on the CPU).
    return y.contiguous() if D is None else u * D + y


def _causal_in_non_finite(u: torch.Tensor, k: torch.Tensor, D: torch.Tensor | None) -> torch.Tensor:
    """`_fft_conv` of u with its non-finite entries left out, NaN from each of them on (per batch and channel)."""
    bad = ~torch.isfinite(u)
    y = _fft_conv(u.masked_fill(bad, 0.0), k, D)
    # Each row's first non-finite step from two reductions over time (argmax takes the first maximum), not from a
    # cumulative sum: that scan along dim 1 took 0.41 ms a call on an H100 at 64 x 1024 x 256 (S4D's whole layer
    # step took 6 ms).
    L = u.shape[1]
    first = torch.where(bad.any(1), bad.to(torch.uint8).argmax(1), L)
    return y.masked_fill(torch.arange(L, device=u.device)[:, None] >= first[:, None, :], float("nan"))
