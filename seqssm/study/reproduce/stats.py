"""The statistics every claim uses: per-seed means, Welch's t-tests, Holm's correction and the power behind the
number of seeds.

A comparison is declared before any run (seqssm/recipes/reproduce/<claim>/claim.yaml) as one of `RELATIONS`, on the
difference d = mean(A) - mean(B) of two arms' seed values (independent seeds, unequal variances: Welch):

    greater      A > B, a one-sided Welch t-test of H0: d <= 0 against H1: d > 0
    less         A < B, the same with the sides swapped
    not_greater  A does not improve on B by more than `margin` (> 0): H0: d >= margin against H1: d < margin
    equivalent   |d| < margin (> 0): two one-sided tests (TOST), H1: d > -margin and H1: d < margin; its p-value
                 is the larger of the two
    faster       a time ratio: B's time / A's time above `margin` (> 1, the ratio the source states), tested on
                 the logarithms of the seeds' times (A is the fast arm)

Each test gives two p-values: `p`, for the claim's own alternative, and `p_against`, for the opposite one (the
difference lies significantly on the wrong side of the claim's boundary). At level alpha a comparison
**agrees** when p < alpha, **disagrees** when p_against < alpha, and is **inconclusive** otherwise. A claim's
primary comparison is judged at alpha; its other counted comparisons at alpha after Holm's step-down correction
(each p-value family, `p` and `p_against`, corrected on its own).

The Student t distribution is computed here (regularized incomplete beta by its continued fraction) so that
scipy is not a dependency; tests check it against scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

RELATIONS = ("greater", "less", "not_greater", "equivalent", "faster")
VERDICTS = ("agrees", "disagrees", "inconclusive")
ALPHA = 0.05
LEVEL = 0.95  # of every interval the reports print


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def variance(values: Sequence[float]) -> float:
    """Sample variance (n - 1 in the denominator); nan for fewer than two values."""
    n = len(values)
    if n < 2:
        return math.nan
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / (n - 1)


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean (sample standard deviation / sqrt(n)); nan for fewer than two values."""
    return math.sqrt(variance(values) / len(values)) if len(values) > 1 else math.nan


# -- the t distribution ------------------------------------------------------------------------------------------
def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz; Press et al., Numerical Recipes,
    6.4), converging for x < (a + 1) / (a + b + 2)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0 <= x <= 1:
        raise ValueError(f"betainc needs 0 <= x <= 1, got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` > 0 degrees of freedom (df = inf: the standard normal)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if math.isinf(df):
        return 0.5 * math.erfc(-t / math.sqrt(2))
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (0 < p < 1), by bisection on `t_cdf`."""
    if not 0 < p < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1, got {p}")
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, abs(mid)):
            break
    return (lo + hi) / 2


# -- Welch's test ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Welch:
    """A - B over seeds: the means, their difference, its standard error and Welch-Satterthwaite degrees of freedom
    (se and df nan with fewer than two seeds in an arm)."""

    a_mean: float
    b_mean: float
    diff: float
    se: float
    df: float

    @classmethod
    def of(cls, a: Sequence[float], b: Sequence[float]) -> Welch:
        """Welch's statistics of two arms' seed values."""
        a_mean, b_mean = mean(a), mean(b)
        if len(a) < 2 or len(b) < 2:
            return cls(a_mean, b_mean, a_mean - b_mean, math.nan, math.nan)
        va, vb = variance(a) / len(a), variance(b) / len(b)
        se = math.sqrt(va + vb)
        # equal seed values in both arms: no spread to estimate, the pooled degrees of freedom
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
        return cls(a_mean, b_mean, a_mean - b_mean, se, df)

    def p_above(self, boundary: float) -> float:
        """One-sided p-value of H1: d > boundary."""
        if self.se == 0:
            return 0.0 if self.diff > boundary else 1.0
        return 1 - t_cdf((self.diff - boundary) / self.se, self.df)

    def p_below(self, boundary: float) -> float:
        """One-sided p-value of H1: d < boundary."""
        if self.se == 0:
            return 0.0 if self.diff < boundary else 1.0
        return t_cdf((self.diff - boundary) / self.se, self.df)

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """Two-sided `level` confidence interval of d."""
        half = t_quantile((1 + level) / 2, self.df) * self.se if self.se > 0 else 0.0
        return self.diff - half, self.diff + half


@dataclass(frozen=True)
class Outcome:
    """One declared comparison tested: Welch's statistics (on log times for `faster`), the claim's p-value and the
    opposite one, the 95% interval of the difference (of the time ratio for `faster`), the verdict at `alpha`."""

    relation: str
    margin: float
    welch: Welch
    p: float
    p_against: float
    interval: tuple[float, float]
    alpha: float = ALPHA

    @property
    def verdict(self) -> str:
        """"agrees" / "disagrees" / "inconclusive" at this test's alpha (a single seed: inconclusive)."""
        return judge(self.p, self.p_against, self.alpha)

    @property
    def estimate(self) -> float:
        """The difference of the means, or for `faster` the ratio of geometric-mean times B / A."""
        return math.exp(-self.welch.diff) if self.relation == "faster" else self.welch.diff


def judge(p: float, p_against: float, alpha: float) -> str:
    """The verdict of a pair of one-sided p-values at level alpha (nan: inconclusive)."""
    if p < alpha:
        return "agrees"
    return "disagrees" if p_against < alpha else "inconclusive"


def check_margin(relation: str, margin: float) -> None:
    """Refuse a relation unknown or a margin that makes the comparison unable to pass (see the module text)."""
    if relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r}; choose one of {RELATIONS}")
    if relation in ("not_greater", "equivalent") and not margin > 0:
        raise ValueError(f"a {relation} comparison needs a margin > 0 (two equal arms could never agree), got {margin}")
    if relation == "faster" and not margin >= 1:
        raise ValueError(f"a faster comparison's margin is the source's time ratio, >= 1; got {margin}")
    if relation in ("greater", "less") and margin:
        raise ValueError(f"a {relation} comparison tests against 0; drop its margin ({margin})")


def welch_test(relation: str, a: Sequence[float], b: Sequence[float], margin: float = 0.0,
               alpha: float = ALPHA) -> Outcome:
    """Test the declared `relation` of arm A's seed values `a` to arm B's `b` (see the module text)."""
    check_margin(relation, margin)
    if relation == "faster":
        if min(*a, *b) <= 0:
            raise ValueError("a faster comparison needs positive times")
        # B's time / A's time > margin  <=>  log A - log B < -log margin
        w = Welch.of([math.log(v) for v in a], [math.log(v) for v in b])
        if math.isnan(w.se):
            return Outcome(relation, margin, w, math.nan, math.nan, (math.nan, math.nan), alpha)
        lo, hi = w.interval()
        boundary = -math.log(margin)
        return Outcome(relation, margin, w, w.p_below(boundary), w.p_above(boundary), (math.exp(-hi), math.exp(-lo)),
                       alpha)
    w = Welch.of(a, b)
    interval = w.interval() if not math.isnan(w.se) else (math.nan, math.nan)
    if math.isnan(w.se):
        p = p_against = math.nan
    elif relation == "greater":
        p, p_against = w.p_above(0.0), w.p_below(0.0)
    elif relation == "less":
        p, p_against = w.p_below(0.0), w.p_above(0.0)
    elif relation == "not_greater":
        p, p_against = w.p_below(margin), w.p_above(margin)
    else:  # equivalent: TOST; outside the margin on either side disagrees
        p = max(w.p_above(-margin), w.p_below(margin))
        p_against = min(w.p_above(margin), w.p_below(-margin))
    return Outcome(relation, margin, w, p, p_against, interval, alpha)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order (nan stays nan and is not counted)."""
    present = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    adjusted, running = list(pvalues), 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (len(present) - rank) * p))
        adjusted[i] = running
    return adjusted


# -- power -------------------------------------------------------------------------------------------------------
def _over_spread(df: int, f) -> float:
    """E[f(sqrt(V / df))] for V ~ chi-squared(df): the estimated standard error's spread around the true one
    (Simpson's rule on a grid wide enough for the df here)."""
    hi = df + 40 * math.sqrt(2 * df) + 40
    n = 4000
    h = hi / n
    log_norm = -(df / 2) * math.log(2) - math.lgamma(df / 2)
    total = math.exp(log_norm) * f(0.0) if df == 2 else 0.0  # the density at 0: 1/2 for df = 2, else 0
    for i in range(1, n + 1):
        v = i * h
        weight = 1 if i == n else (4 if i % 2 else 2)
        total += weight * math.exp(log_norm + (df / 2 - 1) * math.log(v) - v / 2) * f(math.sqrt(v / df))
    return total * h / 3


def power(relation: str, effect: float, sd: float, n: int, margin: float = 0.0, alpha: float = ALPHA) -> float:
    """The chance that a comparison with n seeds per arm agrees when the true difference is `effect` (for
    `equivalent` / `not_greater`: when the arms are equal; for `faster`: `effect` is the true time ratio and `sd`
    that of log times) and each arm's seed-to-seed standard deviation is `sd`: the noncentral t's tail, with the
    equal-variance degrees of freedom 2(n - 1)."""
    check_margin(relation, margin)
    if n < 2:
        return 0.0
    df, se = 2 * (n - 1), sd * math.sqrt(2 / n)
    if se == 0:
        return 1.0
    critical = t_quantile(1 - alpha, df)
    if relation in ("greater", "less"):
        shift = abs(effect) / se
    elif relation == "faster":
        shift = (math.log(effect) - math.log(margin)) / se
    else:
        shift = margin / se
    normal = lambda z: 0.5 * math.erfc(-z / math.sqrt(2))  # noqa: E731
    if relation == "equivalent":
        return _over_spread(df, lambda s: max(0.0, 2 * normal(shift - critical * s) - 1))
    return _over_spread(df, lambda s: normal(shift - critical * s))


def seeds_for_power(relation: str, effect: float, sd: float, margin: float = 0.0, target: float = 0.8,
                    alpha: float = ALPHA, most: int = 64) -> int | None:
    """The fewest seeds per arm (>= 2) whose power reaches `target`; None if even `most` do not."""
    for n in range(2, most + 1):
        if power(relation, effect, sd, n, margin, alpha) >= target:
            return n
    return None
