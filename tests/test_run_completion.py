"""Finished means finished: a run marks its folder complete after every other file, and whatever reads run
folders (`rqsweep report`, `rqsweep gate`, `--compare`, the nightly selector) refuses an unfinished one."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rqsweep import cli, files, job
from tests.minijob import write_job

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def finished(tmp_path):
    config = write_job(tmp_path / "job")
    return config, job.run(config, quiet=True, output_dir=tmp_path / "out").run_dir


def _unfinish(run_dir: Path, status: str = "running") -> None:
    """What a run killed after writing its grid leaves: no per-query table, no report, run.json not complete."""
    for name in ("queries.parquet", "report.md", "report.html"):
        (run_dir / name).unlink(missing_ok=True)
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "status": status}))


def test_the_folder_is_marked_complete_after_every_other_file(tmp_path, monkeypatch):
    written: list[tuple[str, str | None]] = []
    atomic = files._atomic

    @contextlib.contextmanager
    def logged(path: Path):
        with atomic(path) as tmp:
            yield tmp
        status = json.loads(path.read_text()).get("status") if path.name == "run.json" else None
        written.append((path.name, status))

    monkeypatch.setattr(files, "_atomic", logged)
    config = write_job(tmp_path / "job")
    job.run(config, quiet=True, output_dir=tmp_path / "out")
    assert written[-1] == ("run.json", "complete")
    # At the start, and once the verdict is made (the run's own report states it): both still running.
    assert [status for name, status in written if name == "run.json"][:-1] == ["running", "running"]
    finals = {name for name, _ in written}
    assert {"grid.parquet", "queries.parquet", "report.md", "report.html"} <= finals


@pytest.mark.parametrize("status", ["running", "interrupted"])
def test_an_unfinished_folder_is_refused_by_report_gate_and_compare(tmp_path, finished, capsys, status):
    config, previous = finished
    unfinished = job.run(config, quiet=True, output_dir=tmp_path / "later").run_dir
    _unfinish(unfinished, status)
    gate_file = tmp_path / "gate.json"
    assert cli.main(["gate", str(previous), "--gate-file", str(gate_file), "--update-gate-file"]) == 0
    capsys.readouterr()
    for argv in (["report", str(unfinished)],
                 ["gate", str(unfinished), str(previous)],
                 ["gate", str(previous), str(unfinished)],
                 ["gate", str(unfinished), "--gate-file", str(gate_file)],
                 ["gate", str(unfinished), "--gate-file", str(gate_file), "--update-gate-file"],
                 [str(config), "--quiet", "--output-dir", str(tmp_path / "never"), "--compare", str(unfinished)]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert str(unfinished) in err and "unfinished" in err
        assert f"rqsweep {config} --resume {unfinished}" in err
    assert not (tmp_path / "never").exists()  # --compare refused it before any search
    assert not (unfinished / "report.md").exists()


def test_resuming_an_unfinished_folder_finishes_it(tmp_path, finished):
    config, previous = finished
    _unfinish(previous)
    job.run(config, quiet=True, resume=previous)
    assert cli.main(["gate", str(previous), str(previous)]) == 0
    assert (previous / "report.md").exists() and (previous / "queries.parquet").exists()


def _nightly_selector() -> str:
    """The documented way to find the newest finished run (the first `prev=$(...)` of docs/nightly.md)."""
    text = (ROOT / "docs" / "nightly.md").read_text()
    return re.search(r"^prev=\$\(.*\)$", text, re.MULTILINE)[0]


def test_the_nightly_selector_skips_an_unfinished_newer_run(tmp_path, finished):
    _, run_dir = finished
    handbook = tmp_path / "site" / "results" / "handbook"
    handbook.mkdir(parents=True)
    shutil.copytree(run_dir, handbook / "20260101T000000Z-aaaaaaaa")
    shutil.copytree(run_dir, handbook / "20260102T000000Z-aaaaaaaa")
    _unfinish(handbook / "20260102T000000Z-aaaaaaaa")
    (handbook / "20260103T000000Z-aaaaaaaa").mkdir()  # a run killed before it wrote anything
    found = subprocess.run(["bash", "-c", _nightly_selector() + '; echo "$prev"'], cwd=tmp_path / "site",
                           capture_output=True, text=True, check=True).stdout.strip()
    assert found == "results/handbook/20260101T000000Z-aaaaaaaa"
