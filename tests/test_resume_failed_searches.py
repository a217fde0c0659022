"""A failed search is unfinished work: `--resume` evaluates again every setting with a failed query."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rqsweep import cli
from rqsweep.backends.base import OUTCOME_SCHEMA
from rqsweep.backends.http import backend as http_backend_module
from rqsweep.runfolder import RunState
from tests.http_support import EMBEDDED, PASSWORD, http_backend, serving, write_config, write_corpus
from tests.runfolders import outcome_rows, state_rows

QUERIES = 20  # write_corpus's golden set


def test_a_setting_with_a_failed_search_is_not_finished_until_evaluated_again(tmp_path):
    state = RunState(tmp_path, OUTCOME_SCHEMA)
    state.record(outcome_rows("a", [None, "ConnectError: connection refused", None]))
    state.record(outcome_rows("b", [None, None, None]))
    assert state.finished() == {"b"}
    assert RunState(tmp_path, OUTCOME_SCHEMA).finished() == {"b"}
    # The failed searches stay in the rows (the grid shows them) until the setting is evaluated again.
    assert state_rows(state)["error"].null_count() == 5
    state.record(outcome_rows("a", [None, None, None]))
    for reread in (state, RunState(tmp_path, OUTCOME_SCHEMA)):
        assert reread.finished() == {"a", "b"}
        assert state_rows(reread).height == 6 and state_rows(reread)["error"].null_count() == 6


def _read(run_dir: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(run_dir / name).drop("run_id")


def test_a_server_dying_just_before_a_checkpoint_resumes_to_the_uninterrupted_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)
    monkeypatch.setattr(http_backend_module, "SEARCHES_PER_CHECKPOINT", 2 * QUERIES)  # 2 settings per checkpoint
    write_corpus(tmp_path)
    embedded = write_config(tmp_path, "embedded", EMBEDDED)
    with serving(embedded) as server:
        config = write_config(tmp_path, "sweep", http_backend(server.url, mode="direct", retries=3,
                                                              max_consecutive_failures=4))
        # The probe, the seed's check (one search per seeded item), the baseline and one checkpoint of 2 settings
        # succeed; the server dies about 2 searches before the second checkpoint, too few failures in a row to
        # stop the run there: that checkpoint is recorded with its failed searches, and the next one stops the run.
        server.die_after = 1 + 8 + 12 + QUERIES + 2 * QUERIES + 2 * QUERIES - 2
        interrupted = tmp_path / "interrupted"
        assert cli.main([str(config), "--output-dir", str(interrupted), "--quiet"]) == 3
        (run_dir,) = (interrupted / "sweep").iterdir()
        state = state_rows(RunState(run_dir / "state", OUTCOME_SCHEMA))
        failed = state.height - state["error"].null_count()
        assert state["setting_id"].n_unique() == 5 and 0 < failed < 4  # fewer than 4 in a row: recorded

        server.die_after = None
        server.start(port=int(server.url.rsplit(":", 1)[1]))
        assert cli.main([str(config), "--resume", str(run_dir), "--quiet"]) == 0
        whole = tmp_path / "whole"
        assert cli.main([str(config), "--output-dir", str(whole), "--quiet"]) == 0
    (uninterrupted,) = (whole / "sweep").iterdir()
    grid = _read(run_dir, "grid.parquet")
    assert grid["errors"].sum() == 0 and grid["setting_id"].n_unique() == 8
    assert grid.equals(_read(uninterrupted, "grid.parquet"))
    assert _read(run_dir, "queries.parquet").equals(_read(uninterrupted, "queries.parquet"))

