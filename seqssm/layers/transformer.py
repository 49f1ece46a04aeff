"""A causal Transformer over a sliding window, behind the layer contract: the vTransformer baseline of
"Uncertainty Representations in State-Space Layers for Deep RL under Partial Observability" (section 5.1).

torch's encoder layers with causal attention over the last `context` steps and sinusoidal positions
(Vaswani et al. 2017). The state is the window itself: the last context - 1 inputs, so `scan` and
`step` continue a sequence. A reset at t hides every input before t and restarts the positions at 0;
masked steps are compacted away (`seqssm.ops.masked`), so the window holds only valid inputs.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from seqssm.errors import ConfigError
from seqssm.layers.base import SequenceLayer, check_sizes, mask_outputs, promoted_call
from seqssm.ops.masked import gather_steps, scatter_steps, valid_first


def sinusoidal(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """The sinusoidal position code of Vaswani et al.: positions (...) long -> (..., d_model)."""
    i = torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32)
    angles = positions.unsqueeze(-1).float() * torch.exp(-math.log(10000.0) * i / d_model)
    code = torch.zeros(*positions.shape, d_model, device=positions.device)
    code[..., 0::2] = torch.sin(angles)
    code[..., 1::2] = torch.cos(angles[..., : d_model // 2])
    return code


class CausalTransformer(SequenceLayer):
    """Causal windowed Transformer: x (B, L, d_model) -> y (B, L, d_model); state (past inputs (B, context - 1,
    d_model) right-aligned, their count (B,), steps since the start or the last reset (B,))."""

    def __init__(self, d_model: int, n_layers: int = 1, n_heads: int = 1, d_ff: int = 128, context: int = 64):
        super().__init__()
        check_sizes("CausalTransformer", d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff,
                    context=context)
        if d_model % n_heads:
            raise ConfigError(f"CausalTransformer: d_model = {d_model} must split into n_heads = {n_heads} equal heads")
        self.d_model, self.n_heads, self.context = d_model, n_heads, context
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True) for _ in range(n_layers)
        )

    def _scan(self, x, state, resets, mask):
        """x (B, L, d_model), state or None, resets / mask (B, L) bool -> (y (B, L, d_model), state)."""
        if state is None:
            state = self.initial_state(x.shape[0], x.device, x.dtype)
        if mask is None:
            return self._scan_padded(x, state, resets, None)
        order, counts = valid_first(mask)
        valid = torch.arange(x.shape[1], device=x.device) < counts[:, None]
        resets = None if resets is None else gather_steps(resets, order)
        y, state = self._scan_padded(gather_steps(x, order), state, resets, valid)
        return scatter_steps(y, order), state

    def _scan_padded(self, x, state, resets, valid_x):
        """`scan` on right-padded steps: valid_x (B, L) True on each row's first steps, or None (all valid).
        Runs in the promotion of x's and the weights' dtypes; y comes back in x's dtype."""
        batch, length, _ = x.shape
        past, count, steps = state
        n_past = self.context - 1
        arange_past = torch.arange(n_past, device=x.device)
        dtype = torch.promote_types(x.dtype, self.layers[0].linear1.weight.dtype)
        seq = torch.cat([past.to(dtype), x.to(dtype)], dim=1)
        if valid_x is None:
            valid_x = torch.ones(batch, length, dtype=torch.bool, device=x.device)
        valid = torch.cat([arange_past >= n_past - count[:, None], valid_x], dim=1)
        # Valid tokens are contiguous (left-padded past, right-padded input), so index gaps are time gaps.
        step_of = (steps - count)[:, None] + valid.long().cumsum(1) - 1
        idx = torch.arange(seq.shape[1], device=x.device)
        gap = idx[:, None] - idx[None, :]  # query - key
        blocked = (gap < 0) | (gap >= self.context) | ~valid[:, None, :]
        if resets is None:
            segment, positions = None, step_of
        else:  # segment k: the tokens after the k-th reset; attention and positions stay within a segment
            reset = torch.cat([torch.zeros_like(valid[:, :n_past]), resets], dim=1)
            segment = reset.long().cumsum(1)
            start = torch.where(reset, step_of, torch.zeros_like(step_of)).cummax(1).values
            positions = torch.where(segment > 0, step_of - start, step_of)
            blocked = blocked | (segment[:, :, None] != segment[:, None, :])
        blocked = blocked & (gap != 0)  # every query sees itself, so padded queries have a finite softmax
        attn_mask = blocked.repeat_interleave(self.n_heads, dim=0)
        # A blocked key still enters the attention product with weight 0, and 0 x inf is NaN: a non-finite input
        # would reach every query, the earlier ones too. It is left out, and the queries that see it are NaN.
        finite = torch.isfinite(seq) if not torch.isfinite(seq.sum()) else None
        h = seq if finite is None else seq.masked_fill(~finite, 0.0)
        h = h + sinusoidal(positions.clamp(min=0), self.d_model).to(dtype)
        for layer in self.layers:
            h = promoted_call(layer, h, src_mask=attn_mask)
        if finite is not None:
            h = h.masked_fill((~blocked & ~finite.all(-1)[:, None, :]).any(-1, keepdim=True), float("nan"))
        n_new = valid_x.sum(1)
        if segment is None:
            new_count, new_steps = (count + n_new).clamp(max=n_past), steps + n_new
        else:
            in_last = (valid & (segment == segment[:, -1:])).sum(1)
            new_count = in_last.clamp(max=n_past)
            new_steps = torch.where(segment[:, -1] > 0, in_last, steps + n_new)
        keep = n_new[:, None] + arange_past  # the last n_past valid tokens
        new_past = seq.gather(1, keep.unsqueeze(-1).expand(-1, -1, self.d_model))
        new_past = new_past.masked_fill((arange_past < n_past - new_count[:, None]).unsqueeze(-1), 0.0)
        return mask_outputs(valid_x, h[:, n_past:].to(x.dtype)), (new_past, new_count, new_steps)

    def _step(self, x_t, state):
        """x_t (B, d_model), state -> (y_t (B, d_model), state): attends over the stored window."""
        y, state = self._scan(x_t.unsqueeze(1), state, None, None)
        return y[:, 0], state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        """An empty window: zeros (batch_size, context - 1, d_model), count 0 and step 0."""
        p = self.layers[0].linear1.weight
        device, dtype = device or p.device, dtype or p.dtype
        zeros = torch.zeros(batch_size, dtype=torch.long, device=device)
        return torch.zeros(batch_size, self.context - 1, self.d_model, device=device, dtype=dtype), zeros, zeros
