"""The backend registry of the ops: each op lists its implementations and what each can serve.

    choose("selective_scan", backend, Call(...)) -> the function that runs this call

backend="auto" takes the first installed implementation, in registration order, that is meant
for the tensors' device and can serve the call: the mamba_ssm / causal_conv1d CUDA kernels, then
Triton, on CUDA; the pure-PyTorch path elsewhere ("reference" never runs on "auto").
`SEQSSM_BACKEND=name` replaces "auto" for the whole process wherever that backend can serve the
call, and "auto" decides where it cannot. An explicit backend= that cannot serve the call is an
error naming why. The choice made for each op is logged once.

`choose` is traceable by torch.compile without a graph break: it reads dicts and the tensors' metadata, and
what it cannot trace (whether a package imports, the log line) runs in `torch.compiler.assume_constant_result`
helpers, which dynamo calls once while tracing and whose results it keeps as constants.

Capabilities are what differs between implementations: devices, dtypes (complex ones included),
an initial state, resets, and an op-specific check of the arguments. Every implementation has
gradients for all its inputs, and masks (right padding in RL) reach the ops as inputs (Δ = 0 for
the selective scan; a = 1, b = 0 for the linear scan), so neither is a capability.

Adding a backend: write the op's full public signature in one module and `register` it beside
the op, naming the function "module:function" (a module of seqssm) so that its imports (triton, a
CUDA extension) happen only when it first runs.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import seqssm

log = logging.getLogger("seqssm.ops")

REAL = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
COMPLEX = frozenset({torch.complex64, torch.complex128})
NEVER = frozenset()  # auto_devices of a backend that "auto" never picks (the references)
CUDA = frozenset({"cuda"})


@dataclass(frozen=True)
class Call:
    """What one call asks of a backend: its device, the dtypes of its floating inputs, whether it
    carries an initial state or resets, and op-specific `detail` read by a backend's `check`."""

    device: torch.device
    dtypes: tuple
    initial_state: bool = False
    resets: bool = False
    detail: Any = None


@dataclass(frozen=True)
class Backend:
    """One implementation of `op`. `target` is the function or "module:function"; `devices` are the
    device types it runs on and `auto_devices` those on which "auto" may pick it (None: any);
    `available` returns why it is not installed (None when it is); `check` returns why it cannot
    serve a call (None when it can)."""

    op: str
    name: str
    target: str | Callable
    devices: frozenset | None = None
    auto_devices: frozenset | None = None
    dtypes: frozenset = REAL
    initial_state: bool = True
    resets: bool = True
    available: Callable[[], str | None] = field(default=lambda: None)
    check: Callable[[Call], str | None] | None = None

    def why_not(self, call: Call) -> str | None:
        """Why this backend cannot run `call`, or None when it can."""
        missing = _missing(self.op, self.name)
        if missing:
            return missing
        if self.devices is not None and call.device.type not in self.devices:
            return f"it runs on {sorted(self.devices)} tensors, not {call.device.type}"
        bad = sorted({str(d) for d in call.dtypes if d not in self.dtypes})
        if bad:
            return f"it does not take {', '.join(bad)} inputs"
        if call.initial_state and not self.initial_state:
            return "it takes no initial_state"
        if call.resets and not self.resets:
            return "it takes no resets"
        return self.check(call) if self.check else None

    @property
    def function(self) -> Callable:
        """The implementation: `target`, or the function that "module:function" names, imported on first use."""
        if callable(self.target):
            return self.target
        module, name = self.target.split(":")
        _import(module)
        # From the package down through module attributes, which dynamo reads as they are: a dict such as sys.modules
        # it copies once per graph, blind to what _import adds while it traces (a graph's second module imported so
        # was a KeyError, and a graph break).
        return getattr(functools.reduce(getattr, module.split(".")[1:], seqssm), name)


_REGISTRY: dict[str, list[Backend]] = {}


@torch.compiler.assume_constant_result
def _import(module: str) -> bool:
    """Import `module` (outside any graph dynamo traces: dynamo calls this once while tracing)."""
    importlib.import_module(module)
    return True


def register(backend: Backend) -> Backend:
    """Add `backend` to its op's list; "auto" prefers earlier registrations."""
    if isinstance(backend.target, str) and not backend.target.startswith("seqssm."):
        raise ValueError(f"backend target {backend.target!r}: a \"module:function\" target lies inside seqssm")
    impls = _REGISTRY.setdefault(backend.op, [])
    if any(b.name == backend.name for b in impls):
        raise ValueError(f"backend {backend.name!r} is already registered for {backend.op}")
    impls.append(backend)
    return backend


def backends(op: str) -> tuple[str, ...]:
    """The backend names `op` accepts, "auto" first."""
    return ("auto", *(b.name for b in _REGISTRY[op]))


_LOGGED: set[tuple[str, str]] = set()  # (op, backend) pairs whose choice has been logged


@torch.compiler.assume_constant_result
def _log_choice(op: str, backend: str) -> bool:
    """Log the first choice of `backend` for `op`. Under torch.compile it runs once, while dynamo traces, so no
    compiled graph holds a logging call."""
    if (op, backend) not in _LOGGED:
        _LOGGED.add((op, backend))
        log.info("seqssm.ops.%s: using the %r backend", op, backend)
    return True


@torch.compiler.assume_constant_result
def _missing(op: str, name: str) -> str | None:
    """Why backend `name` of `op` is not installed (None when it is): its `available()`, which imports packages,
    so that dynamo asks it while tracing instead of tracing it."""
    return next(b for b in _REGISTRY[op] if b.name == name).available()


def choose(op: str, backend: str, call: Call) -> Callable:
    """The function of the backend that runs this call of `op` (see the module docstring)."""
    impls = {b.name: b for b in _REGISTRY[op]}
    if backend != "auto" and backend not in impls:
        raise ValueError(f"unknown backend {backend!r} for {op}; choose one of {backends(op)}")
    if backend == "auto":
        chosen = None
        env = os.environ.get("SEQSSM_BACKEND", "auto")
        if env != "auto":
            known = {b.name for impls_ in _REGISTRY.values() for b in impls_}
            if env not in known:
                raise ValueError(f"SEQSSM_BACKEND={env!r} is not one of {sorted(known)} (or 'auto')")
            if env in impls and impls[env].why_not(call) is None:
                chosen = impls[env]
        if chosen is None:
            capable = (
                b for b in impls.values()
                if (b.auto_devices is None or call.device.type in b.auto_devices) and b.why_not(call) is None
            )
            chosen = next(capable, None)
        if chosen is None:
            reasons = "; ".join(f"{b.name}: {b.why_not(call)}" for b in impls.values())
            raise RuntimeError(f"no backend of {op} can run this call ({reasons})")
    else:
        chosen = impls[backend]
        reason = chosen.why_not(call)
        if reason:
            raise RuntimeError(f"backend {backend!r} cannot run this {op} call: {reason}")
    _log_choice(op, chosen.name)
    return chosen.function


@functools.lru_cache(maxsize=None)
def optional_function(module: str, name: str) -> tuple[Callable | None, str | None]:
    """(`module.name`, None) when the optional CUDA package behind it loads, else (None, why not).

    The backends call exactly the function this returns, so that "available" means "this import works":
    a package can be installed yet fail to load (built against another torch, a missing CUDA library).
    Such a failure is logged once, with its reason, and the registry falls back to the next backend."""
    package = module.split(".")[0]
    try:
        installed = importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # e.g. a None entry in sys.modules
        installed = False
    if not installed:
        return None, f"{package} is not installed: pip install 'seqssm[cuda]'"
    try:
        return getattr(importlib.import_module(module), name), None
    except Exception as err:  # ImportError, OSError (undefined symbols), RuntimeError, AttributeError, ...
        why = f"{package} is installed but {module}.{name} does not load ({type(err).__name__}: {err})"
        log.warning("seqssm.ops: %s; using the next backend", why)
        return None, why


def mamba_selective_scan():
    """(mamba_ssm's `selective_scan_fn`, None), or (None, why it does not load)."""
    return optional_function("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn")


def causal_conv1d_package():
    """(the `causal_conv1d` package's `causal_conv1d_fn`, None), or (None, why it does not load)."""
    return optional_function("causal_conv1d", "causal_conv1d_fn")


def has_mamba_ssm() -> bool:
    """True when mamba_ssm's selective scan (the function the "mamba_ssm" backend calls) loads."""
    return mamba_selective_scan()[0] is not None


def mamba_ssm_missing() -> str | None:
    return None if has_mamba_ssm() else mamba_selective_scan()[1]


def has_triton() -> bool:
    """True when triton is installed (imports nothing: triton loads when a kernel first runs)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # e.g. a None entry in sys.modules
        return False


def triton_missing() -> str | None:
    return None if has_triton() else "triton is not installed: pip install 'seqssm[triton]'"


def triton_interpreting() -> bool:
    """Is TRITON_INTERPRET=1 set, i.e. do Triton kernels run in the interpreter on CPU tensors?"""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_device_check(call: Call) -> str | None:
    """The Triton backend takes CPU tensors only in the interpreter (meant for tests)."""
    if call.device.type == "cpu" and not triton_interpreting():
        return "CPU tensors need the Triton interpreter: set TRITON_INTERPRET=1, or pass CUDA tensors"
    return None
