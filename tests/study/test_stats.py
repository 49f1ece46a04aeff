"""The verdict rule: a difference against two standard errors, per relation, with margins for close / not_greater."""

import math

import pytest

from seqssm.study.reproduce.stats import Difference, mean, standard_error, verdict


def test_mean_and_standard_error_match_the_textbook_formulas():
    values = [1.0, 2.0, 4.0]
    assert mean(values) == pytest.approx(7 / 3)
    sd = math.sqrt(sum((v - 7 / 3) ** 2 for v in values) / 2)
    assert standard_error(values) == pytest.approx(sd / math.sqrt(3))
    assert math.isnan(standard_error([5.0]))
    with pytest.raises(ValueError, match="mean of no values"):
        mean([])


def test_difference_adds_the_standard_errors_in_quadrature():
    a, b = [1.0, 2.0, 3.0], [0.0, 0.0, 3.0]
    d = Difference.of(a, b)
    assert d.diff == pytest.approx(1.0)
    assert d.se == pytest.approx(math.hypot(standard_error(a), standard_error(b)))


def d(diff, se):
    return Difference(diff, 0.0, diff, se)


@pytest.mark.parametrize("diff, expected", [(0.5, "agrees"), (0.2, "inconclusive"), (-0.2, "inconclusive"),
                                            (-0.5, "disagrees")])
def test_greater_is_decided_outside_two_standard_errors(diff, expected):
    assert verdict("greater", d(diff, 0.1)) == expected
    mirrored = {"agrees": "disagrees", "disagrees": "agrees"}.get(expected, expected)
    assert verdict("less", d(diff, 0.1)) == mirrored


@pytest.mark.parametrize("diff, margin, expected", [
    (-0.5, 0.0, "agrees"),        # clearly worse: no improvement
    (0.0, 0.0, "inconclusive"),   # a tie cannot rule out a gain of up to 2 SE
    (0.0, 0.25, "agrees"),        # ... unless the margin allows it
    (0.5, 0.0, "disagrees"),      # a clear gain
])
def test_not_greater_asks_the_whole_interval_to_stay_below_the_margin(diff, margin, expected):
    assert verdict("not_greater", d(diff, 0.1), margin) == expected


@pytest.mark.parametrize("diff, expected", [(0.0, "agrees"), (-0.05, "agrees"), (0.12, "inconclusive"),
                                            (-0.5, "disagrees"), (0.5, "disagrees")])
def test_close_compares_the_absolute_difference_with_the_margin(diff, expected):
    assert verdict("close", d(diff, 0.02), margin=0.1) == expected


def test_one_seed_is_never_a_verdict():
    assert verdict("greater", Difference.of([1.0], [0.0])) == "inconclusive"


def test_bad_relations_and_margins_are_refused():
    with pytest.raises(ValueError, match="unknown relation 'bigger'"):
        verdict("bigger", d(1.0, 0.1))
    with pytest.raises(ValueError, match="margin must be >= 0"):
        verdict("close", d(1.0, 0.1), margin=-1.0)
