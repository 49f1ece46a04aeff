"""Numerics only (no nn.Module): scans, SSM kernels, convolutions. Each op has a plain
reference, a fast pure-PyTorch path and, where installed, the mamba_ssm CUDA path."""

from seqssm.ops.backend import BACKENDS, resolve_backend
from seqssm.ops.linear import linear_scan, linear_scan_reference
from seqssm.ops.selective import selective_scan, selective_scan_reference, selective_step

__all__ = [
    "BACKENDS",
    "resolve_backend",
    "linear_scan",
    "linear_scan_reference",
    "selective_scan",
    "selective_scan_reference",
    "selective_step",
]
