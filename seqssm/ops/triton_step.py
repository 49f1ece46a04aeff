"""The Triton backends of the decoding steps. `selective_step` (`seqssm.ops.selective`): one step of S6 in one kernel
(`selective_step_fwd` of `seqssm.ops.triton_kernels`: Δ bias and softplus, exp(Δ A), the state update, C·h + D u
and the SiLU(z) gate), as mamba_ssm's `selective_state_update` does, registered as a `torch.library` custom op with
a fake implementation so that `torch.compile(fullgraph=True)` keeps it in its graph.

The op is functional: it writes the next state into a new tensor instead of updating h in place. That is
`selective_step`'s contract (callers keep their old state; the torch path returns a new one), a custom op that
mutates nothing needs no aliasing annotations for torch.compile, and a CUDA graph replays it as well, its output
buffers being the graph's own. Its backward recomputes the torch path (`torch.func.vjp`), so that gradients stay
correct wherever a step is trained through; decoding runs without gradients and never pays for it.

`causal_conv1d_step` (`seqssm.ops.conv1d`): the Mamba blocks' conv window, taps, bias and SiLU in one kernel
(`conv1d_step_fwd`), as causal_conv1d's `causal_conv1d_update` does, where the torch path takes five; a functional
custom op of the same kind.

On CPU tensors the kernels run in Triton's interpreter, which TRITON_INTERPRET=1 allows; it is meant for tests.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from seqssm.ops.conv1d import _causal_conv1d_step_torch
from seqssm.ops.custom import OpCaller
from seqssm.ops.selective import _selective_step_torch
from seqssm.ops.triton_loader import cdiv, kernels_for, launch, next_power_of_2

_KERNELS = "triton_kernels.py"  # the kernel file these launchers load (seqssm.ops.triton_loader)

# Channels per program, compiled: mamba_ssm's choice for its step kernel, a (BLOCK_D, BLOCK_N) state tile of
# 512 elements (4 per thread over 4 warps), so that N up to 128 holds no more registers than N = 16. The
# interpreter's block is smaller, giving the tests several channel blocks.
_TILE = {False: 512, True: 64}
_MAX_BLOCK_D = {False: 32, True: 8}
_WARPS = 4


def _blocks(n: int, interpret: bool) -> tuple[int, int]:
    """(BLOCK_D, BLOCK_N) for N states: all of N, and channels filling a tile of _TILE elements."""
    block_n = next_power_of_2(n)
    return max(1, min(_MAX_BLOCK_D[interpret], _TILE[interpret] // block_n)), block_n


def step_forward(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, softplus: bool) -> tuple[Tensor, Tensor]:
    """The op's implementation (the compile check calls it on meta tensors): h (b, dim, N), u_t, delta_t, z_t
    (b, dim), A (dim, N), B_t, C_t (b, N) or (b, groups, N), D, delta_bias (dim,) -> (y_t (b, dim) in u_t's dtype,
    next h (b, dim, N) float32)."""
    kernels, interpret = kernels_for(_KERNELS, u_t.device)
    batch, dim = u_t.shape
    n = A.shape[1]
    B3, C3 = (M.unsqueeze(1) if M.ndim == 2 else M for M in (B_t, C_t))  # (b, groups, N)
    block_d, block_n = _blocks(n, interpret)
    n_dblocks = cdiv(dim, block_d)
    y = torch.empty(batch, dim, dtype=u_t.dtype, device=u_t.device)
    out = torch.empty(batch, dim, n, dtype=torch.float32, device=u_t.device)
    if batch == 0 or dim == 0:
        return y, out
    z_strides = z_t.stride() if z_t is not None else (0, 0)
    # u_t stands for absent optional tensors (never read).
    launch(kernels.selective_step_fwd, (batch * n_dblocks,), h, u_t, delta_t, A, B3, C3,
            D if D is not None else u_t, z_t if z_t is not None else u_t,
            delta_bias if delta_bias is not None else u_t, y, out, dim, n, dim // B3.shape[1], n_dblocks,
            *h.stride(), *u_t.stride(), *delta_t.stride(), *A.stride(), *B3.stride(), *C3.stride(), *z_strides,
            HAS_D=D is not None, HAS_Z=z_t is not None, HAS_BIAS=delta_bias is not None, SOFTPLUS=softplus,
            BLOCK_D=block_d, BLOCK_N=block_n, num_warps=_WARPS)
    return y, out


@torch.library.custom_op("seqssm::selective_step_triton", mutates_args=())
def _step_op(h: Tensor, u_t: Tensor, delta_t: Tensor, A: Tensor, B_t: Tensor, C_t: Tensor, D: Tensor | None,
             z_t: Tensor | None, delta_bias: Tensor | None, softplus: bool) -> tuple[Tensor, Tensor]:
    """`step_forward` as an op."""
    return step_forward(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, softplus)


@_step_op.register_fake
def _(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, softplus):
    batch, dim = u_t.shape
    return u_t.new_empty(batch, dim), u_t.new_empty(batch, dim, A.shape[1], dtype=torch.float32)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:9])
    ctx.softplus = inputs[9]


def _recomputed_grads(torch_step, inputs, grad_outputs) -> tuple:
    """The gradients of torch_step(*inputs) for grad_outputs, by its vjp: one per input, None for absent inputs."""
    present = [i for i, t in enumerate(inputs) if t is not None]

    def step(*tensors):
        args = list(inputs)
        for i, t in zip(present, tensors):
            args[i] = t
        return torch_step(*args)

    _, vjp = torch.func.vjp(step, *(inputs[i] for i in present))
    grads = dict(zip(present, vjp(grad_outputs)))
    return tuple(grads.get(i) for i in range(len(inputs)))


def _backward(ctx, grad_y, grad_h):
    # The torch path's next state is float32 as the kernel's is (float64 inputs never reach the kernel).
    step = functools.partial(_selective_step_torch, delta_softplus=ctx.softplus)
    return (*_recomputed_grads(step, ctx.saved_tensors, (grad_y, grad_h)), None)


_step = OpCaller(_step_op, step_forward, _setup, _backward)


def selective_step_triton(h, u_t, delta_t, A, B_t, C_t, D=None, z_t=None, delta_bias=None, delta_softplus=False):
    """Triton `selective_step`: h (b, dim, N), u_t, delta_t, z_t (b, dim), A (dim, N), B_t, C_t (b, N) or
    (b, groups, N), D, delta_bias (dim,) -> (y_t (b, dim) in u_t's dtype, next h (b, dim, N) float32)."""
    return _step(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, bool(delta_softplus))


# Channels per program of the conv step: the window of K <= 4 taps is BLOCK_K = 4 wide, 4 warps hold 128 x 4.
_CONV_BLOCK_D = {False: 128, True: 8}


def _conv_y_dtype(x_t, weight, bias) -> torch.dtype:
    """The dtype of the conv step's output: x_t's, weight's and bias's promoted, as the torch path computes it."""
    dtype = torch.promote_types(x_t.dtype, weight.dtype)
    return dtype if bias is None else torch.promote_types(dtype, bias.dtype)


def conv_step_forward(x_t, state, weight, bias, silu: bool) -> tuple[Tensor, Tensor]:
    """The conv step op's implementation: x_t (b, dim), state (b, dim, K-1), weight (dim, K), bias (dim,) or None
    -> (y_t (b, dim) in the promoted dtype of x_t, weight and bias, next state (b, dim, K-1) in x_t's dtype)."""
    kernels, interpret = kernels_for(_KERNELS, x_t.device)
    batch, dim = x_t.shape
    width = weight.shape[1]
    y = torch.empty(batch, dim, dtype=_conv_y_dtype(x_t, weight, bias), device=x_t.device)
    out = torch.empty(batch, dim, width - 1, dtype=x_t.dtype, device=x_t.device)
    if batch == 0 or dim == 0:
        return y, out
    block_d = _CONV_BLOCK_D[interpret]
    n_dblocks = cdiv(dim, block_d)
    launch(kernels.conv1d_step_fwd, (batch * n_dblocks,), x_t, state, weight,
           bias if bias is not None else x_t, y, out, dim, width, n_dblocks,
           *x_t.stride(), *state.stride(), *weight.stride(),
           HAS_BIAS=bias is not None, SILU=silu, BLOCK_D=block_d, BLOCK_K=next_power_of_2(width),
           num_warps=_WARPS)
    return y, out


@torch.library.custom_op("seqssm::causal_conv1d_step_triton", mutates_args=())
def _conv_step_op(x_t: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> tuple[Tensor, Tensor]:
    """`conv_step_forward` as an op."""
    return conv_step_forward(x_t, state, weight, bias, silu)


@_conv_step_op.register_fake
def _(x_t, state, weight, bias, silu):
    return x_t.new_empty(x_t.shape, dtype=_conv_y_dtype(x_t, weight, bias)), x_t.new_empty(*x_t.shape, weight.shape[1] - 1)


def _conv_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:4])
    ctx.silu = inputs[4]


def _conv_backward(ctx, grad_y, grad_state):
    step = functools.partial(_causal_conv1d_step_torch, silu=ctx.silu)
    return (*_recomputed_grads(step, ctx.saved_tensors, (grad_y, grad_state)), None)


_conv_step = OpCaller(_conv_step_op, conv_step_forward, _conv_setup, _conv_backward)


def causal_conv1d_step_triton(x_t, state, weight, bias=None, silu=False):
    """Triton `causal_conv1d_step`: x_t (b, dim), state (b, dim, K-1), weight (dim, K), bias (dim,) -> (y_t (b, dim),
    next state (b, dim, K-1) in x_t's dtype)."""
    return _conv_step(x_t, state, weight, bias, bool(silu))
