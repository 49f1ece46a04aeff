"""Numerics only (no nn.Module): scans, SSM kernels, convolutions. Each op has a plain
reference, a fast pure-PyTorch path, a Triton path and, where installed, the mamba_ssm /
causal_conv1d CUDA path, chosen per call by the registry in `seqssm.ops.backend`."""

from seqssm.ops.backend import backends
from seqssm.ops.conv1d import causal_conv1d, causal_conv1d_reference, causal_conv1d_step
from seqssm.ops.fftconv import fft_conv
from seqssm.ops.linear import linear_scan, linear_scan_reference
from seqssm.ops.ssm_kernels import dense_kernel, dplr_kernel, s4d_kernel
from seqssm.ops.selective import selective_scan, selective_scan_reference, selective_step

__all__ = [
    "backends",
    "linear_scan",
    "linear_scan_reference",
    "selective_scan",
    "selective_scan_reference",
    "selective_step",
    "fft_conv",
    "s4d_kernel",
    "dplr_kernel",
    "dense_kernel",
    "causal_conv1d",
    "causal_conv1d_reference",
    "causal_conv1d_step",
]
