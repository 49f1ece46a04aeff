"""The attention block of hybrid stacks against a plain reference written from mamba_ssm's MHA definition (a loop over
queries, RoPE as complex rotations, the conv as a sum over taps), and its KV cache under the layer contract: forward,
scan and step agree; a scan continues from a cache; resets and masks; gradients through the cache."""

import math

import pytest
import torch

from seqssm.blocks import AttentionBlock, AttentionConfig
from seqssm.errors import InputShapeError

D_MODEL = 12
SETTINGS = {
    "plain": dict(n_heads=3),
    "gqa-rope-conv-mlp": dict(n_heads=4, n_kv_heads=2, head_dim=4, rotary_dim=2, d_conv=3, mlp_dim=8, qkv_bias=False,
                              softmax_scale=0.3),
    "full-rope": dict(n_heads=2, rotary_dim=6, rotary_base=100.0, out_bias=False),
}


def make(name, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    block = AttentionBlock(D_MODEL, AttentionConfig(**SETTINGS[name])).to(dtype)
    with torch.no_grad():  # non-trivial norm weights and biases
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return block


def reference(block: AttentionBlock, x: torch.Tensor, positions=None, segments=None) -> torch.Tensor:
    """x (B, L, d_model) -> (B, L, d_model), one query at a time. positions (B, L) of each step (default 0..L-1);
    segments (B, L): a query attends to earlier steps of its own segment only."""
    c, (b, length, _) = block.config, x.shape
    positions = torch.arange(length).expand(b, -1) if positions is None else positions
    segments = torch.zeros(b, length, dtype=torch.long) if segments is None else segments
    h = block.norm(x) @ block.in_proj.weight.T
    if block.in_proj.bias is not None:
        h = h + block.in_proj.bias
    qkv, mlp = h[..., :block.qkv_dim], h[..., block.qkv_dim:]
    if block.conv1d is not None:  # causal depthwise: tap j reads step t - (K - 1) + j, zeros before the start
        w, k = block.conv1d.weight[:, 0], c.d_conv
        padded = torch.cat([qkv.new_zeros(b, k - 1, block.qkv_dim), qkv], 1)
        qkv = sum(padded[:, j:j + length] * w[:, j] for j in range(k)) + block.conv1d.bias
    hd, nh, nkv = block.head_dim, block.n_heads, block.n_kv_heads
    q = qkv[..., :nh * hd].reshape(b, length, nh, hd)
    k = qkv[..., nh * hd:(nh + nkv) * hd].reshape(b, length, nkv, hd)
    v = qkv[..., (nh + nkv) * hd:].reshape(b, length, nkv, hd)

    def rope(t):
        half = c.rotary_dim // 2
        if not half:
            return t
        theta = c.rotary_base ** (-torch.arange(half, dtype=torch.float64) * 2 / c.rotary_dim)
        turn = torch.polar(torch.ones(b, length, half, dtype=torch.float64), positions[..., None] * theta)
        z = torch.complex(t[..., :half], t[..., half:2 * half]) * turn[:, :, None]
        return torch.cat([z.real, z.imag, t[..., 2 * half:]], -1)

    q, k = rope(q), rope(k)
    scale = c.softmax_scale or 1 / math.sqrt(hd)
    out = torch.zeros(b, length, nh, hd, dtype=x.dtype)
    for i in range(b):
        for t in range(length):
            seen = [s for s in range(t + 1) if segments[i, s] == segments[i, t]]
            for head in range(nh):
                kv = head // (nh // nkv)
                weights = torch.softmax(torch.stack([q[i, t, head] @ k[i, s, kv] for s in seen]) * scale, 0)
                out[i, t, head] = sum(w * v[i, s, kv] for w, s in zip(weights, seen))
    context = out.reshape(b, length, nh * hd)
    if c.mlp_dim:
        up, gate = mlp.chunk(2, -1)
        context = torch.cat([context, up * torch.nn.functional.silu(gate)], -1)
    y = context @ block.out_proj.weight.T
    return x + (y if block.out_proj.bias is None else y + block.out_proj.bias)


def steps(block, x, state=None):
    ys = []
    for t in range(x.shape[1]):
        y, state = block.step(x[:, t], state)
        ys.append(y)
    return torch.stack(ys, 1), state


@pytest.mark.parametrize("name", SETTINGS)
def test_forward_scan_and_step_equal_the_reference(name):
    block = make(name)
    x = torch.randn(2, 9, D_MODEL, dtype=torch.float64)
    expected = reference(block, x)
    torch.testing.assert_close(block(x), expected)
    torch.testing.assert_close(block.scan(x)[0], expected)
    torch.testing.assert_close(steps(block, x)[0], expected)


@pytest.mark.parametrize("name", SETTINGS)
def test_a_scan_continues_from_the_cache_of_an_earlier_one(name):
    block = make(name)
    x = torch.randn(2, 11, D_MODEL, dtype=torch.float64)
    whole, state = block.scan(x)
    first, mid = block.scan(x[:, :4])
    second, end = block.scan(x[:, 4:], mid)
    torch.testing.assert_close(torch.cat([first, second], 1), whole)
    for a, b in zip(end, state):
        torch.testing.assert_close(a, b)
    assert end[0].shape[2] == 11 and end[3].tolist() == [11, 11]


def test_resets_start_a_new_sequence_inside_a_scan():
    block = make("gqa-rope-conv-mlp")
    x = torch.randn(2, 10, D_MODEL, dtype=torch.float64)
    resets = torch.zeros(2, 10, dtype=torch.bool)
    resets[0, 4] = resets[1, 0] = resets[1, 7] = True
    _, cache = block.scan(torch.randn(2, 3, D_MODEL, dtype=torch.float64))  # a reset also hides the cache
    y, _ = block.scan(x, cache, resets)
    # each row's pieces alone, from an empty cache; row 0's first piece continues from the cache
    torch.testing.assert_close(y[0, :4], block.scan(x[:1, :4], tuple(s[:1] for s in cache))[0][0])
    for row, start, end in [(0, 4, 10), (1, 0, 7), (1, 7, 10)]:
        torch.testing.assert_close(y[row, start:end], block(x[row:row + 1, start:end])[0])


def test_masked_steps_are_skipped():
    block = make("gqa-rope-conv-mlp")
    x = torch.randn(2, 8, D_MODEL, dtype=torch.float64)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[0, 5:] = False
    mask[1, 2] = False
    y, cache = block.scan(x, None, None, mask)
    assert (y[~mask] == 0).all()
    kept = x[1, mask[1]][None]
    torch.testing.assert_close(y[1, mask[1]], block(kept)[0])
    torch.testing.assert_close(y[0, :5], block(x[:1, :5])[0])
    # the cache goes on from the valid steps only: position counts them, and the next step agrees
    assert cache[3].tolist() == [5, 7]
    nxt = torch.randn(2, D_MODEL, dtype=torch.float64)
    y_next, _ = block.step(nxt, cache)
    torch.testing.assert_close(y_next[1], block(torch.cat([kept, nxt[1:2, None]], 1))[0, -1])


def test_gradients_flow_through_the_cache_as_through_one_scan():
    block = make("gqa-rope-conv-mlp")
    x = torch.randn(2, 7, D_MODEL, dtype=torch.float64, requires_grad=True)
    whole = block.scan(x)[0]
    first, mid = block.scan(x[:, :3])
    parts = torch.cat([first, block.scan(x[:, 3:], mid)[0]], 1)
    cot = torch.randn_like(whole)
    torch.testing.assert_close(torch.autograd.grad(parts, x, cot)[0], torch.autograd.grad(whole, x, cot)[0])

    # and into a given cache's keys and values, checked against finite differences
    _, cache = block.scan(torch.randn(1, 3, D_MODEL, dtype=torch.float64))
    keys, values = (t.detach().requires_grad_() for t in cache[:2])
    x2 = torch.randn(1, 2, D_MODEL, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda k, v: block.scan(x2, (k, v, *cache[2:]))[0], (keys, values))


def test_under_autocast_and_in_float32():
    block = make("gqa-rope-conv-mlp", torch.float32)
    x = torch.randn(2, 6, D_MODEL)
    expected = reference(block.double(), x.double()).float()
    block.float()
    torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, cache = block.scan(x)
    torch.testing.assert_close(y.float(), expected, atol=0.1, rtol=0.05)
    torch.testing.assert_close(block.step(x[:, 0], cache)[0], block(torch.cat([x, x[:, :1]], 1))[:, -1], atol=0.1,
                               rtol=0.05)


def test_a_wrong_cache_is_refused_with_its_shape():
    block = make("plain")
    _, cache = block.scan(torch.randn(2, 3, D_MODEL, dtype=torch.float64))
    with pytest.raises(InputShapeError, match=r"visible must be \(2, 3\)"):
        block.step(torch.randn(2, D_MODEL, dtype=torch.float64), (*cache[:2], cache[2][:, :2], *cache[3:]))
    with pytest.raises(InputShapeError, match="KV cache, the tuple of 5"):
        block.scan(torch.randn(2, 3, D_MODEL, dtype=torch.float64), cache[:4])


@pytest.mark.parametrize("settings, match", [
    (dict(n_heads=5), "does not split into n_heads 5"),
    (dict(n_heads=2, head_dim=4, rotary_dim=6), "rotary_dim must be even and at most head_dim"),
])
def test_bad_settings_are_refused(settings, match):
    with pytest.raises(ValueError, match=match):
        AttentionBlock(D_MODEL, AttentionConfig(**settings))


@pytest.mark.parametrize("settings, match", [
    (dict(n_heads=4, n_kv_heads=3), "multiple of n_kv_heads"),
    (dict(n_heads=4, mlp_dim=7), "even number"),
    (dict(n_heads=0), "n_heads"),
])
def test_bad_configs_are_refused(settings, match):
    with pytest.raises(ValueError, match=match):
        AttentionConfig(**settings)
