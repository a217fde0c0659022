"""The resumable run state: numbered Parquet parts under `<run>/state/`, read back without loss or doubling."""

from __future__ import annotations

import shutil
import subprocess
import sys

import polars as pl
import pytest

from rqsweep import job
from rqsweep.backends.base import OUTCOME_SCHEMA
from rqsweep.errors import InputError
from rqsweep.results import LocalRunState
from tests.minijob import write_job
from tests.runfolders import outcome_rows


def _rows(setting: str, position: int = 1) -> pl.DataFrame:
    return outcome_rows(setting, [None] * 3, position)


def _state(folder) -> LocalRunState:
    return LocalRunState(folder, OUTCOME_SCHEMA)


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
    assert reread.rows().height == 9


def test_overlapping_parts_do_not_double_rows_and_the_later_part_wins(tmp_path):
    state = _state(tmp_path)
    state.record(_rows("a", position=1))
    state.record(_rows("b"))
    state.record(_rows("a", position=7))
    for reread in (state, _state(tmp_path)):
        rows = reread.rows()
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
    assert _state(tmp_path).rows()["positions"].to_list() == [[4]] * 3


def test_a_resume_over_a_duplicated_part_gives_the_uninterrupted_grid(tmp_path):
    config = write_job(tmp_path / "job")
    clean = job.run(config, quiet=True, output_dir=tmp_path / "out")
    state = clean.run_dir / "state"
    *_, grid_part = sorted(state.glob("part-*.parquet"))  # after the baseline's
    shutil.copy(grid_part, state / "part-000042.parquet")
    resumed = job.run(config, quiet=True, resume=clean.run_dir)
    assert resumed.grid.equals(clean.grid)
    assert resumed.grid["queries"].max() == 10


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
    config = write_job(tmp_path / "job")
    clean = job.run(config, quiet=True, output_dir=tmp_path / "out")
    part = next((clean.run_dir / "state").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    proc = subprocess.run([sys.executable, "-m", "rqsweep.cli", str(config), "--quiet", "--resume",
                           str(clean.run_dir)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert str(part) in proc.stderr and "Traceback" not in proc.stderr
