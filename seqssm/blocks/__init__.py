"""Blocks that wrap the sequence primitives: the Simple block, the Mamba block (with RoPE,
bidirectional and placebo options) and the block stack that models and the RL policy share."""

from seqssm.blocks.common import FeatureDropout, flip_within_lengths, make_norm, make_ssp
from seqssm.blocks.mamba import ConvSSPBranch, MambaBlock
from seqssm.blocks.simple import SimpleBlock
from seqssm.blocks.ssp import ROPE_TARGETS, RotarySSP
from seqssm.blocks.stack import BLOCKS, BlockStack, make_stack

__all__ = [
    "BLOCKS",
    "BlockStack",
    "ConvSSPBranch",
    "FeatureDropout",
    "MambaBlock",
    "ROPE_TARGETS",
    "RotarySSP",
    "SimpleBlock",
    "flip_within_lengths",
    "make_norm",
    "make_ssp",
    "make_stack",
]
