"""The Mamba-2 block: the layer contract (forward, scan with state, resets and masks, step), its SSD layer without
a projection of its own, and equality with transformers' Mamba2Mixer (torch path) given the same weights."""

import pytest
import torch

from seqssm.blocks import Mamba2Block, Mamba2BlockConfig, SSPConfig
from seqssm.layers.ssd import SSD
from seqssm.testing import check_layer_contract


def _config(d_state, dropout=0.0, **ssd):
    return Mamba2BlockConfig(SSPConfig("ssd", d_state, layer_kwargs=ssd), dropout=dropout)


@pytest.mark.parametrize("n_groups", [1, 2])
def test_mamba2_block_contract(n_groups):
    block = Mamba2Block(8, _config(4, head_dim=4, n_groups=n_groups, chunk_size=4)).double()
    check_layer_contract(block, d_in=8)


def test_mamba2_block_equals_transformers_mamba2_mixer():
    modeling = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")
    from transformers import Mamba2Config

    torch.manual_seed(0)
    d_model, heads, head_dim, n, groups = 16, 4, 8, 8, 2
    block = Mamba2Block(d_model, _config(n, head_dim=head_dim, n_groups=groups, chunk_size=8))
    with torch.no_grad():  # weights away from their init, so that a swapped one shows
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    config = Mamba2Config(hidden_size=d_model, num_heads=heads, head_dim=head_dim, state_size=n, n_groups=groups,
                          expand=2, conv_kernel=4, chunk_size=8, use_bias=False, use_conv_bias=True,
                          layer_norm_epsilon=1e-5, num_hidden_layers=1, vocab_size=8)
    mixer = modeling.Mamba2Mixer(config, layer_idx=0).eval()
    with torch.no_grad():
        for ours, theirs in [(block.in_proj.weight, mixer.in_proj.weight), (block.conv1d.weight, mixer.conv1d.weight),
                             (block.conv1d.bias, mixer.conv1d.bias), (block.ssm.dt_bias, mixer.dt_bias),
                             (block.ssm.A_log, mixer.A_log), (block.ssm.D, mixer.D),
                             (block.gated_norm.weight, mixer.norm.weight), (block.out_proj.weight, mixer.out_proj.weight)]:
            theirs.copy_(ours)
    x = torch.randn(2, 21, d_model)
    with torch.no_grad():
        expected = x + mixer(block.norm(x))
        torch.testing.assert_close(block(x), expected, rtol=1e-4, atol=1e-5)


def test_ssd_without_its_projection_says_what_to_call():
    layer = SSD(8, d_state=4, head_dim=4, project=False)
    assert layer.in_proj is None
    with pytest.raises(RuntimeError, match="call scan_projected or step_projected"):
        layer(torch.randn(1, 3, 8))


def test_mamba2_config_refuses_what_the_block_cannot_run():
    with pytest.raises(ValueError, match="runs the SSD layer"):
        Mamba2BlockConfig(SSPConfig("s6", 16))
    with pytest.raises(ValueError, match="no RoPE"):
        Mamba2BlockConfig(SSPConfig("ssd", 16, rope={}))


def test_mamba2_models_build_train_and_generate_by_name():
    """"mamba2-ssd" names a model like the others: it builds, trains a step, and generates from its state cache
    the tokens that rerunning the whole prefix gives."""
    from seqssm.models import build

    torch.manual_seed(0)
    model = build("mamba2-ssd", vocab_size=11, d_model=16, n_layers=2, d_state=8, dropout=0.0,
                  block={"ssp": {"layer_kwargs": {"head_dim": 8, "chunk_size": 4}}})
    assert model.config.block.kind == "mamba2"
    tokens = torch.randint(0, 11, (2, 9))
    logits = model(tokens)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.eval()
    out = model.generate(tokens[:, :5], max_new_tokens=4, temperature=0.0)
    full = tokens[:, :5]
    for _ in range(4):  # greedy by rerunning the whole prefix: no state cache
        full = torch.cat([full, model(full)[:, -1].argmax(-1, keepdim=True)], 1)
    torch.testing.assert_close(out, full)


@pytest.mark.parametrize("position", ["ssp_output", "ssp_input"])
def test_dropout_acts_where_its_position_says(position, monkeypatch):
    torch.manual_seed(0)
    block = Mamba2Block(16, Mamba2BlockConfig(SSPConfig("ssd", 8, layer_kwargs={"head_dim": 8}), dropout=0.5,
                                              dropout_position=position)).train()
    seen = {}
    scan = block.ssm.scan_projected

    def recording(u, *args):
        seen["u"] = u
        y, state = scan(u, *args)
        seen["y"] = y
        return y, state

    monkeypatch.setattr(block.ssm, "scan_projected", recording)
    block(torch.randn(2, 9, 16))
    dropped = (seen["u"] == 0).float().mean()
    assert (dropped > 0.3) == (position == "ssp_input")
    with pytest.raises(ValueError, match="dropout_position is one of"):
        Mamba2BlockConfig(dropout_position="in_proj")


def _two_branches(**variant):
    torch.manual_seed(0)
    block = Mamba2Block(8, Mamba2BlockConfig(SSPConfig("ssd", 4, layer_kwargs={"head_dim": 4, "chunk_size": 4}),
                                             **variant)).double().eval()
    with torch.no_grad():  # the two branches unlike each other
        for p in block.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return block


def test_the_placebo_block_keeps_the_contract_with_a_state_per_branch():
    block = _two_branches(placebo=True)
    check_layer_contract(block, d_in=8)
    conv, ssd = block.initial_state(3)[1]
    assert conv.shape == (3, block.conv_dim, 3) and ssd.shape == (3, 4, 4, 4)


def test_the_bidirectional_block_reads_both_ways():
    """Swapping the two branches' weights and reversing the input reverses the output: the second branch is the
    first one's mirror image, and the rest of the block acts per position."""
    block = _two_branches(bidirectional=True)
    x = torch.randn(2, 11, 8, dtype=torch.float64)
    y = block(x)
    mirrored = _two_branches(bidirectional=True)
    with torch.no_grad():
        for first, second in [("conv1d", "second_conv1d"), ("ssm", "second_ssm")]:
            a, b = getattr(block, first), getattr(block, second)
            for (_, p), (_, q) in zip(getattr(mirrored, first).named_parameters(), b.named_parameters()):
                p.copy_(q)
            for (_, p), (_, q) in zip(getattr(mirrored, second).named_parameters(), a.named_parameters()):
                p.copy_(q)
    torch.testing.assert_close(mirrored(x.flip(1)).flip(1), y)
    # a step's output depends on later inputs
    later = x.clone()
    later[:, -1] += 1.0
    assert not torch.allclose(block(later)[:, 0], y[:, 0])
    with pytest.raises(NotImplementedError, match="bidirectional"):
        block.scan(x)


def test_the_bidirectional_block_reverses_each_sequence_within_its_length():
    block = _two_branches(bidirectional=True)
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    y = block(x, lengths=torch.tensor([10, 6]))
    torch.testing.assert_close(y[1, :6], block(x[1:, :6])[0])
    torch.testing.assert_close(y[0], block(x[:1])[0])


def test_two_branch_mamba2_models_by_name(tmp_path):
    from seqssm.errors import PretrainedFormatError
    from seqssm.models import build

    settings = dict(vocab_size=11, d_state=8, block={"ssp": {"layer_kwargs": {"head_dim": 8}}})
    model = build("mamba2-ssd-bi", n_classes=2, **settings)
    assert model.config.d_model == 128 and model.config.block.bidirectional and not model.causal
    with pytest.raises(ValueError, match="Mamba-2 blocks take -bi and -placebo"):
        build("mamba2-ssd-sm", n_classes=2, **settings)
    with pytest.raises(PretrainedFormatError, match="placebo=True is not supported"):
        build("mamba2-ssd-placebo", d_model=16, n_layers=1, **settings).save_pretrained(tmp_path, format="hf")
