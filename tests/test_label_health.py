"""Label health finds planted cases, and leaves their near misses alone."""

from __future__ import annotations

import polars as pl

from rqsweep import files, job
from rqsweep.decide.label_health import label_health
from rqsweep.runfolder import LABEL_HEALTH
from tests.minijob import write_job

B, C, O = "k60_moff_h0.0", "k5_moff_h30.0", "k1_moff_h0.0"  # baseline, chosen, another setting


def per_query(ranks: dict[str, dict[str, int | None]], ties: dict[str, set[str]]) -> pl.LazyFrame:
    """query -> setting -> first relevant rank (None: the search failed); `ties`: query -> the settings where its
    rank is tie-sensitive."""
    rows = [{"setting_id": sid, "query_id": q, "slice": q.split("-")[0], "query": f"text of {q}",
             "expected": [f"key-{q}"], "rank": rank, "error": None if rank is not None else "HTTP 503",
             "tie_sensitive": sid in ties.get(q, set())}
            for q, by_setting in ranks.items() for sid, rank in by_setting.items()]
    return pl.DataFrame(rows, schema_overrides={"rank": pl.Int64, "error": pl.String}).lazy()


def ranked(lists: dict[tuple[str, str], list[tuple[str, int | None, int | None]]]) -> pl.DataFrame:
    """(setting, query) -> its list, best first: (key, vector position, lexical position)."""
    rows = [{"setting_id": sid, "query_id": q, "position": n + 1, "key": key, "vector": v, "lexical": lex,
             "expected": key == f"key-{q}", "error": None}
            for (sid, q), items in lists.items() for n, (key, v, lex) in enumerate(items)]
    return pl.DataFrame(rows, schema_overrides={"vector": pl.Int64, "lexical": pl.Int64, "error": pl.String})


def test_label_health_finds_the_planted_cases_and_not_their_near_misses(monkeypatch):
    everywhere = lambda r: {B: r, C: r, O: r}  # noqa: E731
    queries = per_query({
        "a-unmoved": everywhere(2),
        "a-moved": {B: 1, C: 2, O: 1},
        "a-never": everywhere(0),
        "a-failed-once": {B: 3, C: None, O: 3},  # a failed search does not make a rank differ
        "b-tie": {B: 1, C: 1, O: 2},
        "b-tie-before": {B: 1, C: 2, O: 1},  # already tie-sensitive at the baseline: it did not become so
        "b-suspect": {B: 2, C: 3, O: 2},
    }, ties={"b-tie": {C, O}, "b-tie-before": {B, C}})
    lists = ranked({
        # An item both channels put above the expected one, in both lists kept: suspected.
        (B, "b-suspect"): [("doc-twin", 1, 2), ("key-b-suspect", 3, 4)],
        (C, "b-suspect"): [("doc-other", 2, 9), ("doc-twin", 1, 1), ("key-b-suspect", 4, 3)],
        # Above in one channel only (doc-other, C), or in one list only (doc-once): not suspected.
        (B, "a-moved"): [("key-a-moved", 1, 1), ("doc-once", 2, 2)],
        (C, "a-moved"): [("doc-once", 1, 1), ("key-a-moved", 2, 2)],
    })
    found = label_health(queries, lists, B, C)
    # Read a few rows per pass, so that every query's rows straddle passes: the findings are the same.
    monkeypatch.setattr(files, "ROWS_PER_PASS", 2)
    assert label_health(queries, lists, B, C).equals(found)
    by_kind = {k: sorted(found.filter(pl.col("kind") == k)["query_id"]) for k in found["kind"].unique()}
    assert by_kind == {"never_found": ["a-never"], "unmoved": ["a-failed-once", "a-unmoved"],
                       "tie_sensitive": ["b-tie"], "suspect_unlabelled": ["b-suspect"]}
    (suspect,) = found.filter(pl.col("kind") == "suspect_unlabelled").iter_rows(named=True)
    assert suspect["key"] == "doc-twin" and suspect["expected"] == ["key-b-suspect"]
    assert suspect["detail"] == "both channels rank it above the expected item in 2 of 2 ranked lists"
    (tie,) = found.filter(pl.col("kind") == "tie_sensitive")["detail"]
    assert tie == ("its rank depends on storage order at 2 of 3 settings (the chosen one among them), not at the "
                   "baseline")
    assert found.filter(pl.col("query_id") == "a-unmoved")["detail"].item() == "rank 2 at all 3 settings"
    assert found["kind"].to_list() == sorted(found["kind"].to_list(), key=["never_found", "unmoved", "tie_sensitive",
                                                                           "suspect_unlabelled"].index)


def test_an_expected_item_absent_from_a_channel_ranks_below_every_item_that_channel_holds():
    queries = per_query({"a-x": {B: 2, C: 2}}, ties={})
    lists = ranked({(B, "a-x"): [("doc-top", 1, 1), ("key-a-x", 2, None)],
                    (C, "a-x"): [("doc-vector-only", 1, None), ("key-a-x", None, 1)]})
    found = label_health(queries, lists, B, C).filter(pl.col("kind") == "suspect_unlabelled")
    # doc-top: above in both channels on B's list (the expected item has no lexical position), absent from C's.
    assert found.height == 0
    lists = ranked({(B, "a-x"): [("doc-top", 1, 1), ("key-a-x", 2, None)],
                    (C, "a-x"): [("doc-top", 1, 2), ("key-a-x", 3, None)]})
    assert label_health(queries, lists, B, C).filter(pl.col("kind") == "suspect_unlabelled")["key"].to_list() == [
        "doc-top"]


def test_a_run_writes_label_health_and_its_report_section(tmp_path):
    out = job.run(write_job(tmp_path), quiet=True)
    table = pl.read_parquet(out.run_dir / LABEL_HEALTH)
    queries = pl.read_parquet(out.run_dir / "queries.parquet")
    ranks = queries.group_by("query_id").agg(pl.col("rank").n_unique().alias("n"), pl.col("rank").max().alias("top"))
    assert sorted(table.filter(pl.col("kind") == "unmoved")["query_id"]) == sorted(
        ranks.filter((pl.col("n") == 1) & (pl.col("top") > 0))["query_id"])
    report = (out.run_dir / "report.md").read_text()
    moved = ranks.filter(pl.col("n") > 1).height
    assert f"The knobs move {moved} of {ranks.height} queries" in report


def test_an_item_above_the_expected_one_in_one_channel_only_is_not_suspected_however_often():
    queries = per_query({"a-x": {B: 3, C: 3}}, ties={})
    lists = ranked({(sid, "a-x"): [("doc-vector", 1, 5), ("doc-lexical", 5, 1), ("key-a-x", 3, 3)] for sid in (B, C)})
    assert label_health(queries, lists, B, C).filter(pl.col("kind") == "suspect_unlabelled").is_empty()
