"""The Simple block of the S4 / S4D papers (Ulbaek 2024 thesis, 12.1, fig. 9)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from seqssm.blocks.common import FeatureDropout, WrapperBlock, checked_config, make_norm, make_ssp
from seqssm.blocks.config import SimpleBlockConfig


class SimpleBlock(WrapperBlock):
    """Post-norm residual block: x (B, L, d_model) -> norm(x + GLU(dropout(GELU(SSP(x))))), same shape.

    The GLU is a linear map to 2 d_model halves (a, g) -> a * sigmoid(g). LayerNorm unless config.rms_norm.
    State: the SSP's state (with RoPE: (SSP state, positions)).
    """

    def __init__(self, d_model: int, config: SimpleBlockConfig | None = None):
        super().__init__()
        config = checked_config("SimpleBlock", d_model, config, SimpleBlockConfig)
        self.ssp = make_ssp(config.ssp, d_model)
        self.dropout = FeatureDropout(config.dropout)
        self.glu = nn.Linear(d_model, 2 * d_model)
        self.norm = make_norm(d_model, config.rms_norm, config.norm_eps)

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
