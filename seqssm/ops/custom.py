"""Custom ops that eager calls reach without the dispatcher's Python round trip.

Every fast op is a `torch.library` custom op, so that torch.compile, export and fake tensors see one op with a fake
implementation and a registered backward. Eagerly that costs host time on every call: the custom op's autograd
wrapper, argument normalisation (`fill_defaults`) and a redispatch into Python, twice per Mamba layer forward and
again in the backward. Where the GPU finishes a layer's kernels faster than the host launches them (the forward of a
training step, an RL update's small shapes), that is time the device waits. `scripts/bench_host.py` times it
(docs/gpu.md quotes its A/B: a 24-layer Mamba training step's host time 0.77x with this module).

So each op's caller (`OpCaller`) calls the very functions the op runs, with the same setup and backward, through
a `torch.autograd.Function` when the call is plainly eager, and the op itself wherever anything traces or
transforms the call: torch.compile, export, a dispatch mode (fake tensors, make_fx), a tensor subclass, functorch,
torch.jit.trace. Both routes compute the same thing with the same kernels (tests/ops/test_op_caller.py holds
their outputs and gradients equal).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

_PLAIN = (torch.Tensor, nn.Parameter)


def traced(inputs) -> bool:
    """Is a call with `inputs` traced or transformed (torch.compile, export, a dispatch mode, a tensor subclass,
    functorch, torch.jit.trace) rather than run eagerly on plain tensors?"""
    return (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or torch._C._are_functorch_transforms_active() or torch._C._get_tracing_state() is not None
            or any(isinstance(x, torch.Tensor) and type(x) not in _PLAIN for x in inputs))


def needs_grad(inputs) -> bool:
    """Does a call with `inputs` (tensors, None and other arguments) record a graph: grad mode on and a tensor
    that requires grad?"""
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)


class _Direct(torch.autograd.Function):
    """A custom op's forward, setup and backward as a plain autograd function: forward(ctx, caller, *inputs)."""

    @staticmethod
    def forward(ctx, caller: OpCaller, *inputs):
        output = caller.forward(*inputs)
        caller.setup(ctx, inputs, output)
        ctx.caller = caller
        return output

    @staticmethod
    def backward(ctx, *grads):
        return None, *ctx.caller.backward(ctx, *grads)


class OpCaller:
    """The caller of custom op `op`, whose body is `forward(*inputs)`: op(*inputs) where the call is traced,
    forward(*inputs) where no input needs a gradient, else forward through `_Direct` with op's autograd
    (`setup(ctx, inputs, output)`, `backward(ctx, *grads)`; both registered on op here). An op without them
    (a backward op) goes through op itself whenever a gradient is needed, so that a double backward still fails
    as the op does."""

    def __init__(self, op, forward: Callable, setup: Callable | None = None, backward: Callable | None = None):
        if (setup is None) != (backward is None):
            raise ValueError("OpCaller: give both setup and backward, or neither")
        self.op, self.forward, self.setup, self.backward = op, forward, setup, backward
        if backward is not None:
            op.register_autograd(backward, setup_context=setup)
        # Its own autograd node class, so that tracebacks and profiles name the op ("triton_scan.selective_forward").
        where = f"{forward.__module__.rsplit('.', 1)[-1]}.{forward.__name__}"
        self._function = type(where, (_Direct,), {})

    def __call__(self, *inputs):
        if traced(inputs):
            return self.op(*inputs)
        if not needs_grad(inputs):
            return self.forward(*inputs)
        if self.backward is None:
            return self.op(*inputs)
        return self._function.apply(self, *inputs)
