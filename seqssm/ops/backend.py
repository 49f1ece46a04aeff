"""Backend choice for the ops: "auto", "reference", "torch", "mamba_ssm".

"auto" picks the mamba_ssm CUDA kernels when they are installed and the tensors live on CUDA,
else the fast pure-PyTorch path. `SEQSSM_BACKEND` overrides "auto" for the whole process.
The choice made for each op is logged once.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os

import torch

log = logging.getLogger("seqssm.ops")

BACKENDS = ("auto", "reference", "torch", "mamba_ssm")


@functools.lru_cache(maxsize=None)
def extension_imports(package: str, module: str) -> bool:
    """True when the optional `package` is installed and its `module` imports (a compiled extension may be
    installed yet fail to load, e.g. against another torch)."""
    if importlib.util.find_spec(package) is None:
        return False
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def has_mamba_ssm() -> bool:
    """True when mamba_ssm's compiled selective-scan kernels (its `selective_scan_cuda` extension) import."""
    return extension_imports("mamba_ssm", "selective_scan_cuda")


@functools.lru_cache(maxsize=None)
def _log_choice(op: str, backend: str) -> None:
    log.info("seqssm.ops.%s: using the %r backend", op, backend)


def resolve_backend(op: str, backend: str, device: torch.device, *, cuda_ok: bool = True) -> str:
    """Turn a requested backend into the one that runs for `op` on tensors on `device`.

    `cuda_ok=False` says this op or this call has no CUDA kernel (no such op in mamba_ssm, or
    initial state / resets requested): "auto" and SEQSSM_BACKEND=mamba_ssm then fall back to
    "torch", while an explicit backend="mamba_ssm" is an error.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} for {op}; choose one of {BACKENDS}")
    if backend == "auto":
        backend = os.environ.get("SEQSSM_BACKEND", "auto")
        if backend not in BACKENDS:
            raise ValueError(f"SEQSSM_BACKEND={backend!r} is not one of {BACKENDS}")
        if backend == "mamba_ssm" and not cuda_ok:
            backend = "torch"
    if backend == "auto":
        backend = "mamba_ssm" if (cuda_ok and device.type == "cuda" and has_mamba_ssm()) else "torch"
    if backend == "mamba_ssm":
        if not has_mamba_ssm():
            raise RuntimeError("backend 'mamba_ssm' requested but mamba_ssm is not installed: pip install 'seqssm[cuda]'")
        if device.type != "cuda":
            raise RuntimeError("backend 'mamba_ssm' needs CUDA tensors; use backend='torch' on CPU")
        if not cuda_ok:
            raise RuntimeError("backend 'mamba_ssm' supports neither initial_state nor resets; use backend='torch'")
    _log_choice(op, backend)
    return backend
