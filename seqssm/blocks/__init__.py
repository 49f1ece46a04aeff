"""Blocks that wrap the sequence primitives: the Simple block, the Mamba block (with RoPE,
bidirectional and placebo options), their typed configs, and the block stack that models and the
RL policy share."""

from seqssm.blocks.common import FeatureDropout, flip_within_lengths, make_norm, make_ssp
from seqssm.blocks.config import (
    BLOCK_CONFIGS,
    FLAT_SSP_NAMES,
    BlockConfig,
    MambaBlockConfig,
    SimpleBlockConfig,
    SSPConfig,
    block_config,
)
from seqssm.blocks.mamba import ConvSSPBranch, MambaBlock
from seqssm.blocks.simple import SimpleBlock
from seqssm.blocks.ssp import ROPE_TARGETS, RotarySSP
from seqssm.blocks.stack import BLOCKS, BlockStack, make_stack

__all__ = [
    "BLOCKS",
    "BLOCK_CONFIGS",
    "FLAT_SSP_NAMES",
    "BlockConfig",
    "BlockStack",
    "ConvSSPBranch",
    "FeatureDropout",
    "MambaBlock",
    "MambaBlockConfig",
    "ROPE_TARGETS",
    "RotarySSP",
    "SSPConfig",
    "SimpleBlock",
    "SimpleBlockConfig",
    "block_config",
    "flip_within_lengths",
    "make_norm",
    "make_ssp",
    "make_stack",
]
