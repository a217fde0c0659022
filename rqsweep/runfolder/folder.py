"""A run folder's name and its lock: `results/<name>/<run id>/`, held by one process at a time."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from datetime import datetime
from pathlib import Path
from typing import Iterator

from rqsweep.errors import InputError
from rqsweep.files import writing_in

# The files of a run folder (the report's two are `rqsweep.report`'s).
RUN_JSON = "run.json"  # the record: `runfolder.record`
LOCK_FILE = "run.lock"
GRID, QUERIES, HITS, RANKED = "grid.parquet", "queries.parquet", "hits.parquet", "ranked.parquet"  # `runfolder.tables`
SETTINGS = "settings.parquet"  # the grid turned wide: `runfolder.settings`, written by `runfolder.tables`
LABEL_HEALTH = "label_health.parquet"  # `rqsweep.report.label_health`, written by `runfolder.tables`
JUDGMENTS = "judgments.parquet"  # the golden set's judged pairs (`golden: {judgments}`), written by `runfolder.tables`
ROUTING = "routing.json"  # one setting per slice: `rqsweep.report.routing`, written by `runfolder.tables`
STATE_DIR = "state"  # the resumable state: `runfolder.state`; an optimise run's journal lives there too
# Four more are named and written by the layers that own their format, which sit below the run folder on the data
# line (docs/architecture.md), and are given only the folder's path: prepare/ (`backends.candidate_blocks.FOLDER`),
# seed.json and seed.journal (`backends.http.seed`), state/optuna.journal (`search.study`) and embedders/
# (`embedder_sweep.EMBEDDERS_FOLDER`).


def new_run_folder(parent: Path, inputs_sha256: str, now: datetime) -> tuple[str, Path]:
    """Create a run's folder under `parent`; returns (run id, folder).

    The id is the UTC time, then the start of the inputs' hash (`Inputs.sha256`: config, sweep, corpus and golden
    set, run.json's `inputs_sha256`): runs sort by time, and equal inputs share a suffix. Runs of the same inputs
    started in the same second get `-2`, `-3`, ... after it.
    """
    first = f"{now:%Y%m%dT%H%M%SZ}-{inputs_sha256[:8]}"
    run_id, n = first, 1
    with writing_in(parent):
        parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                (parent / run_id).mkdir()  # atomic: of two processes, one gets the name
                return run_id, parent / run_id
            except FileExistsError:
                n += 1
                run_id = f"{first}-{n}"


def check_run_folder(path: Path) -> None:
    """InputError (exit 2) unless `path` is a folder holding a run.json: what every command given a run folder
    (report, gate, explain, export, collect, --resume, --compare) checks first, through `RunRecord.read`."""
    if not (path / RUN_JSON).is_file():
        found = "a file" if path.is_file() else f"no {RUN_JSON}" if path.is_dir() else "no such folder"
        raise InputError(path, "", f"not a run folder ({found}): give the folder a run wrote, results/NAME/RUN_ID")


@contextlib.contextmanager
def holding(run_dir: Path) -> Iterator[None]:
    """Hold the run folder's lock (an flock on its run.lock) for the block: one process runs a folder at a time.

    The lock file stays: removing it would let a third process lock a new file while the second holds the old.
    """
    with writing_in(run_dir, LOCK_FILE):
        lock = open(run_dir / LOCK_FILE, "a")
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(run_dir, "", f"another rqsweep process holds this run folder (its {LOCK_FILE}): "
                                          "wait for it to end, or stop it first") from None
        yield


def remove_if_bare(run_dir: Path) -> bool:
    """Delete a new run's folder that holds nothing but its run.json and lock (a run that could not start), and
    its name's folder (`results/<name>/`) when no other run is left in it; returns whether it did. A folder with
    anything else (a seed's record of writes to a server) stays."""
    if any(p.name not in (RUN_JSON, LOCK_FILE) for p in run_dir.iterdir()):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):  # not empty: other runs of the name are there
        run_dir.parent.rmdir()
    return True
