"""Bad input to every public layer and block (issue 19, "Layers and generation"): integer and bool inputs are
refused with the cast that fixes them, every floating dtype is accepted and comes back in its own dtype, empty
inputs give empty outputs and the state unchanged, and wrong shapes, states and flags name the expected and the
given shape. Every layer of the registry is covered, plus the Simple, Mamba, placebo, RoPE and bidirectional
blocks and block stacks."""

import re

import pytest
import torch

from seqssm.blocks import MambaBlock, SimpleBlock, make_stack
from seqssm.blocks.config import block_config
from seqssm import layers
from seqssm.errors import ConfigError
from seqssm.layers import LAYERS, S6, build_layer
from seqssm.layers.base import map_state
from seqssm.ops import selective_scan_reference
from seqssm.errors import InputDtypeError, InputShapeError
from seqssm.testing import assert_close_states

D = 4
BLOCKS = {
    "simple-s4d": lambda: SimpleBlock(D, block_config("simple", ssp="s4d", d_state=4)),
    "mamba-s6": lambda: MambaBlock(D, block_config("mamba", ssp="s6", d_state=3)),
    "mamba-s5-placebo": lambda: MambaBlock(D, block_config("mamba", ssp="s5", d_state=4, placebo=True)),
    "simple-s4d-rope": lambda: SimpleBlock(D, block_config("simple", ssp="s4d", d_state=4, rope={})),
    "mamba-s6-rope-BC": lambda: MambaBlock(D, block_config("mamba", ssp="s6", d_state=3, rope={"targets": ["B", "C"]})),
    "stack-mamba": lambda: make_stack("mamba", D, 2, d_state=3),
    "stack-simple-s5": lambda: make_stack("simple", D, 2, ssp="s5", d_state=4),
}
BIDIRECTIONAL = {
    "mamba-s6-bi": lambda: MambaBlock(D, block_config("mamba", ssp="s6", d_state=3, bidirectional=True)),
    "stack-mamba-bi": lambda: make_stack("mamba", D, 2, d_state=3, bidirectional=True),
}
MODULES = {**{name: (lambda name=name: build_layer(name, D, entry.test_size)) for name, entry in LAYERS.items()},
           **BLOCKS}


@pytest.fixture(params=list(MODULES))
def module(request):
    torch.manual_seed(0)
    module = MODULES[request.param]().eval()
    module.corpus_name = request.param
    return module


def output_dtype(module, dtype: torch.dtype) -> torch.dtype:
    """Layers answer in x's dtype. Blocks run their norms and projections in their (float32) weights' dtype:
    a Mamba block answers in its residual stream's dtype (x's promoted with the weights'), a post-norm Simple
    block and a stack (ending in a norm) in their norm's."""
    if module.corpus_name in LAYERS:
        return dtype
    if module.corpus_name.startswith("mamba"):
        return torch.promote_types(dtype, torch.float32)
    return torch.float32


def leaves(state):
    return [s for part in state for s in leaves(part)] if isinstance(state, (tuple, list)) else [state]


# --------------------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_and_bool_inputs_are_refused_with_the_cast_that_fixes_them(module, dtype):
    # Before: int64 into S4D / S5 came back int64 with every value truncated toward zero.
    x = torch.ones(2, 5, D, dtype=dtype)
    name = type(module).__name__
    for call, method in ((lambda: module(x), "forward"), (lambda: module.scan(x), "scan"),
                         (lambda: module.step(x[:, 0], None), "step")):
        with pytest.raises(InputDtypeError, match=rf"{name}\.{method}: x(_t)? has dtype {dtype}.*cast to float: x"):
            call()
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        module([[0.5] * D] * 5)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-5), (torch.float16, 3e-2), (torch.bfloat16, 1e-1)])
def test_every_floating_dtype_is_taken_and_comes_back_in_its_own_dtype(module, dtype, tol):
    x = torch.randn(2, 6, D).to(dtype)
    reference = module(x.float())  # the float32 model on the very same values
    y = module(x)
    assert y.dtype == output_dtype(module, dtype) and y.shape == x.shape
    torch.testing.assert_close(y.float(), reference, atol=tol, rtol=tol)
    y_scan, _ = module.scan(x)
    y_step, _ = module.step(x[:, 0], None)
    assert y_scan.dtype == y_step.dtype == y.dtype
    torch.testing.assert_close(y_scan.float(), reference, atol=tol, rtol=tol)


def test_s6_takes_float64_and_a_float64_s6_computes_in_float64():
    torch.manual_seed(0)
    layer = S6(D, d_state=3)
    x = torch.randn(2, 7, D, dtype=torch.float64)
    assert layer(x).dtype == torch.float64  # before: "expected m1 and m2 to have the same dtype"
    double = S6(D, d_state=3).double()
    with torch.no_grad():
        double.A_log.add_(1e-12)  # a change float32 cannot represent: it must reach the output
    assert double.A.dtype == double.initial_state(1).dtype == torch.float64
    delta, B, C = (t.transpose(1, 2) for t in double.project(x))
    expected = selective_scan_reference(x.transpose(1, 2), delta, double.A, B, C, double.D,
                                        delta_bias=double.dt_proj.bias, delta_softplus=True).transpose(1, 2)
    torch.testing.assert_close(double(x), expected, atol=1e-13, rtol=1e-12)
    torch.testing.assert_close(double(x.float()), expected.float())  # a float64 layer on float32 input


# ---------------------------------------------------------------------------------------------- empties


@pytest.mark.parametrize("batch,length", [(2, 0), (0, 5), (0, 0)])
def test_empty_in_empty_out(module, batch, length):
    x = torch.randn(batch, length, D)
    assert module(x).shape == (batch, length, D)
    y, state = module.scan(x)
    assert y.shape == (batch, length, D)
    assert_close_states(state, module.initial_state(batch), atol=0, rtol=0)
    flags = torch.ones(batch, length, dtype=torch.bool)
    y, _ = module.scan(x, None, resets=flags, mask=flags)
    assert y.shape == (batch, length, D)
    y_t, state_t = module.step(torch.randn(batch, D), module.initial_state(batch))
    assert y_t.shape == (batch, D) and [s.shape[0] for s in leaves(state_t)] == [batch] * len(leaves(state_t))


def test_an_empty_sequence_passes_the_state_through_unchanged(module):
    _, state = module.scan(torch.randn(2, 5, D))
    y, after = module.scan(torch.randn(2, 0, D), state)
    assert y.shape == (2, 0, D)
    assert_close_states(after, state, atol=0, rtol=0)


def test_batch_zero_gives_a_batch_zero_state(module):
    _, state = module.scan(torch.randn(0, 5, D), module.initial_state(0))
    assert all(s.shape[0] == 0 for s in leaves(state))
    assert [s.shape[1:] for s in leaves(state)] == [s.shape[1:] for s in leaves(module.initial_state(3))]


# ----------------------------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("shape", [(5, D), (2, 5, D + 1), (2, 5, D, 1)])
def test_x_of_the_wrong_rank_or_width_names_the_expected_and_given_shape(module, shape):
    x = torch.randn(shape)
    given = re.escape(str(shape))
    for call in (lambda: module(x), lambda: module.scan(x)):
        with pytest.raises(InputShapeError, match=rf"x must be \(batch, L, d_model\) = \(batch, L, {D}\), got {given}"):
            call()
    with pytest.raises(InputShapeError, match=rf"x_t must be \(batch, d_model\) = \(batch, {D}\), got \(2, {D + 1}\)"):
        module.step(torch.randn(2, D + 1), None)


def test_a_state_of_the_wrong_batch_shape_structure_or_kind_is_refused(module):
    x = torch.randn(2, 5, D)
    with pytest.raises(InputShapeError, match=r"state(\[\d\])* must have shape \(2, .*\) \(as initial_state\(2\) "
                                              r"gives it\), got \(3, "):
        module.scan(x, module.initial_state(3))
    with pytest.raises(InputShapeError, match=r"must have shape \(2, "):
        module.step(x[:, 0], module.initial_state(3))

    state = module.initial_state(2)
    first = leaves(state)[0]
    wider = torch.cat([first, first[..., :1]], dim=-1)
    with pytest.raises(InputShapeError, match=re.escape(f"got {tuple(wider.shape)}")):
        module.scan(x, _replace_first_leaf(state, wider))

    if first.is_complex():
        other_kind = first.real
    elif first.is_floating_point():
        other_kind = first.long()
    else:
        other_kind = first.float()
    with pytest.raises(InputDtypeError, match=rf"must be a \w+ tensor like initial_state's .*got {other_kind.dtype}"):
        module.scan(x, _replace_first_leaf(state, other_kind))

    wrong_structure = (state, state) if isinstance(state, torch.Tensor) else state[0]
    with pytest.raises(InputShapeError):
        module.scan(x, wrong_structure)

    # What initial_state gives, in another precision, is a valid state.
    lower = map_state(lambda s: s.to(torch.complex64 if s.is_complex() else s.dtype), state)
    module.scan(x, lower)


def _replace_first_leaf(state, leaf):
    if isinstance(state, (tuple, list)):
        return type(state)([_replace_first_leaf(state[0], leaf), *state[1:]])
    return leaf


def test_resets_and_mask_of_the_wrong_shape_or_dtype(module):
    x = torch.randn(2, 5, D)
    for name in ("resets", "mask"):
        with pytest.raises(InputShapeError, match=rf"{name} must have shape \(batch, L\) = \(2, 5\), got \(5, 2\)"):
            module.scan(x, None, **{name: torch.ones(5, 2, dtype=torch.bool)})
        # A float mask must not become bool by truthiness (0.3 -> True): it is refused.
        with pytest.raises(InputDtypeError, match=rf"{name} must be bool .* got torch.float32"):
            module.scan(x, None, **{name: torch.full((2, 5), 0.3)})
        with pytest.raises(InputDtypeError, match=rf"{name} of dtype torch.int64 must hold only 0 and 1"):
            module.scan(x, None, **{name: torch.full((2, 5), 2)})
    # Integer 0/1 flags (a tokenizer's attention mask) read as bool.
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    resets = torch.tensor([[0, 0, 1, 0, 0], [0, 1, 0, 0, 0]])
    y_int, s_int = module.scan(x, None, resets=resets, mask=mask)
    y_bool, s_bool = module.scan(x, None, resets=resets.bool(), mask=mask.bool())
    torch.testing.assert_close(y_int, y_bool, atol=0, rtol=0)
    assert_close_states(s_int, s_bool, atol=0, rtol=0)


def test_step_without_a_state_starts_from_zeros(module):
    x_t = torch.randn(2, D)
    y0, s0 = module.step(x_t, None)
    y1, s1 = module.step(x_t, module.initial_state(2))
    torch.testing.assert_close(y0, y1, atol=0, rtol=0)
    assert_close_states(s0, s1, atol=0, rtol=0)


# ------------------------------------------------------------------------------------ bidirectional blocks


@pytest.mark.parametrize("name", list(BIDIRECTIONAL))
def test_bidirectional_blocks_check_forward_and_refuse_scan_and_step(name):
    block = BIDIRECTIONAL[name]().eval()
    assert block(torch.randn(2, 0, D)).shape == (2, 0, D)
    assert block(torch.randn(0, 5, D)).shape == (0, 5, D)
    assert block(torch.randn(2, 5, D), lengths=torch.tensor([5, 3])).shape == (2, 5, D)
    with pytest.raises(InputDtypeError, match="cast to float"):
        block(torch.ones(2, 5, D, dtype=torch.long))
    with pytest.raises(InputShapeError, match=r"got \(2, 5, 3\)"):
        block(torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, L\] = \[0, 5\], got values from 3 to 9"):
        block(torch.randn(2, 5, D), lengths=torch.tensor([9, 3]))
    with pytest.raises(InputShapeError, match=r"lengths must be \(batch,\) = \(2,\), got \(3,\)"):
        block(torch.randn(2, 5, D), lengths=torch.tensor([5, 3, 1]))
    with pytest.raises(InputDtypeError, match="lengths must be an integer tensor"):
        block(torch.randn(2, 5, D), lengths=torch.tensor([5.0, 3.0]))
    for call in (lambda: block.scan(torch.randn(2, 5, D)), lambda: block.step(torch.randn(2, D), None),
                 lambda: block.initial_state(2)):
        with pytest.raises(NotImplementedError, match="bidirectional"):
            call()


def test_inner_calls_skip_the_checks_but_an_error_inside_leaves_the_next_call_checked(monkeypatch):
    stack = make_stack("mamba", D, 2, d_state=3).eval()
    state = stack.initial_state(2)  # per block: (conv state, S6 state)
    with pytest.raises(InputShapeError, match=r"BlockStack.scan: state\[1\]\[1\] must have shape \(2, 8, 3\) "
                                              r"\(as initial_state\(2\) gives it\), got \(2, 1, 3\)"):
        stack.scan(torch.randn(2, 5, D), (state[0], (state[1][0], state[1][1][:, :1])))

    def broken(*args):
        raise RuntimeError("inside")

    monkeypatch.setattr(stack.layers[1], "_forward", broken)
    with pytest.raises(RuntimeError, match="inside"):
        stack(torch.randn(2, 5, D))
    with pytest.raises(InputDtypeError, match="cast to float"):
        stack(torch.ones(2, 5, D, dtype=torch.long))


# --------------------------------------------------------------------------------------------- sizes (issue 27)

BAD_SIZES = [  # (what the error names, constructor, the bad argument, its value)
    ("S4", layers.S4, "d_model", 0), ("S4", layers.S4, "d_state", 0),
    ("S4D", layers.S4D, "d_model", -3), ("S4D", layers.S4D, "d_state", 0),
    ("S5", layers.S5, "d_state", 0), ("S5", layers.S5, "blocks", 0),
    ("S6", S6, "d_model", 0), ("S6", S6, "d_state", 0), ("S6", S6, "dt_rank", 0), ("S6", S6, "d_model", 4.5),
    ("LSSL", layers.LSSL, "d_state", 0), ("LSSLf", layers.LSSLf, "d_model", 0),
    ("MinGRU", layers.MinGRU, "d_hidden", 0), ("GRU", layers.GRU, "d_model", -1),
    ("KalmanLayer", layers.KalmanLayer, "d_state", 0), ("vSSM", layers.vSSM, "d_model", 0),
    ("KalmanNoInput", layers.KalmanNoInput, "d_state", 0),
    ("CausalTransformer", layers.CausalTransformer, "n_heads", 0),
    ("CausalTransformer", layers.CausalTransformer, "d_ff", 0),
    ("CausalTransformer", layers.CausalTransformer, "n_layers", True),
    ("RoPE", layers.RoPE, "dim", 0),
    ("MambaBlock", MambaBlock, "d_model", 0), ("SimpleBlock", SimpleBlock, "d_model", 0),
    ("MambaBlockConfig", lambda **kw: block_config("mamba", **kw), "expand", 0),
    ("MambaBlockConfig", lambda **kw: block_config("mamba", **kw), "d_conv", 0),
    ("make_stack", lambda **kw: make_stack("mamba", **{"d_model": D, "n_layers": 2, **kw}), "n_layers", 0),
    ("make_stack", lambda **kw: make_stack("simple", **{"d_model": D, "n_layers": 2, **kw}), "d_model", 0),
]


@pytest.mark.parametrize("owner,build,name,value", BAD_SIZES, ids=[f"{o}-{n}={v}" for o, _, n, v in BAD_SIZES])
def test_constructors_refuse_sizes_below_one_naming_the_argument_and_value(owner, build, name, value):
    # Before: S6(d_model=0) raised ZeroDivisionError, S4D(d_state=0) an empty-reduction error from torch.
    sizes = {"d_model": D} if owner not in ("RoPE", "MambaBlockConfig", "make_stack") else {}
    sizes = {"dim": D} if owner == "RoPE" else sizes
    with pytest.raises(ConfigError, match=rf"^{owner}: {name} must be an integer >= \d, got {re.escape(repr(value))}$"):
        build(**{**sizes, name: value})


def test_a_transformer_width_must_split_into_its_heads():
    with pytest.raises(ConfigError, match="d_model = 6 must split into n_heads = 4"):
        layers.CausalTransformer(6, n_heads=4)


@pytest.mark.parametrize("batch_size", [-1, 2.5, "2", None])
def test_initial_state_refuses_a_batch_size_that_is_no_integer_at_least_zero(module, batch_size):
    # Before: initial_state(-1) raised torch's "negative dimension -1"; 2.5 a TypeError from torch.zeros.
    name = type(module).__name__
    with pytest.raises(ConfigError, match=rf"^{name}\.initial_state: batch_size must be an integer >= 0, "
                                          rf"got {re.escape(repr(batch_size))}$"):
        module.initial_state(batch_size)
    assert all(leaf.shape[0] == 0 for leaf in leaves(module.initial_state(0)))
    assert all(leaf.shape[0] == 3 for leaf in leaves(module.initial_state(3)))


# ------------------------------------------------------------------------- non-finite inputs (issue 27)
# The FFT convolution of S4 / S4D / LSSL used to spread one inf or NaN to every output, the earlier ones too;
# now they give what the recurrence gives: NaN from the bad step on, in that sequence and channel only.

BAD_STEPS = ((1, 5, 2, float("inf")), (0, 7, 0, float("nan")))  # (batch index, time step, channel, value)


def with_bad_steps(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    for b, t, h, value in BAD_STEPS:
        x[b, t, h] = value
    return x


def step_loop(layer, x):
    state, ys = None, []
    for t in range(x.shape[1]):
        y_t, state = layer.step(x[:, t], state)
        ys.append(y_t)
    return torch.stack(ys, 1)


@pytest.mark.parametrize("name", ["s4d", "s4", "lssl"])
def test_a_non_finite_input_step_leaves_every_earlier_output_as_the_recurrence_gives_it(name):
    torch.manual_seed(0)
    layer = build_layer(name, D, 8).double()
    x = with_bad_steps(torch.randn(2, 12, D, dtype=torch.float64))
    expected_bad = torch.zeros(2, 12, D, dtype=torch.bool)
    for b, t, h, _ in BAD_STEPS:
        expected_bad[b, t:, h] = True
    reference = step_loop(layer, x)
    for y in (layer(x), layer.scan(x)[0]):  # the zero-state FFT path and the scan's FFT path
        assert torch.equal(~torch.isfinite(y), expected_bad) and torch.equal(~torch.isfinite(reference), expected_bad)
        torch.testing.assert_close(y[~expected_bad], reference[~expected_bad], atol=1e-9, rtol=1e-7)
    assert not torch.isfinite(layer.scan(x)[1][:, 0]).all()  # the final state carries it, as the recurrence's
    # with resets (LSSL's Toeplitz product used to spread it over the whole sequence). Whether the reset at 9 clears
    # the NaN from the state is the scan's: LSSL's recurrence zeroes the state, linear_scan multiplies it by 0.
    resets = torch.zeros(2, 12, dtype=torch.bool)
    resets[:, 9] = True
    y = layer.scan(x, resets=resets)[0]
    before, bad = y[:, :9], expected_bad[:, :9]
    assert torch.isfinite(before[~bad]).all() and not torch.isfinite(before[bad]).any()
    torch.testing.assert_close(before[~bad], reference[:, :9][~bad], atol=1e-9, rtol=1e-7)
    after, fresh = y[:, 9:], step_loop(layer, x[:, 9:])
    torch.testing.assert_close(after[torch.isfinite(after)], fresh[torch.isfinite(after)], atol=1e-9, rtol=1e-7)


def test_a_transformer_sees_a_non_finite_input_only_while_it_is_in_its_window():
    # Before: a blocked key entered attention with weight 0, and 0 x inf made every output of the sequence NaN.
    torch.manual_seed(0)
    layer = layers.CausalTransformer(D, context=4).double().eval()
    x = with_bad_steps(torch.randn(2, 12, D, dtype=torch.float64))
    expected_bad = torch.zeros(2, 12, dtype=torch.bool)
    for b, t, _, _ in BAD_STEPS:
        expected_bad[b, t : t + 4] = True  # the queries whose window of 4 holds it, every channel
    reference = step_loop(layer, x)
    first, state = layer.scan(x[:, :6])
    for y in (layer(x), layer.scan(x)[0], torch.cat([first, layer.scan(x[:, 6:], state)[0]], 1), reference):
        assert torch.equal(~torch.isfinite(y).all(-1), expected_bad) and torch.isfinite(y[~expected_bad]).all()
        torch.testing.assert_close(y[~expected_bad], reference[~expected_bad], atol=1e-9, rtol=1e-7)
    resets = torch.zeros(2, 12, dtype=torch.bool)
    resets[:, 6] = True  # hides what came before: the inf at step 5 of sequence 1 is out of view from step 6 on
    y = layer.scan(x, resets=resets)[0]
    assert torch.equal(~torch.isfinite(y).all(-1), expected_bad & ((torch.arange(12) < 6) | torch.tensor([[True], [False]])))


def test_a_block_stack_keeps_the_outputs_before_a_non_finite_step_finite():
    torch.manual_seed(0)
    stack = make_stack("simple", D, 2, ssp="s4d", d_state=4).eval()
    y = stack(with_bad_steps(torch.randn(2, 12, D)))
    # the GLU and the norm mix channels: from the bad step on every channel of that sequence is NaN; before it none
    assert torch.isfinite(y[1, :5]).all() and torch.isfinite(y[0, :7]).all()
    assert not torch.isfinite(y[1, 5:]).any() and not torch.isfinite(y[0, 7:]).any()


def test_the_finite_path_costs_one_reduction_and_the_other_path_runs_only_when_needed(monkeypatch):
    from seqssm.ops import fftconv

    calls = []
    real = fftconv._causal_in_non_finite
    monkeypatch.setattr(fftconv, "_causal_in_non_finite", lambda *a: calls.append(1) or real(*a))
    u, k = torch.randn(2, 16, 3, dtype=torch.float64), torch.randn(3, 16, dtype=torch.float64)
    plain = fftconv.fft_conv(u, k)
    assert calls == []
    fftconv.fft_conv(with_bad_steps(torch.randn(2, 12, D)), torch.randn(D, 12))
    assert calls == [1]
    # compiled graphs always take the non-finite-safe path: the same numbers for finite inputs
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.testing.assert_close(fftconv.fft_conv(u, k), plain, atol=1e-12, rtol=1e-12)


def test_non_finite_inputs_under_autocast_and_torch_compile():
    torch.manual_seed(0)
    layer = build_layer("s4d", D, 8)
    x = with_bad_steps(torch.randn(2, 16, D))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert torch.isfinite(y[1, :5]).all() and torch.isfinite(y[0, :7]).all() and not torch.isfinite(y[1, 5:, 2]).any()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)  # fullgraph: no graph break on the check
    torch.testing.assert_close(compiled(x), layer(x), equal_nan=True)
