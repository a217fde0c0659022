"""Pooled judgments, a round trip: `rqsweep pool` lists the unlabelled pairs the settings rank, a person grades
them, and the golden set reads them back (`golden: {judgments}`)."""

from __future__ import annotations

import csv
from pathlib import Path

import polars as pl
import pytest
import yaml

from rqsweep.cli import main
from rqsweep.errors import InputError
from rqsweep.inputs import load_inputs
from rqsweep.job import run
from rqsweep.report.bounds import run_bounds
from rqsweep.report.pool import COLUMNS, SNIPPET_CHARS, snippet
from rqsweep.runfolder import read_run_folder
from tests.minijob import write_job

BASELINE, RECENCY = "k60_moff_h0.0", "k60_moff_h30.0"
LABELS = {BASELINE: "rrf_k=60 min_similarity=off half_life=0d", RECENCY: "rrf_k=60 min_similarity=off half_life=30d"}
# Entity questions labelled with a near miss (the expenses page) where the true answer, the CFO memory, is not
# labelled: the recency blend buries that 700-day-old memory and lifts the near miss, so on these labels it wins.
GOLDEN = [
    ("d1", "document", "vpn certificate expired", "doc-vpn"),
    ("d2", "document", "when is the on-call handover", "doc-oncall"),
    ("d3", "document", "backups", "doc-backup"),
    ("t1", "exact_token", "VPN-4012", "doc-vpn"),
    ("t2", "exact_token", "SEV-1", "doc-oncall"),
    ("e1", "entity", "CFO", "doc-expenses"),
    ("e2", "entity", "who approves big expenses", "doc-expenses"),
]


def unlabelled_answer_job(folder: Path, **overrides) -> Path:
    config = write_job(folder, {"strategy": "grid", "knobs": {"rrf_k": {"values": [60]},
                                                              "recency_half_life_days": {"values": [0, 30]}}},
                       constraints=[], **overrides)
    (folder / "golden.yaml").write_text(yaml.safe_dump(
        [{"id": i, "slice": s, "query": q, "expected": e} for i, s, q, e in GOLDEN], sort_keys=False))
    return config


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def with_judgments(config: Path, *files: str) -> None:
    data = yaml.safe_load(config.read_text())
    data["golden"] = {"path": "golden.yaml", "judgments": list(files)}
    config.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pool")
    config = unlabelled_answer_job(folder, ranked="all")
    return config, run(config, quiet=True)


def test_pool_lists_the_unlabelled_pairs_any_setting_ranks_most_surfaced_first(first_run, capsys):
    _, result = first_run
    assert main(["pool", str(result.run_dir), "--k", "3"]) == 0
    assert "unlabelled pairs to grade" in capsys.readouterr().out
    rows = read_csv(result.run_dir / "pool.csv")
    assert tuple(rows[0]) == COLUMNS and all(r["grade"] == "" for r in rows)
    lists = pl.read_parquet(result.run_dir / "ranked.parquet").filter(pl.col("position") <= 3)
    unlabelled = lists.filter(~pl.col("expected")).select("query_id", "key").unique()
    assert sorted((r["query_id"], r["key"]) for r in rows) == sorted(unlabelled.iter_rows())
    order = [(-len(r["settings"].split()), int(r["best_position"]), r["query_id"], r["key"]) for r in rows]
    assert order == sorted(order)
    cfo = next(r for r in rows if (r["query_id"], r["key"]) == ("e1", "mem-cfo"))
    # Only the baseline surfaces it: the blend buries the old memory.
    assert (cfo["settings"], cfo["best_position"], cfo["slice"], cfo["query"]) == (BASELINE, "1", "entity", "CFO")
    assert cfo["snippet"] == "The CFO approves expenses above 5000 EUR."


def test_grading_the_unlabelled_answer_in_the_pool_changes_the_chosen_setting(first_run):
    config, result = first_run
    assert result.best == RECENCY
    assert main(["pool", str(result.run_dir), "--out", str(config.parent / "pool.csv")]) == 0
    rows = read_csv(config.parent / "pool.csv")
    for r in rows:  # a person grades the whole pool: the CFO memory answers the entity questions, nothing else does
        r["grade"] = "1" if (r["key"], r["query_id"][0]) == ("mem-cfo", "e") else "0"
    write_csv(config.parent / "graded.csv", rows)
    with_judgments(config, "graded.csv")
    second = run(config, quiet=True)
    assert second.best == BASELINE
    # The report says so under both bounds: on the labels alone the unjudged items could swing the choice; once the
    # pool is graded, both bounds choose the baseline.
    first_report = (result.run_dir / "report.md").read_text()
    assert (f"The choice changes between the bounds: {LABELS[RECENCY]} with unjudged as not relevant, "
            f"{LABELS[BASELINE]} with unjudged as relevant.") in first_report
    second_report = (second.run_dir / "report.md").read_text()
    assert f"The choice holds under both bounds: {LABELS[BASELINE]}." in second_report
    assert f"| {LABELS[BASELINE]} (baseline, best in sample) |    1.0000 |" in second_report  # judged@10: all of it
    judged = pl.read_parquet(second.run_dir / "judgments.parquet")
    assert judged.height == len(rows) and judged["used"].all() and (judged["judge"] == "").all()
    assert judged.filter(pl.col("grade") == 1).select("query_id", "key").sort("query_id").rows() == [
        ("e1", "mem-cfo"), ("e2", "mem-cfo")]
    hits = pl.read_parquet(second.run_dir / "hits.parquet")
    assert hits.filter((pl.col("key") == "mem-cfo") & pl.col("query_id").is_in(["e1", "e2"]))["expected"].all()
    # Every pair is judged now: nothing is left to pool.
    assert main(["pool", str(second.run_dir)]) == 0
    assert read_csv(second.run_dir / "pool.csv") == []


def _judged(folder: Path, text: str) -> Path:
    config = unlabelled_answer_job(folder)
    (folder / "graded.csv").write_text(text, encoding="utf-8")
    with_judgments(config, "graded.csv")
    return config


@pytest.mark.parametrize("text, where, problem", [
    ("query_id,key,grade\ne1,mem-nope,1\n", "line 2.key", "'mem-nope' (query 'e1') does not exist in the corpus"),
    ("query_id,key,grade\ne1,mem-cfo,high\n", "line 2.grade", "expected an integer relevance grade, got 'high'"),
    ("query_id,key,grade\nx9,mem-cfo,1\n", "line 2.query_id", "'x9': no such query in the golden set"),
    ("query_id,key,grade\ne1,doc-expenses,0\n", "line 2.grade", "is graded 1 in the golden set's expected"),
    ("query_id,key,grade\ne1,mem-cfo,1\ne1,mem-cfo,2\n", "line 3.grade", "is graded 1 at graded.csv line 2"),
    ("query_id,key\ne1,mem-cfo\n", "line 1", "the header names no grade"),
])
def test_a_bad_judgment_names_file_line_field_and_value(tmp_path, text, where, problem):
    with pytest.raises(InputError) as caught:
        load_inputs(_judged(tmp_path, text))
    assert (Path(caught.value.file).name, caught.value.where) == ("graded.csv", where)
    assert problem in caught.value.problem


def test_judgments_join_expected_by_the_golden_sets_grade_rules(tmp_path):
    config = _judged(tmp_path, "query_id,key,grade,judge\n"
                               "e1,mem-cfo,2,\n"
                               "e1,doc-vpn,0,\n"
                               "e2,mem-cfo,,\n"  # not graded yet: skipped
                               "e2,doc-vpn,1,judge-a\n"
                               "e1,mem-cfo,0,judge-a\n")  # a person graded it: theirs is used
    inputs = load_inputs(config)
    expected = {q.id: {e.key: e.grade for e in q.expected} for q in inputs.golden.queries}
    assert expected["e1"] == {"doc-expenses": 1, "mem-cfo": 2}
    assert expected["e2"] == {"doc-expenses": 1, "doc-vpn": 1}
    assert [(j.query_id, j.key, j.grade, j.judge) for j in inputs.golden.judged] == [
        ("e1", "mem-cfo", 2, ""), ("e1", "doc-vpn", 0, ""), ("e2", "doc-vpn", 1, "judge-a")]
    assert len(inputs.golden.judgments) == 4
    before = inputs.golden.sha256
    (tmp_path / "graded.csv").write_text("query_id,key,grade\ne1,mem-cfo,1\n")
    assert load_inputs(config).golden.sha256 != before  # the judgments are inputs of the run


def test_the_lower_bound_is_the_grid_and_the_upper_counts_unjudged_items_relevant(first_run):
    _, result = first_run
    bounds = run_bounds(read_run_folder(result.run_dir))
    assert bounds.settings == [BASELINE, RECENCY] and bounds.k == 10
    grid = pl.read_parquet(result.run_dir / "grid.parquet")
    for (sid, slice_, mrr, recall) in grid.select("setting_id", "slice", "mrr", "recall_at_10").iter_rows():
        assert (bounds.lower.value(sid, slice_, "mrr"), bounds.lower.value(sid, slice_, "recall_at_10")) == \
            pytest.approx((mrr, recall), abs=1e-12)
    # Every first slot holds a labelled or an unjudged item, so the upper bound's MRR is 1 everywhere; recall falls
    # where a setting misses unjudged items another setting returns.
    assert bounds.upper.value(BASELINE, "overall", "mrr") == bounds.upper.value(RECENCY, "overall", "mrr") == 1.0
    assert bounds.lower.choice == RECENCY and bounds.upper.choice == BASELINE and bounds.choice_changes
    lists = pl.read_parquet(result.run_dir / "ranked.parquet")
    for sid in (BASELINE, RECENCY):  # nothing is judged yet: judged@10 is the share of expected slots
        assert bounds.judged_at_k[sid] == pytest.approx(lists.filter(pl.col("setting_id") == sid)["expected"].mean())


def test_by_default_the_bounds_compare_the_baseline_and_the_chosen_setting(tmp_path):
    result = run(unlabelled_answer_job(tmp_path), quiet=True)
    bounds = run_bounds(read_run_folder(result.run_dir))
    assert bounds.settings == [BASELINE, RECENCY]
    assert (bounds.lower.choice, bounds.upper.choice) == (RECENCY, BASELINE)
    assert "the baseline's and the best in sample's lists (hits.parquet; `ranked: all` bounds every setting)" in \
        (result.run_dir / "report.md").read_text()


def test_a_long_item_s_snippet_is_cut_where_the_query_s_words_occur_most():
    filler = "Lorem ipsum dolor sit amet consectetur. " * 20
    text = f"Travel policy: {filler}Book trains for trips under 600 km; trains beat flights on short trips. {filler}"
    cut = snippet(text, "trains for short trips")
    assert len(cut) <= SNIPPET_CHARS and cut.startswith("…") and cut.endswith("…")
    assert "Book trains for trips under 600 km; trains beat flights on short trips." in cut
    assert snippet(text, "visa rules") == text[:SNIPPET_CHARS - 2] + "…"  # no word of the query: from the start
    assert snippet("Short item.", "trains") == "Short item."
    # Two windows hold the same words: the earlier one wins.
    twice = f"{filler}trains and trips, first. {filler}trains and trips, second. {filler}"
    cut = snippet(twice, "trains trips")
    assert "trains and trips, first." in cut and "second" not in cut
