"""Selective scan (S6), with the signature and semantics of mamba_ssm's `selective_scan_fn`,
plus an initial state and in-sequence resets.

For each channel d and state index n, with Δ = softplus(delta + delta_bias) when asked:
    h_t = exp(Δ_t A) * h_{t-1} + Δ_t B_t u_t        (zero-order hold on A, Euler on B)
    y_t = <C_t, h_t> + D u_t,  then  y_t * silu(z_t)
`resets[b, t]` zeroes h before step t. Shapes: u, delta, z (batch, dim, L); A (dim, N);
B, C (batch, N, L) or (batch, groups, N, L); D, delta_bias (dim,); initial_state (batch, dim, N).

Backends: "reference" is the sequential definition; "torch" walks the sequence in chunks whose
(batch, chunk, dim, N) intermediates are recomputed in the backward pass instead of stored, so
memory stays a small fraction of one (batch, L, dim, N) tensor; "mamba_ssm" calls the CUDA
kernel (no initial state or resets there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from seqssm.ops.backend import resolve_backend
from seqssm.ops.linear import _scan_forward

# Elements of one chunk's (batch, chunk, dim, N) tensors: large enough that each op amortises
# its dispatch cost, small enough that a handful of them stay well below one full-size tensor.
_CHUNK_ELEMENTS = 1 << 18


def _check_shapes(u, delta, A, B, C, D, z, delta_bias, initial_state, resets):
    if u.ndim != 3 or delta.shape != u.shape:
        raise ValueError(f"u and delta must both be (batch, dim, L); got {tuple(u.shape)} and {tuple(delta.shape)}")
    batch, dim, length = u.shape
    if A.ndim != 2 or A.shape[0] != dim:
        raise ValueError(f"A must be (dim, N) = ({dim}, N), got {tuple(A.shape)}")
    if A.is_complex():
        raise ValueError("selective_scan supports real A only")
    n = A.shape[1]
    for name, M in (("B", B), ("C", C)):
        ok = (M.ndim == 3 and M.shape == (batch, n, length)) or (
            M.ndim == 4 and M.shape[0] == batch and M.shape[2:] == (n, length) and dim % M.shape[1] == 0
        )
        if not ok:
            raise ValueError(
                f"{name} must be (batch, N, L) = ({batch}, {n}, {length}) or (batch, groups, N, L) with groups "
                f"dividing dim={dim}; got {tuple(M.shape)}"
            )
    for name, v in (("D", D), ("delta_bias", delta_bias)):
        if v is not None and v.shape != (dim,):
            raise ValueError(f"{name} must be (dim,) = ({dim},), got {tuple(v.shape)}")
    if z is not None and z.shape != u.shape:
        raise ValueError(f"z must be (batch, dim, L) like u, got {tuple(z.shape)}")
    if initial_state is not None and initial_state.shape != (batch, dim, n):
        raise ValueError(f"initial_state must be (batch, dim, N) = ({batch}, {dim}, {n}), got {tuple(initial_state.shape)}")
    if resets is not None and resets.shape != (batch, length):
        raise ValueError(f"resets must be (batch, L) = ({batch}, {length}), got {tuple(resets.shape)}")


def _grouped(M: torch.Tensor) -> torch.Tensor:
    """B or C as (batch, L, groups, N)."""
    if M.ndim == 3:
        M = M.unsqueeze(1)
    return M.permute(0, 3, 1, 2)


def _finish(y, u, D, z, out_dtype):
    if D is not None:
        y = y + u * D.unsqueeze(-1)
    if z is not None:
        y = y * F.silu(z)
    return y.to(out_dtype)


def _prepare_delta(delta, delta_bias, delta_softplus, compute):
    delta = delta.to(compute)
    if delta_bias is not None:
        delta = delta + delta_bias.to(compute).unsqueeze(-1)
    return F.softplus(delta) if delta_softplus else delta


def selective_step(h, u_t, delta_t, A, B_t, C_t, D=None, z_t=None, delta_bias=None, delta_softplus=False):
    """One step of the selective scan: h (batch, dim, N), u_t, delta_t, z_t (batch, dim), A (dim, N),
    B_t, C_t (batch, N) or (batch, groups, N) -> (y_t (batch, dim), next h)."""
    batch, dim = u_t.shape
    n = A.shape[1]
    out_dtype = u_t.dtype
    compute = torch.promote_types(u_t.dtype, torch.float32)
    delta_t = _prepare_delta(delta_t.unsqueeze(-1), delta_bias, delta_softplus, compute).squeeze(-1)
    B_t = B_t.to(compute).view(batch, -1, 1, n)
    C_t = C_t.to(compute).view(batch, -1, 1, n)
    groups = B_t.shape[1]
    shape = (batch, groups, dim // groups)
    u_g, delta_g = u_t.to(compute).view(shape), delta_t.view(shape)
    h = h.to(compute).view(*shape, n)
    h = torch.exp(delta_g.unsqueeze(-1) * A.to(compute).view(groups, dim // groups, n)) * h
    h = h + (delta_g * u_g).unsqueeze(-1) * B_t
    y = (h * C_t).sum(-1).reshape(batch, dim)
    z_t = None if z_t is None else z_t.unsqueeze(-1)
    y = _finish(y.unsqueeze(-1), u_t.to(compute).unsqueeze(-1), D, z_t, out_dtype).squeeze(-1)
    return y, h.reshape(batch, dim, n)


def selective_scan_reference(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None,
):
    """The sequential definition: a loop of `selective_step` (see the module docstring for shapes)."""
    _check_shapes(u, delta, A, B, C, D, z, delta_bias, initial_state, resets)
    batch, dim, length = u.shape
    compute = torch.promote_types(u.dtype, torch.float32)
    h = u.new_zeros(batch, dim, A.shape[1], dtype=compute) if initial_state is None else initial_state
    # unbind gives per-step views whose backward is one stack, not L full-size scatters.
    zs = z.unbind(-1) if z is not None else [None] * length
    steps = zip(u.unbind(-1), delta.unbind(-1), B.unbind(-1), C.unbind(-1), zs)
    ys = []
    for t, (u_t, delta_t, B_t, C_t, z_t) in enumerate(steps):
        if resets is not None:
            h = h * (~resets[:, t]).to(h.dtype).view(batch, 1, 1)
        y_t, h = selective_step(h, u_t, delta_t, A, B_t, C_t, D, z_t, delta_bias, delta_softplus)
        ys.append(y_t)
    y = torch.stack(ys, dim=-1)
    return (y, h.to(y.dtype)) if return_last_state else y


def _chunk_states(u, delta, A, B, keep, h_start):
    """Discretise and scan one chunk: u, delta (b, T, g, e); A (g, e, N); B (b, T, g, N);
    keep (b, T) or None; h_start (b, g, e, N) -> dA, h, both (b, T, g, e, N)."""
    dA = torch.exp(delta.unsqueeze(-1) * A)
    if keep is not None:
        dA = dA * keep.view(*keep.shape, 1, 1, 1)
    dBu = (delta * u).unsqueeze(-1) * B.unsqueeze(3)
    shape = dA.shape
    flat = (shape[0], shape[1], -1)
    h = _scan_forward(dA.reshape(flat), dBu.reshape(flat), h_start.reshape(shape[0], -1))
    return dA, h.view(shape)


class _SelectiveScan(torch.autograd.Function):
    """u, delta (b, L, g, e); A (g, e, N); B, C (b, L, g, N); h0 (b, g, e, N); keep (b, L) or None
    -> y (b, L, g, e), last state (b, g, e, N). Only chunk-start states are kept for backward."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, h0, keep, chunk):
        length = u.shape[1]
        starts, ys = [], []
        h = h0
        for s in range(0, length, chunk):
            sl = slice(s, s + chunk)
            starts.append(h)
            _, hs = _chunk_states(u[:, sl], delta[:, sl], A, B[:, sl], None if keep is None else keep[:, sl], h)
            ys.append(torch.matmul(hs, C[:, sl].unsqueeze(-1)).squeeze(-1))
            h = hs[:, -1].clone()  # a view would keep the whole chunk alive in `starts`
        ctx.save_for_backward(u, delta, A, B, C, keep, torch.stack(starts))
        ctx.chunk = chunk
        return torch.cat(ys, dim=1), h

    @staticmethod
    def backward(ctx, grad_y, grad_last):
        u, delta, A, B, C, keep, starts = ctx.saved_tensors
        chunk = ctx.chunk
        length = u.shape[1]
        grad_u, grad_delta, grad_B, grad_C = (torch.empty_like(x) for x in (u, delta, B, C))
        grad_A = torch.zeros_like(A)
        # Adjoint of the state after the current chunk, carried backwards across chunks.
        g_next = grad_last.clone() if grad_last is not None else torch.zeros_like(starts[0])
        for i, s in reversed(list(enumerate(range(0, length, chunk)))):
            sl = slice(s, s + chunk)
            u_c, delta_c, B_c, C_c = u[:, sl], delta[:, sl], B[:, sl], C[:, sl]
            dA, h = _chunk_states(u_c, delta_c, A, B_c, None if keep is None else keep[:, sl], starts[i])
            gy = grad_y[:, sl]
            # Adjoint g_t = C_t gy_t + dA_{t+1} g_{t+1}; the chunk's last step receives g_next.
            g = gy.unsqueeze(-1) * C_c.unsqueeze(3)
            g[:, -1] += g_next
            if g.shape[1] > 1:
                shape = g[:, :-1].shape
                flat = (shape[0], shape[1], -1)
                g[:, :-1] = _scan_forward(
                    dA[:, 1:].reshape(flat), g[:, :-1].reshape(flat), g[:, -1].reshape(shape[0], -1), reverse=True
                ).view(shape)
            grad_C[:, sl] = torch.matmul(gy.unsqueeze(-2), h).squeeze(-2)
            du = delta_c * u_c
            grad_B[:, sl] = torch.matmul(du.unsqueeze(-2), g).squeeze(-2)
            grad_du = torch.matmul(g, B_c.unsqueeze(-1)).squeeze(-1)
            g_next = dA[:, 0] * g[:, 0]  # adjoint of the state before this chunk
            # d loss / d (delta * A) per state = g_t * h_{t-1} * dA_t, in place: g is spent.
            g[:, 1:].mul_(h[:, :-1])
            g[:, 0].mul_(starts[i])
            x = g.mul_(dA)
            grad_delta[:, sl] = (x * A).sum(-1) + grad_du * u_c
            grad_u[:, sl] = grad_du * delta_c
            grad_A += (x * delta_c.unsqueeze(-1)).sum((0, 1))  # einsum lowers to a slow strided bmm here
        return grad_u, grad_delta, grad_A, grad_B, grad_C, g_next, None, None


def _selective_scan_torch(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, resets):
    out_dtype = u.dtype
    compute = torch.promote_types(u.dtype, torch.float32)
    batch, dim, length = u.shape
    n = A.shape[1]
    groups = 1 if B.ndim == 3 else B.shape[1]
    if C.ndim != B.ndim or (C.ndim == 4 and C.shape[1] != groups):
        raise ValueError("B and C must have the same grouping in the 'torch' backend")
    u_c = u.to(compute)
    delta = _prepare_delta(delta, delta_bias, delta_softplus, compute)
    # (batch, L, groups, dim/groups): the scan runs along dim 1, a group shares one B / C.
    to_blge = lambda x: x.transpose(1, 2).reshape(batch, length, groups, dim // groups).contiguous()  # noqa: E731
    h0 = (
        u_c.new_zeros(batch, groups, dim // groups, n)
        if initial_state is None
        else initial_state.to(compute).reshape(batch, groups, dim // groups, n)
    )
    keep = None if resets is None else (~resets.to(torch.bool)).to(compute)
    chunk = max(1, _CHUNK_ELEMENTS // (batch * dim * n))
    y, last = _SelectiveScan.apply(
        to_blge(u_c), to_blge(delta), A.to(compute).reshape(groups, dim // groups, n),
        _grouped(B).to(compute).contiguous(), _grouped(C).to(compute).contiguous(), h0, keep, chunk,
    )
    y = y.reshape(batch, length, dim).transpose(1, 2)
    return _finish(y, u_c, D, z, out_dtype), last.reshape(batch, dim, n)


def _selective_scan_mamba(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state):
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    return selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)


def selective_scan(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
    *, initial_state=None, resets=None, backend: str = "auto",
):
    """S6 selective scan: u, delta (batch, dim, L) -> y (batch, dim, L) [, last state (batch, dim, N)].

    Same arguments as mamba_ssm's `selective_scan_fn`, plus `initial_state` (batch, dim, N) and
    `resets` (batch, L) bool (True at t zeroes the state before step t). backend: "auto",
    "reference", "torch" or "mamba_ssm".
    """
    _check_shapes(u, delta, A, B, C, D, z, delta_bias, initial_state, resets)
    plain = initial_state is None and resets is None
    name = resolve_backend("selective_scan", backend, u.device, cuda_ok=plain)
    if name == "reference":
        return selective_scan_reference(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state,
            initial_state=initial_state, resets=resets,
        )
    if name == "mamba_ssm":
        return _selective_scan_mamba(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
    y, last = _selective_scan_torch(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, resets)
    return (y, last.to(y.dtype)) if return_last_state else y
