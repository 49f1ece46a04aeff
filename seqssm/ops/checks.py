"""The input rules at the public entry of every op and layer, in one place.

- Floating point only. Sequences, parameters and states are float16, bfloat16, float32 or float64 (complex
  where an op computes in complex). Integer and bool tensors are refused with `InputDtypeError`, never
  truncated: an int64 input would otherwise come back int64 with every value rounded toward zero. SSM
  recurrences run in at least float32 (`seqssm.layers.base.compute_dtype`); outputs come back in the
  dtype each op documents (the input's, for layers).
- Step flags (resets, mask) are bool. Integer tensors holding only 0 and 1 (a tokenizer's attention mask)
  are read as bool; float flags are refused, since 0.3 would silently count as True.
- Empty in, empty out: a batch of 0 or a sequence of L = 0 gives outputs of the right empty shape, and the
  state passes through unchanged (a batch-0 state for batch 0).
- A wrong shape is an `InputShapeError` naming the expected and the given shape.
- Checks that read tensor values (token ids in range, 0/1 flags, lengths) go through `holds`: eagerly they
  raise their error with the offending values; under torch.compile they become an assertion in the graph
  (no Python branch on a value, so no graph break) that fails with the error's fixed part.
"""

from __future__ import annotations

import operator

import torch

from seqssm.errors import InputDtypeError, InputShapeError
from seqssm.ops.backend import COMPLEX, REAL


def holds(condition: torch.Tensor, compiled_message: str) -> bool:
    """Does the bool tensor `condition` (one element) hold? Eagerly its value decides, and the caller raises its
    own error when it does not. While torch.compile traces, it is asserted inside the graph instead (failing
    with RuntimeError(compiled_message) when the graph runs) and taken as holding."""
    if torch.compiler.is_compiling():
        torch._assert_async(condition, compiled_message)
        return True
    return bool(condition)


def check_floating(where: str, allow_complex: bool = False, **tensors: torch.Tensor | None) -> None:
    """Refuse any of `tensors` (name=tensor, None skipped) that is not floating point (or complex, where allowed)."""
    taken = REAL | COMPLEX if allow_complex else REAL
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise InputDtypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in taken:
            kinds = "float16, bfloat16, float32 or float64" + (" (or complex)" if allow_complex else "")
            raise InputDtypeError(f"{where}: {name} has dtype {t.dtype}; it takes {kinds} tensors: "
                                  f"cast to float: {name}.float()")


def check_flags(where: str, name: str, flags: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """resets or mask (batch, length) -> bool, or None; refuses other shapes, float flags and integers but 0 / 1."""
    if flags is None:
        return None
    if not isinstance(flags, torch.Tensor):
        raise InputDtypeError(f"{where}: {name} must be a bool torch.Tensor (batch, L), got {type(flags).__name__}")
    if tuple(flags.shape) != (batch, length):
        raise InputShapeError(f"{where}: {name} must have shape (batch, L) = ({batch}, {length}), "
                              f"got {tuple(flags.shape)}")
    if flags.dtype == torch.bool:
        return flags
    if flags.is_floating_point() or flags.is_complex():
        raise InputDtypeError(f"{where}: {name} must be bool (one True/False per step), got {flags.dtype}: a float "
                              f"flag is ambiguous (is 0.3 True?); pass {name}.bool() if it holds 0/1, or {name} > 0.5")
    only_01 = f"{where}: {name} of dtype {flags.dtype} must hold only 0 and 1 (or be bool)"
    if flags.numel() and not holds(((flags == 0) | (flags == 1)).all(), only_01):
        raise InputDtypeError(f"{only_01}, got values {torch.unique(flags)[:8].tolist()}")
    return flags.to(torch.bool)


def check_length(where: str, L) -> int:
    """A sequence length argument: an int >= 0. An int (a symbolic one too: a traced shape under torch.compile with
    dynamic shapes) passes as it is: operator.index would fix the graph to its one value."""
    try:
        length = None if isinstance(L, bool) else L if isinstance(L, int) else operator.index(L)
    except TypeError:
        length = None
    if length is None or length < 0:
        raise ValueError(f"{where}: the length L must be an int >= 0, got {L!r}")
    return length
