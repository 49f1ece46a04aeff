"""Seed statistics and the verdict rule of a comparison: mean, standard error, agrees / disagrees / inconclusive.

A comparison says how arm A should stand against arm B on one metric (`RELATIONS`). With d the difference
of the seed means (A - B) and s = sqrt(SE_A^2 + SE_B^2) its standard error:

    greater      A > B: agrees if d > 2s, disagrees if d < -2s, else inconclusive
    less         A < B: the same with the sign of d turned
    not_greater  A does not improve on B by more than `margin`: agrees if d + 2s <= margin (even the upper end
                 of the interval is no real gain), disagrees if d - 2s > margin, else inconclusive
    close        |A - B| <= margin: agrees if |d| + 2s <= margin, disagrees if |d| - 2s > margin, else
                 inconclusive

so "inconclusive" always means the difference is within two standard errors of the boundary the claim draws.
A single seed has no standard error: its comparisons are inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

RELATIONS = ("greater", "less", "not_greater", "close")
VERDICTS = ("agrees", "disagrees", "inconclusive")


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean (sample standard deviation / sqrt(n)); nan for fewer than two values."""
    n = len(values)
    if n < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n)


@dataclass(frozen=True)
class Difference:
    """A - B over seeds: the difference of the means and its standard error (nan with a single seed)."""

    a_mean: float
    b_mean: float
    diff: float
    se: float

    @classmethod
    def of(cls, a: Sequence[float], b: Sequence[float]) -> "Difference":
        """The difference of two arms' seed values (independent seeds: the SEs add in quadrature)."""
        a_mean, b_mean = mean(a), mean(b)
        return cls(a_mean, b_mean, a_mean - b_mean, math.hypot(standard_error(a), standard_error(b)))


def verdict(relation: str, d: Difference, margin: float = 0.0) -> str:
    """"agrees", "disagrees" or "inconclusive" for `relation` (one of RELATIONS) given the difference A - B."""
    if relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r}; choose one of {RELATIONS}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if math.isnan(d.se):
        return "inconclusive"
    diff, band = d.diff, 2 * d.se
    if relation == "less":
        relation, diff = "greater", -diff
    if relation == "greater":
        return "agrees" if diff > band else "disagrees" if diff < -band else "inconclusive"
    if relation == "close":
        diff = abs(diff)
    if diff + band <= margin:
        return "agrees"
    return "disagrees" if diff - band > margin else "inconclusive"
