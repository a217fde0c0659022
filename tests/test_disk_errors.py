"""Outputs that cannot be written (a read-only folder, a full disk, a file-size limit) and run folders that cannot be
read (damaged Parquet, a run.json that is not an object or predates `config_path`): a message naming the folder or
the file, exit 2, never a traceback; a run stopped by its disk resumes to the uninterrupted run's results."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from rqsweep import cli, job
from rqsweep.errors import OutputError
from rqsweep.files import write_parquet, write_text
from tests.minijob import write_job

ROOT = Path(__file__).resolve().parents[1]


def _rqsweep(args: list[str], file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run([sys.executable, "-m", "rqsweep.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit)


def _tables(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    return tuple(pl.read_parquet(run_dir / f"{t}.parquet").drop("run_id") for t in ("grid", "queries"))


def test_a_file_size_limit_stops_the_run_with_exit_2_naming_the_folder_and_resume_completes_it(tmp_path):
    config = write_job(tmp_path / "job")
    whole = job.run(config, quiet=True, output_dir=tmp_path / "whole").run_dir
    # Large enough for run.json and the state's parts, too small for the per-query table.
    limit = (whole / "queries.parquet").stat().st_size // 2
    done = _rqsweep([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"], file_size_limit=limit)
    (run_dir,) = (tmp_path / "out" / "mini").iterdir()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "cannot write" in done.stderr and str(run_dir) in done.stderr and "File too large" in done.stderr
    assert f"--resume {run_dir}" in done.stderr
    resumed = _rqsweep([str(config), "--resume", str(run_dir), "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    for got, want in zip(_tables(run_dir), _tables(whole)):
        assert got.drop("config_sha256", strict=False).equals(want.drop("config_sha256", strict=False))


def test_an_output_folder_that_cannot_be_created_is_exit_2_naming_it(tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("a file where the output folder should be")
    config = write_job(tmp_path / "job")
    done = _rqsweep([str(config), "--output-dir", str(blocker / "sub"), "--quiet"])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"cannot write in {blocker / 'sub' / 'mini'}" in done.stderr


@pytest.mark.parametrize("code, said", [(errno.ENOSPC, "No space left on device"),
                                        (errno.EROFS, "Read-only file system")])
def test_a_full_or_read_only_disk_is_an_output_error_naming_the_file_and_folder(tmp_path, monkeypatch, code, said):
    def refuse(*_args, **_kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(pq.ParquetWriter, "write_table", refuse)
    with pytest.raises(OutputError, match=f"cannot write grid.parquet in {tmp_path}: .*{said}") as raised:
        write_parquet(tmp_path / "grid.parquet", pl.DataFrame({"a": [1]}))
    assert raised.value.exit_code == 2
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind
    monkeypatch.setattr(os, "fsync", refuse)
    with pytest.raises(OutputError, match=f"cannot write run.json in {tmp_path}"):
        write_text(tmp_path / "run.json", "{}")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    config = write_job(tmp_path_factory.mktemp("explain") / "job")
    return job.run(config, quiet=True).run_dir


@pytest.fixture()
def copy(finished, tmp_path):
    """A copy of the finished run to damage, removed after the test (conftest's check reads finished folders)."""
    import shutil

    target = tmp_path / finished.name
    shutil.copytree(finished, target)
    yield target
    shutil.rmtree(target)


@pytest.mark.parametrize("name", ["hits.parquet", "queries.parquet", "grid.parquet"])
@pytest.mark.parametrize("damage", ["truncated", "random bytes"])
def test_explain_on_a_damaged_table_names_the_file(copy, capsys, name, damage):
    path = copy / name
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else os.urandom(len(data)))
    assert cli.main(["explain", str(copy), "f1"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: damaged: cannot be read as Parquet" in err and "Traceback" not in err


def test_a_run_json_that_is_not_an_object_is_named(copy, capsys):
    (copy / "run.json").write_text("[1, 2, 3]\n")
    for command in (["explain", str(copy), "f1"], ["report", str(copy)]):
        assert cli.main(command) == 2
        assert f"{copy / 'run.json'}: expected a JSON object, got list" in capsys.readouterr().err


def test_an_older_run_json_without_config_path_names_what_is_missing(copy, capsys):
    info = json.loads((copy / "run.json").read_text())
    del info["config_path"]
    (copy / "run.json").write_text(json.dumps(info))
    # A setting the run folder did not store is recomputed from the run's config, which this run.json does not name.
    assert cli.main(["explain", str(copy), "f1", "--setting", "k1_m0.3_h1.0"]) == 2
    err = capsys.readouterr().err
    assert f"{copy / 'run.json'}: config_path: missing" in err and "is not a file" not in err
