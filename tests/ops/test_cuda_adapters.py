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
from seqssm.ops.backend import Call, choose, optional_function
from seqssm.ops.conv1d import _causal_conv1d_package, _causal_conv1d_torch
from seqssm.ops.selective import _selective_scan_mamba, _SelectiveDetail, selective_scan_reference

CUDA = torch.device("cuda")


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Write stand-in packages under tmp_path: files {relative path: source}; the import caches are cleared
    before and after."""
    def clear():
        optional_function.cache_clear()
        for name in list(sys.modules):
            if name.split(".")[0] in ("mamba_ssm", "causal_conv1d"):
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
# mamba_ssm's contract as the adapter sees it: the last state in float32, and no gradient through it.
WORKING_MAMBA = {
    "mamba_ssm/__init__.py": "",
    "mamba_ssm/ops/__init__.py": "",
    "mamba_ssm/ops/selective_scan_interface.py": (
        "from seqssm.ops.selective import selective_scan_reference\n"
        "def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,\n"
        "                      return_last_state=False):\n"
        "    y, last = selective_scan_reference(u, delta, A, B, C, D, z, delta_bias, delta_softplus, True)\n"
        "    return (y, last.detach().float()) if return_last_state else y\n"
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


def test_causal_conv1d_gets_only_the_widths_and_layouts_its_kernel_takes(packages):
    packages({"causal_conv1d/__init__.py": "def causal_conv1d_fn(x, weight, bias=None):\n    raise AssertionError\n"})
    x = torch.zeros(2, 16, 10)
    assert choose("causal_conv1d", "auto", _conv_call(x, torch.zeros(16, 4))) is _causal_conv1d_package
    for weight in (torch.zeros(16, 5), torch.zeros(16, 1)):
        assert choose("causal_conv1d", "auto", _conv_call(x, weight)) is _causal_conv1d_torch
    with pytest.raises(RuntimeError, match="it takes kernel widths 2 to 4, not 5"):
        choose("causal_conv1d", "causal_conv1d", _conv_call(x, torch.zeros(16, 5)))
    channels_last = torch.zeros(2, 10, 16).transpose(1, 2)
    assert choose("causal_conv1d", "auto", _conv_call(channels_last, torch.zeros(16, 4))) is _causal_conv1d_package
    misaligned = torch.zeros(2, 10, 12).transpose(1, 2)
    with pytest.raises(RuntimeError, match="channels and strides in multiples of 8, got 12 channels"):
        choose("causal_conv1d", "causal_conv1d", _conv_call(misaligned, torch.zeros(12, 4)))
    strided = torch.zeros(2, 16, 20)[:, :, ::2]
    assert choose("causal_conv1d", "auto", _conv_call(strided, torch.zeros(16, 4))) is _causal_conv1d_torch


def test_broken_causal_conv1d_falls_back(packages, caplog):
    packages({"causal_conv1d/__init__.py": "import causal_conv1d_cuda\n"})
    with caplog.at_level(logging.WARNING, logger="seqssm.ops"):
        assert choose("causal_conv1d", "auto", _conv_call(torch.zeros(2, 16, 10), torch.zeros(16, 4))) \
            is _causal_conv1d_torch
    assert any("causal_conv1d.causal_conv1d_fn does not load (ModuleNotFoundError" in r.getMessage()
               for r in caplog.records)
