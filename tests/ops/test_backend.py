"""The backend registry: what "auto", SEQSSM_BACKEND and explicit choices pick, and the errors they give."""

import logging
import os
import subprocess
import sys

import pytest
import torch

import seqssm.ops.backend as backend_module
from seqssm.ops import backends, causal_conv1d, linear_scan, selective_scan
from seqssm.ops.backend import Backend, Call, choose, register
from seqssm.ops.conv1d import _causal_conv1d_torch
from seqssm.ops.linear import linear_scan_reference, linear_scan_torch
from seqssm.ops.selective import _selective_scan_mamba, _selective_scan_torch, _SelectiveDetail, selective_scan_reference

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _selective_call(device, dtype=torch.float32, initial_state=False, resets=False, delta_dtype=None,
                    last_state_grad=False):
    u = torch.zeros(1, 2, 3, dtype=dtype)
    delta = u.to(delta_dtype or dtype)
    A, B = torch.zeros(2, 4), torch.zeros(1, 4, 3, dtype=dtype)
    detail = _SelectiveDetail(u, delta, A, B, B, None, None, None, last_state_grad)
    return Call(device, (u.dtype, delta.dtype, A.dtype), initial_state, resets, detail=detail)


@pytest.fixture
def mamba_installed(monkeypatch):
    """Pretend mamba_ssm's CUDA kernels import (they cannot be built here)."""
    monkeypatch.setattr(backend_module, "has_mamba_ssm", lambda: True)


def test_auto_on_cpu_is_the_torch_path(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter is for tests: "auto" never picks it
    assert choose("selective_scan", "auto", _selective_call(CPU, resets=True)) is _selective_scan_torch
    assert choose("linear_scan", "auto", Call(CPU, (torch.complex64,), True, True)) is linear_scan_torch
    assert choose("causal_conv1d", "auto", Call(CPU, (torch.float32,), True, True)) is _causal_conv1d_torch


def test_auto_on_cuda_prefers_mamba_ssm_then_triton_then_torch(mamba_installed, monkeypatch):
    pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
    from seqssm.ops.triton_scan import linear_scan_triton, selective_scan_triton

    assert choose("selective_scan", "auto", _selective_call(CUDA)) is _selective_scan_mamba
    # What mamba_ssm cannot serve goes to Triton: an initial state, resets, float64, mixed dtypes, and a
    # last state whose gradient may be needed.
    for call in (_selective_call(CUDA, initial_state=True), _selective_call(CUDA, resets=True),
                 _selective_call(CUDA, dtype=torch.float64), _selective_call(CUDA, torch.bfloat16, delta_dtype=torch.float32),
                 _selective_call(CUDA, last_state_grad=True)):
        assert choose("selective_scan", "auto", call) is selective_scan_triton
    assert choose("linear_scan", "auto", Call(CUDA, (torch.complex64,), True, True)) is linear_scan_triton
    monkeypatch.setattr(backend_module, "has_triton", lambda: False)
    assert choose("selective_scan", "auto", _selective_call(CUDA, resets=True)) is _selective_scan_torch
    assert choose("linear_scan", "auto", Call(CUDA, (torch.float32,))) is linear_scan_torch


def test_environment_override(monkeypatch):
    monkeypatch.setenv("SEQSSM_BACKEND", "reference")
    assert choose("selective_scan", "auto", _selective_call(CPU)) is selective_scan_reference
    assert choose("linear_scan", "auto", Call(CPU, (torch.float32,))) is linear_scan_reference
    # A backend that cannot serve a call (or op) leaves the choice to "auto"; an explicit backend= wins.
    monkeypatch.setenv("SEQSSM_BACKEND", "mamba_ssm")
    assert choose("selective_scan", "auto", _selective_call(CPU)) is _selective_scan_torch
    assert choose("linear_scan", "auto", Call(CPU, (torch.float32,))) is linear_scan_torch
    assert choose("linear_scan", "reference", Call(CPU, (torch.float32,))) is linear_scan_reference
    monkeypatch.setenv("SEQSSM_BACKEND", "cuda")
    with pytest.raises(ValueError, match="SEQSSM_BACKEND='cuda' is not one of"):
        choose("linear_scan", "auto", Call(CPU, (torch.float32,)))


def test_explicit_backend_that_cannot_serve_the_call_says_why(mamba_installed):
    with pytest.raises(RuntimeError, match="backend 'mamba_ssm' cannot run this selective_scan call: it runs on"):
        choose("selective_scan", "mamba_ssm", _selective_call(CPU))
    with pytest.raises(RuntimeError, match="it takes no resets"):
        choose("selective_scan", "mamba_ssm", _selective_call(CUDA, resets=True))
    with pytest.raises(RuntimeError, match="it does not take torch.float64"):
        choose("selective_scan", "mamba_ssm", _selective_call(CUDA, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"unknown backend 'cuda' for linear_scan; choose one of \('auto', 'reference'"):
        linear_scan(torch.rand(1, 3, 2), torch.rand(1, 3, 2), backend="cuda")


def test_mamba_ssm_missing_is_named():
    if backend_module.has_mamba_ssm():
        pytest.skip("mamba_ssm is installed")
    with pytest.raises(RuntimeError, match=r"mamba_ssm is not installed: pip install 'seqssm\[cuda\]'"):
        selective_scan(torch.rand(1, 2, 3), torch.rand(1, 2, 3), -torch.rand(2, 4), torch.rand(1, 4, 3),
                       torch.rand(1, 4, 3), backend="mamba_ssm")


def test_every_op_lists_its_backends():
    assert backends("selective_scan") == ("auto", "reference", "mamba_ssm", "triton", "torch")
    assert backends("linear_scan") == ("auto", "reference", "triton", "torch")
    assert backends("causal_conv1d") == ("auto", "reference", "causal_conv1d", "triton", "torch")
    with pytest.raises(ValueError, match="already registered"):
        register(Backend("linear_scan", "torch", linear_scan_torch))


def test_choice_is_logged_once_per_op(caplog, monkeypatch):
    monkeypatch.setattr(backend_module, "_LOGGED", set())
    x, w = torch.rand(1, 2, 5), torch.rand(2, 3)
    with caplog.at_level(logging.INFO, logger="seqssm.ops"):
        for _ in range(3):
            causal_conv1d(x, w)
            linear_scan(torch.rand(1, 5, 2), torch.rand(1, 5, 2))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["seqssm.ops.causal_conv1d: using the 'torch' backend", "seqssm.ops.linear_scan: using the 'torch' backend"]


def test_seqssm_imports_and_runs_without_triton():
    """triton is optional: importing seqssm and the torch path must never need it."""
    code = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` fail
        "import torch, seqssm, seqssm.ops as ops\n"
        "from seqssm.ops.backend import has_triton\n"
        "h = ops.linear_scan(torch.rand(1, 4, 2), torch.rand(1, 4, 2), resets=torch.zeros(1, 4, dtype=torch.bool))\n"
        "assert h.shape == (1, 4, 2)\n"
        "assert 'triton' not in [m for m in sys.modules if sys.modules[m] is not None and m.startswith('triton')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_backends_imported_while_dynamo_traces_stay_in_one_graph():
    """Two ops whose backends ("module:function") are first imported inside one traced graph: no graph break. A
    dict that the import filled was read by dynamo as it stood before, and the second lookup was a KeyError and a
    break (Mamba-2 on CUDA, the Triton conv then the Triton SSD scan). A fresh process, so that neither is imported."""
    pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
    code = (
        "import torch\n"
        "from seqssm.ops import causal_conv1d, selective_scan\n"
        "def f(x, w, delta, A, B):\n"
        "    return selective_scan(causal_conv1d(x, w, backend='triton'), delta, A, B, B, backend='triton')\n"
        "x, delta = torch.randn(1, 2, 5), torch.rand(1, 2, 5)\n"
        "explained = torch._dynamo.explain(f)(x, torch.randn(2, 4), delta, -torch.rand(2, 3), torch.randn(1, 3, 5))\n"
        "print(explained.graph_count, explained.graph_break_count)\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    assert result.stdout.split()[-2:] == ["1", "0"], result.stdout + result.stderr


def test_a_backend_imported_on_first_use_lies_inside_seqssm():
    with pytest.raises(ValueError, match="inside seqssm"):
        register(Backend("selective_scan", "elsewhere", "json:dumps"))
    assert "elsewhere" not in backends("selective_scan")
