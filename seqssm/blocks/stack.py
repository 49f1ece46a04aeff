"""A stack of blocks with a final norm: the backbone of every SequenceModel, usable on its own."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from seqssm.blocks.attention import AttentionBlock
from seqssm.blocks.common import make_norm
from seqssm.blocks.config import AttentionConfig, BlockConfig, GatedBlockConfig, block_config
from seqssm.errors import ConfigError, InputShapeError
from seqssm.blocks.mamba import MambaBlock
from seqssm.blocks.mamba2 import Mamba2Block
from seqssm.blocks.simple import SimpleBlock
from seqssm.layers.base import SequenceLayer, check_sizes, mask_outputs, non_causal_error

BLOCKS = {"mamba": MambaBlock, "simple": SimpleBlock, "mamba2": Mamba2Block}


class BlockStack(SequenceLayer):
    """layers then norm_f: x (B, L, d_model) -> (B, L, d_model); state: a tuple with one state per block.

    The layers are blocks (Mamba, Simple, ...) or bare sequence layers: anything with the layer contract.
    """

    def __init__(self, layers: list[nn.Module], norm_f: nn.Module):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm_f = norm_f
        self.d_model = getattr(layers[0], "d_model", None) if layers else None
    @property
    def causal(self) -> bool:
        return all(layer.causal for layer in self.layers)

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        weight = getattr(self.norm_f, "weight", None)
        # A float32 residual stream (residual_in_fp32) leaves through the norm in the model's dtype.
        return self.norm_f(x if weight is None else x.to(weight.dtype))

    def _forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d_model), lengths (B,) for right-padded batches (only bidirectional blocks need them)."""
        for layer in self.layers:
            x = layer(x) if layer.causal else layer(x, lengths=lengths)
        return self._final(x)

    def _scan(self, x, state, resets, mask):
        """x (B, L, d_model), state (tuple per block, or None), resets / mask (B, L) -> (y (B, L, d_model), state)."""
        states = []
        for layer, s in zip(self.layers, (None,) * len(self.layers) if state is None else state):
            x, s = layer.scan(x, s, resets, mask)
            states.append(s)
        return mask_outputs(mask, self._final(x)), tuple(states)

    def _step(self, x_t, state):
        """x_t (B, d_model), state -> (y_t (B, d_model), state)."""
        states = []
        for layer, s in zip(self.layers, state):
            x_t, s = layer.step(x_t, s)
            states.append(s)
        return self._final(x_t), tuple(states)

    def _check_state(self, where: str, state, batch: int, path: str = "state") -> None:
        """One state per block, each checked by its block (an attention block's KV cache has no fixed length)."""
        if not isinstance(state, (tuple, list)) or len(state) != len(self.layers):
            raise InputShapeError(f"{where}: {path} must be a tuple of {len(self.layers)} block states (as "
                                  f"initial_state({batch}) gives it), got {type(state).__name__}"
                                  + (f" of {len(state)}" if isinstance(state, (tuple, list)) else ""))
        for i, (layer, s) in enumerate(zip(self.layers, state)):
            layer._check_state(where, s, batch, f"{path}[{i}]")

    def initial_state(self, batch_size: int, device=None, dtype=None):
        if not self.causal:
            raise non_causal_error(self)
        return tuple(layer.initial_state(batch_size, device=device, dtype=dtype) for layer in self.layers)


def make_stack(block: str | BlockConfig, d_model: int, n_layers: int, final_norm: bool | None = None,
               attn_layer_idx: list[int] | tuple[int, ...] = (), attn: AttentionConfig | dict | None = None,
               **changes: Any) -> BlockStack:
    """n_layers blocks of width d_model plus the final norm (Mamba stacks; a Simple block ends in its own norm).

    block: a block config, or a kind ("mamba", "simple") for its defaults; final_norm: end in the block's kind of
    norm or not (None: the kind's rule, `BlockConfig.final_norm`); attn_layer_idx: the depths (0-based) that hold an
    `AttentionBlock` of settings `attn` instead (a hybrid stack, as mamba_ssm's config names it; pre-norm blocks
    only); changes: fields or flat names that `seqssm.blocks.block_config` takes, e.g. make_stack("mamba", 64, 2,
    ssp="s4d", d_state=16, dropout=0.1).
    """
    check_sizes("make_stack", d_model=d_model, n_layers=n_layers)
    config = block_config(block, **changes)
    attn_layer_idx = hybrid_layers(config, n_layers, attn_layer_idx, attn)
    layers = [AttentionBlock(d_model, AttentionConfig.from_dict(attn), config.rms_norm, config.norm_eps,
                             config.residual_in_fp32) if i in attn_layer_idx else BLOCKS[config.kind](d_model, config)
              for i in range(n_layers)]
    norm = config.final_norm if final_norm is None else final_norm
    norm_f = make_norm(d_model, config.rms_norm, config.norm_eps) if norm else nn.Identity()
    return BlockStack(layers, norm_f)


def hybrid_layers(block: BlockConfig, n_layers: int, attn_layer_idx, attn) -> list[int]:
    """attn_layer_idx checked against the stack's `block` and depth `n_layers` -> the sorted depths; errors say which
    setting does not fit."""
    where = "attn_layer_idx"
    if isinstance(attn_layer_idx, (str, bytes)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in attn_layer_idx):
        raise ConfigError(f"{where} must be a list of layer indices, got {attn_layer_idx!r}")
    depths = sorted(attn_layer_idx)
    if not depths:
        if attn is not None:
            raise ConfigError("attn configures the attention layers of a hybrid stack: give attn_layer_idx too, or "
                              "drop attn")
        return depths
    if len(set(depths)) != len(depths) or depths[0] < 0 or depths[-1] >= n_layers:
        raise ConfigError(f"{where} {list(attn_layer_idx)} must name distinct layers in 0..{n_layers - 1}")
    if attn is None:
        raise ConfigError(f"{where} {depths} needs attn, the attention layers' settings (at least n_heads)")
    if not isinstance(block, GatedBlockConfig):
        raise ConfigError(f"attention layers join pre-norm stacks (mamba, mamba2 blocks), not {block.kind} blocks")
    if block.bidirectional:
        raise ConfigError("a hybrid stack's attention layers are causal: they cannot join bidirectional blocks")
    return depths
