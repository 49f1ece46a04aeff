"""Bad input at the public entry of every op (issue 19): integer and bool tensors are refused with the cast that
fixes them, float flags are refused, empty inputs give empty outputs and the state unchanged (answered before any
backend runs), and wrong shapes name the expected and the given shape."""

import pytest
import torch

from seqssm.ops import (
    causal_conv1d, causal_conv1d_step, dense_kernel, dplr_kernel, fft_conv, linear_scan, s4d_kernel, selective_scan,
    selective_step,
)
from seqssm.errors import InputDtypeError, InputShapeError
from seqssm.ops.krylov import krylov
from seqssm.ops.masked import masked_causal_conv1d

DIM, N, K = 3, 4, 4
SCAN_BACKENDS = ["auto", "reference", "torch"]


def selective_inputs(batch, length, dtype=torch.float32):
    return dict(u=torch.randn(batch, DIM, length).to(dtype), delta=torch.rand(batch, DIM, length),
                A=-torch.rand(DIM, N) - 0.1, B=torch.randn(batch, N, length), C=torch.randn(batch, N, length))


# --------------------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_inputs_are_refused_not_truncated(dtype):
    # Before: selective_scan on an int64 u returned int64 outputs, 0.9987 truncated to 0.
    with pytest.raises(InputDtypeError, match=rf"selective_scan: u has dtype {dtype}.*cast to float: u.float\(\)"):
        selective_scan(**selective_inputs(2, 5, dtype))
    ones = torch.ones(2, 5, DIM, dtype=dtype)
    with pytest.raises(InputDtypeError, match=rf"linear_scan: b has dtype {dtype}.*cast to float"):
        linear_scan(torch.rand(2, 5, DIM), ones)
    with pytest.raises(InputDtypeError, match=rf"causal_conv1d: x has dtype {dtype}.*cast to float"):
        causal_conv1d(ones.transpose(1, 2), torch.randn(DIM, K))
    with pytest.raises(InputDtypeError, match=rf"fft_conv: u has dtype {dtype}"):
        fft_conv(ones, torch.randn(DIM, 5))
    with pytest.raises(InputDtypeError, match=rf"causal_conv1d_step: x_t has dtype {dtype}"):
        causal_conv1d_step(ones[:, 0], torch.zeros(2, DIM, K - 1), torch.randn(DIM, K))
    with pytest.raises(InputDtypeError, match=rf"selective_step: u_t has dtype {dtype}"):
        selective_step(torch.zeros(2, DIM, N), ones[:, 0], torch.rand(2, DIM), -torch.rand(DIM, N),
                       torch.randn(2, N), torch.randn(2, N))
    with pytest.raises(InputDtypeError, match=rf"s4d_kernel: C has dtype {dtype}"):
        s4d_kernel(torch.ones(DIM, 2, dtype=dtype), torch.ones(DIM, 2, dtype=torch.cfloat),
                   -torch.ones(DIM, 2, dtype=torch.cfloat), 5)
    with pytest.raises(InputDtypeError, match=rf"dense_kernel: A has dtype {dtype}"):
        dense_kernel(torch.ones(DIM, 2, 2, dtype=dtype), torch.ones(DIM, 2), torch.ones(DIM, 2), torch.ones(DIM), 5)
    with pytest.raises(InputDtypeError, match=rf"krylov: A has dtype {dtype}"):
        krylov(torch.ones(2, 2, dtype=dtype), torch.ones(2), 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_every_floating_dtype_is_taken_and_u_s_dtype_comes_back(dtype):
    inputs = selective_inputs(2, 6, dtype)
    y, last = selective_scan(**inputs, return_last_state=True)
    assert y.dtype == last.dtype == dtype
    reference = selective_scan(**{**inputs, "u": inputs["u"].float()})
    torch.testing.assert_close(y.float(), reference, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("op", ["selective_scan", "linear_scan", "causal_conv1d"])
def test_float_and_non_binary_flags_are_refused_and_binary_integers_read_as_bool(op):
    x = torch.randn(2, DIM, 5)

    def run(resets):
        if op == "selective_scan":
            return selective_scan(**selective_inputs(2, 5), resets=resets)
        if op == "linear_scan":
            return linear_scan(torch.rand(2, 5, DIM), x.transpose(1, 2), resets=resets)
        return causal_conv1d(x, torch.ones(DIM, K), resets=resets)

    with pytest.raises(InputDtypeError, match=rf"{op}: resets must be bool .*got torch.float32"):
        run(torch.full((2, 5), 0.3))
    with pytest.raises(InputDtypeError, match=r"resets of dtype torch.int64 must hold only 0 and 1"):
        run(torch.full((2, 5), 3))
    with pytest.raises(InputShapeError, match=r"resets must (have shape|be) \(batch, L\) = \(2, 5\), got \(2, 4\)"):
        run(torch.zeros(2, 4, dtype=torch.bool))
    flags = torch.tensor([[0, 1, 0, 0, 1], [0, 0, 0, 1, 0]])
    torch.manual_seed(0)
    as_int = run(flags)
    torch.manual_seed(0)
    torch.testing.assert_close(as_int, run(flags.bool()), atol=0, rtol=0)


# ---------------------------------------------------------------------------------------------- empties


@pytest.mark.parametrize("backend", SCAN_BACKENDS)
@pytest.mark.parametrize("batch,length", [(2, 0), (0, 5), (0, 0)])
def test_selective_scan_empty_in_empty_out(backend, batch, length):
    inputs = selective_inputs(batch, length)
    h0 = torch.randn(batch, DIM, N)
    y, last = selective_scan(**inputs, return_last_state=True, initial_state=h0, backend=backend)
    assert y.shape == (batch, DIM, length)
    torch.testing.assert_close(last, h0, atol=0, rtol=0)  # L = 0: the state passes through; batch 0: batch-0 state
    y, last = selective_scan(**inputs, return_last_state=True, backend=backend)
    assert last.shape == (batch, DIM, N) and not last.any()


@pytest.mark.parametrize("backend", SCAN_BACKENDS)
@pytest.mark.parametrize("batch,length", [(2, 0), (0, 5)])
def test_linear_scan_empty_in_empty_out(backend, batch, length):
    h = linear_scan(torch.rand(batch, length, DIM, dtype=torch.cfloat), torch.randn(batch, length, DIM),
                    initial_state=torch.randn(batch, DIM, dtype=torch.cfloat),
                    resets=torch.zeros(batch, length, dtype=torch.bool), backend=backend)
    assert h.shape == (batch, length, DIM) and h.dtype == torch.cfloat


@pytest.mark.parametrize("backend", ["auto", "reference", "torch"])
@pytest.mark.parametrize("batch,length", [(2, 0), (0, 5)])
def test_causal_conv1d_empty_in_empty_out(backend, batch, length):
    x, h0 = torch.randn(batch, DIM, length), torch.randn(batch, DIM, K - 1)
    y, state = causal_conv1d(x, torch.randn(DIM, K), torch.randn(DIM), initial_state=h0, return_final_state=True,
                             backend=backend)
    assert y.shape == (batch, DIM, length)
    torch.testing.assert_close(state, h0, atol=0, rtol=0)
    y, state = masked_causal_conv1d(x, torch.randn(DIM, K), None, h0, mask=torch.ones(batch, length, dtype=torch.bool))
    assert y.shape == (batch, DIM, length)
    torch.testing.assert_close(state, h0, atol=0, rtol=0)


def test_steps_and_convolutions_take_batch_zero_and_length_zero():
    y, h = selective_step(torch.zeros(0, DIM, N), torch.zeros(0, DIM), torch.zeros(0, DIM), -torch.rand(DIM, N),
                          torch.zeros(0, N), torch.zeros(0, N))  # before: "cannot reshape tensor of 0 elements"
    assert y.shape == (0, DIM) and h.shape == (0, DIM, N)
    y, state = causal_conv1d_step(torch.zeros(0, DIM), torch.zeros(0, DIM, K - 1), torch.randn(DIM, K))
    assert y.shape == (0, DIM) and state.shape == (0, DIM, K - 1)
    for batch, length in ((2, 0), (0, 5)):  # before: an MKL FFT error
        assert fft_conv(torch.randn(batch, length, DIM), torch.randn(DIM, length), torch.ones(DIM)).shape == (
            batch, length, DIM)


def test_kernels_of_length_zero_are_empty_and_negative_lengths_are_refused():
    c = torch.randn(DIM, 2, dtype=torch.cdouble)
    assert s4d_kernel(c, c, -c.abs().to(c.dtype), 0).shape == (DIM, 0)
    assert dplr_kernel(c, c, c, c, torch.rand(DIM, dtype=torch.double), 0).shape == (DIM, 0)  # before: irfft error
    assert dense_kernel(torch.randn(DIM, 2, 2), torch.randn(DIM, 2), torch.randn(DIM, 2), torch.rand(DIM), 0).shape == (
        DIM, 0)  # before: "stack expects a non-empty TensorList"
    assert krylov(torch.randn(2, 2), torch.randn(2), 0).shape == (0, 2)
    for L in (-1, 2.5, True):
        with pytest.raises(ValueError, match=rf"s4d_kernel: the length L must be an int >= 0, got {L!r}"):
            s4d_kernel(c, c, c, L)


# ----------------------------------------------------------------------------------------------- shapes


def test_wrong_shapes_name_the_expected_and_the_given_shape():
    inputs = selective_inputs(2, 5)
    with pytest.raises(InputShapeError, match=r"selective_scan: initial_state must be \(batch, dim, N\) = "
                                              r"\(2, 3, 4\), got \(2, 3, 5\)"):
        selective_scan(**inputs, initial_state=torch.zeros(2, DIM, N + 1))
    with pytest.raises(InputShapeError, match=r"linear_scan: initial_state must have shape \(batch, \.\.\.\) = "
                                              r"\(2, 3\), got \(2, 4\)"):
        linear_scan(torch.rand(2, 5, DIM), torch.rand(2, 5, DIM), initial_state=torch.zeros(2, 4))
    with pytest.raises(InputShapeError, match=r"causal_conv1d: initial_state must be \(batch, dim, K-1\) = "
                                              r"\(2, 3, 3\), got \(2, 3, 4\)"):
        causal_conv1d(torch.randn(2, DIM, 5), torch.randn(DIM, K), initial_state=torch.zeros(2, DIM, K))
    with pytest.raises(InputShapeError, match=r"fft_conv: need u \(B, L, H\) and k \(H, Lk\); got \(2, 5, 3\) and "
                                              r"\(4, 5\)"):
        fft_conv(torch.randn(2, 5, DIM), torch.randn(DIM + 1, 5))
    with pytest.raises(InputShapeError, match=r"fft_conv: D must be \(H,\) = \(3,\), got \(4,\)"):
        fft_conv(torch.randn(2, 5, DIM), torch.randn(DIM, 5), torch.ones(DIM + 1))
