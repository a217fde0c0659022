"""One process at a time on a run folder; runs of one config started in the same second get their own folders."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone

import polars as pl
import pytest

from rqsweep.sweep import Sweep
from rqsweep import cli, job
from tests.minijob import write_job


def _second_process_on_the_same_folder(monkeypatch, config):
    """Make the run try `rqsweep CONFIG --resume RUN_DIR` on its own folder while it sweeps; returns what it got."""
    seen: dict = {}
    sweep = Sweep.run

    def run_with_a_rival(self, *args):
        if seen:  # the rival itself, when it was not refused
            return sweep(self, *args)
        before = (self.run_dir / "run.json").read_text()
        seen["run_dir"] = self.run_dir
        seen["code"] = cli.main([str(config), "--quiet", "--resume", str(self.run_dir)])
        seen["run.json unchanged"] = (self.run_dir / "run.json").read_text() == before
        sweep(self, *args)

    monkeypatch.setattr(Sweep, "run", run_with_a_rival)
    return seen


@pytest.mark.parametrize("resumed", [False, True])
def test_a_second_process_on_a_running_folder_is_refused(tmp_path, monkeypatch, capsys, resumed):
    config = write_job(tmp_path / "job")
    run_dir = None
    if resumed:
        run_dir = job.run(config, quiet=True, output_dir=tmp_path / "out").run_dir
    seen = _second_process_on_the_same_folder(monkeypatch, config)
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out", resume=run_dir)
    err = capsys.readouterr().err
    assert seen["code"] == 2 and seen["run.json unchanged"]
    assert str(seen["run_dir"]) in err and "another rqsweep process" in err
    # The first run is unharmed: it finishes, complete.
    assert json.loads((outcome.run_dir / "run.json").read_text())["status"] == "complete"
    assert outcome.grid["setting_id"].n_unique() == 48


def test_a_resume_started_beside_a_running_process_leaves_it_unharmed(tmp_path):
    big = {"strategy": "grid", "knobs": {  # 400 x 21 x 5 = 42,000 settings: several seconds
        "rrf_k": {"low": 1, "high": 400},
        "min_similarity": {"include_off": True, "low": 0.02, "high": 0.4, "step": 0.02},
        "recency_half_life_days": {"values": [0, 1, 7, 30, 365]},
    }}
    config = write_job(tmp_path / "job", sweep=big)
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "-m", "rqsweep.cli", str(config), "--quiet", "--output-dir", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("mini/*/state/part-*.parquet")):
        time.sleep(0.02)
    (run_dir,) = out.glob("mini/*")
    second = subprocess.run([sys.executable, "-m", "rqsweep.cli", str(config), "--quiet", "--resume", str(run_dir)],
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stderr
    assert first.poll() is None, "the first run ended before the second started: make the grid bigger"
    assert str(run_dir) in second.stderr and "another rqsweep process" in second.stderr
    assert "Traceback" not in second.stderr
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    grid = pl.read_parquet(run_dir / "grid.parquet")
    assert grid["setting_id"].n_unique() == 42_000 and grid["queries"].max() == 10


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    config = write_job(tmp_path / "job")
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)
    a = job.run(config, quiet=True, output_dir=tmp_path / "out", now=now)
    b = job.run(config, quiet=True, output_dir=tmp_path / "out", now=now)
    assert a.run_dir != b.run_dir
    ids = [a.grid["run_id"][0], b.grid["run_id"][0]]
    assert len(set(ids)) == 2 and all(i.startswith("20261130T120000Z-") for i in ids)
    later = job.run(config, quiet=True, output_dir=tmp_path / "out",
                    now=datetime(2026, 11, 30, 12, 0, 1, tzinfo=timezone.utc))
    # Ids still sort by time.
    assert sorted([*ids, later.grid["run_id"][0]])[-1] == later.grid["run_id"][0]
