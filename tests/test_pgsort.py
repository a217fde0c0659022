"""Unit tests of the PostgreSQL tie-order model, without a server (see test_pgsort_postgres.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.engine.pgsort import (
    insertion_top,
    insertion_top_approx,
    postgres_top,
    postgres_top_approx,
)

# Few distinct values so that ties are the rule, plus the values PostgreSQL orders specially.
TIE_VALUES = [0.1, 0.2, 0.3, 0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]
keys_strategy = st.lists(st.sampled_from(TIE_VALUES), min_size=0, max_size=120)
limits = st.integers(min_value=0, max_value=130)


def pg_rank(value: float, descending: bool) -> tuple[int, float]:
    """A sort key ordering floats as PostgreSQL does: NaN above everything, -0.0 == 0.0."""
    if math.isnan(value):
        return (0, 0.0) if descending else (1, 0.0)
    return (1, -value) if descending else (0, value + 0.0)


def stable_reference(keys: list[float], limit: int, descending: bool) -> list[int]:
    return sorted(range(len(keys)), key=lambda i: (pg_rank(keys[i], descending), i))[:max(limit, 0)]


@settings(max_examples=300, deadline=None)
@given(keys=keys_strategy, limit=limits, descending=st.booleans(), float32=st.booleans())
def test_both_orders_return_a_valid_top(keys: list[float], limit: int, descending: bool, float32: bool) -> None:
    array = np.array(keys, dtype=np.float32 if float32 else np.float64)
    expected_ranks = [pg_rank(keys[i], descending) for i in stable_reference(keys, limit, descending)]
    for pick in (postgres_top, insertion_top):
        top = pick(array, limit, descending=descending).tolist()
        assert len(set(top)) == len(top) == min(max(limit, 0), len(keys))
        assert [pg_rank(keys[i], descending) for i in top] == expected_ranks


@settings(max_examples=300, deadline=None)
@given(keys=keys_strategy, limit=limits, descending=st.booleans())
def test_insertion_top_is_a_stable_sort(keys: list[float], limit: int, descending: bool) -> None:
    top = insertion_top(np.array(keys), limit, descending=descending).tolist()
    assert top == stable_reference(keys, limit, descending)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 3), min_size=1, max_size=80), extra=st.integers(0, 40))
def test_presorted_input_keeps_input_order_on_the_quicksort_path(keys: list[int], extra: int) -> None:
    # With at most 2 * limit rows PostgreSQL quicksorts, and its presorted check returns at once.
    array = np.sort(np.array(keys, dtype=np.float64))
    limit = (len(keys) + 1) // 2 + extra
    assert postgres_top(array, limit, descending=False).tolist() == list(range(min(limit, len(keys))))
    assert postgres_top(array[::-1].copy(), limit, descending=True).tolist() == list(range(min(limit, len(keys))))


@pytest.mark.parametrize(
    ("keys", "limit", "descending", "expected"),
    [
        # Observed on PostgreSQL 18.6: `SELECT id ... ORDER BY s [DESC] LIMIT n` on rows loaded in order.
        ([0.1, 0.2, 0.1, 0.3, 0.3, 0.3, 0.2, 0.3, 0.2, 0.1, 0.2, 0.2, 0.2, 0.3, 0.1], 3, True, [4, 3, 5]),
        ([0.3, 0.1, 0.3, 0.2, 0.3, 0.1, 0.1, 0.1, 0.3, 0.3, 0.1, 0.2, 0.1, 0.1, 0.3], 4, True, [4, 2, 0, 8]),
        ([0.1, 0.2, 0.2, 0.2, 0.1, 0.1, 0.1], 7, False, [4, 5, 6, 0, 3, 1, 2]),
    ],
)
def test_known_postgres_orders(keys: list[float], limit: int, descending: bool, expected: list[int]) -> None:
    assert postgres_top(np.array(keys), limit, descending=descending).tolist() == expected
    assert insertion_top(np.array(keys), limit, descending=descending).tolist() != expected


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 3000),
    limit=st.integers(1, 60),
    levels=st.integers(1, 40),
    descending=st.booleans(),
)
def test_estimated_keys_give_the_exact_answer(seed: int, count: int, limit: int, levels: int,
                                              descending: bool) -> None:
    rng = np.random.default_rng(seed)
    exact = rng.integers(0, levels, count) / levels
    exact[rng.random(count) < 0.02] = np.nan
    bound = 0.3 / levels
    approx = exact + rng.uniform(-bound, bound, count)
    lookup = exact.__getitem__
    assert (postgres_top_approx(approx, bound, lookup, limit, descending=descending).tolist()
            == postgres_top(exact, limit, descending=descending).tolist())
    assert (insertion_top_approx(approx, bound, lookup, limit, descending=descending).tolist()
            == insertion_top(exact, limit, descending=descending).tolist())


def test_estimated_keys_are_only_computed_where_they_matter() -> None:
    rng = np.random.default_rng(3)
    exact = rng.random(100_000)
    asked: list[int] = []

    def lookup(rows: np.ndarray) -> np.ndarray:
        asked.append(len(rows))
        return exact[rows]

    for pick in (postgres_top_approx, insertion_top_approx):
        asked.clear()
        pick(exact + 1e-9, 2e-9, lookup, 10, descending=True)
        assert sum(asked) < 2_000


@pytest.mark.parametrize("descending", [False, True])
def test_improving_input_without_ties_takes_the_shortcut(descending: bool) -> None:
    # Every row enters the heap; with distinct keys the plain sorted top is the answer.
    keys = np.arange(50_000, dtype=np.float64)
    keys = keys if descending else keys[::-1].copy()
    top = postgres_top(keys, 10, descending=descending)
    assert top.tolist() == np.argsort(-keys if descending else keys, kind="stable")[:10].tolist()


def test_large_quicksort_with_distinct_keys_is_a_plain_sort() -> None:
    keys = np.random.default_rng(5).permutation(10_000).astype(np.float64)
    assert postgres_top(keys, 20_000, descending=False).tolist() == np.argsort(keys).tolist()


def test_empty_inputs_and_zero_limit() -> None:
    assert postgres_top(np.array([]), 5, descending=False).tolist() == []
    assert insertion_top(np.array([]), 5, descending=True).tolist() == []
    assert postgres_top(np.array([1.0, 2.0]), 0, descending=False).tolist() == []
    assert insertion_top(np.array([1.0, 2.0]), 0, descending=False).tolist() == []
