"""The run's end: a new run scores each batch as it is evaluated and writes queries.parquet then, and its tables equal
those of the end that reads its state back and scores it again (what a resumed run's end does)."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pyarrow.parquet as pq
import pytest

from rqsweep.sweep import Sweep
from rqsweep import job, sweep
from rqsweep.backends.embedded import EmbeddedBackend
from rqsweep.runfolder import QUERIES, state, tables
from tests.minijob import write_job

TABLES = ("grid.parquet", "queries.parquet", "hits.parquet", "settings.parquet", "label_health.parquet")


def _tables(run_dir):
    out = {name: (pl.read_parquet(run_dir / name), pq.read_schema(run_dir / name).metadata) for name in TABLES}
    if (run_dir / "routing.json").exists():
        out["routing.json"] = json.loads((run_dir / "routing.json").read_text())
    return out


@pytest.mark.parametrize("validation", [True, False])
def test_a_new_runs_end_equals_its_state_scored_again(tmp_path, monkeypatch, validation):
    config = write_job(tmp_path / "job", validation=validation)
    written_early = []
    finish = Sweep.finish

    def finish_and_look(self, metadata):
        # queries.parquet's rows are in its temporary file before the end begins, and no part is read back.
        written_early.append(bool(list(self.run_dir.glob(f".{QUERIES}.*.tmp"))))
        monkeypatch.setattr(self.state, "chunks", None)
        return finish(self, metadata)

    monkeypatch.setattr(Sweep, "finish", finish_and_look)
    noise_given, write_report = [], job.write_report

    def write_report_and_look(run_dir, **kwargs):
        noise_given.append(kwargs["made"].noise is not None)
        return write_report(run_dir, **kwargs)

    monkeypatch.setattr(job, "write_report", write_report_and_look)
    new = job.run(config, quiet=True, output_dir=tmp_path / "out")
    monkeypatch.setattr(Sweep, "finish", finish)
    assert written_early == [True]
    assert noise_given == [True]  # and a resume's end leaves them to the report, which reads queries.parquet

    again = tmp_path / "again" / new.run_dir.name
    shutil.copytree(new.run_dir, again)
    # A finished run resumed: its state is queries.parquet's row groups, read back and scored again.
    job.run(config, quiet=True, resume=again)
    assert noise_given == [True, False]
    first, second = _tables(new.run_dir), _tables(again)
    assert first.keys() == second.keys() and ("routing.json" in first) == validation
    for name in first:
        if name == "routing.json":
            assert first[name] == second[name]
            continue
        (frame, metadata), (frame_again, metadata_again) = first[name], second[name]
        assert frame.equals(frame_again), name
        assert metadata == metadata_again, name
    assert first["queries.parquet"][0].height == first["settings.parquet"][0].height * 10
    # The report's noise figures, made as the settings were evaluated, are those read back from queries.parquet.
    assert _noise_section(new.run_dir) == _noise_section(again)


def _noise_section(run_dir):
    text = (run_dir / "report.md").read_text()
    start = text.index("How much noise the bounds sit in")
    section = text[start:text.index("\n#", start)]
    assert "MDD" in section
    return section


def test_an_interrupted_evaluation_leaves_no_half_written_query_table(tmp_path, monkeypatch):
    config = write_job(tmp_path / "job")
    evaluate, calls = Sweep.evaluate, []

    def interrupted_after_the_baseline(self, settings):
        calls.append(1)
        if len(calls) == 2:  # the baseline is evaluated first, then the grid
            raise KeyboardInterrupt
        return evaluate(self, settings)

    monkeypatch.setattr(Sweep, "evaluate", interrupted_after_the_baseline)
    with pytest.raises(KeyboardInterrupt):
        job.run(config, quiet=True, output_dir=tmp_path / "out")
    (run_dir,) = (tmp_path / "out" / "mini").iterdir()
    assert list((run_dir / "state").glob("part-*.parquet"))  # what finished is kept
    assert not list(run_dir.glob(f".{QUERIES}.*")) and not (run_dir / QUERIES).exists()
    monkeypatch.setattr(Sweep, "evaluate", evaluate)
    killed = run_dir / f".{QUERIES}.0123456789abcdef.tmp"  # what a run killed while writing it leaves
    killed.write_bytes(b"PAR1")
    resumed = job.run(config, quiet=True, resume=run_dir)
    assert not killed.exists()
    clean = job.run(config, quiet=True, output_dir=tmp_path / "clean")
    assert resumed.grid.drop("run_id").equals(clean.grid.drop("run_id"))
    assert pl.read_parquet(run_dir / QUERIES).drop("run_id").equals(
        pl.read_parquet(clean.run_dir / QUERIES).drop("run_id"))


@pytest.mark.parametrize("validation", [True, False])
def test_batches_scored_and_kept_a_few_settings_at_a_time_give_the_tables_of_whole_batches(tmp_path, monkeypatch,
                                                                                            validation):
    config = write_job(tmp_path / "job", validation=validation)
    whole = job.run(config, quiet=True, output_dir=tmp_path / "whole")  # 48 settings x 10 queries: one frame
    assert pq.ParquetFile(whole.run_dir / QUERIES).num_row_groups == 1
    # Batches of 7 settings, scored 3 at a time (25 rows: no divisor of 70) and kept in parts in groups of 4.
    monkeypatch.setattr(EmbeddedBackend, "ROWS_PER_CHECKPOINT", 70)
    monkeypatch.setattr(sweep, "QUERY_ROWS_PER_GROUP", 25)
    monkeypatch.setattr(tables, "QUERY_ROWS_PER_GROUP", 25)
    monkeypatch.setattr(state, "PART_ROWS_PER_GROUP", 35)
    evaluate, groups = Sweep.evaluate, []

    def interrupted_after_two_batches(self, settings):
        if len(list(self.state.folder.glob("part-*.parquet"))) == 3:  # the baseline's and two of the grid's
            groups.extend(pq.ParquetFile(p).num_row_groups for p in sorted(self.state.folder.glob("part-*")))
            raise KeyboardInterrupt
        return evaluate(self, settings)

    monkeypatch.setattr(Sweep, "evaluate", interrupted_after_two_batches)
    with pytest.raises(KeyboardInterrupt):
        job.run(config, quiet=True, output_dir=tmp_path / "split")
    assert groups == [1, 2, 2]  # 10 rows, then 70 as 40 + 30
    monkeypatch.setattr(Sweep, "evaluate", evaluate)
    split = job.run(config, quiet=True, output_dir=tmp_path / "fresh")
    (interrupted,) = (tmp_path / "split" / "mini").iterdir()
    resumed = job.run(config, quiet=True, resume=interrupted)
    rows = pq.ParquetFile(split.run_dir / QUERIES)
    sizes = [rows.metadata.row_group(g).num_rows for g in range(rows.num_row_groups)]
    assert sizes[:3] == [10 + 30, 30, 10 + 30]  # the baseline alone, then a batch's 30 + 30 + 10 rows
    ids = [set(rows.read_row_group(g, columns=["setting_id"])["setting_id"].to_pylist()) for g in range(len(sizes))]
    assert sum(map(len, ids)) == len(set().union(*ids)) == 48  # each setting in one row group
    expected = _tables(whole.run_dir)
    for run in (split, resumed):
        got = _tables(run.run_dir)
        assert got.keys() == expected.keys()
        for name in expected:
            if name == "routing.json":
                assert {**got[name], "run_id": None} == {**expected[name], "run_id": None}
                continue
            (frame, metadata), (frame_expected, metadata_expected) = got[name], expected[name]
            assert frame.drop("run_id", strict=False).equals(frame_expected.drop("run_id", strict=False)), name
            assert metadata == metadata_expected, name
        assert _noise_section(run.run_dir) == _noise_section(whole.run_dir)


def _string_bytes(frame: pl.DataFrame) -> tuple[int, int]:
    """Of `frame`'s string columns: the bytes of the data buffers they point into, and the bytes of their own
    strings too long to be held inline (over 12 bytes, Arrow's string views)."""
    table = frame.to_arrow(compat_level=pl.CompatLevel.newest())
    held = own = 0
    for name in (n for n, kind in frame.schema.items() if kind == pl.String):
        held += sum(b.size for chunk in table.column(name).chunks for b in chunk.buffers()[2:] if b is not None)
        own += sum(len(s.encode()) for s in frame[name].drop_nulls() if len(s.encode()) > 12)
    return held, own


def test_what_the_end_keeps_of_each_batch_holds_its_own_strings_not_the_batchs(tmp_path, monkeypatch):
    # A group-by's or a unique's string keys point into the buffers of the rows they came from: kept as they were,
    # the few rows per setting the end needs held every batch's bytes (0.6 GB at 100,000 settings x 165 queries).
    kept, finish = [], Sweep.finish

    def finish_and_look(self, metadata):
        kept.extend(self._scores.parts)
        return finish(self, metadata)

    monkeypatch.setattr(Sweep, "finish", finish_and_look)
    job.run(write_job(tmp_path / "job"), quiet=True, output_dir=tmp_path / "out")
    frames = [f for s in kept for f in (s.slices, s.knobs, s.spreads, *vars(s.tally).values()) if f is not None]
    held, own = map(sum, zip(*map(_string_bytes, frames)))
    assert 0 < held <= 1.5 * own, (held, own)
