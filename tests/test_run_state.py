"""The resumable run state: numbered Parquet parts under `<run>/state/`, read back without loss or doubling."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep import job
from rqsweep.backends.base import OUTCOME_SCHEMA
from rqsweep.errors import InputError
from rqsweep.runfolder import RunState
from rqsweep.runfolder.state import whole_settings
from tests.minijob import write_job
from tests.runfolders import outcome_rows, state_rows


def _rows(setting: str, position: int = 1) -> pl.DataFrame:
    return outcome_rows(setting, [None] * 3, position)


def _state(folder) -> RunState:
    return RunState(folder, OUTCOME_SCHEMA)


def test_a_part_written_after_a_gap_overwrites_nothing(tmp_path):
    state = _state(tmp_path)
    for s in ("a", "b", "c"):
        state.record(_rows(s))
    first, *_ = sorted(tmp_path.glob("part-*.parquet"))
    first.unlink()  # a gap: two parts left, the highest numbered beyond their count
    state = _state(tmp_path)
    state.record(_rows("d"))
    reread = _state(tmp_path)
    assert reread.finished() == {"b", "c", "d"}
    assert state_rows(reread).height == 9


def test_overlapping_parts_do_not_double_rows_and_the_later_part_wins(tmp_path):
    state = _state(tmp_path)
    state.record(_rows("a", position=1))
    state.record(_rows("b"))
    state.record(_rows("a", position=7))
    for reread in (state, _state(tmp_path)):
        rows = state_rows(reread)
        assert rows.height == 6
        assert rows.filter(pl.col("setting_id") == "a")["positions"].to_list() == [[7]] * 3
        # A setting keeps the place of its first evaluation.
        assert rows["setting_id"].to_list() == ["a"] * 3 + ["b"] * 3


def test_later_means_the_higher_sequence_number_not_the_name_order(tmp_path):
    state = _state(tmp_path)
    state.record(_rows("a", position=1))
    (tmp_path / "part-000000.parquet").rename(tmp_path / "part-999999.parquet")
    state = _state(tmp_path)
    state.record(_rows("a", position=4))  # part 1000000 sorts before part 999999 as text
    assert state_rows(_state(tmp_path))["positions"].to_list() == [[4]] * 3


def _finished_run(tmp_path):
    config = write_job(tmp_path / "job")
    return config, job.run(config, quiet=True, output_dir=tmp_path / "out")


def _state_of(run_dir) -> RunState:
    return RunState(run_dir / "state", OUTCOME_SCHEMA, consolidated=run_dir / "queries.parquet")


def test_a_finished_run_keeps_its_rows_once_and_a_resume_over_a_duplicated_part_gives_the_same_grid(tmp_path):
    config, clean = _finished_run(tmp_path)
    assert not list((clean.run_dir / "state").glob("part-*.parquet"))  # queries.parquet holds them
    state = _state_of(clean.run_dir)
    # A finish that died between writing queries.parquet and deleting the parts leaves both.
    state.record(state.rows_of(state.settings()[3:9]))
    resumed = job.run(config, quiet=True, resume=clean.run_dir)
    assert resumed.grid.equals(clean.grid)
    assert resumed.grid["queries"].max() == 10
    assert state_rows(_state_of(clean.run_dir)).height == clean.grid["setting_id"].n_unique() * 10


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "wrong columns"])
def test_a_damaged_part_is_an_input_error_naming_it(tmp_path, damage):
    state = _state(tmp_path)
    state.record(_rows("a"))
    part = next(tmp_path.glob("part-*.parquet"))
    data = part.read_bytes()
    if damage == "wrong columns":
        pl.DataFrame({"x": [1]}).write_parquet(part)
    else:
        part.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "garbage": b"PAR1" * 50}[damage])
    with pytest.raises(InputError) as err:
        _state(tmp_path)
    assert err.value.file == str(part)
    assert "delete it" in err.value.problem and "re-evaluated" in err.value.problem


def test_the_cli_reports_a_damaged_part_without_a_traceback(tmp_path):
    config, clean = _finished_run(tmp_path)
    state = _state_of(clean.run_dir)
    state.record(state.rows_of(state.settings()[:2]))
    part = next((clean.run_dir / "state").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    proc = subprocess.run([sys.executable, "-m", "rqsweep.cli", str(config), "--quiet", "--resume",
                           str(clean.run_dir)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert str(part) in proc.stderr and "Traceback" not in proc.stderr


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), max_size=12), st.integers(1, 20))
def test_whole_settings_cuts_between_settings_at_the_first_end_reaching_the_size(lengths, at_least):
    rows = pl.DataFrame({"setting_id": [f"s{i}" for i, n in enumerate(lengths) for _ in range(n)],
                         "row": range(sum(lengths))})
    frames = list(whole_settings(rows, at_least))
    assert (pl.concat(frames) if frames else rows.clear()).equals(rows)
    assert all(f.height for f in frames)
    ids = [set(f["setting_id"]) for f in frames]
    assert sum(map(len, ids)) == len(set().union(*ids))  # no setting in two frames
    for f in frames[:-1]:  # each but the last the fewest whole settings reaching `at_least` rows
        last = f["setting_id"][-1]
        assert f.height >= at_least > f.filter(pl.col("setting_id") != last).height
