"""`ranked: all`: every setting's top-`limit` lists in ranked.parquet, agreeing with the positions the sweep
scored, and read by `rqsweep export`."""

from __future__ import annotations

import polars as pl

from rqsweep.cli import main
from tests.minijob import write_job


def test_ranked_all_keeps_every_settings_lists_and_they_agree_with_the_scored_positions(tmp_path, capsys):
    config = write_job(tmp_path, ranked="all", validation=False)
    assert main([str(config), "--dry-run"]) == 0
    assert "ranked: all: at most 480 more searches after the sweep, for ranked.parquet" in capsys.readouterr().out
    assert main([str(config), "--quiet"]) in (0, 4), capsys.readouterr().err
    run_dir = next((tmp_path / "results" / "mini").iterdir())
    ranked = pl.read_parquet(run_dir / "ranked.parquet")
    queries = pl.read_parquet(run_dir / "queries.parquet")
    assert set(ranked["setting_id"]) == set(queries["setting_id"])
    assert ranked.group_by("setting_id", "query_id").agg(pl.col("position").max())["position"].max() <= 10
    # Each expected key's first slot in the stored list is the position the sweep scored, for every setting.
    first = ranked.group_by("setting_id", "query_id", "key").agg(pl.col("position").min())
    want = queries.select("setting_id", "query_id", "expected", "positions").explode("expected", "positions")
    joined = want.join(first, left_on=["setting_id", "query_id", "expected"],
                       right_on=["setting_id", "query_id", "key"], how="left")
    assert joined.height == want.height
    assert joined["positions"].to_list() == joined["position"].to_list()
    # hits.parquet's lists are the same rows for the two settings it holds.
    hits = pl.read_parquet(run_dir / "hits.parquet")
    for sid in hits["setting_id"].unique():
        cols = ["query_id", "position", "key", "chunk", "score"]
        assert ranked.filter(pl.col("setting_id") == sid).select(cols).sort(cols).equals(
            hits.filter(pl.col("setting_id") == sid).select(cols).sort(cols))
    other = next(s for s in queries["setting_id"].unique().sort() if s not in set(hits["setting_id"]))
    assert main(["export", str(run_dir), "--setting", other, "--output-dir", str(tmp_path / "out")]) == 0
    lines = (tmp_path / "out" / f"{other}.run").read_text().splitlines()
    assert len(lines) == ranked.filter(pl.col("setting_id") == other).height
