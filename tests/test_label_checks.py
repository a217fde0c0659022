"""The checks run on every golden set: the leak check (a query its answer, or another item, holds nearly verbatim)
and the discrimination check (which slices tell the settings apart)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from rqsweep import job
from rqsweep.corpus import Corpus, Document, Memory
from rqsweep.decide.discrimination import UNMOVED, discrimination
from rqsweep.decide.leaks import MIN_TOKENS, SHARE, leaks, run_needed
from rqsweep.decide.noise import SliceNoise, minimum_detectable_difference
from rqsweep.golden import Expected, GoldenQuery
from tests.minijob import write_job

CORPUS = Corpus(
    [Document("doc-backup", "Backups run nightly at 02:00 UTC. Restores are tested monthly by the on-call engineer."),
     Document("doc-laptop", "Laptops are refreshed every three years; request one in the IT portal."),
     Document("doc-expenses", "Expenses under 500 EUR need no approval.")],
    [Memory("mem-cfo", "The CFO approves expenses above 5000 EUR.")])


def q(qid: str, text: str, key: str, slice_: str = "document") -> GoldenQuery:
    return GoldenQuery(qid, slice_, text, (Expected("document", key),))


def flagged(*queries: GoldenQuery) -> list[tuple[str, str, str]]:
    return [(r["kind"], r["query_id"], r["key"]) for r in leaks(queries, CORPUS).iter_rows(named=True)]


def test_a_query_copied_from_its_answer_and_one_copied_from_another_item_are_flagged_a_clean_one_is_not():
    assert flagged(
        q("own", "Restores are tested monthly by the on-call engineer", "doc-backup"),
        q("other", "laptops are refreshed every three years", "doc-expenses"),  # doc-laptop answers it, unlabelled
        q("clean", "how often do we check that a backup can be restored", "doc-backup"),
    ) == [("leak_own", "own", "doc-backup"), ("leak_other", "other", "doc-laptop")]


def test_the_share_of_a_querys_tokens_is_flagged_from_its_bound_on():
    assert SHARE == 0.8 and run_needed(5) == 4
    # 5 tokens: a run of 4 (80%, on the bound) leaks; a run of 3 (60%) does not.
    assert flagged(q("on", "restores are tested monthly anyway", "doc-backup")) == [("leak_own", "on", "doc-backup")]
    assert flagged(q("below", "restores are tested every week", "doc-backup")) == []


def test_a_short_query_is_what_a_lexical_match_is_for_and_is_not_checked():
    assert MIN_TOKENS == 4
    assert flagged(q("code", "Expenses under 500", "doc-expenses")) == []


def test_the_detail_states_the_run_and_the_share():
    (row,) = leaks([q("own", "the CFO approves expenses above 5000 EUR", "doc-expenses")], CORPUS).iter_rows(
        named=True)
    assert (row["kind"], row["key"]) == ("leak_other", "mem-cfo")
    assert row["detail"] == "a run of 7 of its 7 tokens (100%) occurs in this item, not labelled"


def rows(ranks: dict[str, dict[str, int]], slices: dict[str, str]) -> pl.DataFrame:
    """Per-query rows of settings -> {query -> rank}."""
    return pl.DataFrame([{"setting_id": s, "query_id": qid, "slice": slices[qid], "rank": r, "error": None}
                         for s, by_query in ranks.items() for qid, r in by_query.items()],
                        schema={"setting_id": pl.String, "query_id": pl.String, "slice": pl.String, "rank": pl.Int64,
                                "error": pl.String})


def test_the_discrimination_check_names_a_slice_no_setting_moves():
    slices = {"a1": "flat", "a2": "flat", "b1": "moving", "b2": "moving"}
    passes = [rows({"base": {"a1": 1, "a2": 3, "b1": 1, "b2": 2}, "s1": {"a1": 1, "a2": 3, "b1": 2, "b2": 2}}, slices),
              rows({"s2": {"a1": 1, "a2": 3, "b1": 2, "b2": 1}, "s3": {"a1": 1, "a2": 3, "b1": 1, "b2": 2}}, slices)]
    flat, moving = discrimination(passes, {}, {"flat": 0.0, "moving": 0.25})
    assert (flat.slice, flat.moved, flat.vectors, flat.tells) == ("flat", 0, 1, False)
    assert flat.advice == f"no setting moves flat: {UNMOVED}"
    # Rank vectors across passes: (1, 2), (2, 2), (2, 1); (1, 2) twice is one.
    assert (moving.slice, moving.queries, moving.moved, moving.vectors) == ("moving", 2, 2, 3)
    assert "no setting moves" not in moving.advice


def test_a_failed_search_is_its_own_rank_in_a_vector_and_moves_no_query():
    slices = {"a1": "s"}
    frame = rows({"base": {"a1": 1}, "s1": {"a1": 1}}, slices).with_columns(
        pl.when(pl.col("setting_id") == "s1").then(pl.lit("timeout")).otherwise(None).alias("error"))
    (check,) = discrimination([frame], {}, {})
    assert (check.moved, check.vectors) == (0, 2)


@pytest.mark.parametrize("factor, tells", [(1.0, True), (0.999, False)])
def test_a_slice_tells_the_chosen_setting_apart_from_a_change_exactly_its_mdd(factor, tells):
    slices = {f"q{i}": "s" for i in range(10)}
    passes = [rows({"base": {k: 1 for k in slices}, "s1": {k: 1 + (k == "q0") for k in slices}}, slices)]
    mdd = minimum_detectable_difference(0.3, 10)
    noise = {"s": SliceNoise("s", "mrr", 10, 1, 0.3, mdd)}
    (check,) = discrimination(passes, noise, {"s": -mdd * factor})
    assert check.tells is tells
    assert check.needed == (10 if tells else 11)
    assert math.isclose(check.mdd, mdd)


def test_a_run_lists_its_leaks_in_label_health_and_names_the_slice_no_setting_moves(tmp_path):
    planted = [("l1", "document", "Restores are tested monthly. The backup bucket", "doc-backup"),
               ("l2", "document", "Laptops are refreshed every three years", "doc-expenses")]
    result = job.run(write_job(tmp_path, extra_queries=planted), quiet=True)
    health = pl.read_parquet(result.run_dir / "label_health.parquet")
    leaked = health.filter(pl.col("kind").str.starts_with("leak_")).select("kind", "query_id", "key").rows()
    assert leaked == [("leak_own", "l1", "doc-backup"), ("leak_other", "l2", "doc-laptop")]
    report = (result.run_dir / "report.md").read_text()
    assert "Leak check: 1 queries' text occurs nearly verbatim in their own expected item" in report
    # The mini job's two exact_token queries rank first at every setting.
    assert f"No setting moves exact_token: {UNMOVED}." in report
