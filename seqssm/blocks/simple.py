"""The Simple block of the S4 / S4D papers (thesis 12.1, fig. 9)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.blocks.common import FeatureDropout, make_norm, make_ssp
from seqssm.blocks.ssp import RotarySSP
from seqssm.layers.base import SequenceLayer


class SimpleBlock(SequenceLayer):
    """Post-norm residual block: x (B, L, d_model) -> norm(x + GLU(dropout(GELU(SSP(x))))), same shape.

    The GLU is a linear map to 2 d_model halves (a, g) -> a * sigmoid(g). LayerNorm unless rms_norm.
    State: the SSP's state (with `rope`: (SSP state, positions)).
    """

    causal = True

    def __init__(
        self,
        d_model: int,
        ssp: str = "s4d",
        d_state: int = 64,
        dropout: float = 0.0,
        rope: dict | None = None,
        rms_norm: bool = False,
        norm_eps: float = 1e-5,
        ssp_kwargs: dict | None = None,
    ):
        super().__init__()
        self.d_model = d_model
        layer = make_ssp(ssp, d_model, d_state, **(ssp_kwargs or {}))
        self.ssp = layer if rope is None else RotarySSP(layer, **rope)
        self.dropout = FeatureDropout(dropout)
        self.glu = nn.Linear(d_model, 2 * d_model)
        self.norm = make_norm(d_model, rms_norm, norm_eps)

    def _finish(self, x, y):
        return self.norm(x + F.glu(self.glu(self.dropout(F.gelu(y))), dim=-1))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d_model) -> (B, L, d_model); `lengths` is accepted for a uniform block interface (causal: unused)."""
        return self._finish(x, self.ssp(x))

    def scan(self, x, state=None, resets=None):
        y, state = self.ssp.scan(x, state, resets)
        return self._finish(x, y), state

    def step(self, x_t, state):
        y, state = self.ssp.step(x_t, state)
        return self._finish(x_t, y), state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return self.ssp.initial_state(batch_size, device=device, dtype=dtype)
