"""minGRU (Feng et al. 2024; van Gelooven 2025 thesis, 2.1.7): a GRU whose gate and candidate see only the input.

    z_t = σ(W_z x_t),  h̃_t = W_h x_t,  h_t = (1 - z_t) h_{t-1} + z_t h̃_t

Without h_{t-1} inside the gate the recurrence is linear in h, so training runs it as one
`linear_scan` (a_t = 1 - z_t, b_t = z_t h̃_t) and inference steps it.
"""

from __future__ import annotations

import torch
from torch import nn

from seqssm.layers.base import SequenceLayer, check_sizes, compute_dtype, mask_outputs, mask_recurrence, promoted_call
from seqssm.ops.linear import linear_scan


class MinGRU(SequenceLayer):
    """minGRU: x (B, L, d_model) -> y (B, L, d_model); state h (B, d_hidden).

    y = h when d_hidden == d_model (the default), else a linear read-out of h.
    """

    def __init__(self, d_model: int, d_hidden: int | None = None, backend: str = "auto"):
        super().__init__()
        check_sizes("MinGRU", d_model=d_model, d_hidden=d_hidden)
        self.d_model, self.d_hidden, self.backend = d_model, d_hidden or d_model, backend
        self.in_proj = nn.Linear(d_model, 2 * self.d_hidden)  # gate logits and candidate in one matmul
        self.out_proj = nn.Linear(self.d_hidden, d_model) if self.d_hidden != d_model else nn.Identity()

    def _gates(self, x: torch.Tensor):
        """x (..., d_model) -> the decay 1 - z and the input z h̃, each (..., d_hidden)."""
        # The recurrence runs in at least float32 even under autocast: bf16 decays drift over long sequences.
        gates = promoted_call(self.in_proj, x).to(compute_dtype(x.dtype, self.in_proj.weight.dtype))
        k, h_tilde = gates.chunk(2, dim=-1)
        # σ(-k) rather than 1 - σ(k): exact when the gate saturates near 1.
        return torch.sigmoid(-k), torch.sigmoid(k) * h_tilde

    def _scan(self, x: torch.Tensor, state, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """x (B, L, d_model), state (B, d_hidden) or None, resets / mask (B, L) -> (y (B, L, d_model), final state)."""
        a, b = mask_recurrence(mask, *self._gates(x))
        h = linear_scan(a, b, initial_state=None if state is None else state.to(b.dtype), resets=resets,
                        backend=self.backend)
        return mask_outputs(mask, self._read_out(h, x.dtype)), h[:, -1]

    def _step(self, x_t: torch.Tensor, state: torch.Tensor):
        """x_t (B, d_model), state (B, d_hidden) -> (y_t (B, d_model), next state)."""
        a, b = self._gates(x_t)
        h = torch.addcmul(b, a, state.to(b.dtype))
        return self._read_out(h, x_t.dtype), h

    def _read_out(self, h: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The output y in the input's `dtype` from the states h (..., d_hidden)."""
        return promoted_call(self.out_proj, h.to(dtype)).to(dtype)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zeros (batch_size, d_hidden) in the compute dtype of `dtype` (default: the parameters')."""
        w = self.in_proj.weight
        return torch.zeros(batch_size, self.d_hidden, device=device or w.device, dtype=compute_dtype(dtype or w.dtype))
