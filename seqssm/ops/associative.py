"""Parallel inclusive scans under any associative operator, and the Möbius-map composition of the Kalman layer."""

from __future__ import annotations

import torch

Elems = tuple[torch.Tensor, ...]


def _interleave(even: torch.Tensor, odd: torch.Tensor) -> torch.Tensor:
    """Along dim 1: e0, o0, e1, o1, ... with len(even) - len(odd) in {0, 1}."""
    n = odd.shape[1]
    out = torch.stack([even[:, :n], odd], dim=2).flatten(1, 2)
    return torch.cat([out, even[:, n:]], dim=1)


def associative_scan(combine, elems: Elems) -> Elems:
    """Inclusive scan along dim 1 of a tuple of (B, L, ...) tensors under an associative `combine(earlier, later)`.

    The odd-even recursion (Blelloch / jax.lax.associative_scan): combine neighbouring pairs, scan
    the half-length sequence, then fill in the even positions. O(L) work, O(log L) depth.
    """
    length = elems[0].shape[1]
    if length < 2:
        return elems
    even = tuple(e[:, 0::2] for e in elems)
    odd = tuple(e[:, 1::2] for e in elems)
    n_odd = odd[0].shape[1]
    odd_scanned = associative_scan(combine, combine(tuple(e[:, :n_odd] for e in even), odd))
    n_rest = even[0].shape[1] - 1  # even positions 2, 4, ...: prefix up to 2k - 1 composed with element 2k
    rest = combine(tuple(o[:, :n_rest] for o in odd_scanned), tuple(e[:, 1:] for e in even))
    even_scanned = tuple(torch.cat([e[:, :1], r], dim=1) for e, r in zip(even, rest))
    return tuple(_interleave(e, o) for e, o in zip(even_scanned, odd_scanned))


def mobius_compose(first: Elems, then: Elems) -> Elems:
    """The map `then ∘ first` of Möbius maps P -> (a P + b) / (c P + d) given as entries (a, b, c, d) >= 0.

    The product is rescaled to unit entry sum, which leaves the map unchanged and keeps long
    products in range; the sum is positive because no map here is the zero matrix.
    """
    a1, b1, c1, d1 = first
    a2, b2, c2, d2 = then
    out = (a2 * a1 + b2 * c1, a2 * b1 + b2 * d1, c2 * a1 + d2 * c1, c2 * b1 + d2 * d1)
    total = out[0] + out[1] + out[2] + out[3]
    return tuple(e / total for e in out)
