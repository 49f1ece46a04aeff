"""Every sequence layer of seqssm by name: the one table that blocks, named models and RL cores read.

    build_layer("s5", d_model=64, d_state=32, blocks=2)   # S5(64, d_state=32, blocks=2)
    build_layer("gru", d_model=64, d_state=32)            # GRU(64, d_hidden=32): its state size's own name

A new layer joins every consumer (Simple / Mamba blocks, `seqssm.models.build` names such as
"mamba-<layer>", PPO cores, SAC history encoders) and every test of all layers by one line here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from seqssm.layers.gru import GRU
from seqssm.layers.kalman import KalmanLayer, KalmanNoInput, vSSM
from seqssm.layers.lssl import LSSL, LSSLf
from seqssm.layers.mingru import MinGRU
from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s5 import S5
from seqssm.layers.s6 import S6
from seqssm.layers.ssd import SSD
from seqssm.layers.transformer import CausalTransformer


@dataclass(frozen=True)
class LayerEntry:
    """A registered layer: its class, the keyword that takes the state size (d_state, d_hidden, ...), and the
    state size of the small instances that the tests build of every layer (fast, yet a state that matters)."""

    cls: type[nn.Module]
    state_arg: str = "d_state"
    test_size: int = field(kw_only=True)


LAYERS: dict[str, LayerEntry] = {
    "s4": LayerEntry(S4, test_size=4),
    "s4d": LayerEntry(S4D, test_size=4),
    "s6": LayerEntry(S6, test_size=3),
    "s5": LayerEntry(S5, test_size=4),
    "ssd": LayerEntry(SSD, test_size=4),
    "lssl": LayerEntry(LSSL, test_size=3),
    "lsslf": LayerEntry(LSSLf, test_size=3),
    "mingru": LayerEntry(MinGRU, "d_hidden", test_size=5),
    "gru": LayerEntry(GRU, "d_hidden", test_size=5),
    "kalman": LayerEntry(KalmanLayer, test_size=3),
    "kalman_u": LayerEntry(KalmanNoInput, test_size=3),
    "vssm": LayerEntry(vSSM, test_size=3),
    "transformer": LayerEntry(CausalTransformer, "context", test_size=4),  # its state is the window of past inputs
}


def layer_entry(name: str) -> LayerEntry:
    """The registry entry of layer `name`; a clear error listing the registered names otherwise."""
    if name not in LAYERS:
        raise ValueError(f"unknown sequence layer {name!r}; registered layers: {', '.join(LAYERS)}")
    return LAYERS[name]


def build_layer(name: str, d_model: int, d_state: int | None = None, **kwargs) -> nn.Module:
    """Layer `name` over d_model channels: (B, L, d_model) -> (B, L, d_model). d_state goes to the layer's own
    state-size keyword (None keeps its default); kwargs are the layer's other constructor arguments."""
    entry = layer_entry(name)
    if d_state is not None:
        kwargs[entry.state_arg] = d_state
    return entry.cls(d_model, **kwargs)
