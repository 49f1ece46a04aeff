"""Sequence primitives (nn.Module), one file each, all speaking the layer contract of `base`."""

from seqssm.layers.base import SequenceLayer, frozen_weights
from seqssm.layers.gru import GRU
from seqssm.layers.kalman import KalmanLayer, vSSM
from seqssm.layers.lssl import LSSL, LSSLf
from seqssm.layers.mingru import MinGRU
from seqssm.layers.rope import RoPE
from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s5 import S5
from seqssm.layers.s6 import S6

__all__ = ["SequenceLayer", "frozen_weights", "S4", "S4D", "S6", "S5", "MinGRU", "LSSL", "LSSLf", "KalmanLayer", "vSSM", "GRU", "RoPE"]
