"""SIGKILL a real `rqsweep` run at 20 random moments, its final writes included, and resume each: every resumed
grid and per-query table equals the uninterrupted run's; every folder killed before completion is refused by
`rqsweep report`, `rqsweep gate` and `--compare` until it is resumed."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

from rqsweep import cli
from tests.minijob import write_job

# A real rqsweep process, checkpointing every 4 settings so that the 48-setting grid leaves 13 state parts.
RQSWEEP = ("import sys; from rqsweep.backends.embedded import EmbeddedBackend; "
           "EmbeddedBackend.checkpoint_every = 4; from rqsweep.cli import entry; entry()")
# Where the 20 moments fall: a random delay after an event the killer sees in the run folder, so that the
# sweep (short for this grid) and the final writes get their share whatever the machine's load.
ANCHORS = {  # event -> (glob under the output folder, kills)
    "start": (None, 8),
    "sweep": ("mini/*/state/part-000000.parquet", 6),  # the baseline's part
    "final writes": ("mini/*/*queries.parquet*", 6),  # the per-query table (or its temporary file)
}


def _start(config: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RQSWEEP, str(config), "--quiet", "--output-dir", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _tables(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    return tuple(pl.read_parquet(run_dir / name).drop("run_id") for name in ("grid.parquet", "queries.parquet"))


def _status(run_dir: Path) -> str | None:
    path = run_dir / "run.json"
    return json.loads(path.read_text())["status"] if path.exists() else None


def _refused_everywhere(run_dir: Path, finished: Path, config: Path, capsys) -> None:
    for argv in (["report", str(run_dir)], ["gate", str(run_dir), str(finished)],
                 [str(config), "--quiet", "--compare", str(run_dir), "--output-dir", str(run_dir.parent / "never")]):
        assert cli.main(argv) == 2, argv
        assert f"--resume {run_dir}" in capsys.readouterr().err


def _when(proc: subprocess.Popen, out: Path, pattern: str | None) -> None:
    """Wait until `pattern` appears under `out` (or the process ends)."""
    while pattern is not None and proc.poll() is None and not list(out.glob(pattern)):
        time.sleep(0.002)


def test_sigkill_at_twenty_random_moments_then_resume_gives_the_uninterrupted_run(tmp_path, capsys):
    config = write_job(tmp_path / "job")
    clean_out = tmp_path / "clean"
    started = time.monotonic()
    clean = _start(config, clean_out)
    seen = {}
    for anchor, (pattern, _) in ANCHORS.items():
        _when(clean, clean_out, pattern)
        seen[anchor] = time.monotonic() - started
    assert clean.wait(timeout=120) == 0, clean.stderr.read()
    seen["end"] = time.monotonic() - started
    (finished,) = clean_out.glob("mini/*")
    expected = _tables(finished)

    rng = random.Random(20261130)
    anchors = list(ANCHORS) + ["end"]
    moments = [(anchor, rng.uniform(0, seen["end"] - seen[anchor] if anchor == "start"
                                    else seen[anchors[anchors.index(anchor) + 1]] - seen[anchor]))
               for anchor, (_, kills) in ANCHORS.items() for _ in range(kills)]
    phases = []
    for i, (anchor, delay) in enumerate(moments):
        out = tmp_path / f"kill-{i}"
        proc = _start(config, out)
        _when(proc, out, ANCHORS[anchor][0])
        time.sleep(delay)
        proc.kill()
        proc.wait(timeout=60)
        folders = list(out.glob("mini/*"))
        if not folders:
            phases.append("before the run folder")
            continue
        (run_dir,) = folders
        status = _status(run_dir)
        if status is None:  # killed between creating the folder and writing run.json: nothing was evaluated
            assert not list(run_dir.glob("state/part-*")), run_dir
            phases.append("creating the folder")
            continue
        if status != "complete":
            assert status == "running"
            _refused_everywhere(run_dir, finished, config, capsys)
            done = sorted(n for n in ("queries.parquet", "grid.parquet", "report.md") if (run_dir / n).exists())
            parts = len(list(run_dir.glob("state/part-*.parquet")))
            phases.append(f"final writes ({', '.join(done)})" if done else f"sweep ({parts} parts)")
        else:
            phases.append("after completion")
        where = (anchor, round(delay, 3), phases[-1])
        assert cli.main([str(config), "--quiet", "--resume", str(run_dir)]) == 0, where
        assert _status(run_dir) == "complete", where
        grid, queries = _tables(run_dir)
        assert grid.equals(expected[0]), where
        assert queries.equals(expected[1]), where
    capsys.readouterr()
    # The moments reached the sweep and the final writes, not only the start-up.
    assert any(p.startswith("sweep") for p in phases), phases
    assert any(p.startswith("final writes") for p in phases), phases
