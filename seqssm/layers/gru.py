"""The GRU baseline (van Gelooven 2025 thesis, 4.1.3; "Uncertainty Representations in State-Space Layers for
Deep RL under Partial Observability", appendix B): torch's own `nn.GRU` behind the layer contract.

A GRU's state update is nonlinear, so resets and masks cannot be folded into a scan. `scan` cuts
the sequence where any sequence of the batch resets or changes mask, and runs `nn.GRU` (cuDNN on
GPU) once per piece: one call without resets or mask, at most L calls in the worst case.
"""

from __future__ import annotations

import torch
from torch import nn

from seqssm.layers.base import SequenceLayer, check_sizes, mask_outputs, promoted_call, where_state


class GRU(SequenceLayer):
    """Single-layer GRU: x (B, L, d_model) -> y (B, L, d_model); state h (B, d_hidden).

    y = h when d_hidden == d_model (the default), else a linear read-out of h.
    """

    def __init__(self, d_model: int, d_hidden: int | None = None):
        super().__init__()
        check_sizes("GRU", d_model=d_model, d_hidden=d_hidden)
        self.d_model, self.d_hidden = d_model, d_hidden or d_model
        self.gru = nn.GRU(d_model, self.d_hidden, batch_first=True)
        self.out_proj = nn.Linear(self.d_hidden, d_model) if self.d_hidden != d_model else nn.Identity()

    def _scan(self, x: torch.Tensor, state, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """x (B, L, d_model), state (B, d_hidden) or None, resets / mask (B, L) -> (y (B, L, d_model), final state).

        Masked steps leave the state unchanged and output zeros. The GRU runs in the promotion of x's and
        its weights' dtypes (`promoted_call`), y comes back in x's dtype.
        """
        batch, length, _ = x.shape
        dtype = torch.promote_types(x.dtype, self.gru.weight_ih_l0.dtype)
        h = self.initial_state(batch, x.device, dtype) if state is None else state.to(dtype)
        # A piece starts wherever some sequence resets or its mask flips; inside a piece every
        # sequence either runs all steps or skips all of them, so one nn.GRU call serves it.
        change = torch.zeros(length, dtype=torch.bool, device=x.device)
        change[0] = True
        if resets is not None:
            change |= resets.any(0)
        if mask is not None:
            change[1:] |= (mask[:, 1:] != mask[:, :-1]).any(0)
        starts = torch.nonzero(change).flatten().tolist() + [length]
        outs = []
        for s, e in zip(starts[:-1], starts[1:]):
            if resets is not None:
                h = h.masked_fill(resets[:, s, None], 0)
            out, h_new = promoted_call(self.gru, x[:, s:e], h.unsqueeze(0).contiguous())
            h_new = h_new.squeeze(0)
            if mask is not None:
                h_new = where_state(mask[:, s], h_new, h)
            outs.append(out)
            h = h_new
        y = promoted_call(self.out_proj, torch.cat(outs, dim=1)).to(x.dtype)
        return mask_outputs(mask, y), h

    def _step(self, x_t: torch.Tensor, state: torch.Tensor):
        """x_t (B, d_model), state (B, d_hidden) -> (y_t (B, d_model), next state)."""
        out, h = promoted_call(self.gru, x_t.unsqueeze(1), state.unsqueeze(0).contiguous())
        return promoted_call(self.out_proj, out.squeeze(1)).to(x_t.dtype), h.squeeze(0)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, d_hidden) in the parameters' dtype unless `dtype` is given."""
        w = self.gru.weight_ih_l0
        return torch.zeros(batch_size, self.d_hidden, device=device or w.device, dtype=dtype or w.dtype)
