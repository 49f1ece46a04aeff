"""Masked steps for ops that are not linear recurrences: compact each sequence's valid steps to the
front (stable order), run the op there, scatter the outputs back.

A mask (B, L) bool marks valid steps (True). A masked step must leave an op's state unchanged; for a
linear recurrence that is a = 1, b = 0 on that step, but a sliding window (the causal conv1d) or an
attention window has no such neutral element. Compacting works for any mask; on a right-padded
batch it is the identity permutation and the final state is read at each sequence's length.
"""

from __future__ import annotations

import torch

from seqssm.ops.conv1d import causal_conv1d


def valid_first(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """mask (B, L) bool -> (order (B, L) long, counts (B,) long): row b of x.gather(1, order) holds the
    valid steps of row b first, in their order, then the masked ones; counts = valid steps per row."""
    order = torch.sort((~mask).to(torch.uint8), dim=1, stable=True).indices
    return order, mask.sum(1)


def gather_steps(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x (B, L, ...) -> x with the steps of row b in `order[b]` (B, L)."""
    return x.gather(1, order.view(*order.shape, *([1] * (x.ndim - 2))).expand_as(x))


def scatter_steps(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The inverse of `gather_steps`: step t of row b of x goes back to position order[b, t]."""
    index = order.view(*order.shape, *([1] * (x.ndim - 2))).expand_as(x)
    return torch.empty_like(x).scatter_(1, index, x)


def masked_causal_conv1d(x, weight, bias=None, initial_state=None, resets=None, mask=None, silu=False):
    """`causal_conv1d` with masked steps: x (batch, dim, L), weight (dim, K), bias (dim,), initial_state
    (batch, dim, K-1), resets / mask (batch, L) bool -> (y (batch, dim, L), through SiLU with `silu`, final state
    (batch, dim, K-1)).

    Masked steps output zeros and are skipped: the window of a valid step holds the K-1 valid inputs
    before it, and the final state the last K-1 valid inputs (those before the last reset zeroed).
    Resets on masked steps are dropped. mask None is `causal_conv1d(..., return_final_state=True)`.
    """
    if mask is None:
        return causal_conv1d(x, weight, bias, initial_state, resets, return_final_state=True, silu=silu)
    batch, dim, length = x.shape
    k = weight.shape[1]
    order, counts = valid_first(mask)
    valid = torch.arange(length, device=x.device) < counts[:, None]  # the mask after compaction
    xc = gather_steps(x.transpose(1, 2), order).transpose(1, 2)  # (batch, dim, L), channels-last like x
    rc = None if resets is None else gather_steps(resets, order) & valid
    yc = causal_conv1d(xc, weight, bias, initial_state, rc, silu=silu)  # SiLU(0) = 0: masked steps stay zero
    y = scatter_steps(yc.transpose(1, 2) * valid.unsqueeze(-1), order).transpose(1, 2)
    start = x.new_zeros(batch, dim, k - 1) if initial_state is None else initial_state.to(x.dtype)
    padded = torch.cat([start, xc], dim=-1)  # index i holds compacted step i - (K - 1)
    window = counts[:, None] + torch.arange(k - 1, device=x.device)  # (batch, K-1): the last K-1 valid inputs
    state = padded.gather(-1, window.unsqueeze(1).expand(-1, dim, -1))
    if rc is not None:  # inputs before the last reset are hidden from every later step
        t = torch.arange(length, device=x.device)
        last_reset = torch.where(rc, t, torch.full_like(t, -k)).amax(1, keepdim=True)
        state = state * (window - (k - 1) >= last_reset).unsqueeze(1).to(state.dtype)
    return y, state
