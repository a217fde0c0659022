"""`rqsweep explain`: which knob moved an expected item, on constructed candidates and on a real run folder."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rqsweep import cli, job
from rqsweep.engine.channels import Candidate, Candidates
from rqsweep.engine.trace import trace_item
from rqsweep.knobs import Knobs
from rqsweep.report.explain import moved_by
from tests.minijob import write_job

EXPECTED = {("document", 0)}


def doc(row: int, score: float) -> Candidate:
    return Candidate("document", row, score)


def explained(candidates: Candidates, before: Knobs, after: Knobs, limit: int, ages=(), rows=EXPECTED) -> list[str]:
    traces = [trace_item(candidates, rows, k, limit, list(ages)) for k in (before, after)]
    return moved_by(*traces, before, after, limit)


def test_the_floor_is_named_when_it_removes_the_only_channel_that_held_the_item():
    candidates = Candidates((doc(0, 0.25), doc(1, 0.2)), ())
    assert trace_item(candidates, EXPECTED, Knobs(), 10, []).final == 1
    after = trace_item(candidates, EXPECTED, Knobs(min_similarity=0.3), 10, [])
    assert after.floored_out and after.final is None and after.fused is None
    reasons = explained(candidates, Knobs(), Knobs(min_similarity=0.3), 10)
    assert reasons[0].startswith("min_similarity: the floor 0.3 removed it from the vector channel (cosine 0.2500)")
    assert not any(r.startswith(("rrf_k", "recency", "cut")) for r in reasons[1:])


def test_rrf_is_named_when_a_larger_k_lets_an_item_in_both_lists_overtake_a_top_vector_hit():
    # rrf_k 1: the expected item (vector #1 only) scores 1/2, the other (vector #3, lexical #4) 1/4 + 1/5.
    # rrf_k 60: 1/61 against 1/63 + 1/64, so the other moves ahead and the expected item falls past limit 1.
    candidates = Candidates((doc(0, 0.9), doc(2, 0.8), doc(1, 0.7)), (doc(3, 0.5), doc(4, 0.4), doc(5, 0.3),
                                                                       doc(1, 0.2)))
    before, after = Knobs(rrf_k=1), Knobs(rrf_k=60)
    assert trace_item(candidates, EXPECTED, before, 1, []).final == 1
    assert trace_item(candidates, EXPECTED, after, 1, []).fused == 2
    reasons = explained(candidates, before, after, 1)
    assert [r.split(":")[0] for r in reasons] == ["rrf_k", "cut"]
    assert "fused position #1 -> #2 (rrf_k 1 -> 60" in reasons[0]


def test_the_blend_is_named_when_an_old_memory_decays_below_a_document():
    memory = {("memory", 0)}
    candidates = Candidates((Candidate("memory", 0, 0.9), doc(0, 0.8)), ())
    before, after = Knobs(), Knobs(recency_half_life_days=30.0)
    reasons = explained(candidates, before, after, 1, ages=[100.0], rows=memory)
    assert [r.split(":")[0] for r in reasons] == ["recency_half_life_days", "cut"]
    assert "moved it -1 place(s) instead of +0 (half-life 30 d, its factor 0.0992)" in reasons[0]
    # A document is never decayed, but the blend moves it when a memory above it decays.
    assert explained(candidates, before, after, 2, ages=[100.0]) == [
        "recency_half_life_days: the blend moved it +1 place(s) instead of +0 (half-life 30 d, its factor 1.0000)"]


@pytest.fixture(scope="module")
def mini_run(tmp_path_factory):
    config = write_job(tmp_path_factory.mktemp("explain") / "job")
    try:
        outcome = job.run(config, quiet=True)
    except Exception as exc:  # noqa: BLE001 - a run without a feasible setting still writes its folder
        outcome = exc
    return outcome.run_dir


def test_explain_prints_both_lists_and_the_path_of_each_expected_item(mini_run, capsys):
    assert cli.main(["explain", str(mini_run), "f1"]) == 0
    out = capsys.readouterr().out
    assert "Query f1 (slice freshness): 'pager number'" in out
    assert "Expected: mem-pager-new" in out
    assert "baseline k60_moff_h0.0" in out
    hits = pl.read_parquet(mini_run / "hits.parquet").filter(pl.col("query_id") == "f1", pl.col("is_baseline"))
    for row in hits.iter_rows(named=True):  # every stored slot of the baseline is shown, expected ones starred
        assert f"{row['position']:>3}{'*' if row['expected'] else ' '}{row['key']} ({row['source_type']})" in out
    assert "  step      baseline" in out and "  moved by: " in out


def test_explain_recomputes_a_setting_the_run_did_not_store(mini_run, capsys):
    assert cli.main(["explain", str(mini_run), "f1", "--setting", "k1_m0.3_h1.0"]) == 0
    out = capsys.readouterr().out
    assert "setting k1_m0.3_h1.0" in out and "moved by: " in out


def test_explain_refuses_an_unknown_query_or_setting(mini_run, capsys):
    assert cli.main(["explain", str(mini_run), "nope"]) == 2
    assert "'nope': no such query in this run" in capsys.readouterr().err
    assert cli.main(["explain", str(mini_run), "f1", "--setting", "k60"]) == 2
    assert "not a setting id: 'k60'" in capsys.readouterr().err


def test_explain_refuses_a_run_another_embedder_made(tmp_path, capsys):
    """A run folder whose config's bytes are unchanged but now give another embedder (a config without `embedder:`
    meant the feature hash before the local model became the default): lists recomputed now would not be the run's."""
    outcome = job.run(write_job(tmp_path / "job", {"strategy": "grid", "knobs": {"rrf_k": {"values": [1, 60]}}},
                                constraints=[]), quiet=True)
    record = outcome.run_dir / "run.json"
    data = json.loads(record.read_text())
    assert data["embedder"] == "feature-hash-256"
    record.write_text(json.dumps(data | {"embedder": "feature-hash-1024"}))
    assert cli.main(["explain", str(outcome.run_dir), "f1", "--setting", "k1_moff_h0.0"]) == 2
    err = capsys.readouterr().err
    assert str(record) in err and "embedder: 'feature-hash-1024'" in err and "'feature-hash-256'" in err
