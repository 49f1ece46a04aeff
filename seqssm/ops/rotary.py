"""The angle table of rotary position embeddings (RoPE) as a custom op.

    torch.ops.seqssm.rotary_table(positions, frequencies) -> (cos, sin), each (..., 2 * pairs)

One op of its own so that torch.compile computes each (position, pair) once: as plain tensor ops, inductor inlines
cos and sin into every loop that reads them, once per batch row and again in the backward pass.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqssm.ops.custom import OpCaller


def angle_table(positions: Tensor, frequencies: Tensor) -> tuple[Tensor, Tensor]:
    """positions (...) integer, frequencies (pairs,) float64 -> cos and sin of positions x frequencies, each
    (..., 2 * pairs) float64 with every angle repeated for the two features of its pair. The angles are float64:
    k θ for k in the thousands must not lose its low bits before cos and sin."""
    angles = (positions.to(torch.float64).unsqueeze(-1) * frequencies).repeat_interleave(2, dim=-1)
    return angles.cos(), angles.sin()


rotary_table_op = torch.library.custom_op("seqssm::rotary_table", mutates_args=())(angle_table)


@rotary_table_op.register_fake
def _(positions, frequencies):
    shape = (*positions.shape, 2 * frequencies.shape[0])
    return positions.new_empty(shape, dtype=torch.float64), positions.new_empty(shape, dtype=torch.float64)


rotary_table = OpCaller(rotary_table_op, angle_table)
