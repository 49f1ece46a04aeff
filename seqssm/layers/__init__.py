"""Sequence primitives (nn.Module), one file each, all speaking the layer contract of `base`."""

from seqssm.layers.base import SequenceLayer
from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s6 import S6

__all__ = ["SequenceLayer", "S4", "S4D", "S6"]
