"""Blocks that wrap the sequence primitives: the Simple block, the Mamba block (with RoPE,
bidirectional and placebo options), the Mamba-2 block, the attention block of hybrid stacks, their typed configs, and
the block stack that models and the RL policy share."""

from seqssm.blocks.attention import AttentionBlock
from seqssm.blocks.common import FeatureDropout, flip_within_lengths, make_norm, make_ssp
from seqssm.blocks.config import (
    BLOCK_CONFIGS,
    FLAT_SSP_NAMES,
    AttentionConfig,
    BlockConfig,
    Mamba2BlockConfig,
    MambaBlockConfig,
    SimpleBlockConfig,
    SSPConfig,
    block_config,
)
from seqssm.blocks.mamba import ConvSSPBranch, MambaBlock
from seqssm.blocks.mamba2 import GatedRMSNorm, Mamba2Block
from seqssm.blocks.simple import SimpleBlock
from seqssm.blocks.ssp import ROPE_TARGETS, RotarySSP
from seqssm.blocks.stack import BLOCKS, BlockStack, make_stack

__all__ = [
    "AttentionBlock",
    "AttentionConfig",
    "BLOCKS",
    "BLOCK_CONFIGS",
    "FLAT_SSP_NAMES",
    "BlockConfig",
    "BlockStack",
    "ConvSSPBranch",
    "FeatureDropout",
    "GatedRMSNorm",
    "Mamba2Block",
    "Mamba2BlockConfig",
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
