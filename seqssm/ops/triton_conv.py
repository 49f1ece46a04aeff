"""The Triton backend of `causal_conv1d` (`seqssm.ops.conv1d`) for training: the Mamba blocks' short causal conv,
bias and SiLU in one kernel forward (`conv1d_fwd`) and one backward (`conv1d_bwd`, which recomputes the
pre-activation SiLU's derivative needs instead of keeping it), as the causal_conv1d package's kernels do, for
installs without that package. The torch path takes K + 3 passes over (batch, dim, L) forward and more backward,
and returns float32 for a bfloat16 input under autocast.

y is laid out as x (torch.empty_like), in x's dtype, as the package returns it; the kernels compute in float32.
The ops are `torch.library` custom ops with fake implementations, so `torch.compile(fullgraph=True)` keeps them.
On CPU tensors the kernels run in Triton's interpreter, which TRITON_INTERPRET=1 allows; it is meant for tests.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from seqssm.ops.conv1d import with_final_state
from seqssm.ops.cuda_packages import conv_caller
from seqssm.ops.triton_loader import cdiv, kernels_for, launch, next_power_of_2

_KERNELS = "triton_kernels.py"  # the kernel file these launchers load (seqssm.ops.triton_loader)
_WARPS = 4
# (BLOCK_D, BLOCK_L) tiles of 2048 elements, 16 per thread over 4 warps, longest along x's contiguous axis so that
# loads coalesce: time for the Mamba block's layout on CUDA, channels for a channels-last x. The interpreter's tiles
# are small, giving the tests several tiles each way. Keyed by (interpreted, x channels-last).
_TILES = {(False, False): (16, 128), (False, True): (128, 16), (True, False): (4, 8), (True, True): (8, 4)}
# The backward holds several tiles at once (dv, the recomputed pre-activation, x's gradient): 8 elements per thread
# (4 channels-last) keep it near 100 registers (128) without spills, the compile check's rule.
_BACKWARD_TILES = {(False, False): (8, 128), (False, True): (64, 8), (True, False): (4, 8), (True, True): (8, 4)}
# The backward's programs per (batch row, channel block) at most, compiled and interpreted: each sums the weight's
# and bias's gradients over its tiles, and the launcher then sums batch x this many float32 rows of (dim, K). The
# interpreter's 2 gives the tests programs of several tiles.
_MAX_GROUPS = {False: 64, True: 2}


def _tile(tiles: dict, x: Tensor, interpret: bool) -> tuple[int, int]:
    channels_last = x.stride(1) == 1 and x.stride(2) != 1
    return tiles[(interpret, channels_last)]


def conv_forward(x: Tensor, weight: Tensor, bias: Optional[Tensor], silu: bool) -> Tensor:
    """The forward op's implementation: x (b, dim, L), weight (dim, K), bias (dim,) or None -> y (b, dim, L) in x's
    dtype and layout."""
    kernels, interpret = kernels_for(_KERNELS, x.device)
    batch, dim, length = x.shape
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    block_d, block_l = _tile(_TILES, x, interpret)
    n_dblocks, n_lblocks = cdiv(dim, block_d), cdiv(length, block_l)
    launch(kernels.conv1d_fwd, (batch * n_dblocks * n_lblocks,), x, weight, bias if bias is not None else x, y,
           dim, length, n_dblocks, n_lblocks, *x.stride(), *y.stride(), *weight.stride(),
           HAS_BIAS=bias is not None, SILU=silu, WIDTH=weight.shape[1], BLOCK_D=block_d, BLOCK_L=block_l,
           num_warps=_WARPS)
    return y


def conv_backward(x: Tensor, weight: Tensor, bias: Optional[Tensor], grad_y: Tensor,
                  silu: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The backward op's implementation: the gradients of `conv_forward` for grad_y (b, dim, L) -> (x (laid out as
    x), weight, bias (empty without bias)), each in its input's dtype."""
    kernels, interpret = kernels_for(_KERNELS, x.device)
    batch, dim, length = x.shape
    width = weight.shape[1]
    grad_x = torch.empty_like(x)
    if x.numel() == 0:
        grad_bias = torch.zeros_like(bias) if bias is not None else x.new_empty(0)
        return grad_x, torch.zeros_like(weight), grad_bias
    if 0 in grad_y.stride():
        grad_y = grad_y.contiguous()  # an expanded gradient (of y.sum(), say): the kernel reads it as a tensor
    block_d, block_l = _tile(_BACKWARD_TILES, x, interpret)
    n_dblocks, n_lblocks = cdiv(dim, block_d), cdiv(length, block_l)
    n_groups = min(n_lblocks, _MAX_GROUPS[interpret])
    tiles_per_group = cdiv(n_lblocks, n_groups)
    n_groups = cdiv(n_lblocks, tiles_per_group)
    sums_w = torch.empty(batch * n_groups, dim, width, dtype=torch.float32, device=x.device)
    sums_b = torch.empty(batch * n_groups, dim, dtype=torch.float32, device=x.device) if bias is not None else sums_w
    launch(kernels.conv1d_bwd, (batch * n_dblocks * n_groups,), x, weight, bias if bias is not None else x, grad_y,
           grad_x, sums_w, sums_b, dim, length, n_dblocks, n_groups, tiles_per_group,
           *x.stride(), *grad_y.stride(), *grad_x.stride(), *weight.stride(),
           HAS_BIAS=bias is not None, SILU=silu, WIDTH=width, BLOCK_D=block_d, BLOCK_L=block_l,
           BLOCK_W=next_power_of_2(width), num_warps=_WARPS)
    grad_bias = sums_b.sum(0).to(bias.dtype) if bias is not None else x.new_empty(0)
    return grad_x, sums_w.sum(0).to(weight.dtype), grad_bias


@torch.library.custom_op("seqssm::causal_conv1d_triton", mutates_args=())
def _conv_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], silu: bool) -> Tensor:
    """`conv_forward` as an op."""
    return conv_forward(x, weight, bias, silu)


@_conv_op.register_fake
def _(x, weight, bias, silu):
    return torch.empty_like(x)


@torch.library.custom_op("seqssm::causal_conv1d_triton_backward", mutates_args=())
def _conv_backward_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], grad_y: Tensor,
                      silu: bool) -> tuple[Tensor, Tensor, Tensor]:
    """`conv_backward` as an op."""
    return conv_backward(x, weight, bias, grad_y, silu)


@_conv_backward_op.register_fake
def _(x, weight, bias, grad_y, silu):
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias) if bias is not None else x.new_empty(0)


_conv = conv_caller(_conv_op, conv_forward, _conv_backward_op, conv_backward)


def causal_conv1d_triton(x, weight, bias=None, initial_state=None, resets=None, return_final_state=False,
                         silu=False):
    """Triton `causal_conv1d` (no initial state, no resets: the backend refuses those calls): x (b, dim, L), weight
    (dim, K), bias (dim,) -> y (b, dim, L) in x's dtype and layout, through SiLU with `silu` [, final state]."""
    return with_final_state(_conv(x, weight, bias, bool(silu)), x, weight.shape[1], return_final_state)
