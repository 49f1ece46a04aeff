"""The kernels of the optional CUDA packages mamba_ssm and causal_conv1d as torch.library custom ops.

    torch.ops.seqssm.mamba_selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
        -> y, last state (float32), the kernel's chunk states x, out (y before the gate z; empty without z)
    torch.ops.seqssm.mamba_selective_scan_backward(u, delta, A, B, C, D, z, delta_bias, delta_softplus, x, out, grad_y)
        -> gradients of u, delta, A, B, C, D, z, delta_bias (empty where that input is None)
    torch.ops.seqssm.causal_conv1d_package(x, weight, bias, silu) -> y (through SiLU with silu)
    torch.ops.seqssm.causal_conv1d_package_backward(x, weight, bias, grad_y, silu) -> gradients of x, weight, bias

As custom ops with fake implementations and registered gradients, torch.compile traces through them without a
graph break (the packages' own autograd Functions call pybind kernels that dynamo cannot trace). The selective
scan calls the two kernels mamba_ssm's `selective_scan_fn` runs, `selective_scan_cuda.fwd` and `.bwd`, with the
arguments it gives them (see `_kernel`), so the forward and the backward are each one kernel; as there, the last
state carries no gradient. The convolution's forward is the package's `causal_conv1d_fn`, its backward the
package's backward kernel (`seqssm::causal_conv1d_package_backward`; the convolution's adjoint in tensor ops on
releases without one).

The package loads only when an op first runs; `seqssm.ops.backend` decides whether it may (the
registry's "mamba_ssm" and "causal_conv1d" backends, CUDA tensors).
"""

from __future__ import annotations

import importlib
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from seqssm.ops.backend import causal_conv1d_package
from seqssm.ops.custom import OpCaller

# Steps per chunk of mamba_ssm's selective-scan kernel (kChunkSize): x holds one (2N) state slot per chunk.
MAMBA_CHUNK = 2048


def _kernel(name: str, *args):
    """selective_scan_cuda.<name>(*args), the kernel module mamba_ssm's selective_scan_fn calls. Releases since
    mamba_ssm 2.2.5 take one more, optional argument (cu_seqlens) that other releases refuse: it is passed as None
    only where the short call is refused."""
    kernel = getattr(importlib.import_module("selective_scan_cuda"), name)
    try:
        return kernel(*args)
    except TypeError:  # pybind11's "incompatible function arguments": the release with cu_seqlens
        return kernel(*args, None)


def _time_contiguous(t: Tensor | None) -> Tensor | None:
    """t with its time (last) dimension contiguous, as mamba_ssm's kernels read it; None stays None."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def mamba_scan_forward(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Optional[Tensor], z: Optional[Tensor],
    delta_bias: Optional[Tensor], delta_softplus: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """mamba_ssm's selective-scan forward kernel: the arguments of `selective_scan_fn` -> y (b, dim, L), the last
    state (b, dim, N) float32, and what its backward reads: the chunk states x (b, dim, chunks, 2N) and, with z,
    the output before the gate (empty without z). The kernel allocates y and out as torch.empty_like(delta)
    (y with z as torch.empty_like(z)): their layouts and dtypes; x is contiguous."""
    u, delta, z = (_time_contiguous(t) for t in (u, delta, z))
    B, C = (_time_contiguous(M.unsqueeze(1) if M.ndim == 3 else M) for M in (B, C))
    D = None if D is None else D.contiguous()
    out, x, *rest = _kernel("fwd", u, delta, A, B, C, D, z, delta_bias, delta_softplus)
    last = x[:, :, -1, 1::2].clone()
    return (out, last, x, out.new_empty(0)) if z is None else (rest[0], last, x, out)


mamba_scan_op = torch.library.custom_op("seqssm::mamba_selective_scan", mutates_args=())(mamba_scan_forward)


@mamba_scan_op.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
    batch, dim, length = u.shape
    n = A.shape[1]
    chunks = -(-length // MAMBA_CHUNK)
    u, delta, z = (_time_contiguous(t) for t in (u, delta, z))
    out = torch.empty_like(delta)
    x = u.new_empty(batch, dim, chunks, 2 * n, dtype=A.dtype)
    if z is None:
        return out, u.new_empty(batch, dim, n, dtype=A.dtype), x, u.new_empty(0)
    return torch.empty_like(z), u.new_empty(batch, dim, n, dtype=A.dtype), x, out


def mamba_scan_backward(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Optional[Tensor], z: Optional[Tensor],
    delta_bias: Optional[Tensor], delta_softplus: bool, x: Tensor, out: Tensor, grad_y: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """mamba_ssm's selective-scan backward kernel: the forward's inputs, its x and out, and the gradient of y ->
    gradients of u, delta, A, B, C (B and C as given, 3-D or 4-D), D, z, delta_bias; empty for a None input."""
    squeeze = [M.ndim == 3 for M in (B, C)]
    u, delta, z, grad_y = (_time_contiguous(t) for t in (u, delta, z, grad_y))
    B, C = (_time_contiguous(M.unsqueeze(1) if M.ndim == 3 else M) for M in (B, C))
    D = None if D is None else D.contiguous()
    du, ddelta, dA, dB, dC, dD, ddelta_bias, *rest = _kernel(
        "bwd", u, delta, A, B, C, D, z, delta_bias, grad_y, x, None if z is None else out, None, delta_softplus,
        False)
    dB, dC = (g.squeeze(1) if sq else g for g, sq in zip((dB, dC), squeeze))
    dz = rest[0] if z is not None else None
    # As the fake implementation says: those of u, delta, z laid out like them (the kernel's torch.empty_like),
    # the small ones contiguous.
    return (du, ddelta, *(u.new_empty(0) if g is None else g.contiguous() for g in (dA, dB, dC, dD)),
            u.new_empty(0) if dz is None else dz, u.new_empty(0) if ddelta_bias is None else ddelta_bias.contiguous())


mamba_scan_backward_op = torch.library.custom_op("seqssm::mamba_selective_scan_backward",
                                                 mutates_args=())(mamba_scan_backward)


@mamba_scan_backward_op.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, delta_softplus, x, out, grad_y):
    def like(t):
        return u.new_empty(0) if t is None else t.new_empty(t.shape)

    u, delta, z = (_time_contiguous(t) for t in (u, delta, z))
    return (torch.empty_like(u), torch.empty_like(delta), like(A), like(B), like(C), like(D),
            u.new_empty(0) if z is None else torch.empty_like(z), like(delta_bias))


def _save_scan(ctx, inputs, output):
    u, delta, A, B, C, D, z, delta_bias, delta_softplus = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, output[2], output[3])
    ctx.delta_softplus = delta_softplus


def _scan_backward(ctx, grad_y, _grad_last, _grad_x, _grad_out):
    u, delta, A, B, C, D, z, delta_bias, x, out = ctx.saved_tensors
    grads = _mamba_scan_backward(u, delta, A, B, C, D, z, delta_bias, ctx.delta_softplus, x, out, grad_y)
    optional = [None if given is None else grad for given, grad in zip((D, z, delta_bias), grads[5:])]
    return (*grads[:5], *optional, None)


_mamba_scan_backward = OpCaller(mamba_scan_backward_op, mamba_scan_backward)
mamba_scan = OpCaller(mamba_scan_op, mamba_scan_forward, _save_scan, _scan_backward)


def causal_conv1d_package_forward(x: Tensor, weight: Tensor, bias: Optional[Tensor], silu: bool) -> Tensor:
    """The causal_conv1d package's `causal_conv1d_fn(x, weight, bias, activation="silu" if silu)`: x (b, dim, L),
    weight (dim, K), bias (dim,) -> y (b, dim, L), laid out as torch.empty_like(x) lays it out."""
    causal_conv1d_fn, _ = causal_conv1d_package()
    y = causal_conv1d_fn(x, weight, bias, activation="silu" if silu else None)
    like = torch.empty_like(x)
    return y if y.stride() == like.stride() else like.copy_(y)


causal_conv1d_package_op = torch.library.custom_op("seqssm::causal_conv1d_package",
                                                   mutates_args=())(causal_conv1d_package_forward)


@causal_conv1d_package_op.register_fake
def _(x, weight, bias, silu):
    return torch.empty_like(x)


def _conv_adjoint(x: Tensor, weight: Tensor, grad_y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of y[t] = bias + Σ_j weight[:, j] x[t - (K-1) + j] (zeros before t = 0) for x, weight and bias:
    dx[s] = Σ_j weight[:, j] dy[s + (K-1) - j], dweight[:, j] = Σ_{b,t} dy[t] x[t - (K-1) + j], dbias = Σ_{b,t} dy."""
    k, length = weight.shape[1], x.shape[-1]
    sums = torch.promote_types(grad_y.dtype, torch.float32)  # half-precision sums over (batch, L) lose too much
    grad_ahead = F.pad(grad_y, (0, k - 1))  # dy after the end is zero
    x_behind = F.pad(x, (k - 1, 0))  # x before the start is zero
    grad_x = sum(grad_ahead[..., k - 1 - j:k - 1 - j + length] * weight[:, j, None] for j in range(k))
    grad_weight = torch.stack([(grad_y * x_behind[..., j:j + length]).sum((0, 2), dtype=sums)
                               for j in range(k)], dim=1)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype), grad_y.sum((0, 2), dtype=sums)


def _package_conv_backward():
    """causal_conv1d's own backward (`cpp_functions.causal_conv1d_bwd_function`, since causal_conv1d 1.5: one
    kernel), or None on releases without it."""
    try:
        return importlib.import_module("causal_conv1d.cpp_functions").causal_conv1d_bwd_function
    except (ImportError, AttributeError):
        return None


def causal_conv1d_package_backward(x: Tensor, weight: Tensor, bias: Optional[Tensor], grad_y: Tensor,
                                   silu: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of `causal_conv1d_package_op` -> (x, weight, bias (empty without bias)): the package's backward
    kernel where it has one (with `silu`, it recomputes the convolution for SiLU's derivative), else the
    convolution's adjoint (`_conv_adjoint`) of the gradient through SiLU. In the profile of a mamba-130m training
    step on an H200 the adjoint took 1.4 ms per layer."""
    backward = _package_conv_backward()
    if backward is None:
        if silu:  # through SiLU first: silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v))) at the convolution's output v
            v = causal_conv1d_package()[0](x, weight, bias).to(torch.promote_types(grad_y.dtype, torch.float32))
            gate = torch.sigmoid(v)
            grad_y = (grad_y * gate * (1 + v * (1 - gate))).to(grad_y.dtype)
        grad_x, grad_weight, grad_bias = _conv_adjoint(x, weight, grad_y)
    else:
        if grad_y.stride(2) != 1 and grad_y.stride(1) != 1:
            grad_y = grad_y.contiguous()  # the kernel reads time- or channel-contiguous rows, as its autograd does
        grad_x, grad_weight, grad_bias, _ = backward(x, weight, bias, grad_y, None, None, None, None, False, silu)
    like = torch.empty_like(x)
    grad_x = grad_x if grad_x.stride() == like.stride() else like.copy_(grad_x)
    grad_bias = grad_bias.to(bias.dtype) if bias is not None else x.new_empty(0)
    return grad_x, grad_weight.to(weight.dtype), grad_bias


causal_conv1d_backward_op = torch.library.custom_op("seqssm::causal_conv1d_package_backward",
                                                    mutates_args=())(causal_conv1d_package_backward)


@causal_conv1d_backward_op.register_fake
def _(x, weight, bias, grad_y, silu):
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias) if bias is not None else x.new_empty(0)


def conv_caller(op, forward, backward_op, backward_body) -> OpCaller:
    """The caller (`OpCaller`) of a causal conv op, op(x, weight, bias, silu) -> y with body `forward`, given its
    autograd: backward_op(x, weight, bias, grad_y, silu) with body `backward_body` -> gradients of x, weight, bias
    (empty without bias), as this module's and the Triton backend's ops have."""
    backward_call = OpCaller(backward_op, backward_body)

    def setup(ctx, inputs, output):
        x, weight, bias, silu = inputs
        ctx.save_for_backward(x, weight, bias)
        ctx.silu = silu

    def backward(ctx, grad_y):
        x, weight, bias = ctx.saved_tensors
        grad_x, grad_weight, grad_bias = backward_call(x, weight, bias, grad_y, ctx.silu)
        return grad_x, grad_weight, None if bias is None else grad_bias, None

    return OpCaller(op, forward, setup, backward)


package_conv = conv_caller(causal_conv1d_package_op, causal_conv1d_package_forward, causal_conv1d_backward_op,
                           causal_conv1d_package_backward)
