"""Blocks: Mamba (plain / placebo / bidirectional / RoPE) and Simple blocks, stacks."""

import pytest
import torch
import torch.nn.functional as F

from seqssm.blocks import (
    BlockStack,
    FeatureDropout,
    MambaBlock,
    MambaBlockConfig,
    SimpleBlock,
    SimpleBlockConfig,
    SSPConfig,
    flip_within_lengths,
    make_stack,
)
from seqssm.testing import check_layer_contract

D = 8


# --- layer contract ---------------------------------------------------------------------------

CAUSAL_BLOCKS = {
    "mamba-s6": lambda: MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4))),
    "mamba-s4d": lambda: MambaBlock(D, MambaBlockConfig(SSPConfig("s4d", 4))),
    "mamba-s4": lambda: MambaBlock(D, MambaBlockConfig(SSPConfig("s4", 4))),
    "mamba-s6-placebo": lambda: MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), placebo=True)),
    "mamba-s6-rope": lambda: MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4, rope={}))),
    "mamba-s6-rope-B-delta": lambda: MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4, rope={"targets": ["B", "delta"]}))),
    "mamba-s4d-rope-normed-trainable": lambda: MambaBlock(
        D, MambaBlockConfig(SSPConfig("s4d", 4, rope={"normalize_len": 13, "trainable": True, "base": 10}))),
    "mamba-s6-fp32-residual-layernorm": lambda: MambaBlock(
        D, MambaBlockConfig(SSPConfig("s6", 4), residual_in_fp32=True, rms_norm=False, proj_bias=True)),
    "simple-s4d": lambda: SimpleBlock(D, SimpleBlockConfig(SSPConfig("s4d", 4))),
    "simple-s4": lambda: SimpleBlock(D, SimpleBlockConfig(SSPConfig("s4", 4))),
    "simple-s4d-rope": lambda: SimpleBlock(D, SimpleBlockConfig(SSPConfig("s4d", 4, rope={}))),
}


@pytest.mark.parametrize("name", CAUSAL_BLOCKS)
def test_causal_blocks_obey_the_layer_contract(name):
    block = CAUSAL_BLOCKS[name]().double()
    y = check_layer_contract(block, D)
    assert y.shape == (2, 13, D)


@pytest.mark.parametrize("block", ["mamba", "simple"])
def test_stacks_obey_the_layer_contract(block):
    stack = make_stack(block, D, 2, ssp="s4d", d_state=4).double()
    check_layer_contract(stack, D)
    state = stack.initial_state(3)
    assert isinstance(state, tuple) and len(state) == 2


def test_mamba_state_layout():
    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), expand=2, d_conv=4))
    conv, ssp = block.initial_state(3)
    assert conv.shape == (3, 2 * D, 3) and ssp.shape == (3, 2 * D, 4)
    _, (conv, ssp) = block.scan(torch.randn(3, 6, D))
    assert conv.shape == (3, 2 * D, 3) and ssp.shape == (3, 2 * D, 4)
    placebo = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), placebo=True)).initial_state(3)
    assert len(placebo) == 2 and all(s[0].shape == (3, 2 * D, 3) for s in placebo)


def test_reset_zeroes_the_conv_state_too():
    """With a reset at t, what came before t must not reach outputs >= t through the conv taps."""
    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s4d", 4))).double()
    x = torch.randn(1, 10, D, dtype=torch.float64)
    x_other = x.clone()
    x_other[:, :6] = torch.randn(1, 6, D, dtype=torch.float64)
    r = torch.zeros(1, 10, dtype=torch.bool)
    r[0, 6] = True
    y1, s1 = block.scan(x, None, r)
    y2, s2 = block.scan(x_other, None, r)
    torch.testing.assert_close(y1[:, 6:], y2[:, 6:])
    assert not torch.allclose(y1[:, :6], y2[:, :6])


# --- bidirectional / placebo ------------------------------------------------------------------


def test_flip_within_lengths_reverses_valid_part_only():
    x = torch.arange(12.0).view(2, 6, 1)
    out = flip_within_lengths(x, torch.tensor([4, 6]))
    assert out[0, :, 0].tolist() == [3, 2, 1, 0, 4, 5]
    assert out[1, :, 0].tolist() == [11, 10, 9, 8, 7, 6]
    torch.testing.assert_close(flip_within_lengths(out, torch.tensor([4, 6])), x)


@pytest.mark.parametrize("ssp", ["s6", "s4d"])
def test_bidirectional_is_non_causal_and_has_no_recurrence(ssp):
    block = MambaBlock(D, MambaBlockConfig(SSPConfig(ssp, 4), bidirectional=True)).double()
    x = torch.randn(2, 9, D, dtype=torch.float64)
    x2 = x.clone()
    x2[:, -1] += 1.0
    assert not torch.allclose(block(x)[:, 0], block(x2)[:, 0])
    for call in (lambda: block.scan(x), lambda: block.step(x[:, 0], None), lambda: block.initial_state(2)):
        with pytest.raises(NotImplementedError, match="bidirectional"):
            call()
    stack = BlockStack([block], torch.nn.Identity())
    assert not stack.causal
    with pytest.raises(NotImplementedError, match="bidirectional"):
        stack.scan(x)


def test_bidirectional_is_the_sum_of_a_forward_and_a_flipped_branch():
    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), bidirectional=True, dropout=0.0)).double()
    x = torch.randn(2, 7, D, dtype=torch.float64)
    xi, z = block.in_proj(block.norm(x)).chunk(2, -1)
    fwd, bwd = block.branches
    y = fwd(xi) + bwd(xi.flip(1)).flip(1)
    torch.testing.assert_close(block(x), x + block.out_proj(y * F.silu(z)))


def test_placebo_has_the_parameters_of_bidirectional_and_no_flips():
    bi = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), bidirectional=True)).double()
    placebo = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), placebo=True)).double()
    placebo.load_state_dict(bi.state_dict())  # same names and shapes
    x = torch.randn(2, 7, D, dtype=torch.float64)
    xi, z = placebo.in_proj(placebo.norm(x)).chunk(2, -1)
    y = placebo.branches[0](xi) + placebo.branches[1](xi)
    torch.testing.assert_close(placebo(x), x + placebo.out_proj(y * F.silu(z)))
    assert not torch.allclose(placebo(x), bi(x))


@pytest.mark.parametrize("bidirectional", [False, True])
def test_block_right_padding_does_not_change_valid_outputs(bidirectional):
    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), bidirectional=bidirectional)).double()
    x = torch.randn(2, 9, D, dtype=torch.float64)
    lengths = torch.tensor([5, 9])
    y = block(x, lengths=lengths)
    torch.testing.assert_close(y[:1, :5], block(x[:1, :5]))
    torch.testing.assert_close(y[1:], block(x[1:]))


# --- dropout ---------------------------------------------------------------------------------


def test_feature_dropout_zeroes_whole_features_and_is_identity_in_eval():
    drop = FeatureDropout(0.5)
    x = torch.ones(4, 20, 32)
    y = drop(x)
    zeroed = y[:, 0] == 0
    assert zeroed.any() and (~zeroed).any()
    assert torch.equal(y == 0, zeroed.unsqueeze(1).expand_as(y))
    assert torch.allclose(y[~(y == 0)], torch.tensor(2.0))
    drop.eval()
    assert torch.equal(drop(x), x)


def test_mamba_dropout_sits_after_the_ssp_by_default():
    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), dropout=0.999)).train()
    assert block.dropout_position == "ssp_output"
    x = torch.randn(2, 5, D)
    torch.manual_seed(1)
    # With nearly every SSP feature dropped the block is (almost surely) the identity map.
    torch.testing.assert_close(block(x), x)
    block.eval()
    assert not torch.allclose(block(x), x)


class EveryThirdFeatureDropped(torch.nn.Module):
    """A deterministic stand-in for FeatureDropout: zeroes features 0, 3, 6, ... at every position."""

    def forward(self, t):
        return t * (torch.arange(t.shape[-1]) % 3 != 0).to(t.dtype)


def _masked(t):
    return EveryThirdFeatureDropped()(t)


@pytest.mark.parametrize("position", ["ssp_output", "ssp_input", "in_proj"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_mamba_dropout_position_in_forward_scan_and_step(position, bidirectional):
    torch.manual_seed(0)
    config = MambaBlockConfig(SSPConfig("s6", 4), dropout=0.1, dropout_position=position, bidirectional=bidirectional)
    block = MambaBlock(D, config).double().train()
    block.dropout = EveryThirdFeatureDropped()
    x = torch.randn(2, 7, D, dtype=torch.float64)
    # reference: the block written out, the mask placed by hand
    xz = block.in_proj(block.norm(x))  # (B, L, 2 d_inner)
    xi, z = (_masked(xz) if position == "in_proj" else xz).chunk(2, dim=-1)
    if position == "ssp_input":
        xi = _masked(xi)
    y = block.branches[0](xi)
    if bidirectional:
        y = y + block.branches[1](xi.flip(1)).flip(1)
    gated = y * F.silu(z)
    if position == "ssp_output":
        gated = _masked(gated)
    expected = x + block.out_proj(gated)
    torch.testing.assert_close(block(x), expected, rtol=0, atol=1e-12)
    if bidirectional:
        return
    torch.testing.assert_close(block.scan(x)[0], expected, rtol=0, atol=1e-12)
    state, steps = block.initial_state(2, dtype=torch.float64), []
    for t in range(x.shape[1]):
        y_t, state = block.step(x[:, t], state)
        steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, 1), expected, rtol=0, atol=1e-12)


def test_mamba_dropout_at_the_ssp_input_drops_whole_features_of_the_conv_input():
    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), dropout=0.5, dropout_position="ssp_input")).train()
    seen = []
    branch = block.branches[0]
    forward = branch.gated_channels_first
    branch.gated_channels_first = lambda t, z: (seen.append(t), forward(t, z))[1]
    torch.manual_seed(3)
    block(torch.randn(3, 6, D))
    xi = seen[0]  # (B, d_inner, L)
    dropped = (xi == 0).all(dim=2)
    assert dropped.any() and (~dropped).any() and not ((xi == 0) & ~dropped[..., None]).any()
    with pytest.raises(ValueError, match="dropout_position"):
        MambaBlockConfig(dropout_position="after_gate")


@pytest.mark.parametrize("name", ["simple-s4d", "simple-s4", "mamba-s4d", "mamba-s4-bi"])
def test_plain_params_train_as_ordinary_weights(name):
    """ssp_plain_params=["C"] drops C's SSM tag (full lr, the run's weight decay), as S4's published code trains C;
    the other SSM parameters keep theirs, and the setting survives a config round trip."""
    import json

    from seqssm.models import SequenceModelConfig, build
    from seqssm.optim import param_groups

    model = build(name, d_input=1, n_classes=3, d_model=8, n_layers=2, d_state=4, ssp_plain_params=["C"])
    cs = [p for n, p in model.named_parameters() if n.endswith(".C")]
    assert cs and all(not hasattr(p, "_optim") for p in cs)
    groups = {(g["lr"], g["weight_decay"]): {id(p) for p in g["params"]} for g in param_groups(model, 0.01, 0.05)}
    assert all(id(p) in groups[(0.01, 0.05)] for p in cs)
    assert any(n.endswith(".log_dt") for n, p in model.named_parameters() if id(p) in groups[(0.001, 0.0)])
    config = model.config
    assert config.block.ssp.plain_params == ["C"]
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    assert SequenceModelConfig.from_dict(config.to_dict()) == config
    default = build(name, d_input=1, n_classes=3, d_model=8, n_layers=1, d_state=4)
    assert all(p._optim["ssm"] for n, p in default.named_parameters() if n.endswith(".C"))


def test_plain_params_name_a_tagged_parameter():
    from seqssm.models import build

    with pytest.raises(ValueError, match=r"S6 has no SSM parameter 'C'; its SSM parameters are \['A_log'\]"):
        build("mamba-s6", d_input=1, n_classes=3, d_model=8, n_layers=1, ssp_plain_params=["C"])
    with pytest.raises(ValueError, match="plain_params must be parameter names"):
        build("simple-s4d", d_input=1, n_classes=3, d_model=8, n_layers=1, ssp_plain_params=[3])


@pytest.mark.parametrize("position", ["ssp_output", "in_proj", "ssp_input"])
def test_mamba_channels_first_projection_equals_in_proj(position):
    """The CUDA layout of in_proj (W h^T, time-contiguous xi and z) gives in_proj's values, feature dropout
    included (the same seed drops the same features)."""
    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), dropout=0.3, dropout_position=position,
                                           proj_bias=True)).train()
    x = torch.randn(2, 7, D)
    torch.manual_seed(5)
    plain = block._project(x)
    torch.manual_seed(5)
    first = block._project(x, channels_first=True)
    for a, b in zip(plain, first):
        torch.testing.assert_close(b, a)
        assert b.transpose(1, 2).stride(-1) == 1  # time-contiguous, as the CUDA kernels read it


@pytest.mark.parametrize("bias", [False, True])
def test_mamba_channels_first_projection_backward_writes_no_activation_sized_tensor(bias):
    """The CUDA layout's in_proj backward: the gradients of x, in_proj's weight and bias equal in_proj's, and, given
    xi's and z's gradients laid out as the conv and scan kernels write them (like xi and z), no op writes a tensor of
    (d_inner, B L) elements or more (autograd's backward of chunk concatenated the two: a pass over the block's
    widest activation)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sizes = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and func.overloadpacket.__name__ not in ("view", "t", "permute", "detach"):
                    self.sizes[func.overloadpacket.__name__] = max(self.sizes.get(func.overloadpacket.__name__, 0),
                                                                    t.numel())
            return out

    block = MambaBlock(D, MambaBlockConfig(SSPConfig("s6", 4), proj_bias=bias)).double()
    h = torch.randn(3, 7, D, dtype=torch.float64, requires_grad=True)
    first, plain = block._project(h, channels_first=True), block._project(h)
    grads = [torch.empty_like(t).normal_() for t in first]
    largest = Largest()
    with largest:
        got = torch.autograd.grad(first, [h, *block.parameters()], grads, allow_unused=True)
    want = torch.autograd.grad(plain, [h, *block.parameters()], grads, allow_unused=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    activation = block.d_inner * 3 * 7
    assert largest.sizes and max(largest.sizes.values()) < activation, largest.sizes
    with torch.autocast("cpu", dtype=torch.bfloat16):  # mixed precision: bfloat16 products, float32 gradients
        block.float()
        first = block._project(h.detach().float().requires_grad_(), channels_first=True)
        plain = block._project(h.detach().float().requires_grad_())
    assert all(t.dtype == torch.bfloat16 for t in first)
    torch.testing.assert_close(first, plain)
    grads = [torch.randn(t.shape, dtype=torch.bfloat16) for t in first]
    got = torch.autograd.grad(first, list(block.parameters()), grads, allow_unused=True)
    want = torch.autograd.grad(plain, list(block.parameters()), grads, allow_unused=True)
    for g, w in zip(got, want):
        assert g is None or g.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "auto"])
@pytest.mark.parametrize("position", ["ssp_output", "in_proj"])
def test_mamba_block_on_cuda_equals_the_cpu_block(backend, position, monkeypatch):
    """The CUDA layout ((d_inner, B L) memory from in_proj to out_proj, the conv and scan kernels reading and
    writing it) gives the CPU block's outputs and every gradient; "auto" takes mamba_ssm's and causal_conv1d's
    kernels where they are installed, "triton" the Triton scan and conv (SEQSSM_BACKEND, which CPU tensors
    ignore without the interpreter)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("SEQSSM_BACKEND", backend)
    torch.manual_seed(0)
    config = MambaBlockConfig(SSPConfig("s6", 16, layer_kwargs={"backend": backend}), dropout=0.2,
                              dropout_position=position, proj_bias=True)
    block = MambaBlock(32, config).eval()
    x = torch.randn(3, 150, 32)
    outs = {}
    for device in ("cpu", "cuda"):
        model = block.to(device)
        model.branches[0].ssp.backend = backend if device == "cuda" else "auto"
        x_d = x.to(device).requires_grad_()
        y = model(x_d)
        grads = torch.autograd.grad(y.square().sum(), [x_d, *model.parameters()])
        outs[device] = [t.cpu() for t in (y, *grads)]
    for name, got, want in zip(["y", "x", *dict(block.named_parameters())], outs["cuda"], outs["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4, msg=lambda m: f"{name}: {m}")
