"""The torch paths' custom ops under torch.library.opcheck: schemas (no undeclared mutation, no aliasing), fake
implementations (shapes, strides and dtypes equal to the real outputs'), autograd registration and AOT dispatch, on
the layouts and options the layers pass (channels-last, grouped or time-invariant B / C, resets, several chunks)."""

import pytest
import torch
from torch.library import opcheck

from seqssm.ops.linear import linear_scan_chunked_backward_op, linear_scan_chunked_op
from seqssm.ops.rotary import rotary_table_op
from seqssm.ops.selective_chunked import (selective_scan_chunked, selective_scan_chunked_backward_op,
                                          selective_scan_chunked_op)

B_, D_, L_, N_ = 2, 4, 7, 3


def _selective_inputs(channels_last: bool, bc: str, resets: bool):
    """u, delta, A, B, C, h0, keep in float64; bc: "variable" (b, 1, N, L), "groups" (b, 2, N, L) or "invariant"
    (D, N) for both B and C."""
    def seq(*shape):  # (b, ..., L), channels-last memory when asked
        if channels_last:
            return torch.randn(shape[0], shape[-1], *shape[1:-1], dtype=torch.float64).movedim(1, -1)
        return torch.randn(*shape, dtype=torch.float64)

    u, delta = seq(B_, D_, L_), seq(B_, D_, L_).sigmoid()
    A = -torch.rand(D_, N_, dtype=torch.float64) - 0.1
    if bc == "invariant":
        B, C = torch.randn(D_, N_, dtype=torch.float64), torch.randn(D_, N_, dtype=torch.float64)
    else:
        groups = 2 if bc == "groups" else 1
        B, C = seq(B_, groups, N_, L_), seq(B_, groups, N_, L_)
    h0 = torch.randn(B_, D_, N_, dtype=torch.float64)
    keep = (torch.rand(B_, L_) > 0.3).double() if resets else None
    return [t.requires_grad_() for t in (u, delta, A, B, C, h0)] + [keep]


@pytest.mark.parametrize("channels_last, bc, resets", [
    (False, "variable", True), (True, "variable", False), (False, "groups", False), (True, "groups", True),
    (False, "invariant", True), (True, "invariant", False),
])
def test_selective_scan_chunked_ops(channels_last, bc, resets):
    inputs = _selective_inputs(channels_last, bc, resets)
    chunk = 3  # three chunks of L = 7: carries between chunks and a short last chunk
    opcheck(selective_scan_chunked_op, (*inputs, chunk, True))
    with torch.no_grad():
        y, last, starts = selective_scan_chunked_op(*inputs, chunk, True)
    u, delta, A, B, C, _, keep = (None if t is None else t.detach() for t in inputs)
    opcheck(selective_scan_chunked_backward_op, (u, delta, A, B, C, keep, starts, torch.randn_like(y),
                                                 torch.randn_like(last), chunk))


def test_selective_scan_chunked_without_chunk_states_refuses_gradients():
    inputs = _selective_inputs(False, "variable", False)
    with pytest.raises(RuntimeError, match="gradients need the chunk-start states; call it with store_starts=True"):
        selective_scan_chunked(*inputs, 3, False)


@pytest.mark.parametrize("dtype, with_h0, length", [  # L 5: the sequential loop; 40: chunks side by side, padded
    (torch.float64, True, 5), (torch.float64, False, 40), (torch.complex128, False, 5), (torch.complex128, True, 40),
])
def test_linear_scan_chunked_ops(dtype, with_h0, length, monkeypatch):
    import seqssm.ops.linear as linear_module

    monkeypatch.setattr(linear_module, "_SLICE_TARGET", 64)
    a, b = 0.9 * torch.rand(2, length, 3, dtype=dtype), torch.randn(2, length, 3, dtype=dtype)
    h0 = torch.randn(2, 3, dtype=dtype) if with_h0 else None
    args = [a.requires_grad_(), b.requires_grad_(), h0 if h0 is None else h0.requires_grad_()]
    opcheck(linear_scan_chunked_op, tuple(args))
    with torch.no_grad():
        h = linear_scan_chunked_op(*args)
    saved = [None if t is None else t.detach() for t in args]
    opcheck(linear_scan_chunked_backward_op, (saved[0], h, saved[2], torch.randn_like(h)))


def test_rotary_table_op():
    opcheck(rotary_table_op, (torch.randint(0, 5000, (2, 7)), torch.rand(4, dtype=torch.float64)))
