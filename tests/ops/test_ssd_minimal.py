"""The SSD scan against the minimal SSD of Dao & Gu 2024 ("Transformers are SSMs", listing 1, which mamba_ssm ships as
`ssd_minimal_discrete`), written here from its published definition, over mamba_ssm's test grid: groups 1, 2, 8 and
one per head, chunks of 64 and 128, packed sequences of 1 to 200 steps (its variable-length test: seqssm's resets
stand for its sequence boundaries), and the shape of the listing's own check (L 2048, 32 heads of 64, N 64)."""

import pytest
import torch

from seqssm.ops.ssd import ssd_chunked


def segment_sums(a: torch.Tensor) -> torch.Tensor:
    """a (..., T) -> (..., T, T): entry (t, s) = a[s+1] + ... + a[t] for s <= t, -inf above the diagonal."""
    steps = a.shape[-1]
    totals = torch.cumsum(a, -1)
    sums = totals[..., :, None] - totals[..., None, :]
    return sums.masked_fill(~torch.ones(steps, steps, dtype=torch.bool).tril(), float("-inf"))


def ssd_minimal(X, A, B, C, block_len, initial_states=None):
    """The listing's four steps. X (b, L, H, P), A (b, L, H) = Δ·A, B, C (b, L, H, N) per head; L a multiple of
    block_len -> (Y (b, L, H, P), final state (b, H, P, N)). Its discretised form: X already carries Δ."""
    b, length, h, p = X.shape
    c = length // block_len
    X, A, B, C = (t.reshape(b, c, block_len, *t.shape[2:]) for t in (X, A, B, C))
    A = A.permute(0, 3, 1, 2)  # (b, H, c, l)
    A_cumsum = torch.cumsum(A, -1)
    # 1. outputs within each chunk (the diagonal blocks)
    L = torch.exp(segment_sums(A))
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, L, X)
    # 2. each chunk's state from its own inputs
    decay_states = torch.exp(A_cumsum[..., -1:] - A_cumsum)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, X)
    # 3. states passed from chunk to chunk
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    states = torch.cat([initial_states, states], 1)
    decay_chunk = torch.exp(segment_sums(torch.nn.functional.pad(A_cumsum[..., -1], (1, 0))))
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    # 4. the entering states' outputs
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, torch.exp(A_cumsum))
    return (Y_diag + Y_off).reshape(b, length, h, p), final_state


def minimal_of(x, dt, A, B, C, chunk, initial_state=None):
    """ssd_minimal on seqssm's arguments: X = Δ x, A = Δ A, B and C repeated per head, L padded with Δ = 0."""
    heads = x.shape[2]
    pad = -x.shape[1] % chunk

    def padded(t):
        return torch.nn.functional.pad(t, (0, 0) * (t.ndim - 2) + (0, pad))

    per_head = heads // B.shape[2]
    y, last = ssd_minimal(padded(x * dt[..., None]), padded(dt * A), padded(B.repeat_interleave(per_head, 2)),
                          padded(C.repeat_interleave(per_head, 2)), chunk,
                          None if initial_state is None else initial_state[:, None])
    return y[:, :x.shape[1]], last


def inputs(b, length, heads, p, groups, n, dtype=torch.float64, seed=0):
    """mamba_ssm's test distribution: B / 5, A = -0.1 U(0, 1), Δ = softplus(N(0, 1) - 4)."""
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(b, length, heads, p, generator=g, dtype=dtype),
                dt=torch.nn.functional.softplus(torch.randn(b, length, heads, generator=g, dtype=dtype) - 4),
                A=-0.1 * torch.rand(heads, generator=g, dtype=dtype),
                B=torch.randn(b, length, groups, n, generator=g, dtype=dtype) / 5,
                C=torch.randn(b, length, groups, n, generator=g, dtype=dtype))


@pytest.mark.parametrize("chunk", [64, 128])
@pytest.mark.parametrize("groups", [1, 2, 8, "max"])
def test_packed_sequences_equal_the_minimal_ssd_run_on_each(chunk, groups):
    heads, p, n = 16, 8, 32  # mamba_ssm's grid has 64 heads of 64 and N 32: narrower here, the same structure
    groups = heads if groups == "max" else groups
    lengths = torch.randint(1, 200, (12,), generator=torch.Generator().manual_seed(chunk + heads))
    total = int(lengths.sum())
    inp = inputs(1, total, heads, p, groups, n, seed=groups)
    starts = torch.cumsum(lengths, 0) - lengths
    resets = torch.zeros(1, total, dtype=torch.bool)
    resets[0, starts] = True
    y, _ = ssd_chunked(**inp, resets=resets, chunk_size=chunk)
    for start, length in zip(starts.tolist(), lengths.tolist()):
        piece = {k: v[:, start:start + length] if v.ndim > 1 else v for k, v in inp.items()}
        expected, _ = minimal_of(**piece, chunk=chunk)
        torch.testing.assert_close(y[:, start:start + length], expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, dict(rtol=1e-9, atol=1e-9)),
                                        (torch.float32, dict(rtol=1e-3, atol=2e-3))])
def test_the_listings_own_shape_with_an_initial_state(dtype, tol):
    inp = inputs(1, 2048, 32, 64, 1, 64, dtype=dtype)
    state = torch.randn(1, 32, 64, 64, dtype=dtype, generator=torch.Generator().manual_seed(3))
    y, last = ssd_chunked(**inp, initial_state=state, chunk_size=64)
    expected, expected_last = minimal_of(**{k: v.double() for k, v in inp.items()}, chunk=64,
                                         initial_state=state.double())
    torch.testing.assert_close(y.double(), expected, **tol)
    torch.testing.assert_close(last.double(), expected_last, **tol)
