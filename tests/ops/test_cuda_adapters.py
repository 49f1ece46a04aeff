"""The adapters to mamba_ssm and causal_conv1d, with stand-in packages (the real ones need CUDA to build):
a broken install falls back with its reason logged once, availability imports exactly what the adapter
calls, the last state comes back in u's dtype, a last state that may need a gradient never goes to
mamba_ssm, and causal_conv1d is asked only for the widths and layouts its kernel takes."""

import logging
import sys

import pytest
import torch

import seqssm.ops.selective as selective_module
from seqssm.ops import selective_scan
from seqssm.ops.backend import Call, choose, has_triton, optional_function
from seqssm.ops.conv1d import _causal_conv1d_package, _causal_conv1d_torch, causal_conv1d_reference
from seqssm.ops.selective import _selective_scan_mamba, _SelectiveDetail, selective_scan_reference

CUDA = torch.device("cuda")


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Write stand-in packages under tmp_path: files {relative path: source}; the import caches are cleared
    before and after."""
    def clear():
        optional_function.cache_clear()
        for name in list(sys.modules):
            if name.split(".")[0] in ("mamba_ssm", "causal_conv1d", "selective_scan_cuda"):
                del sys.modules[name]

    def write(files: dict):
        for path, source in files.items():
            target = tmp_path / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source)
        clear()

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    clear()


BROKEN_MAMBA = {
    "mamba_ssm/__init__.py": "",
    "mamba_ssm/ops/__init__.py": "",
    "mamba_ssm/ops/selective_scan_interface.py": "raise OSError('libcudart.so.12: cannot open shared object file')\n",
}
# mamba_ssm's contract as the adapter sees it: the interface module that availability loads, and the kernel module
# `selective_scan_cuda` its selective_scan_fn calls (fwd -> out, x (chunk states, the last state in the odd slots of
# the last chunk, float32) [, out gated by z]; bwd -> du, ddelta, dA, dB, dC, dD, ddelta_bias [, dz], None for an
# absent D or delta_bias), here computed with the torch path's chunked scan and its backward.
KERNELS = """
import torch
import torch.nn.functional as F
from seqssm.ops.selective_chunked import chunked_backward, selective_scan_chunked


def _scan(u, delta, A, B, C, delta_bias, delta_softplus):
    # in at least float32, as the kernels compute
    u, delta, A, B, C = (t.to(torch.promote_types(t.dtype, torch.float32)) for t in (u, delta, A, B, C))
    pre = delta if delta_bias is None else delta + delta_bias[:, None]
    dt = F.softplus(pre) if delta_softplus else pre
    y, last, starts = selective_scan_chunked(u, dt, A, B, C, u.new_zeros(*u.shape[:2], A.shape[1]), None, 4, True)
    return pre, dt, y, last, starts


def fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
    _, _, out, last, _ = _scan(u, delta, A, B, C, delta_bias, delta_softplus)
    if D is not None:
        out = out + u * D[:, None]
    x = u.new_zeros(u.shape[0], u.shape[1], -(-u.shape[2] // 2048), 2 * A.shape[1], dtype=A.dtype)
    x[:, :, -1, 1::2] = last
    # laid out as the kernel allocates them: torch.empty_like(delta), and with z torch.empty_like(z)
    y = torch.empty_like(delta).copy_(out)
    return [y, x] if z is None else [y, x, torch.empty_like(z).copy_(out * F.silu(z))]


def bwd(u, delta, A, B, C, D, z, delta_bias, dout, x, out, dz, delta_softplus, recompute_out_z):
    pre, dt, y, last, starts = _scan(u, delta, A, B, C, delta_bias, delta_softplus)
    if z is not None:
        sig = torch.sigmoid(z)
        dz = dout * out * sig * (1 + z * (1 - sig))
        dout = dout * F.silu(z)
    du, ddt, dA, dB, dC, _ = chunked_backward(u, dt, A, B, C, None, starts, dout, torch.zeros_like(last), 4)
    ddelta = ddt * torch.sigmoid(pre) if delta_softplus else ddt
    dD = None if D is None else (dout * u).sum((0, 2))
    du = du if D is None else du + dout * D[:, None]
    ddelta_bias = None if delta_bias is None else ddelta.sum((0, 2))
    du, ddelta = torch.empty_like(u).copy_(du), torch.empty_like(delta).copy_(ddelta)
    dB, dC = dB.to(B.dtype), dC.to(C.dtype)
    return [du, ddelta, dA, dB, dC, dD, ddelta_bias] + ([torch.empty_like(z).copy_(dz)] if z is not None else [])
"""
WORKING_MAMBA = {
    "mamba_ssm/__init__.py": "",
    "mamba_ssm/ops/__init__.py": "",
    "mamba_ssm/ops/selective_scan_interface.py": "import selective_scan_cuda\ndef selective_scan_fn(*args):\n    pass\n",
    "selective_scan_cuda.py": KERNELS,
}
WORKING_CAUSAL_CONV1D = {
    "causal_conv1d/__init__.py": (
        "from seqssm.ops.conv1d import causal_conv1d_reference\n"
        "def causal_conv1d_fn(x, weight, bias=None, activation=None):\n"
        "    assert activation in (None, 'silu')\n"
        "    return causal_conv1d_reference(x, weight, bias, silu=activation == 'silu')\n"
    ),
}


# causal_conv1d >= 1.5's own backward (cpp_functions), as the adapter calls it; the calls are recorded.
CAUSAL_CONV1D_BACKWARD = {
    "causal_conv1d/cpp_functions.py": (
        "import torch\n"
        "import torch.nn.functional as F\n"
        "CALLS = []\n"
        "def causal_conv1d_bwd_function(x, weight, bias, dout, seq_idx, initial_states, dfinal_states, dx,\n"
        "                               return_dinitial_states, silu_activation):\n"
        "    CALLS.append((seq_idx, initial_states, dfinal_states, dx, return_dinitial_states, silu_activation))\n"
        "    k, length = weight.shape[1], x.shape[-1]\n"
        "    if silu_activation:  # the kernel recomputes the convolution for SiLU's derivative\n"
        "        v = F.conv1d(F.pad(x, (k - 1, 0)), weight.unsqueeze(1), bias, groups=weight.shape[0])\n"
        "        dout = dout * torch.sigmoid(v) * (1 + v * (1 - torch.sigmoid(v)))\n"
        "    # the adjoint as a correlation: dx[s] = sum_j w[j] dy[s + k - 1 - j]\n"
        "    dx = F.conv1d(F.pad(dout, (0, k - 1)), weight.flip(-1).unsqueeze(1), groups=weight.shape[0])\n"
        "    xp = F.pad(x, (k - 1, 0))\n"
        "    dw = torch.stack([(dout * xp[..., j:j + length]).sum((0, 2)) for j in range(k)], 1)\n"
        "    return dx, dw.float(), dout.sum((0, 2)).float() if bias is not None else None, None\n"
    ),
}


def _call(last_state_grad=False, dtype=torch.float32):
    u = torch.zeros(1, 2, 3, dtype=dtype)
    A, B = torch.zeros(2, 4), torch.zeros(1, 4, 3, dtype=dtype)
    detail = _SelectiveDetail(u, u, A, B, B, None, None, None, last_state_grad)
    return Call(CUDA, (dtype, dtype, torch.float32), detail=detail)


def test_broken_mamba_ssm_falls_back_and_says_why_once(packages, caplog):
    packages(BROKEN_MAMBA)
    with caplog.at_level(logging.WARNING, logger="seqssm.ops"):
        for _ in range(3):
            assert choose("selective_scan", "auto", _call()) is not _selective_scan_mamba
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "mamba_ssm.ops.selective_scan_interface.selective_scan_fn does not load (OSError: libcudart" in warnings[0]
    with pytest.raises(RuntimeError, match="does not load"):
        choose("selective_scan", "mamba_ssm", _call())


def test_missing_mamba_ssm_names_the_extra(packages):
    packages({})
    with pytest.raises(RuntimeError, match=r"mamba_ssm is not installed: pip install 'seqssm\[cuda\]'"):
        choose("selective_scan", "mamba_ssm", _call())


def test_mamba_ssm_gets_no_call_whose_last_state_may_need_a_gradient(packages):
    packages(WORKING_MAMBA)
    assert choose("selective_scan", "auto", _call()) is _selective_scan_mamba
    assert choose("selective_scan", "auto", _call(last_state_grad=True)) is not _selective_scan_mamba
    with pytest.raises(RuntimeError, match="its last state carries no gradient"):
        choose("selective_scan", "mamba_ssm", _call(last_state_grad=True))


def test_mamba_ssm_adapter_returns_the_state_in_u_dtype(packages):
    packages(WORKING_MAMBA)
    torch.manual_seed(0)
    u, delta = torch.randn(2, 4, 6, dtype=torch.bfloat16), torch.rand(2, 4, 6, dtype=torch.bfloat16)
    A, B, C = -torch.rand(4, 3), torch.randn(2, 3, 6, dtype=torch.bfloat16), torch.randn(2, 3, 6, dtype=torch.bfloat16)
    y, last = _selective_scan_mamba(u, delta, A, B, C, return_last_state=True)
    y_ref, last_ref = selective_scan_reference(u, delta, A, B, C, return_last_state=True)
    assert y.dtype == last.dtype == torch.bfloat16
    torch.testing.assert_close(last, last_ref)
    torch.testing.assert_close(y, y_ref)


def test_s6_asks_for_a_last_state_only_when_its_caller_wants_one(monkeypatch):
    """forward() needs no final state (so mamba_ssm may serve training); scan() returns one, which may need a
    gradient."""
    from seqssm.layers.s6 import S6

    seen = []
    real_choose = selective_module.choose

    def spy(op, backend, call):
        seen.append(call.detail.last_state_grad)
        return real_choose(op, backend, call)

    monkeypatch.setattr(selective_module, "choose", spy)
    layer = S6(8, d_state=4)
    x = torch.randn(2, 5, 8)
    layer(x).sum().backward()
    y, state = layer.scan(x)
    (y.sum() + state.sum()).backward()
    with torch.no_grad():
        layer.scan(x)
    assert seen == [False, True, False]


def test_the_last_state_gradient_survives_two_chained_scans():
    """scan(x) then scan(x2, state=last): the first scan's inputs get the gradient that flows through the state."""
    torch.manual_seed(0)
    u = torch.randn(1, 2, 4, dtype=torch.float64, requires_grad=True)
    delta, A = torch.rand(1, 2, 4, dtype=torch.float64), -torch.rand(2, 3, dtype=torch.float64)
    B, C = torch.randn(1, 3, 4, dtype=torch.float64), torch.randn(1, 3, 4, dtype=torch.float64)
    _, last = selective_scan(u, delta, A, B, C, return_last_state=True)
    y2 = selective_scan(u.detach(), delta, A, B, C, initial_state=last)
    (grad,) = torch.autograd.grad(y2.sum(), u)
    assert grad.abs().sum() > 0


def _conv_call(x, weight):
    return Call(CUDA, (x.dtype, weight.dtype), detail=(x, weight))


def _after_the_package():
    """auto's next choice on CUDA for a call the package refuses: the Triton kernels where triton is installed."""
    if not has_triton():
        return _causal_conv1d_torch
    from seqssm.ops.triton_conv import causal_conv1d_triton
    return causal_conv1d_triton


def test_causal_conv1d_gets_only_the_widths_and_layouts_its_kernel_takes(packages):
    packages({"causal_conv1d/__init__.py": "def causal_conv1d_fn(x, weight, bias=None):\n    raise AssertionError\n"})
    x = torch.zeros(2, 16, 10)
    assert choose("causal_conv1d", "auto", _conv_call(x, torch.zeros(16, 4))) is _causal_conv1d_package
    for weight in (torch.zeros(16, 5), torch.zeros(16, 1)):
        assert choose("causal_conv1d", "auto", _conv_call(x, weight)) is _after_the_package()
    with pytest.raises(RuntimeError, match="it takes kernel widths 2 to 4, not 5"):
        choose("causal_conv1d", "causal_conv1d", _conv_call(x, torch.zeros(16, 5)))
    channels_last = torch.zeros(2, 10, 16).transpose(1, 2)
    assert choose("causal_conv1d", "auto", _conv_call(channels_last, torch.zeros(16, 4))) is _causal_conv1d_package
    misaligned = torch.zeros(2, 10, 12).transpose(1, 2)
    with pytest.raises(RuntimeError, match="channels and strides in multiples of 8, got 12 channels"):
        choose("causal_conv1d", "causal_conv1d", _conv_call(misaligned, torch.zeros(12, 4)))
    strided = torch.zeros(2, 16, 20)[:, :, ::2]
    assert choose("causal_conv1d", "auto", _conv_call(strided, torch.zeros(16, 4))) is _after_the_package()


def test_broken_causal_conv1d_falls_back(packages, caplog):
    packages({"causal_conv1d/__init__.py": "import causal_conv1d_cuda\n"})
    with caplog.at_level(logging.WARNING, logger="seqssm.ops"):
        assert choose("causal_conv1d", "auto", _conv_call(torch.zeros(2, 16, 10), torch.zeros(16, 4))) \
            is _after_the_package()
    assert any("causal_conv1d.causal_conv1d_fn does not load (ModuleNotFoundError" in r.getMessage()
               for r in caplog.records)


def _mamba_inputs(dtype=torch.float64, device="cpu"):
    """A selective_scan_fn call with every optional input: u, delta, A, B, C, D, z, delta_bias (B 3-D, C 4-D)."""
    torch.manual_seed(0)
    b, d, n, length = 2, 4, 3, 6
    u, delta, z = torch.randn(b, d, length), torch.rand(b, d, length) - 0.5, torch.randn(b, d, length)
    A, D, delta_bias = -torch.rand(d, n) - 0.5, torch.randn(d), torch.randn(d)
    B, C = torch.randn(b, n, length), torch.randn(b, 1, n, length)
    return [t.to(device, dtype).requires_grad_() for t in (u, delta, A, B, C, D, z, delta_bias)]


def test_mamba_ssm_adapter_gives_the_reference_outputs_and_gradients(packages):
    packages(WORKING_MAMBA)
    inputs = _mamba_inputs()
    y = _selective_scan_mamba(*inputs, delta_softplus=True)
    y_ref = selective_scan_reference(*inputs, delta_softplus=True)
    torch.testing.assert_close(y, y_ref)
    weights = torch.randn_like(y)
    grads = torch.autograd.grad((y * weights).sum(), inputs)
    grads_ref = torch.autograd.grad((y_ref * weights).sum(), inputs)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref)


def test_mamba_ssm_ops_pass_opcheck(packages):
    """Schemas, fake implementations (shapes, strides, dtypes), autograd registration and AOT dispatch of both ops,
    with and without the optional inputs."""
    from seqssm.ops.cuda_packages import mamba_scan_backward_op, mamba_scan_op

    packages(WORKING_MAMBA)
    u, delta, A, B, C, D, z, delta_bias = _mamba_inputs()
    # (dim, batch, L) memory, as the Mamba block lays out u, delta and z on CUDA: outputs keep that layout
    u, delta, z = (t.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_() for t in (u, delta, z))
    for optional in ((D, z, delta_bias), (None, None, None)):
        torch.library.opcheck(mamba_scan_op, (u, delta, A, B, C, *optional, True))
        with torch.no_grad():
            y, _, x, out = mamba_scan_op(u, delta, A, B, C, *optional, True)
        saved = [None if t is None else t.detach() for t in (u, delta, A, B, C, *optional)]  # no double backward
        torch.library.opcheck(mamba_scan_backward_op, (*saved, True, x, out, torch.randn_like(y)))


def test_mamba_ssm_kernels_with_a_cu_seqlens_argument_get_it_as_none(packages):
    """Releases whose kernels take cu_seqlens (a tenth argument) are called with it None."""
    kernels = KERNELS.replace("def fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus):",
                              "def fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus, cu_seqlens):\n"
                              "    assert cu_seqlens is None")
    packages({**WORKING_MAMBA, "selective_scan_cuda.py": kernels})
    inputs = [t.detach() for t in _mamba_inputs()]
    torch.testing.assert_close(_selective_scan_mamba(*inputs), selective_scan_reference(*inputs))


def _conv_inputs(dtype=torch.float64, device="cpu"):
    torch.manual_seed(0)
    x = torch.randn(2, 10, 16, device=device, dtype=dtype).transpose(1, 2)  # channels-last, as the Mamba block's
    weight, bias = torch.randn(16, 4, device=device, dtype=dtype), torch.randn(16, device=device, dtype=dtype)
    return [t.requires_grad_() for t in (x, weight, bias)]


@pytest.mark.parametrize("silu", [False, True], ids=["plain", "silu"])
@pytest.mark.parametrize("own_backward", [False, True], ids=["adjoint", "package backward"])
def test_causal_conv1d_adapter_gives_the_reference_outputs_and_gradients(packages, own_backward, silu):
    """The gradient comes from the package's backward where it has one (called once, with no states, and with the
    activation when SiLU is asked for), else from the convolution's adjoint of the gradient through SiLU."""
    packages({**WORKING_CAUSAL_CONV1D, **(CAUSAL_CONV1D_BACKWARD if own_backward else {})})
    inputs = _conv_inputs()
    y, state = _causal_conv1d_package(*inputs, return_final_state=True, silu=silu)
    y_ref, state_ref = causal_conv1d_reference(*inputs, return_final_state=True, silu=silu)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(state, state_ref)
    weights = torch.randn_like(y)
    for g, g_ref in zip(torch.autograd.grad((y * weights).sum(), inputs),
                        torch.autograd.grad((y_ref * weights).sum(), inputs)):
        torch.testing.assert_close(g, g_ref)
    if own_backward:
        import causal_conv1d.cpp_functions

        assert causal_conv1d.cpp_functions.CALLS == [(None, None, None, None, False, silu)]


@pytest.mark.parametrize("own_backward", [False, True], ids=["adjoint", "package backward"])
def test_causal_conv1d_op_passes_opcheck(packages, own_backward):
    from seqssm.ops.cuda_packages import causal_conv1d_backward_op, causal_conv1d_package_op

    packages({**WORKING_CAUSAL_CONV1D, **(CAUSAL_CONV1D_BACKWARD if own_backward else {})})
    x, weight, bias = _conv_inputs()
    for args in ((x, weight, bias, True), (x.detach().contiguous(), weight, None, False)):
        torch.library.opcheck(causal_conv1d_package_op, args)
        plain = tuple(None if t is None else t.detach() for t in args[:3])  # a backward has no gradient of its own
        torch.library.opcheck(causal_conv1d_backward_op, (*plain, torch.randn_like(plain[0]), args[3]))


def _needs_package(check):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    function, why = check()
    if function is None:
        pytest.skip(why)


@pytest.mark.gpu
def test_mamba_ssm_kernels_compile_and_match_the_reference_on_cuda():
    """The real mamba_ssm: opcheck of both ops, outputs and gradients against the reference, and a Mamba-S6 model
    on the mamba_ssm backend compiled with fullgraph=True."""
    from seqssm.ops.backend import mamba_selective_scan
    from seqssm.ops.cuda_packages import mamba_scan_op

    _needs_package(mamba_selective_scan)
    u, delta, A, B, C, D, z, delta_bias = inputs = _mamba_inputs(torch.float32, "cuda")
    torch.library.opcheck(mamba_scan_op, (u, delta, A, B, C, D, z, delta_bias, True))
    y = _selective_scan_mamba(*inputs, delta_softplus=True)
    y_ref = selective_scan_reference(*inputs, delta_softplus=True)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    for g, g_ref in zip(torch.autograd.grad(y.sum(), inputs), torch.autograd.grad(y_ref.sum(), inputs)):
        torch.testing.assert_close(g, g_ref, rtol=1e-3, atol=1e-3)
    _compiles_in_one_graph("mamba_ssm")


@pytest.mark.gpu
def test_causal_conv1d_kernel_compiles_and_matches_the_reference_on_cuda():
    from seqssm.ops.backend import causal_conv1d_package
    from seqssm.ops.cuda_packages import causal_conv1d_package_op

    _needs_package(causal_conv1d_package)
    inputs = [t.float().detach().requires_grad_() for t in _conv_inputs(device="cuda")]
    torch.library.opcheck(causal_conv1d_package_op, (*inputs, True))
    y, y_ref = _causal_conv1d_package(*inputs, silu=True), causal_conv1d_reference(*inputs, silu=True)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    for g, g_ref in zip(torch.autograd.grad(y.sum(), inputs), torch.autograd.grad(y_ref.sum(), inputs)):
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-4)
    _compiles_in_one_graph("auto")


def _compiles_in_one_graph(backend: str):
    """A small Mamba-S6 model whose S6 layers use `backend`, on CUDA: compiled (fullgraph, aot_eager) forward and
    gradients equal eager ones."""
    from seqssm.models import build

    model = build("mamba-s6", d_input=3, n_classes=4, d_model=32, n_layers=2, dropout=0.0,
                  block={"ssp": {"layer_kwargs": {"backend": backend}}}).cuda()
    x = torch.randn(2, 64, 3, device="cuda")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    grads = torch.autograd.grad(y.square().sum(), list(model.parameters()))
    y_eager = model(x)
    grads_eager = torch.autograd.grad(y_eager.square().sum(), list(model.parameters()))
    torch.testing.assert_close(y, y_eager, rtol=1e-4, atol=1e-4)
    for g, g_eager in zip(grads, grads_eager):
        torch.testing.assert_close(g, g_eager, rtol=1e-3, atol=1e-3)
