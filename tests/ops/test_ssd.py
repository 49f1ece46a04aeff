"""The SSD scan of Mamba-2: the chunked form and single steps against the sequential recurrence, outputs and every
gradient (initial state included), with groups, resets and lengths that are no multiple of the chunk."""

import pytest
import torch

from seqssm.ops.ssd import ssd_chunked, ssd_reference, ssd_step


def _inputs(b=2, length=23, heads=4, p=3, groups=2, n=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape, positive=False):
        t = torch.rand(*shape, generator=g, dtype=dtype) if positive else torch.randn(*shape, generator=g, dtype=dtype)
        return t.requires_grad_()

    return dict(x=leaf(b, length, heads, p), dt=leaf(b, length, heads, positive=True),
                A=(-torch.rand(heads, generator=g, dtype=dtype) - 0.2).requires_grad_(),
                B=leaf(b, length, groups, n), C=leaf(b, length, groups, n), D=leaf(heads),
                initial_state=leaf(b, heads, p, n))


def _resets(b, length, chunk):
    resets = torch.rand(b, length, generator=torch.Generator().manual_seed(1)) < 0.15
    resets[0, 0] = True
    resets[-1, min(chunk, length - 1)] = True  # on a chunk boundary
    return resets


@pytest.mark.parametrize("length,chunk,groups,with_state,with_resets", [
    (23, 8, 2, True, True), (24, 8, 1, False, False), (7, 16, 4, True, False), (1, 4, 2, True, True),
    (40, 64, 2, False, True),
])
def test_chunked_equals_the_recurrence_values_and_gradients(length, chunk, groups, with_state, with_resets):
    inp = _inputs(length=length, groups=groups)
    if not with_state:
        inp["initial_state"] = None
    resets = _resets(2, length, chunk) if with_resets else None
    fast = ssd_chunked(**inp, resets=resets, chunk_size=chunk)
    ref = ssd_reference(**inp, resets=resets)
    torch.testing.assert_close(fast, ref)
    leaves = [v for v in inp.values() if v is not None]
    cot = [torch.randn_like(t) for t in ref]
    for name, g, g_ref in zip([k for k, v in inp.items() if v is not None], torch.autograd.grad(fast, leaves, cot),
                              torch.autograd.grad(ref, leaves, cot)):
        torch.testing.assert_close(g, g_ref, msg=lambda m: f"gradient of {name}: {m}")


def test_steps_equal_the_recurrence():
    inp = {k: v.detach() for k, v in _inputs(length=9).items()}
    y_ref, last_ref = ssd_reference(**inp)
    state, ys = inp["initial_state"], []
    for t in range(9):
        y_t, state = ssd_step(state, inp["x"][:, t], inp["dt"][:, t], inp["A"], inp["B"][:, t], inp["C"][:, t],
                              inp["D"])
        ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, 1), y_ref)
    torch.testing.assert_close(state, last_ref)


def test_a_reset_forgets_the_past_exactly():
    """After a reset at t the outputs are those of a fresh scan started at t from zeros."""
    inp = {k: v.detach() for k, v in _inputs(length=20).items()}
    resets = torch.zeros(2, 20, dtype=torch.bool)
    resets[:, 11] = True
    y, _ = ssd_chunked(**inp, resets=resets, chunk_size=8)
    tail = {k: (v[:, 11:] if k in ("x", "dt", "B", "C") else v) for k, v in inp.items()}
    tail["initial_state"] = None
    torch.testing.assert_close(y[:, 11:], ssd_reference(**tail)[0])


def test_half_inputs_compute_in_float32():
    inp = {k: v.detach() for k, v in _inputs(length=17, dtype=torch.float32).items()}
    half = {k: (v.to(torch.bfloat16) if k in ("x", "B", "C") else v) for k, v in inp.items()}
    y, last = ssd_chunked(**half, chunk_size=8)
    y_ref, last_ref = ssd_reference(**half)
    assert y.dtype == torch.bfloat16 and last.dtype == torch.float32
    torch.testing.assert_close(last, last_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y.float(), y_ref.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("change,match", [
    (dict(A=torch.ones(3)), r"A must be \(heads,\)"),
    (dict(B=torch.randn(2, 23, 3, 5), C=torch.randn(2, 23, 3, 5)), "4 heads do not split into 3 groups"),
    (dict(dt=torch.rand(2, 22, 4)), r"dt must be \(batch, L, heads\)"),
    (dict(initial_state=torch.zeros(2, 4, 3, 4)), "initial_state must be"),
])
def test_shapes_that_do_not_fit_are_named(change, match):
    inp = {k: v.detach() for k, v in _inputs().items()}
    inp.update(change)
    with pytest.raises(ValueError, match=match):
        ssd_chunked(**inp)


def test_empty_sequence_passes_the_state_through():
    inp = {k: v.detach() for k, v in _inputs(length=0).items()}
    y, last = ssd_chunked(**inp)
    assert y.shape == (2, 0, 4, 3)
    torch.testing.assert_close(last, inp["initial_state"])


@pytest.mark.parametrize("length,chunk,groups", [(64, 16, 1), (50, 16, 2), (33, 64, 4), (1, 8, 1)])
def test_chunked_equals_the_transformers_torch_path(length, chunk, groups):
    """transformers' Mamba2 SSD on its torch path (the function its kernel wrapper falls back to) as the peer:
    outputs and last state, from an initial state, across chunk sizes and groups."""
    import inspect

    modeling = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")
    peer = inspect.unwrap(modeling.mamba2_chunk_scan)
    inp = {k: v.detach().float() for k, v in _inputs(length=length, groups=groups, heads=4, p=8, n=16).items()}
    y_peer, last_peer = peer(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], chunk, D=inp["D"],
                             initial_states=inp["initial_state"], return_final_states=True)
    y, last = ssd_chunked(**inp, chunk_size=chunk)
    torch.testing.assert_close(y, y_peer.to(y.dtype), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(last, last_peer, rtol=1e-4, atol=1e-4)
