"""`rqsweep report` and `rqsweep collect` show their progress on stderr as a run does (plain lines off a terminal),
and nothing with --quiet; before, neither said anything until it ended."""

from __future__ import annotations

import re

from rqsweep import cli, job
from rqsweep.report import document
from tests.minijob import write_job

SMALL_GRID = {"strategy": "grid", "knobs": {"rrf_k": {"values": [5, 60]}}}
SMALL_STUDY = {"strategy": "optimize", "knobs": {"rrf_k": {"low": 1, "high": 100, "log": True}},
               "optimize": {"sampler": "tpe", "n_trials": 4, "seed": 5, "warm_start": 2, "batch_size": 2}}


def test_report_shows_its_progress_and_quiet_hides_it(tmp_path, capsys):
    run_dir = job.run(write_job(tmp_path, SMALL_GRID), quiet=True).run_dir
    capsys.readouterr()
    assert cli.main(["report", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"mini report: {document.STEPS}/{document.STEPS} parts" in err
    assert cli.main(["report", str(run_dir), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_collect_shows_the_progress_of_what_it_does(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    run_dir = job.run(write_job(tmp_path, SMALL_STUDY), quiet=True, storage=url).run_dir
    capsys.readouterr()
    assert cli.main(["collect", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "mini candidates: 10/10 queries" in err and "mini scoring: " in err
    assert f"mini report: {document.STEPS}/{document.STEPS} parts" in err
    assert cli.main(["collect", str(run_dir), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_a_run_shows_the_vectors_made_then_the_candidates(tmp_path, capsys):
    job.run(write_job(tmp_path, SMALL_GRID), quiet=False)
    err = capsys.readouterr().err
    made = re.findall(r"mini vectors: (\d+)/(\d+) rows", err)
    assert made and made[-1][0] == made[-1][1] and int(made[-1][0]) > 0  # the last line: every row made
    assert err.index("mini vectors: ") < err.index("mini candidates: 10/10 queries")
