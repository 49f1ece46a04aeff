"""The Simple block of the S4 / S4D papers (thesis 12.1, fig. 9)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from seqssm.blocks.common import FeatureDropout, WrapperBlock, make_norm, make_ssp
from seqssm.blocks.ssp import RotarySSP


class SimpleBlock(WrapperBlock):
    """Post-norm residual block: x (B, L, d_model) -> norm(x + GLU(dropout(GELU(SSP(x))))), same shape.

    The GLU is a linear map to 2 d_model halves (a, g) -> a * sigmoid(g). LayerNorm unless rms_norm.
    State: the SSP's state (with `rope`: (SSP state, positions)).
    """

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
        layer = make_ssp(ssp, d_model, d_state, **(ssp_kwargs or {}))
        self.ssp = layer if rope is None else RotarySSP(layer, **rope)
        self.dropout = FeatureDropout(dropout)
        self.glu = nn.Linear(d_model, 2 * d_model)
        self.norm = make_norm(d_model, rms_norm, norm_eps)

    @property
    def inner(self) -> nn.Module:
        return self.ssp

    def _finish(self, x, y):
        # The GLU and the norm read their inputs in their weights' dtype (as the Mamba block's norm does), so a
        # float64 or float16 x meets float32 weights without a dtype error; the result is in the norm's dtype.
        glu = F.glu(self.glu(self.dropout(F.gelu(y.to(self.glu.weight.dtype)))), dim=-1)
        residual = x + glu
        weight = getattr(self.norm, "weight", None)
        return self.norm(residual if weight is None else residual.to(weight.dtype))
