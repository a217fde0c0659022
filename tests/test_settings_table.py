"""settings.parquet: one row per setting, each slice's value and change from the baseline, the worst slice."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rqsweep import job
from rqsweep.runfolder.settings import settings_table
from tests.minijob import write_job

METRICS = ["recall_at_5", "recall_at_10", "mrr"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return job.run(write_job(tmp_path_factory.mktemp("settings")), quiet=True).run_dir


def self_join(grid: pl.DataFrame) -> pl.DataFrame:
    """The table by hand: the grid joined to its own baseline rows on slice, then pivoted to one row per setting."""
    base = grid.filter(pl.col("is_baseline")).select("slice", *(pl.col(m).alias(m + "_b") for m in METRICS))
    long = grid.join(base, on="slice").with_columns((pl.col(m) - pl.col(m + "_b")).alias(m + "_d") for m in METRICS)
    wide = long.pivot(on="slice", index="setting_id", values=[*METRICS, *(m + "_d" for m in METRICS)])
    renamed = {}
    for m in METRICS:
        for s in grid["slice"].unique():
            renamed[f"{m}_{s}"] = f"{m}[{s}]"
            renamed[f"{m}_d_{s}"] = f"{m}_change[{s}]"
    return wide.rename(renamed)


def test_settings_parquet_equals_a_self_join_of_the_grid(run_dir):
    grid = pl.read_parquet(run_dir / "grid.parquet")
    table = pl.read_parquet(run_dir / "settings.parquet")
    assert table.height == grid["setting_id"].n_unique()
    in_order = grid.sort("evaluation_order")["setting_id"].unique(maintain_order=True)
    assert table["setting_id"].to_list() == in_order.to_list()
    by_hand = self_join(grid)
    assert_frame_equal(table.select(by_hand.columns), by_hand.select(by_hand.columns).join(
        table.select("setting_id"), on="setting_id", how="right").select(by_hand.columns))
    overall = grid.filter(pl.col("slice") == "overall").select(
        "setting_id", "rrf_k", "min_similarity", "recency_half_life_days", "feasible", "violations", "is_best",
        pl.col("mrr").alias("objective"))
    assert_frame_equal(table.select(overall.columns), overall.sort(pl.col("setting_id").replace_strict(
        {s: i for i, s in enumerate(table["setting_id"])})))
    # The worst slice by hand: each setting's lowest MRR change among the golden slices.
    changes = grid.filter(pl.col("slice") != "overall").join(
        grid.filter(pl.col("is_baseline")).select("slice", pl.col("mrr").alias("b")), on="slice").with_columns(
        (pl.col("mrr") - pl.col("b")).alias("d"))
    worst = changes.group_by("setting_id").agg(pl.col("d").min())
    joined = table.join(worst, on="setting_id")
    assert (joined["worst_change"] == joined["d"]).all()
    assert (table.filter(pl.col("is_baseline"))["worst_change"] == 0).all()
    # The worst slice is one whose change is the worst.
    for sid, slice_, change in table.select("setting_id", "worst_slice", "worst_change").rows():
        assert changes.filter((pl.col("setting_id") == sid) & (pl.col("slice") == slice_))["d"][0] == change


def test_the_newcomers_question_is_one_filter(run_dir):
    """Settings keeping every slice within 0.05 MRR of the baseline, by overall gain: one filter, not a self-join."""
    table = pl.read_parquet(run_dir / "settings.parquet")
    answer = table.filter(pl.col("worst_change") >= -0.05).sort("objective_change", descending=True)
    grid = pl.read_parquet(run_dir / "grid.parquet")
    base = grid.filter(pl.col("is_baseline")).select("slice", pl.col("mrr").alias("b"))
    kept = (grid.filter(pl.col("slice") != "overall").join(base, on="slice")
            .group_by("setting_id").agg(((pl.col("mrr") - pl.col("b")) >= -0.05).all().alias("ok"))
            .filter("ok")["setting_id"])
    assert set(answer["setting_id"]) == set(kept)


def test_worst_slice_ties_go_to_the_first_slice_by_name_and_nulls_are_skipped():
    grid = pl.DataFrame({
        "run_id": "r", "setting_id": ["b", "b", "b", "x", "x", "x"], "rrf_k": [60, 60, 60, 1, 1, 1],
        "min_similarity": [None] * 6, "recency_half_life_days": [0.0] * 6,
        "slice": ["a", "c", "overall"] * 2, "mrr": [0.5, 0.5, 0.5, 0.4, 0.4, 0.4], "errors": 0,
        "feasible": True, "violations": [[]] * 6, "is_baseline": [True] * 3 + [False] * 3, "is_best": False,
        "evaluation_order": [0, 0, 0, 1, 1, 1]}, schema_overrides={"min_similarity": pl.Float64,
                                                                   "violations": pl.List(pl.String)})
    table = settings_table(grid, ("mrr", "overall"), ["mrr"])
    assert table.filter(pl.col("setting_id") == "x").select("worst_slice", "worst_change").row(0) == (
        "a", pytest.approx(-0.1))
    missing = settings_table(grid.with_columns(pl.when(pl.col("slice") == "a").then(None).otherwise(pl.col("mrr"))
                                                .alias("mrr")), ("mrr", "overall"), ["mrr"])
    assert missing.filter(pl.col("setting_id") == "x")["worst_slice"][0] == "c"
