"""The gate's significant mode (a paired, Holm-adjusted test per slice) beside the exact one, and its noise notes."""

from __future__ import annotations

import polars as pl
import pytest

from rqsweep.cli import main
from rqsweep.errors import InputError
from rqsweep.gate import gate
from tests.runfolders import query_rows, write_run

BASE, BEST = "k60_moff_h0.0", "k20_moff_h0.0"
SIZES = {"entity": 20, "freshness": 10}


def _run(path, freshness_ranks: list[int], run_id: str):
    """The chosen setting BEST finds every entity query first and the freshness queries at `freshness_ranks`;
    the grid's rows are those per-query values' means."""
    rows = pl.concat([query_rows(sid, "entity", [1] * 20) for sid in (BASE, BEST)] + [
        query_rows(BASE, "freshness", [1] * 10), query_rows(BEST, "freshness", freshness_ranks)])
    means = {}
    for sid in (BASE, BEST):
        part = rows.filter(pl.col("setting_id") == sid)
        means[sid] = {s: tuple(part.filter(pl.col("slice") == s)[m].mean() if s != "overall" else part[m].mean()
                               for m in ("recall_at_5", "recall_at_10", "mrr")) for s in (*SIZES, "overall")}
    return write_run(path, means, baseline=BASE, best=BEST, queries=rows, run_id=run_id,
                     sizes={**SIZES, "overall": 30})


@pytest.fixture()
def previous(tmp_path):
    return _run(tmp_path / "previous", [1] * 10, "20260101T000000Z-aaaa")


def test_one_query_moving_fails_the_exact_gate_and_not_the_significant_one(tmp_path, previous):
    current = _run(tmp_path / "current", [2] + [1] * 9, "20260102T000000Z-bbbb")  # one rank lost: MRR -0.05
    exact = gate(current, previous, None, 0.0)
    assert not exact.passed and exact.failing_slices == ("freshness", "overall")
    assert "Gate mode: exact (fails on any fall beyond the tolerance 0, at 4 decimals)." in exact.text
    significant = gate(current, previous, None, 0.0, mode="significant")
    assert significant.passed, significant.text
    assert "Gate mode: significant (two-sided paired sign-flip permutation test" in significant.text
    assert "30 queries ran in both" in significant.text and "none regressed significantly" in significant.text


def test_a_regression_of_the_whole_slice_fails_the_significant_gate_naming_it(tmp_path, previous):
    current = _run(tmp_path / "current", [0] * 10, "20260102T000000Z-bbbb")  # every freshness query lost
    result = gate(current, previous, None, 0.0, mode="significant")
    assert not result.passed and result.failing_slices == ("freshness", "overall")
    # 10 pairs all at -1: the sign-flip p-value is 2/1024 at best (~0.002 with 10,000 flips); times the 6 tests.
    (freshness_mrr,) = [p for p in result.problems if p.startswith("freshness: MRR")]
    assert freshness_mrr.startswith("freshness: MRR -1.0000 over 10 paired queries, p (Holm) 0.0")
    assert "REGRESSED" in result.text
    (row,) = [line for line in result.text.splitlines() if line.startswith("| freshness ") and "MRR" in line]
    assert [cell.strip() for cell in row.split("|")[1:6]] == ["freshness", "MRR", "10", "10", "-1.0000"]


def test_a_regression_luck_could_make_is_not_significant_after_holm(tmp_path, previous):
    # Three of ten freshness queries lost: p about 0.25 on its own, never significant.
    current = _run(tmp_path / "current", [0, 0, 0] + [1] * 7, "20260102T000000Z-bbbb")
    assert gate(current, previous, None, 0.0, mode="significant").passed
    assert not gate(current, previous, None, 0.25).passed


@pytest.mark.parametrize("shared", [0, 1])
def test_the_significant_mode_refuses_runs_that_share_fewer_than_two_queries(tmp_path, previous, capsys, shared):
    """Nothing paired, nothing could fail: that is no pass (exit 2, as two runs that cannot be compared)."""
    current = _run(tmp_path / "current", [0] * 10, "20260102T000000Z-bbbb")  # every freshness query lost
    queries = pl.read_parquet(current / "queries.parquet").with_columns(  # the golden set's texts reworded
        pl.when(pl.col("query_id").is_in([f"entity-{i}" for i in range(shared)])).then(pl.col("query"))
        .otherwise("reworded " + pl.col("query")).alias("query"))
    queries.write_parquet(current / "queries.parquet")
    with pytest.raises(InputError) as err:
        gate(current, previous, None, 0.0, mode="significant")
    assert err.value.where == "--gate-mode" and err.value.file == str(previous)
    assert err.value.problem.startswith(f"significant: {shared} queries ran in both runs (the same id and text, "
                                        "neither search failed); a paired test needs at least 2")
    assert main(["gate", str(current), str(previous), "--gate-mode", "significant"]) == 2
    assert "Gate passed" not in capsys.readouterr().out


def test_holm_adjusts_over_every_test_so_six_of_ten_lost_passes(tmp_path, previous):
    # Six freshness queries lost: raw p 2/64 (0.031) per metric; Holm over six such tests (freshness and overall,
    # two metrics each) makes it 0.187, not significant.
    current = _run(tmp_path / "current", [0] * 6 + [1] * 4, "20260102T000000Z-bbbb")
    result = gate(current, previous, None, 0.0, mode="significant")
    assert result.passed, result.text
    (row,) = [line for line in result.text.splitlines() if line.startswith("| freshness ") and "MRR |" in line]
    assert [cell.strip() for cell in row.split("|")[6:10]] == ["[-0.9000, -0.3000]", "0.0312", "0.1872", "ok"]


def test_a_significant_improvement_passes_the_significant_gate(tmp_path):
    previous = _run(tmp_path / "previous", [0] * 10, "20260101T000000Z-aaaa")
    current = _run(tmp_path / "current", [1] * 10, "20260102T000000Z-bbbb")  # every freshness query found now
    result = gate(current, previous, None, 0.0, mode="significant")
    assert result.passed and result.problems == (), result.text
    assert "none regressed significantly" in result.text


def test_the_significant_mode_refuses_a_gate_file(tmp_path, previous):
    with pytest.raises(InputError) as err:
        gate(previous, None, tmp_path / "gate.json", 0.0, mode="significant")
    assert err.value.where == "--gate-mode" and "a gate file holds none" in err.value.problem


def test_the_exact_gate_warns_when_its_tolerance_is_below_one_query_or_the_noise(tmp_path):
    ranks = [2, 1, 3, 1, 0, 1, 1, 1, 1, 1]  # BEST moves four freshness queries away from the baseline's rank 1
    previous = _run(tmp_path / "previous", ranks, "20260101T000000Z-aaaa")
    current = _run(tmp_path / "current", ranks, "20260102T000000Z-bbbb")
    text = gate(current, previous, None, 0.02).text
    assert ("warning: tolerance 0.02 is below one query's worth on entity (1/20 = 0.050), freshness (1/10 = 0.100): "
            "one query losing its hit fails the gate") in text
    # No setting moves entity, so only freshness has a minimum detectable difference.
    (inside,) = [line for line in text.splitlines() if "below the minimum detectable difference" in line]
    assert "freshness (recall@10 " in inside and "entity" not in inside
    assert "--gate-mode significant" in inside
    assert "below one query's worth" not in gate(current, previous, None, 0.2).text


def test_the_command_line_takes_the_mode(tmp_path, previous, capsys):
    current = _run(tmp_path / "current", [2] + [1] * 9, "20260102T000000Z-bbbb")
    assert main(["gate", str(current), str(previous)]) == 5
    assert main(["gate", str(current), str(previous), "--gate-mode", "significant"]) == 0
    assert "Gate mode: significant" in capsys.readouterr().out
