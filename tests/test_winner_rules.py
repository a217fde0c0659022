"""The rules that pick a winner, through the path a run takes: positions -> per-query metrics -> slice means ->
constraints -> the best feasible setting. They are the nightly job's safety rules: a floor a slice exactly meets
is met, and production knobs stay where they are unless a setting measurably beats them."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from rqsweep import job, metrics
from rqsweep.backends.base import OUTCOME_SCHEMA
from rqsweep.config import Constraint
from rqsweep.decide.constraints import SliceMeans, choose_best, constraint_values
from rqsweep.golden import OVERALL
from rqsweep.knobs import Knobs
from tests.finished_runs import assert_knob_columns_match_ids
from tests.minijob import write_job

NAMES = ("recall_at_10", "mrr")
BASELINE = Knobs().id  # k60_moff_h0.0
OTHER, THIRD = Knobs(rrf_k=5).id, Knobs(rrf_k=1).id


def means_of(found: dict[str, list[list[int | None]]]) -> SliceMeans:
    """Slice means as a run computes them, from each setting's positions per query (slice `a`, in the given
    setting order): each query expects as many keys as it lists positions."""
    rows = []
    for sid, queries in found.items():
        knobs = Knobs.from_id(sid)
        for n, positions in enumerate(queries):
            rows.append({"setting_id": sid, **knobs.columns(), "query_id": f"q{n}", "positions": positions,
                         "error": None, "tie_sensitive": None,
                         "numeric_sensitive": None})
    scored = metrics.score_queries(pl.DataFrame(rows, schema=OUTCOME_SCHEMA), NAMES).with_columns(
        pl.lit("a").alias("slice"))
    return SliceMeans.from_frame(metrics.slice_metrics(scored, NAMES), list(found), ["a"], NAMES)


def seven_of_ten(queries: int) -> list[list[int | None]]:
    """Queries of ten expected keys each, seven of them in the top ten: recall@10 0.7 per query."""
    return [[1, 2, 3, 4, 5, 6, 7, None, None, None]] * queries


@pytest.mark.parametrize("queries", [1, 3])
def test_a_mean_exactly_on_a_min_bound_is_feasible(queries):
    # Three queries at 0.7 average to 0.6999999999999998 in floating point: a rounding below the bound is
    # still on it. One query is the bound exactly.
    means = means_of({BASELINE: [[1]] * queries, OTHER: seven_of_ten(queries)})
    floor = Constraint("recall_at_10", "a", 0.7, None)
    keys, values = constraint_values(means, BASELINE, [floor], ["a"])
    assert keys == ["recall_at_10[a]:min"]
    assert values[1, 0] <= 0  # Optuna's convention: <= 0 is met
    verdicts = choose_best(means, BASELINE, ("mrr", "a"), [floor], ["a"])
    assert verdicts.feasible().tolist() == [True, True]
    assert verdicts.violations().to_list() == [[], []]
    # And a floor a hair above the mean does reject it: the check is not vacuous.
    above = Constraint("recall_at_10", "a", 0.7000001, None)
    assert choose_best(means, BASELINE, ("mrr", "a"), [above], ["a"]).feasible().tolist() == [True, False]


def test_a_drop_exactly_the_allowed_max_drop_is_feasible():
    # Baseline recall 1.0, OTHER 0.7: a drop of 0.3 (0.30000000000000016 in floating point) against max_drop 0.3.
    means = means_of({BASELINE: [[1]] * 3, OTHER: seven_of_ten(3)})
    allowed = Constraint("recall_at_10", "a", None, 0.3)
    assert choose_best(means, BASELINE, ("mrr", "a"), [allowed], ["a"]).feasible().tolist() == [True, True]
    tighter = Constraint("recall_at_10", "a", None, 0.2999999)
    assert choose_best(means, BASELINE, ("mrr", "a"), [tighter], ["a"]).feasible().tolist() == [True, False]


@pytest.mark.parametrize("order", [(BASELINE, OTHER), (OTHER, BASELINE), (OTHER, BASELINE, THIRD)])
def test_a_setting_that_only_ties_the_baseline_never_wins(order):
    # Every setting finds the expected key at position 2: equal MRR, so the production knobs stay, wherever the
    # baseline stands in the evaluation order (an optimise study resumed from another's trials, a fold's choice).
    means = means_of({sid: [[2], [2]] for sid in order})
    verdicts = choose_best(means, BASELINE, ("mrr", "overall"), [], ["a"])
    assert verdicts.best == BASELINE


@pytest.mark.parametrize("at", [0, 1])
def test_a_setting_that_beats_the_baseline_wins_and_the_earlier_of_two_equal_winners_is_chosen(at):
    # Non-vacuous counterpart: a real gain moves the knobs; among equal winners, evaluation order decides.
    winners = [OTHER, THIRD]
    order = winners[:at] + [BASELINE] + winners[at:]
    found = {sid: [[1], [2]] if sid != BASELINE else [[2], [2]] for sid in order}
    verdicts = choose_best(means_of(found), BASELINE, ("mrr", "overall"), [], ["a"])
    assert verdicts.best == OTHER
    assert np.all(verdicts.feasible())


def test_a_run_whose_knob_ranges_overlap_writes_each_knob_under_its_own_name(tmp_path):
    # min_similarity and the half-life share the values 0 to 1 here, the baseline's floor included, so a knob
    # written under another's name would still be a valid setting and nothing downstream would crash: only the ids
    # tell.
    config = write_job(tmp_path, sweep={"strategy": "grid", "knobs": {
        "rrf_k": {"values": [5, 60]}, "min_similarity": {"values": [0.0, 0.3]},
        "recency_half_life_days": {"values": [0.5, 1]}}},
        baseline={"rrf_k": 60, "min_similarity": 0.2, "recency_half_life_days": 0}, validation=False)
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    assert_knob_columns_match_ids(outcome.run_dir)
    report = (outcome.run_dir / "report.md").read_text()
    assert Knobs.from_id(outcome.best or outcome.baseline).label() in report


@hsettings(max_examples=200, deadline=None)
@given(st.data())
def test_slice_means_put_each_row_in_its_cell_and_leave_a_cell_without_one_empty(data):
    """Rows in any order, some cells missing, rows of settings and slices outside the means, null metrics: each
    cell holds its row's values (NaN for a null or a missing row), errors come from the overall row (0 without)."""
    order = data.draw(st.lists(st.sampled_from([BASELINE, OTHER, THIRD, "k2_moff_h0.0"]), unique=True, min_size=1))
    slices = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), unique=True, min_size=1))
    value = st.none() | st.sampled_from([0.0, 0.25, 1 / 3, 1.0])
    cells = data.draw(st.lists(st.tuples(st.sampled_from([*order, "k9_moff_h0.0"]),
                                         st.sampled_from([*slices, OVERALL, "z"])), unique=True))
    rows = [{"setting_id": sid, "slice": s, "mrr": data.draw(value), "recall_at_10": data.draw(value),
             "errors": data.draw(st.integers(0, 3))} for sid, s in cells]
    frame = pl.DataFrame(rows, schema={"setting_id": pl.String, "slice": pl.String, "mrr": pl.Float64,
                                       "recall_at_10": pl.Float64, "errors": pl.Int64})
    means = SliceMeans.from_frame(frame, order, slices, ["recall_at_10", "mrr"])
    at = {(r["setting_id"], r["slice"]): r for r in rows}
    for i, sid in enumerate(order):
        for n, s in enumerate([*slices, OVERALL]):
            row = at.get((sid, s), {})
            expected = [np.nan if row.get(m) is None else row[m] for m in ("recall_at_10", "mrr")]
            assert np.array_equal(means.values[i, n], expected, equal_nan=True)
        assert means.errors[i] == at.get((sid, OVERALL), {}).get("errors", 0)
    assert means.errors.dtype == np.int64 and means.values.shape == (len(order), len(slices) + 1, 2)
