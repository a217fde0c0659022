"""The minimum detectable difference: its t quantiles, a simulation of its power, the grid's spread, the warnings."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats  # in requirements.lock (pytrec-eval-terrier's): an independent reference here

from rqsweep.decide.noise import (MOST_QUERIES, POWER, SliceNoise, bound_warnings, minimum_detectable_difference,
                           queries_needed, slice_noise, t_quantile)

# Per-query MRR differences as a sweep makes them: most queries unmoved, some up or down by a rank or a hit.
SUPPORT = np.array([-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0])
PROBS = np.array([0.05, 0.08, 0.07, 0.6, 0.07, 0.08, 0.05])
MARGIN = 0.03  # the stated margin: power at the MDD within 0.80 +- 0.03, from 10 queries on


@pytest.mark.parametrize("df", [1, 2, 3, 4, 9, 17, 39, 164])
def test_the_t_quantiles_match_scipys(df):
    for p in (0.8, 0.975):
        tolerance = 1e-9 if df <= 2 else 0.004 if df == 3 else 0.002 if df < 10 else 1e-4
        assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), abs=tolerance)


@pytest.mark.parametrize("n", [10, 18, 40, 165])
def test_a_paired_t_test_detects_a_true_difference_of_the_mdd_four_times_in_five(n):
    rng = np.random.default_rng(n)
    mean = (PROBS * SUPPORT).sum()
    sd = math.sqrt((PROBS * SUPPORT ** 2).sum() - mean ** 2)
    mdd = minimum_detectable_difference(sd, n)
    d = rng.choice(SUPPORT, size=(20_000, n), p=PROBS) - mean + mdd
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    power = (np.abs(t) > stats.t.ppf(0.975, n - 1)).mean()
    assert power == pytest.approx(POWER, abs=MARGIN)
    # Half the MDD is detected far less often: the figure is the threshold, not any difference.
    half = (d - mdd / 2).mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    assert (np.abs(half) > stats.t.ppf(0.975, n - 1)).mean() < 0.45


def test_the_spread_is_the_rms_of_the_moving_settings_standard_deviations():
    rng = np.random.default_rng(3)
    slices = {"x": 12, "y": 7}
    queries = [(f"{s}-{i}", s) for s, n in slices.items() for i in range(n)]
    base = rng.choice([0.0, 0.25, 0.5, 1.0], size=len(queries))
    moved = {"A": base + rng.normal(0, 0.2, len(queries)), "C": base.copy(),
             "D": base + rng.normal(0, 0.4, len(queries))}
    moved["C"][-1] += 0.5  # C moves one y-query only: on x it is the baseline's twin and is left out
    rows = [{"setting_id": sid, "query_id": q, "slice": s, "error": None, "mrr": float(v[j])}
            for sid, v in {"B": base, **moved}.items() for j, (q, s) in enumerate(queries)]
    frame = pl.DataFrame(rows, schema_overrides={"error": pl.String})
    noise = {n.slice: n for n in slice_noise(frame.lazy(), "B", ["mrr"])}
    # Pass by pass (frames of whole settings, as queries.parquet's row groups hold them), the same figures; to the
    # last bit only as often as the whole table's twice over: polars' group-by variance is not bit-deterministic.
    passes = [frame.filter(pl.col("setting_id").is_in(ids)) for ids in (["A"], ["B", "C"], ["D"])]
    for n in slice_noise(frame.lazy(), "B", ["mrr"], passes):
        whole = noise[n.slice]
        assert (n.queries, n.moving_settings) == (whole.queries, whole.moving_settings)
        assert n.sd == pytest.approx(whole.sd, rel=1e-12) and n.mdd == pytest.approx(whole.mdd, rel=1e-12)
    x = np.array([s == "x" for _, s in queries])
    expected_x = math.sqrt(np.mean([np.var((moved[k] - base)[x], ddof=1) for k in ("A", "D")]))
    expected_y = math.sqrt(np.mean([np.var((moved[k] - base)[~x], ddof=1) for k in ("A", "C", "D")]))
    assert noise["x"].moving_settings == 2 and noise["y"].moving_settings == 3
    assert noise["x"].sd == pytest.approx(expected_x) and noise["y"].sd == pytest.approx(expected_y)
    assert noise["x"].mdd == pytest.approx(minimum_detectable_difference(expected_x, 12))
    assert noise["x"].queries == 12 and noise["x"].one_query == pytest.approx(1 / 12)


def test_a_slice_no_setting_moves_has_no_mdd():
    frame = pl.DataFrame({"setting_id": ["B", "B", "A", "A"], "query_id": ["q1", "q2"] * 2, "slice": "x",
                          "error": pl.Series([None] * 4, dtype=pl.String), "mrr": [0.5, 1.0, 0.5, 1.0]})
    (noise,) = slice_noise(frame.lazy(), "B", ["mrr"])
    assert (noise.moving_settings, noise.sd, noise.mdd) == (0, None, None)


def test_a_bound_below_one_query_or_the_mdd_is_said_so():
    semantic = SliceNoise("semantic", "mrr", 18, 40, 0.26, 0.17)
    (words,) = bound_warnings(0.10, semantic, "max_drop")
    assert "below its minimum detectable difference (0.170 mrr at 80% power)" in words
    assert words.endswith("it allows 1 query to lose a hit; semantic: 18 queries resolve 0.17, 56 would resolve 0.1")
    below_one, inside = bound_warnings(0.02, SliceNoise("entity", "mrr", 40, 9, 0.2, 0.09), "tolerance")
    assert "below one query's worth (1/40 = 0.025)" in below_one and "allows 0 queries" in inside
    assert bound_warnings(0.2, semantic, "max_drop") == []


def test_a_bound_exactly_on_one_querys_worth_or_the_mdd_is_not_warned():
    # 0.05 is one query's worth of 20 queries and this slice's MDD: a bound that allows exactly one loss, and
    # that a paired test sizes, sits at the noise, not inside it.
    assert bound_warnings(0.05, SliceNoise("entity", "mrr", 20, 9, 0.1, 0.05), "max_drop") == []
    (words,) = bound_warnings(0.05, SliceNoise("entity", "mrr", 20, 9, 0.1, 0.0501), "max_drop")
    assert "below its minimum detectable difference" in words and "allows 1 query to lose a hit;" in words
    (words,) = bound_warnings(0.0499, SliceNoise("entity", "mrr", 20, 9, 0.1, 0.01), "max_drop")
    assert "below one query's worth (1/20 = 0.050)" in words


@pytest.mark.parametrize("bound", [0.05, 0.10, 0.2])
def test_queries_needed_gives_a_paired_t_test_its_power_at_the_bound_and_one_fewer_does_not(bound):
    """Simulated paired t-tests of a true difference equal to the bound: at the queries needed the test detects it
    with POWER (within MARGIN), and the figure is the fewest: one query fewer has an MDD above the bound."""
    rng = np.random.default_rng(7)
    mean = (PROBS * SUPPORT).sum()
    sd = math.sqrt((PROBS * SUPPORT ** 2).sum() - mean ** 2)
    n = queries_needed(sd, bound)
    assert minimum_detectable_difference(sd, n) <= bound < minimum_detectable_difference(sd, n - 1)
    d = rng.choice(SUPPORT, size=(20_000, n), p=PROBS) - mean + bound
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    assert (np.abs(t) > stats.t.ppf(0.975, n - 1)).mean() == pytest.approx(POWER, abs=MARGIN)


def test_queries_needed_at_its_edges():
    assert queries_needed(None, 0.1) is None and queries_needed(0.3, 0.0) is None
    assert queries_needed(0.0, 0.1) == 2  # no spread: two queries size anything
    mdd_at_40 = minimum_detectable_difference(0.3, 40)
    assert queries_needed(0.3, mdd_at_40) == 40  # a bound exactly on the MDD of 40 queries: 40 resolve it
    assert queries_needed(0.3, float(np.nextafter(mdd_at_40, 0))) == 41
    assert queries_needed(1.0, 1e-6) is None  # more than MOST_QUERIES
    assert queries_needed(1.0, 2.9 / math.sqrt(MOST_QUERIES)) <= MOST_QUERIES
