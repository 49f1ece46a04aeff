"""The device of the Triton tests: the interpreter on CPU (TRITON_INTERPRET=1, set per test), or CUDA (marked `gpu`)."""

import pytest
import torch


@pytest.fixture(params=[pytest.param("cpu", id="interpreted"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)])
def device(request, monkeypatch):
    if request.param == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return torch.device(request.param)
