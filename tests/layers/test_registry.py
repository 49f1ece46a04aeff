"""Every registered layer keeps the whole layer contract (masks included), and every consumer of layers
by name (blocks, named models, PPO cores, SAC encoders) reads the one registry."""

import pytest
import torch

from seqssm.blocks import SimpleBlock, SimpleBlockConfig, SSPConfig, make_stack
from seqssm.layers import LAYERS, build_layer, layer_entry
from seqssm.models import build

pytest.importorskip("gymnasium", reason="the PPO cores and SAC encoders need the rl extra: pip install 'seqssm[rl]'")

from seqssm.rl.core import CoreConfig, build_core
from seqssm.rl.offpolicy import ENCODERS, HistoryEncoderConfig
from seqssm.testing import check_layer_contract

D = 4


def moved_off_init(layer: torch.nn.Module) -> torch.nn.Module:
    """float64, parameters moved as if trained, and steps large enough that the state matters in short tests."""
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
        if hasattr(layer, "log_dt"):
            layer.log_dt.copy_(torch.empty_like(layer.log_dt).uniform_(-3, -0.5))
        if hasattr(layer, "dt_raw"):
            layer.dt_raw.fill_(-1.0)
    return layer.double()


@pytest.mark.parametrize("name", LAYERS)
def test_every_registered_layer_keeps_the_contract(name):
    torch.manual_seed(0)
    layer = moved_off_init(build_layer(name, D, layer_entry(name).test_size))
    check_layer_contract(layer, d_in=D)


@pytest.mark.parametrize("name", LAYERS)
def test_state_size_goes_to_the_layers_own_keyword(name):
    entry = layer_entry(name)
    layer = build_layer(name, D, 6)
    assert isinstance(layer, entry.cls) and getattr(layer, entry.state_arg) == 6


def test_unknown_names_list_the_registered_layers():
    names = ", ".join(LAYERS)
    for make in (lambda: build_layer("lstm", D), lambda: SSPConfig("lstm", 4),
                 lambda: make_stack("simple", D, 1, ssp="lstm"),
                 lambda: build_core(CoreConfig(layer="lstm", d_model=D))):
        with pytest.raises(ValueError, match=f"unknown sequence layer 'lstm'; registered layers: {names}"):
            make()
    with pytest.raises(ValueError, match="layer one of " + names):
        build("mamba-lstm", d_input=2, n_classes=2)


@pytest.mark.parametrize("name", LAYERS)
def test_every_consumer_builds_every_registered_layer(name):
    d_state = layer_entry(name).test_size
    block = SimpleBlock(D, SimpleBlockConfig(SSPConfig(name, d_state)))
    assert isinstance(block.ssp, LAYERS[name].cls)
    core = build_core(CoreConfig(layer=name, d_model=D, d_state=d_state, n_layers=1))
    assert isinstance(core.layers[0].layer, LAYERS[name].cls)
    model = build(f"mamba-{name}", d_input=2, n_classes=2, d_model=D, n_layers=1, d_state=d_state)
    assert isinstance(model.backbone.layers[0].branches[0].ssp, LAYERS[name].cls)
    assert name in ENCODERS
    encoder = build_core(HistoryEncoderConfig(kind=name, d_model=D, d_state=d_state, n_layers=1, d_ff=8).core_config())
    assert isinstance(encoder.layers[0], LAYERS[name].cls)
