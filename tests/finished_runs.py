"""A check every finished run folder the tests produce must pass: its tables' knob columns say what their
`setting_id` says (`Knobs.from_id`). A run that wrote one knob's values under another's name would otherwise
report, gate and explain settings it never evaluated. `tests/conftest.py` applies it after every test."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl

from rqsweep.knobs import KNOBS, Knobs


def assert_knob_columns_match_ids(run_dir: Path) -> None:
    """grid.parquet's (and queries.parquet's, when present) knob columns equal `Knobs.from_id(setting_id)` on
    every row."""
    for name in ("grid.parquet", "queries.parquet"):
        path = run_dir / name
        if not path.exists():
            continue
        written = pl.scan_parquet(path).select("setting_id", *KNOBS).unique(maintain_order=True).collect()
        expected = pl.DataFrame([{"setting_id": sid, **Knobs.from_id(sid).columns()}
                                 for sid in written["setting_id"]], schema=written.schema)
        wrong = written.join(expected, on="setting_id", suffix="_from_id").filter(
            pl.any_horizontal(pl.col(k).ne_missing(pl.col(f"{k}_from_id")) for k in KNOBS))
        assert wrong.is_empty(), f"{path}: knob columns disagree with their setting_id:\n{wrong}"


class FinishedRuns:
    """Finds the finished run folders (run.json says complete) under a folder, each once per version of its
    run.json, so that a check after every test reads only the runs that test finished."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, int]] = set()

    def new_under(self, root: Path) -> list[Path]:
        found = []
        for folder, subfolders, files in os.walk(root):
            if "run.json" not in files:
                continue
            subfolders.clear()  # a run folder holds no other run
            stamp = (folder, os.stat(os.path.join(folder, "run.json")).st_mtime_ns)
            if stamp in self._seen:
                continue
            self._seen.add(stamp)
            try:
                status = json.loads(Path(folder, "run.json").read_text()).get("status")
            except (OSError, ValueError, AttributeError):
                continue  # a test's deliberately damaged folder
            if status == "complete":
                found.append(Path(folder))
        return found
