"""The statistics of every claim: the t distribution, Welch's one-sided tests, TOST, time ratios, Holm and power,
on hand-computed cases (no scipy) and against scipy (the [test] extra) where it is installed."""

import math

import pytest

from seqssm.study.reproduce.stats import (Welch, betainc, holm, judge, mean, power, seeds_for_power, standard_error,
                                          t_cdf, t_quantile, welch_test)


def test_mean_and_standard_error_match_the_textbook_formulas():
    values = [1.0, 2.0, 4.0]
    assert mean(values) == pytest.approx(7 / 3)
    sd = math.sqrt(sum((v - 7 / 3) ** 2 for v in values) / 2)
    assert standard_error(values) == pytest.approx(sd / math.sqrt(3))
    assert math.isnan(standard_error([5.0]))
    with pytest.raises(ValueError, match="mean of no values"):
        mean([])


def test_t_distribution_hand_computed_cases():
    # df = 1 is the Cauchy distribution: P(T <= t) = 1/2 + atan(t) / pi
    for t in (-3.0, -0.5, 0.0, 0.7, 10.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
    # df = 2 has a closed form: 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-2.0, 0.3, 4.0):
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_quantile(0.975, 2) == pytest.approx(4.302652729911275, abs=1e-9)  # the textbook table's 4.303
    assert t_cdf(1.959963984540054, math.inf) == pytest.approx(0.975, abs=1e-12)
    assert betainc(1.0, 1.0, 0.3) == pytest.approx(0.3)  # I_x(1, 1) = x
    assert betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, abs=1e-12)  # 1 - (1-x)^4 - 4x(1-x)^3 at x = 0.4


def test_welch_hand_computed_case():
    # a = [1, 2, 3], b = [0, 0, 3]: variances 1 and 3, SE^2 = 1/3 + 1 = 4/3, df = (4/3)^2 / ((1/3)^2/2 + 1/2) = 16/5
    w = Welch.of([1.0, 2.0, 3.0], [0.0, 0.0, 3.0])
    assert (w.diff, w.se, w.df) == pytest.approx((1.0, math.sqrt(4 / 3), 16 / 5))
    o = welch_test("greater", [1.0, 2.0, 3.0], [0.0, 0.0, 3.0])
    assert o.p == pytest.approx(1 - t_cdf(1 / math.sqrt(4 / 3), 16 / 5))
    assert o.p + o.p_against == pytest.approx(1.0)
    half = t_quantile(0.975, 16 / 5) * math.sqrt(4 / 3)
    assert o.interval == pytest.approx((1 - half, 1 + half))


@pytest.mark.parametrize("a, b, expected", [
    ([0.357, 0.354, 0.363], [0.339, 0.331, 0.354], "inconclusive"),  # bi vs causal: p = 0.059 (the issue)
    ([1.0, 1.1, 1.2], [0.0, 0.1, 0.2], "agrees"),
    ([0.0, 0.1, 0.2], [1.0, 1.1, 1.2], "disagrees"),
])
def test_greater_verdicts(a, b, expected):
    o = welch_test("greater", a, b)
    assert o.verdict == expected
    assert welch_test("less", b, a).verdict == expected


def test_not_greater_and_equivalence_need_a_margin_and_let_equal_arms_agree():
    equal_a, equal_b = [0.50, 0.51, 0.49, 0.50], [0.50, 0.49, 0.51, 0.50]
    with pytest.raises(ValueError, match="needs a margin > 0"):
        welch_test("not_greater", equal_a, equal_b)
    assert welch_test("not_greater", equal_a, equal_b, margin=0.05).verdict == "agrees"
    assert welch_test("equivalent", equal_a, equal_b, margin=0.05).verdict == "agrees"
    far = [v + 0.3 for v in equal_a]
    assert welch_test("not_greater", far, equal_b, margin=0.05).verdict == "disagrees"
    assert welch_test("equivalent", far, equal_b, margin=0.05).verdict == "disagrees"
    assert welch_test("equivalent", [v - 0.3 for v in equal_a], equal_b, margin=0.05).verdict == "disagrees"
    with pytest.raises(ValueError, match="drop its margin"):
        welch_test("greater", equal_a, equal_b, margin=0.1)


def test_faster_tests_the_time_ratio_against_the_stated_one():
    fast, slow = [100.0, 101.0, 99.0], [150.0, 152.0, 149.0]
    o = welch_test("faster", fast, slow, margin=1.0)
    assert o.estimate == pytest.approx(1.5, rel=0.01)
    assert o.interval[0] < 1.5 < o.interval[1] and o.verdict == "agrees"
    assert welch_test("faster", fast, slow, margin=6.0).verdict == "disagrees"  # 1.5x is not "over six times"
    with pytest.raises(ValueError, match="ratio"):
        welch_test("faster", fast, slow, margin=0.5)


def test_one_seed_is_never_a_verdict():
    o = welch_test("greater", [1.0], [0.0])
    assert o.verdict == "inconclusive" and math.isnan(o.p)


def test_equal_seeds_without_spread_decide_by_the_sign():
    assert welch_test("greater", [1.0, 1.0], [0.0, 0.0]).verdict == "agrees"
    assert welch_test("greater", [0.0, 0.0], [0.0, 0.0]).verdict == "inconclusive"


def test_holm_step_down():
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01, 2 x 0.03, max(0.06, 1 x 0.04); nan is left out and kept
    assert holm([0.04, 0.01, math.nan, 0.03]) == pytest.approx([0.06, 0.03, math.nan, 0.06], nan_ok=True)
    assert holm([0.4, 0.3]) == pytest.approx([0.6, 0.6]) and holm([0.9, 0.8]) == [1.0, 1.0]  # capped at 1
    assert judge(0.01, 0.9, 0.05) == "agrees" and judge(0.5, 0.01, 0.05) == "disagrees"


def test_power_hand_computed_limits_and_seed_counts():
    assert power("greater", 0.0, 1.0, 10) == pytest.approx(0.05, abs=1e-3)  # no effect: the test's level
    assert power("greater", 10.0, 0.1, 3) == pytest.approx(1.0)
    assert power("greater", 1.0, 1.0, 20) > power("greater", 1.0, 1.0, 10) > power("greater", 1.0, 1.0, 5)
    n = seeds_for_power("greater", 1.0, 1.0)
    assert power("greater", 1.0, 1.0, n) >= 0.8 > power("greater", 1.0, 1.0, n - 1)
    assert seeds_for_power("greater", 0.01, 1.0) is None


def test_against_scipy():
    stats = pytest.importorskip("scipy.stats", reason="scipy comes with the [test] extra: pip install 'seqssm[test]'")
    for t, df in [(0.3, 2), (2.1, 3.7), (-1.5, 10), (5.0, 1), (12.0, 2.5), (-0.01, 200)]:
        assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-12)
    for p, df in [(0.975, 2), (0.95, 3.3), (0.8, 50)]:
        assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), abs=1e-9)
    a, b = [0.357, 0.354, 0.363, 0.36], [0.339, 0.331, 0.354]
    o = welch_test("greater", a, b)
    ref = stats.ttest_ind(a, b, equal_var=False, alternative="greater")
    assert o.p == pytest.approx(ref.pvalue, abs=1e-10)
    assert o.interval == pytest.approx(tuple(stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)),
                                       abs=1e-9)
    # TOST: the larger of two one-sided tests against the shifted boundaries
    margin = 0.05
    lower = stats.ttest_ind([v + margin for v in a], b, equal_var=False, alternative="greater").pvalue
    upper = stats.ttest_ind([v - margin for v in a], b, equal_var=False, alternative="less").pvalue
    assert welch_test("equivalent", a, b, margin=margin).p == pytest.approx(max(lower, upper), abs=1e-10)
    # power: the noncentral t's tail at the equal-variance degrees of freedom
    for effect, sd, n in [(0.03, 0.01, 3), (0.5, 1.0, 2), (1.0, 1.0, 10)]:
        df, se = 2 * (n - 1), sd * math.sqrt(2 / n)
        ref = 1 - stats.nct.cdf(stats.t.ppf(0.95, df), df, effect / se)
        assert power("greater", effect, sd, n) == pytest.approx(ref, abs=1e-3)
