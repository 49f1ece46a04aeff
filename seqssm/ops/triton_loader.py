"""Loading the Triton kernel files of `seqssm.ops`, compiled or interpreted, and launching their kernels.

Triton fixes whether a kernel is compiled or interpreted when it decorates the function, so each kernel file
(`triton_kernels.py`, `triton_ssd_kernels.py`) is loaded once per mode as a module of its own: both modes can
live in one process (CUDA tensors compiled, CPU tensors interpreted under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os

import torch
import triton

from seqssm.ops.backend import triton_interpreting


@functools.lru_cache(maxsize=None)
def load_kernels(filename: str, interpret: bool):
    """The kernel file `filename` of seqssm/ops as a module, its kernels compiled or interpreted."""
    path = os.path.join(os.path.dirname(__file__), filename)
    mode = "interpreted" if interpret else "compiled"
    spec = importlib.util.spec_from_file_location(f"seqssm.ops._{filename.removesuffix('.py')}_{mode}", path)
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        spec.loader.exec_module(module)
    return module


# The compile check's recorder (`recording`), None otherwise.
_recorder = None


@contextlib.contextmanager
def recording(record):
    """Inside, `launch` calls record(kernel, grid, *args, **kwargs) instead of running the kernel, and `kernels_for`
    gives the compiled kernels on any device: the compile check (`seqssm.ops.triton_aot`) collects the launches the
    launchers make on meta tensors."""
    global _recorder
    previous, _recorder = _recorder, record
    try:
        yield
    finally:
        _recorder = previous


def kernels_for(filename: str, device: torch.device):
    """(the kernels of `filename` for tensors on `device`, interpreted?): interpreted on CPU, and everywhere under
    TRITON_INTERPRET=1; compiled while `recording`."""
    interpret = _recorder is None and interpreted(device)
    return load_kernels(filename, interpret), interpret


def interpreted(device: torch.device) -> bool:
    """Do kernels run interpreted for tensors on `device`? On CPU, and everywhere under TRITON_INTERPRET=1."""
    return device.type == "cpu" or triton_interpreting()


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of ints, for launchers: `triton.cdiv` is a constexpr function, whose call from Python costs some
    microseconds (about 5 on a 2-core CPU), and a launch of a small RL update's scan made several."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The least power of two >= n for n >= 1 (0 for 0), as `triton.next_power_of_2` gives it, at a plain int's cost
    (see `cdiv`)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def launch(kernel, grid, *args, **kwargs) -> None:
    """Launch `kernel` on `grid`; every launcher launches through here, so that `recording` sees each launch."""
    if _recorder is not None:
        _recorder(kernel, grid, *args, **kwargs)
        return
    kernel[grid](*args, **kwargs)
