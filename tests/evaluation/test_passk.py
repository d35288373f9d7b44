"""Unbiased pass@k (Chen et al. 2021) against hand computation and brute-force enumeration."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascent.evaluation.passk import mean_pass_at_k, pass_at_k


def test_pass_at_k_matches_hand_computation():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # n=10, c=3, k=1 is the plain fraction correct
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # n=4, c=1, k=3: 1 - C(3,3)/C(4,3) = 1 - 1/4
    assert pass_at_k(4, 1, 3) == pytest.approx(0.75)
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 2, 3) == 1.0  # any 3 of 4 include one of the 2 correct


def brute_force(n: int, c: int, k: int) -> Fraction:
    """Fraction of all k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(i < c for i in subset) for subset in subsets)
    return Fraction(hits, len(subsets))


@given(
    st.integers(1, 10).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_pass_at_k_equals_enumeration_over_subsets(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(float(brute_force(n, c, k)), abs=1e-12)


@given(
    st.integers(1, 400).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_pass_at_k_is_stable_where_binomials_overflow_floats(nck):
    n, c, k = nck
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(float(exact), abs=1e-9)


def test_large_n_stays_finite_where_the_naive_formula_overflows():
    with pytest.raises(OverflowError):
        float(math.comb(2000, 1000))
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)


def test_mean_over_problems_and_invalid_arguments():
    assert mean_pass_at_k([(4, 4), (4, 0)], 1) == pytest.approx(0.5)
    assert mean_pass_at_k([], 1) is None
    with pytest.raises(ValueError, match="k=5"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c=5"):
        pass_at_k(4, 5, 1)
