"""The metric registry against hand-computed values: ties of positions, several expected keys, absent items."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from rqsweep import metrics

# Three queries: [first slot 3, second key absent], [one key at 1], [nothing returned], and one with
# three keys at 2, 5 and 12 (past a cut-off of 10).
POSITIONS = np.array([[3, 0, 0], [1, 0, 0], [0, 0, 0], [2, 5, 12]])
N_EXPECTED = np.array([2, 1, 1, 3])


def value(name: str) -> list[float]:
    return metrics.get(name).per_query(metrics.Judged.binary(POSITIONS, N_EXPECTED)).tolist()


def test_recall_counts_expected_items_within_the_cut_off():
    assert value("recall_at_5") == [0.5, 1.0, 0.0, 2 / 3]
    assert value("recall_at_10") == [0.5, 1.0, 0.0, 2 / 3]
    assert value("recall_at_1") == [0.0, 1.0, 0.0, 0.0]
    assert value("recall_at_20") == [0.5, 1.0, 0.0, 1.0]


def test_mrr_is_the_reciprocal_of_the_first_slot_any_expected_item_holds():
    assert value("mrr") == [1 / 3, 1.0, 0.0, 0.5]


def test_precision_divides_by_the_cut_off_not_by_what_was_returned():
    assert value("precision_at_5") == [1 / 5, 1 / 5, 0.0, 2 / 5]
    assert value("precision_at_1") == [0.0, 1.0, 0.0, 0.0]


def test_hit_is_success_at_k():
    assert value("hit_at_1") == [0.0, 1.0, 0.0, 0.0]
    assert value("hit_at_3") == [1.0, 1.0, 0.0, 1.0]


def test_ndcg_uses_binary_gains_and_the_ideal_order_of_min_expected_k_items():
    got = value("ndcg_at_10")
    assert got[0] == pytest.approx((1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    assert got[1] == 1.0
    assert got[2] == 0.0
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert got[3] == pytest.approx((1 / math.log2(3) + 1 / math.log2(6)) / ideal)
    # With a cut-off below |expected|, the ideal list holds k items only: a perfect top 2 scores 1.
    top_two = metrics.Judged.binary(np.array([[1, 2, 0]]), np.array([3]))
    assert metrics.get("ndcg_at_2").per_query(top_two).tolist() == [1.0]


def test_r_precision_cuts_at_the_number_of_expected_items():
    # R = 2: only position 3 is past it; R = 3: positions 2 and 5 -> only 2 within 3.
    assert value("r_precision") == [0.0, 1.0, 0.0, 1 / 3]


def test_unknown_names_and_out_of_range_cut_offs_are_refused():
    for name in ("map", "recall_at_0", "recall_at_101", "bogus_at_5", "recall@10"):
        with pytest.raises(KeyError):
            metrics.get(name)
    assert "recall_at_K" in metrics.known()


def test_a_failed_search_has_no_metric_and_is_left_out_of_the_averages():
    outcomes = pl.DataFrame({
        "setting_id": ["s"] * 3, "query_id": ["a", "b", "c"], "slice": ["x", "x", "y"],
        "positions": pl.Series([[3, None], None, [None]], dtype=pl.List(pl.Int64)),
        "error": [None, "HTTP 503", None], "tie_sensitive": pl.Series([None, None, None], dtype=pl.Boolean),
        "numeric_sensitive": pl.Series([None, None, None], dtype=pl.Boolean),
    })
    scored = metrics.score_queries(outcomes, ["recall_at_5", "mrr"])
    assert scored["rank"].to_list() == [3, None, 0]
    assert scored["mrr"].to_list() == [1 / 3, None, 0.0]
    assert scored["recall_at_5"].to_list() == [0.5, None, 0.0]
    table = {r["slice"]: r for r in metrics.slice_metrics(scored, ["mrr"]).iter_rows(named=True)}
    assert table["x"]["mrr"] == 1 / 3 and table["x"]["errors"] == 1 and table["x"]["queries"] == 2
    assert table["overall"]["mrr"] == pytest.approx(1 / 6)
    # No backend could tell storage-order sensitivity: the sum stays null, not 0.
    assert table["overall"]["tie_sensitive"] is None


def test_padded_positions_read_sliced_list_columns():
    series = pl.Series([[1, None], [None, 4, 2], None, [7]], dtype=pl.List(pl.Int64)).slice(1, 3)
    padded, lengths = metrics.padded_positions(series)
    assert padded.tolist() == [[0, 4, 2], [0, 0, 0], [7, 0, 0]]
    assert lengths.tolist() == [3, 0, 1]


def test_ndcg_takes_the_grades_as_gains_and_the_ideal_from_the_best_grades():
    # Grades 1 and 3; the grade-1 item at position 1, the grade-3 item at position 3.
    judged = metrics.Judged(np.array([[1, 3]]), np.array([[1, 3]]))
    dcg = 1 / math.log2(2) + 3 / math.log2(4)
    ideal = 3 / math.log2(2) + 1 / math.log2(3)
    assert metrics.get("ndcg_at_10").per_query(judged).tolist() == [pytest.approx(dcg / ideal)]
    # Cut at 1: the ideal holds the best grade only.
    assert metrics.get("ndcg_at_1").per_query(judged).tolist() == [pytest.approx(1 / 3)]


def test_binary_metrics_count_items_graded_at_least_the_relevance_level():
    judged = metrics.Judged(np.array([[1, 3, 0]]), np.array([[1, 3, 2]]), level=2)
    assert metrics.get("mrr").per_query(judged).tolist() == [1 / 3]  # the grade-1 item at 1 is not relevant
    assert metrics.get("recall_at_5").per_query(judged).tolist() == [0.5]  # one of the two graded >= 2
    assert metrics.get("precision_at_5").per_query(judged).tolist() == [1 / 5]
    assert metrics.get("r_precision").per_query(judged).tolist() == [0.0]  # R = 2: position 3 is past it
    # No item at the level: 0 everywhere, as trec_eval scores a query without relevant documents.
    none = metrics.Judged(np.array([[1]]), np.array([[1]]), level=3)
    assert [metrics.get(m).per_query(none).tolist() for m in ("mrr", "recall_at_5", "hit_at_5")] == [[0.0]] * 3


def test_score_queries_joins_the_grades_by_query_id():
    outcomes = pl.DataFrame({
        "setting_id": ["s"] * 3, "query_id": ["b", "a", "b"],
        "positions": pl.Series([[1, 2], [4], None], dtype=pl.List(pl.Int64)),
        "error": [None, None, "timeout"], "tie_sensitive": pl.Series([None] * 3, dtype=pl.Boolean),
        "numeric_sensitive": pl.Series([None] * 3, dtype=pl.Boolean),
    })
    scored = metrics.score_queries(outcomes, ["mrr", "ndcg_at_10"], {"a": (2,), "b": (1, 2)}, level=2)
    assert scored["rank"].to_list() == [2, 4, None]  # b's item at 1 has grade 1, below the level
    assert scored["mrr"].to_list() == [0.5, 0.25, None]
    ideal = 2 + 1 / math.log2(3)
    assert scored["ndcg_at_10"].to_list()[0] == pytest.approx((1 + 2 / math.log2(3)) / ideal)


# binary_scores (the fast path's metrics) against the registry: same values to the last bit.
FUSED_NAMES = ("recall_at_1", "recall_at_5", "recall_at_10", "precision_at_3", "hit_at_2", "hit_at_10", "mrr",
               "ndcg_at_5", "r_precision")  # the last two through the registry


@st.composite
def padded_rows(draw):
    """(rows, keys) positions, duplicates and ties included, 0 for absent and for the padding past n_expected."""
    rows, keys = draw(st.integers(1, 12)), draw(st.integers(1, 4))
    top = draw(st.sampled_from([3, 10, 100]))
    n_expected = np.array(draw(st.lists(st.integers(0, keys), min_size=rows, max_size=rows)))
    positions = np.array(draw(st.lists(st.lists(st.integers(0, top), min_size=keys, max_size=keys),
                                       min_size=rows, max_size=rows)))
    positions[np.arange(keys)[None, :] >= n_expected[:, None]] = 0
    return positions, n_expected


@given(padded_rows(), st.sampled_from([np.uint8, np.int16, np.int64]))
@hsettings(max_examples=200, deadline=None)
def test_binary_scores_equal_the_registry_bit_for_bit(case, dtype):
    positions, n_expected = case
    judged = metrics.Judged.binary(positions, n_expected)
    rank, values = metrics.binary_scores(positions.astype(dtype), n_expected, FUSED_NAMES)
    assert rank.tolist() == metrics.first_relevant_rank(judged.relevant).tolist()
    for name in FUSED_NAMES:
        want = metrics.get(name).per_query(judged)
        assert values[name].dtype == np.float64 and values[name].tobytes() == want.tobytes(), name


@given(padded_rows(), st.integers(1, 3))
@hsettings(max_examples=50, deadline=None)
def test_binary_scores_broadcast_n_expected_over_settings(case, n_settings):
    positions, n_expected = case
    stacked = np.stack([np.roll(positions, s, axis=1) * (positions > 0) for s in range(n_settings)]).astype(np.uint8)
    rank, values = metrics.binary_scores(stacked, n_expected, FUSED_NAMES)
    for s in range(n_settings):
        judged = metrics.Judged.binary(stacked[s].astype(np.int64), n_expected)
        assert rank[s].tolist() == metrics.first_relevant_rank(judged.relevant).tolist()
        for name in FUSED_NAMES:
            assert values[name][s].tobytes() == metrics.get(name).per_query(judged).tobytes(), name


def test_binary_scores_refuse_what_the_registry_refuses():
    with pytest.raises(KeyError):
        metrics.binary_scores(POSITIONS, N_EXPECTED, ["recall_at_101"])


@given(padded_rows(), st.lists(st.booleans(), min_size=12, max_size=12))
@hsettings(max_examples=100, deadline=None)
def test_score_queries_without_grades_equals_every_grade_1(case, failed):
    """The ungraded path (binary_scores) and the graded one (the registry) on the same rows, failed ones among them."""
    positions, n_expected = case
    ids = [f"q{r}" for r in range(len(positions))]
    lists = [[p or None for p in row[:n]] for row, n in zip(positions.tolist(), n_expected.tolist())]
    outcomes = pl.DataFrame({
        "setting_id": ["s"] * len(ids), "query_id": ids,
        "positions": pl.Series([None if f else x for x, f in zip(lists, failed)], dtype=pl.List(pl.Int64)),
        "error": ["HTTP 503" if f else None for f in failed[:len(ids)]],
        "tie_sensitive": pl.Series([None] * len(ids), dtype=pl.Boolean),
        "numeric_sensitive": pl.Series([None] * len(ids), dtype=pl.Boolean),
    })
    graded = metrics.score_queries(outcomes, FUSED_NAMES, {i: (1,) * n for i, n in zip(ids, n_expected.tolist())})
    assert metrics.score_queries(outcomes, FUSED_NAMES).equals(graded)
