"""Memory cores: the memoryless core (layer "mlp") keeps the layer contract with an empty state and remembers
nothing; block "none" runs the layers bare; the residual block without its norm; the cores' SSM learning rate; block
cores read their defaults from the blocks' configs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqssm.blocks import BLOCK_CONFIGS
from seqssm.layers import LAYERS
from seqssm.optim import param_groups
from seqssm.rl.core import CoreConfig, FeedForward, build_core
from seqssm.testing import check_layer_contract


def test_feedforward_keeps_the_layer_contract_with_an_empty_state():
    layer = FeedForward(6).double()
    y = check_layer_contract(layer, d_in=6)
    x = torch.randn(2, 13, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(x), F.leaky_relu(x @ layer.linear.weight.T + layer.linear.bias))
    assert layer.initial_state(3) == () and y.shape == (2, 13, 6)


def test_the_mlp_core_remembers_nothing():
    """Each output depends on its own step's input alone: the earlier inputs can be anything."""
    core = build_core(CoreConfig(layer="mlp", d_model=8, n_layers=2, block="none")).double()
    x = torch.randn(3, 9, 8, dtype=torch.float64)
    other = torch.randn(3, 9, 8, dtype=torch.float64)
    other[:, -1] = x[:, -1]
    y, state = core.scan(x, core.initial_state(3))
    torch.testing.assert_close(core.scan(other, state)[0][:, -1], y[:, -1])
    assert state == ((), ())
    assert [type(m).__name__ for m in core.layers] == ["FeedForward", "FeedForward"]
    # POPGym's MLP memory model (Morad et al. 2023): Linear(256, 256) + LeakyReLU, twice
    mlp = build_core(CoreConfig(layer="mlp", d_model=256, n_layers=2, block="none"))
    assert sum(p.numel() for p in mlp.parameters()) == 2 * (256 * 256 + 256)


def test_block_none_is_the_bare_layer():
    core = build_core(CoreConfig(layer="gru", d_model=8, n_layers=1, block="none")).double()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    gru = core.layers[0]
    torch.testing.assert_close(core(x), gru.gru(x)[0])


def test_the_residual_block_without_norm_adds_the_activation_to_its_input():
    config = CoreConfig(layer="s5", d_model=8, d_state=8, n_layers=1, activation="glu", norm=False)
    core = build_core(config).double()
    block = core.layers[0]
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    expected = x + F.glu(block.glu(F.gelu(block.layer(x))), dim=-1)
    torch.testing.assert_close(core(x), expected)
    normed = build_core(CoreConfig(layer="s5", d_model=8, d_state=8, n_layers=1)).layers[0]
    assert isinstance(normed.norm, torch.nn.LayerNorm) and isinstance(block.norm, torch.nn.Identity)


def test_ssm_lr_scale_sets_the_fraction_of_every_ssm_parameter():
    def rates(core):
        return sorted({g["lr"] for g in param_groups(core, 1.0, 0.0)})

    assert rates(build_core(CoreConfig(layer="s5", d_model=8, d_state=8, n_layers=2))) == [0.2, 1.0]  # S5's own
    assert rates(build_core(CoreConfig(layer="s5", d_model=8, d_state=8, n_layers=2, ssm_lr_scale=1.0))) == [1.0]
    mamba = CoreConfig(layer="s6", block="mamba", d_model=8, d_state=4, ssm_lr_scale=0.5)
    assert 0.5 in rates(build_core(mamba))


@pytest.mark.parametrize("config, message", [
    (CoreConfig(layer="lstm"), "unknown sequence layer 'lstm'; registered layers: .*; or 'mlp', the core without"),
    (CoreConfig(layer="mlp", block="mamba"), "memoryless core layer 'mlp' runs in block 'residual' or 'none'"),
    (CoreConfig(layer="mlp", block="none", layer_kwargs={"activation": "swish"}), "unknown activation 'swish'"),
])
def test_bad_cores_are_named(config, message):
    with pytest.raises(ValueError, match=message):
        build_core(config)


def test_block_cores_take_their_defaults_and_settings_from_the_blocks_config():
    for kind, config in BLOCK_CONFIGS.items():
        ssp = config().ssp
        core = build_core(CoreConfig(layer=ssp.layer, block=kind, d_model=16, n_layers=1))
        layer = next(m for m in core.modules() if isinstance(m, LAYERS[ssp.layer].cls))
        assert layer.d_state == ssp.d_state, kind  # the state size the block's config states, not one restated here
    wide = build_core(CoreConfig(layer="s6", block="mamba", d_model=8, n_layers=1, block_kwargs={"expand": 3}))
    assert wide.layers[0].d_inner == 24 and isinstance(wide.norm_f, torch.nn.RMSNorm)
    bare = build_core(CoreConfig(layer="s6", block="mamba", d_model=8, n_layers=1, final_norm=False))
    assert isinstance(bare.norm_f, torch.nn.Identity)
    normed = build_core(CoreConfig(layer="gru", block="none", d_model=8, n_layers=1, final_norm=True))
    assert isinstance(normed.norm_f, torch.nn.RMSNorm)
    with pytest.raises(ValueError, match=r"block_kwargs \{'expand': 3\} configure a block of seqssm.blocks"):
        build_core(CoreConfig(layer="s5", d_model=8, block_kwargs={"expand": 3}))
