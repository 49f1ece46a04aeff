"""Sequence primitives (nn.Module), one file each, all speaking the layer contract of `base`, by name in `registry`."""

from seqssm.layers.base import SequenceLayer, frozen_weights
from seqssm.layers.gru import GRU
from seqssm.layers.kalman import KalmanLayer, KalmanNoInput, vSSM
from seqssm.layers.lssl import LSSL, LSSLf
from seqssm.layers.mingru import MinGRU
from seqssm.layers.registry import LAYERS, build_layer, layer_entry
from seqssm.layers.rope import RoPE
from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s5 import S5
from seqssm.layers.s6 import S6
from seqssm.layers.ssd import SSD
from seqssm.layers.transformer import CausalTransformer

__all__ = [
    "LAYERS", "SequenceLayer", "build_layer", "layer_entry", "frozen_weights", "S4", "S4D", "S6", "SSD", "S5", "MinGRU",
    "LSSL", "LSSLf", "KalmanLayer", "KalmanNoInput", "vSSM", "GRU", "CausalTransformer", "RoPE",
]
