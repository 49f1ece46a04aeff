"""The layer contract every causal primitive, block and stack in seqssm speaks, and the numerics they share.

    y = layer(x)                                   # (B, L, D) -> (B, L, D), zero initial state
    y, state = layer.scan(x, state, resets=None, mask=None)  # continue from `state`
    y_t, state = layer.step(x_t, state)            # x_t (B, D): one recurrent step
    state = layer.initial_state(batch_size, device=..., dtype=...)

`resets[b, t] = True` zeroes the state of sequence b before step t is applied. `mask[b, t] = False`
skips step t of sequence b: the state passes it unchanged, its output is zero and a reset on it is
dropped, so a right-padded batch gives every sequence the outputs and final state it has alone.
A state is a tensor or a (nested) tuple of tensors; its leading dimension is the batch.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable

import torch
from torch import nn

from seqssm.errors import InputDtypeError, InputShapeError, check_int
from seqssm.ops.checks import check_flags, check_floating, holds
from seqssm.optim import SSM_LR_SCALE, tag_ssm

State = Any  # a tensor or a nested tuple / list of tensors

class _Inside(threading.local):
    """.call: True while a layer's checked public call runs in this thread (see `_nested`). Set in each thread
    from its first use, so that torch.compile's guards on it hold from the first call on."""

    def __init__(self):
        self.call = False


_frozen = threading.local()
_inside = _Inside()


def compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The real dtype SSM numerics run in: the promotion of `dtypes`, at least float32."""
    out = torch.float32
    for d in dtypes:
        out = torch.promote_types(out, d.to_real() if d.is_complex else d)
    return out


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    """complex128 for float64 (or complex128), else complex64."""
    return torch.complex128 if dtype in (torch.float64, torch.complex128) else torch.complex64


@contextlib.contextmanager
def full_precision(x: torch.Tensor, *like: torch.Tensor):
    """`with full_precision(x, param) as dtype:` autocast off on x's device; dtype = `compute_dtype` of x and `like`.

    The recurrences of SSM layers drift in bf16 / fp16 over long sequences, so scan and step run in at
    least float32 whatever the caller's autocast or module dtype.
    """
    with torch.autocast(device_type=x.device.type, enabled=False):
        yield compute_dtype(x.dtype, *(t.dtype for t in like))


def promoted_call(module: nn.Module, x: torch.Tensor, *args, **kwargs):
    """module(x, *args, **kwargs) in the promotion of x's dtype and the module's parameter dtype, e.g. a float64 x
    through a float32 nn.Linear computes in float64 (the layers' dtype rule), and the result is in that dtype.
    Floating tensors in args are cast along with x; under autocast, autocast decides as usual."""
    param = next((p for p in module.parameters() if p.is_floating_point()), None)
    if param is None or torch.is_autocast_enabled(x.device.type):
        return module(x, *args, **kwargs)
    dtype = torch.promote_types(x.dtype, param.dtype)
    x, args = x.to(dtype), tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
    if param.dtype == dtype:
        return module(x, *args, **kwargs)
    # The module's own weights are narrower than the input: run it on promoted copies (gradients still reach them).
    tensors = {name: t.to(dtype) for name, t in (*module.named_parameters(), *module.named_buffers())
               if t.is_floating_point()}
    return torch.func.functional_call(module, tensors, (x, *args), kwargs)


def promoted_mm(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """weight (m, k) @ x (k, n) in the promotion of their dtypes (the layers' dtype rule, as `promoted_call`); under
    autocast, autocast casts them, and nothing is widened first (a bfloat16 x made float32 only to be cast back
    would cost two passes over it each way)."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.mm(weight, x)
    dtype = torch.promote_types(x.dtype, weight.dtype)
    return torch.mm(weight.to(dtype), x.to(dtype))


def ssm_param(value: torch.Tensor, lr_scale: float = SSM_LR_SCALE) -> nn.Parameter:
    """An SSM parameter (A, B, C, Δ), tagged for `lr_scale` x the learning rate and no weight decay."""
    return tag_ssm(nn.Parameter(value.contiguous()), lr_scale)


@contextlib.contextmanager
def frozen_weights():
    """Inside this block the caller promises that no parameter changes (a rollout, generation): layers
    then build their discretised system once per dtype and reuse it in every `step` run without
    autograd, instead of rebuilding it (exponentials, dense inverses) at each step. The cache is
    dropped when the block ends. Nested blocks share the outermost one's cache."""
    if getattr(_frozen, "cache", None) is not None:
        yield
        return
    _frozen.cache = {}
    try:
        yield
    finally:
        _frozen.cache = None


def frozen_systems() -> dict | None:
    """The systems cached so far by the enclosing `frozen_weights()` block, None outside one. A CUDA graph recorded
    inside the block reads them by address, so whatever keeps the graph past the block must keep them too."""
    return getattr(_frozen, "cache", None)


def step_system(layer: nn.Module, build: Callable[[torch.dtype], Any], dtype: torch.dtype):
    """build(dtype): the layer's parameter-only system for `step`, cached inside `frozen_weights()` when
    autograd is off (with autograd on, every call rebuilds it so gradients reach the parameters)."""
    cache = getattr(_frozen, "cache", None)
    if cache is None or torch.is_grad_enabled():
        return build(dtype)
    key = (layer, dtype)
    if key not in cache:
        cache[key] = build(dtype)
    return cache[key]


def check_sizes(where: str, minimum: int = 1, **sizes) -> None:
    """Refuse any of `sizes` (name=value, None skipped) that is not an integer >= `minimum`: a ConfigError naming
    `where` (the class), the argument and its value, before a zero width turns into a ZeroDivisionError or an
    empty reduction deep inside an initialisation."""
    for name, value in sizes.items():
        if value is not None:
            check_int(where, name, value, minimum)


def _checked_initial_state(initial_state: Callable) -> Callable:
    """`initial_state` refusing a batch_size that is not an integer >= 0 (before torch.zeros(-1) does)."""

    @functools.wraps(initial_state)
    def checked(self, batch_size, *args, **kwargs):
        check_int(f"{type(self).__name__}.initial_state", "batch_size", batch_size, minimum=0)
        return initial_state(self, batch_size, *args, **kwargs)

    checked.checks_batch_size = True
    return checked


def _kind(dtype: torch.dtype) -> str:
    return "complex" if dtype.is_complex else "floating" if dtype.is_floating_point else "bool" if dtype == torch.bool \
        else "integer"


def _check_state_leaf(where: str, path: str, expected, given, batch: int) -> None:
    """Compare a given state (part) with the template from initial_state(1) (meta tensors), batch size apart."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(given, (tuple, list)) or len(given) != len(expected):
            got = f"a {type(given).__name__}" + (f" of {len(given)}" if isinstance(given, (tuple, list)) else "")
            raise InputShapeError(f"{where}: {path} must be a tuple of {len(expected)} (as initial_state({batch}) "
                                  f"gives it), got {got}")
        for i, (e, g) in enumerate(zip(expected, given)):
            _check_state_leaf(where, f"{path}[{i}]", e, g, batch)
        return
    if isinstance(given, torch.Tensor) and given.ndim == expected.ndim and given.shape[1:] == expected.shape[1:] \
            and given.shape[0] == batch and _kind(given.dtype) == _kind(expected.dtype):
        return  # the common case, without building any message
    want = (batch, *expected.shape[1:])
    if not isinstance(given, torch.Tensor):
        raise InputShapeError(f"{where}: {path} must be a tensor of shape {want} (as initial_state({batch}) gives it), "
                              f"got {type(given).__name__}")
    if tuple(given.shape) != want:
        raise InputShapeError(f"{where}: {path} must have shape {want} (as initial_state({batch}) gives it), "
                              f"got {tuple(given.shape)}")
    if _kind(given.dtype) != _kind(expected.dtype):
        raise InputDtypeError(f"{where}: {path} must be a {_kind(expected.dtype)} tensor like initial_state's "
                              f"({expected.dtype}), got {given.dtype}")


def _nested() -> bool:
    """Is this call inside another layer's call? Then the outermost call has checked the inputs it derives from."""
    return _inside.call


def _run_nested(fn: Callable, *args):
    """fn(*args) with the calls of layers inside it unchecked (see `_nested`)."""
    _inside.call = True
    try:
        return fn(*args)
    finally:
        _inside.call = False


def non_causal_error(module: nn.Module) -> NotImplementedError:
    """The error of scan / step / initial_state on a bidirectional module."""
    return NotImplementedError(
        f"{type(module).__name__} is bidirectional: its output at t depends on inputs after t, "
        "so it has no recurrent state to carry. Use a causal model for scan/step."
    )


class SequenceLayer(nn.Module):
    """Base class of causal sequence layers: x (B, L, D) -> y (B, L, D) with a recurrent state.

    The public calls (`forward`, `scan`, `step` and the channels-first forms) check their inputs once, by the
    rules of `seqssm.ops.checks`: x floating point (float16 / bfloat16 / float32 / float64; integers and bool are
    refused: cast to float), of shape (B, L, d_model); a state of the structure, shapes and kind (real, complex,
    integer) that `initial_state` gives; resets / mask (B, L) bool. They answer empty inputs themselves: an
    empty x (B = 0 or L = 0) gives an empty y, and the state passes through unchanged (the zero state of the
    batch when None). Then they run the subclass's `_forward`, `_scan` and `_step` on checked inputs. Calls that
    a layer makes on the layers inside it skip the checks: the outermost call has checked what they derive from.
    Outputs come back in x's dtype; SSM recurrences run in `compute_dtype` (at least float32).
    `d_model` is D, the channel count of x (a module without it skips the width check). Each subclass's
    `initial_state` refuses a batch_size that is not an integer >= 0 (added by `__init_subclass__`).
    """

    causal = True

    def __init_subclass__(cls, **kwargs):
        # Every layer, block and stack defines its own initial_state; each gets the batch_size check here, once.
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("initial_state")
        if own is not None and not getattr(own, "checks_batch_size", False):
            cls.initial_state = _checked_initial_state(own)

    # ----------------------------------------------------------------------------- the public calls

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> y (B, L, D) from the zero state. lengths (B,) of right-padded sequences: read by
        non-causal (bidirectional) modules only."""
        if _nested():
            return self._forward(x, lengths)
        self._check_x(x, "forward", time_dim=1)
        lengths = check_lengths(f"{type(self).__name__}.forward", lengths, x.shape[0], x.shape[1])
        if x.numel() == 0:
            return torch.zeros_like(x)
        return _run_nested(self._forward, x, lengths)

    def scan(self, x: torch.Tensor, state: State = None, resets: torch.Tensor | None = None,
             mask: torch.Tensor | None = None):
        """x (B, L, D), state from `initial_state` or a previous call (None: zeros), resets / mask (B, L)
        bool -> (y (B, L, D), final state)."""
        if _nested():
            return self._scan(x, state, resets, mask)
        return self._checked_scan(x, state, resets, mask, time_dim=1)

    def step(self, x_t: torch.Tensor, state: State = None):
        """x_t (B, D), state (None: zeros) -> (y_t (B, D), next state)."""
        if _nested():
            return self._step(x_t, state)
        where = f"{type(self).__name__}.step"
        if not self.causal:
            raise non_causal_error(self)
        check_floating(where, x_t=x_t)
        width = getattr(self, "d_model", None)
        if x_t.ndim != 2 or (width is not None and x_t.shape[1] != width):
            raise InputShapeError(f"{where}: x_t must be (batch, d_model) = (batch, {width}), got {tuple(x_t.shape)}")
        batch = x_t.shape[0]
        if state is None:
            state = self.initial_state(batch, device=x_t.device)
        else:
            self._check_state(where, state, batch)
        if batch == 0:
            return torch.zeros_like(x_t), state
        return _run_nested(self._step, x_t, state)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        """The zero state for `batch_size` sequences."""
        raise NotImplementedError

    # Channels before time, (B, D, L): the layout the Mamba block keeps between its in_proj and out_proj
    # (as mamba_ssm's does) and the one S6's kernels read. Layers that compute in it override the
    # underscored forms (`ChannelsFirstLayer`); the others see the (B, L, D) view of the same memory.

    def forward_channels_first(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D, L) -> y (B, D, L): `forward` with channels before time."""
        if _nested():
            return self._forward_channels_first(x)
        self._check_x(x, "forward_channels_first", time_dim=2)
        if x.numel() == 0:
            return torch.zeros_like(x)
        return _run_nested(self._forward_channels_first, x)

    def scan_channels_first(self, x: torch.Tensor, state: State = None, resets: torch.Tensor | None = None,
                            mask: torch.Tensor | None = None):
        """x (B, D, L) -> (y (B, D, L), final state): `scan` with channels before time."""
        if _nested():
            return self._scan_channels_first(x, state, resets, mask)
        return self._checked_scan(x, state, resets, mask, time_dim=2)

    # ------------------------------------------------------------- what subclasses implement or override

    def _scan(self, x: torch.Tensor, state: State, resets: torch.Tensor | None, mask: torch.Tensor | None):
        """`scan` on checked, non-empty inputs: resets / mask bool or None, resets on masked steps dropped."""
        raise NotImplementedError

    def _step(self, x_t: torch.Tensor, state: State):
        """`step` on a checked, non-empty x_t and a state (never None)."""
        raise NotImplementedError

    def _forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """`forward` on a checked, non-empty x: the zero-state scan unless a subclass has a faster path."""
        return self._scan(x, None, None, None)[0]

    def _forward_channels_first(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward(x.transpose(1, 2)).transpose(1, 2)

    def _scan_channels_first(self, x, state, resets, mask):
        y, state = self._scan(x.transpose(1, 2), state, resets, mask)
        return y.transpose(1, 2), state

    # ------------------------------------------------------------------------------------- the checks

    def _check_x(self, x: torch.Tensor, method: str, time_dim: int) -> None:
        """x floating point, (B, L, d_model) (time_dim 1) or (B, d_model, L) (time_dim 2)."""
        where = f"{type(self).__name__}.{method}"
        check_floating(where, x=x)
        width = getattr(self, "d_model", None)
        layout = "(batch, L, d_model)" if time_dim == 1 else "(batch, d_model, L)"
        channel_dim = 2 if time_dim == 1 else 1
        if x.ndim != 3 or (width is not None and x.shape[channel_dim] != width):
            expected = layout.replace("d_model", str(width)) if width is not None else layout
            raise InputShapeError(f"{where}: x must be {layout} = {expected}, got {tuple(x.shape)}")

    def _check_state(self, where: str, state: State, batch: int, path: str = "state") -> None:
        """The state (named `path` in errors) against `initial_state`'s: same structure, shapes and kind (precision
        may differ)."""
        template = self.__dict__.get("_state_template")
        if template is None:  # shapes and kinds of a state do not change with the parameters: built once
            template = self.initial_state(1, device=torch.device("meta"))
            self.__dict__["_state_template"] = template
        _check_state_leaf(where, path, template, state, batch)

    def _checked_scan(self, x, state, resets, mask, time_dim: int):
        method = "scan" if time_dim == 1 else "scan_channels_first"
        where = f"{type(self).__name__}.{method}"
        if not self.causal:
            raise non_causal_error(self)
        self._check_x(x, method, time_dim)
        resets, mask = check_steps(x, resets, mask, time_dim, where)
        if state is not None:
            self._check_state(where, state, x.shape[0])
        if x.numel() == 0:
            return torch.zeros_like(x), self.initial_state(x.shape[0], device=x.device) if state is None else state
        return _run_nested(self._scan if time_dim == 1 else self._scan_channels_first, x, state, resets, mask)


class ChannelsFirstLayer(SequenceLayer):
    """A layer that computes with channels before time: subclasses give `_scan_channels_first` (and
    `_forward_channels_first` where a zero-state path is faster); `forward` and `scan` are their (B, L, D) views."""

    def _forward(self, x, lengths=None):
        return self._forward_channels_first(x.transpose(1, 2)).transpose(1, 2)

    def _forward_channels_first(self, x):
        return self._scan_channels_first(x, None, None, None)[0]

    def _scan(self, x, state, resets, mask):
        y, state = self._scan_channels_first(x.transpose(1, 2), state, resets, mask)
        return y.transpose(1, 2), state

    def _scan_channels_first(self, x, state, resets, mask):
        raise NotImplementedError


def check_lengths(where: str, lengths: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """lengths (B,) integer in [0, L] of right-padded sequences, or None."""
    if lengths is None:
        return None
    if not isinstance(lengths, torch.Tensor) or lengths.is_floating_point() or lengths.is_complex() \
            or lengths.dtype == torch.bool:
        got = lengths.dtype if isinstance(lengths, torch.Tensor) else type(lengths).__name__
        raise InputDtypeError(f"{where}: lengths must be an integer tensor (batch,), got {got}")
    if tuple(lengths.shape) != (batch,):
        raise InputShapeError(f"{where}: lengths must be (batch,) = ({batch},), got {tuple(lengths.shape)}")
    in_range = f"{where}: lengths must lie in [0, L] = [0, {length}]"
    if lengths.numel() and not holds(((lengths >= 0) & (lengths <= length)).all(), in_range):
        raise ValueError(f"{in_range}, got values from {int(lengths.min())} to {int(lengths.max())}")
    return lengths


def check_steps(x: torch.Tensor, resets: torch.Tensor | None, mask: torch.Tensor | None, time_dim: int = 1,
                where: str = "scan"):
    """The flags preamble of every `scan`: resets and mask (B, L) checked against x (B, L, ...) (time at `time_dim`)
    -> (resets, mask) as bool or None, with resets on masked steps dropped (padding never clears a state)."""
    batch, length = x.shape[0], x.shape[time_dim]
    resets, mask = check_flags(where, "resets", resets, batch, length), check_flags(where, "mask", mask, batch, length)
    if resets is not None and mask is not None:
        resets = resets & mask
    return resets, mask


def _per_step(flags: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """flags (B, L) viewed to broadcast against like (B, L, ...)."""
    return flags.to(like.device).view(*flags.shape, *([1] * (like.ndim - 2)))


def mask_recurrence(mask: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor):
    """Skip masked steps of h_t = a_t h_{t-1} + b_t: -> (a, b) with a_t = 1, b_t = 0 where mask (B, L) is False.

    a broadcastable to b (B, L, ...). A skipped step passes the state through unchanged: the masked
    associative operator of "Uncertainty Representations in State-Space Layers for Deep RL under Partial
    Observability" (section 4.3), written on the elements instead of the operator. On a right-padded
    batch every running state, the final one included, is the state after the sequence's last valid
    step. mask None returns the inputs as they are.
    """
    if mask is None:
        return a, b
    m = _per_step(mask, b)
    a = torch.where(m, a, torch.ones((), dtype=a.dtype, device=a.device))
    b = torch.where(m, b, torch.zeros((), dtype=b.dtype, device=b.device))
    return a, b


def mask_outputs(mask: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
    """Zero the outputs y (B, L, ...) of masked steps (mask (B, L) False), so padding never leaks into losses."""
    if mask is None:
        return y
    return y.masked_fill(~_per_step(mask, y), 0)


def map_state(fn: Callable[..., Any], *states):
    """Apply fn leaf-wise to one or more states of the same structure (nested tuples / lists of tensors)."""
    first = states[0]
    if isinstance(first, (tuple, list)):
        return type(first)(map_state(fn, *parts) for parts in zip(*states))
    return fn(*states)


def where_state(keep: torch.Tensor, new: State, old: State) -> State:
    """Per sequence, `new` where keep (B,) bool is True, else `old`: a masked step leaves the state as it was."""
    def pick(n, o):
        return torch.where(keep.to(n.device).view(-1, *([1] * (n.ndim - 1))), n, o)

    return map_state(pick, new, old)
