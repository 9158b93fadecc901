"""glyph.report.stats against independent answers: published Wilson
intervals, pass@k by enumerating every k-subset, McNemar by hand."""

import itertools
import math

import numpy as np
import pytest

from glyph.report.stats import Bootstrap, mcnemar_exact, pass_at_k, wilson


@pytest.mark.parametrize(
    "x,n,lo,hi",
    [
        (0, 10, 0.0, 0.2775),  # Newcombe (1998), Table I / Brown, Cai & DasGupta (2001)
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
        (1, 29, 0.0061, 0.1718),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_wilson_matches_published_values(x, n, lo, hi):
    got = wilson(x, n)
    assert got[0] == pytest.approx(lo, abs=5e-5) and got[1] == pytest.approx(hi, abs=5e-5)


def test_wilson_of_nothing_is_none():
    assert wilson(0, 0) is None


def _pass_at_k_by_enumeration(n: int, c: int, k: int) -> float:
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    "n,c,k", [(5, 0, 1), (5, 2, 1), (5, 2, 3), (6, 1, 5), (7, 3, 4), (4, 4, 2), (8, 5, 8)]
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    got = pass_at_k(np.array([n]), np.array([c]), k)[0]
    assert got == pytest.approx(_pass_at_k_by_enumeration(n, c, k), abs=1e-12)
    assert got == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_pass_at_k_needs_k_samples():
    with pytest.raises(ValueError):
        pass_at_k(np.array([3]), np.array([1]), 4)


@pytest.mark.parametrize(
    "b,c,p", [(0, 0, 1.0), (0, 5, 2 / 32), (1, 9, 2 * (1 + 10) / 1024), (3, 3, 1.0), (1, 3, 2 * (1 + 4) / 16)]
)
def test_mcnemar_exact(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p)
    assert mcnemar_exact(c, b) == pytest.approx(p)


def test_bootstrap_is_seeded_and_brackets_the_mean():
    values = np.random.default_rng(0).normal(0.5, 0.2, size=100)
    a = Bootstrap(1000, 3).mean(values, "x")
    assert a == Bootstrap(1000, 3).mean(values, "x")
    assert a != Bootstrap(1000, 4).mean(values, "x") and a != Bootstrap(1000, 3).mean(values, "y")
    assert a[0] < values.mean() < a[1] and a[1] - a[0] == pytest.approx(2 * 1.96 * 0.2 / 10, rel=0.25)
    assert Bootstrap().mean(np.array([]), "x") is None
    assert Bootstrap().mean(np.array([2.0, 2.0]), "x") == (2.0, 2.0)


def test_bootstrap_ratio_resamples_units_shared_by_groups():
    num = np.array([[1, 1], [0, 0], [1, 0]], dtype=float)
    den = np.ones_like(num)
    lo, hi = Bootstrap(2000, 0).ratio(num, den, "s")
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0
    # a group missing a unit (den 0) is left out of that unit's draw, not counted as a failure
    full = Bootstrap(500, 0).ratio(np.array([[1.0, 1.0]]), np.array([[1.0, 0.0]]), "t")
    assert full == (1.0, 1.0)
