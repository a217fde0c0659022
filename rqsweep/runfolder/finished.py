"""A finished run read back: its record (run.json), its grid and the job config, and its per-query table on demand.

Shared by what reads finished runs: the report, `explain` and the gate. A run is finished when its run.json says
`"status": "complete"`, which the run writes after every other file (grid, per-query table, report).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from rqsweep.config import Constraint
from rqsweep.engine.index import DEFAULT_LIMIT
from rqsweep.errors import InputError
from rqsweep.files import reading_parquet
from rqsweep.golden import OVERALL
from rqsweep.knobs import KNOBS, Knobs
from rqsweep.runfolder.folder import GRID, QUERIES
from rqsweep.runfolder.record import RunRecord


@dataclass(frozen=True)
class RunFolder:
    """One run folder. `chosen` is the best feasible setting, or the baseline when none is feasible."""

    path: Path
    grid: pl.DataFrame
    config: dict
    golden: str  # the golden set's path as the run read it
    strategy: str  # `grid` or `optimize`
    definitions: dict[str, str]  # what each column means, metrics included (`rqsweep.metrics` metadata)
    server_profile: dict | None = None  # what produced the rankings (`backends.base`); None before it was kept
    validation: dict | None = None  # the run's cross-validation (`CrossValidation.as_json`); None when off
    record: RunRecord = RunRecord()  # its run.json

    @property
    def corpus_sha256(self) -> str | None:
        """The corpus searched (`Corpus.sha256`); None before runs kept it."""
        return self.record.corpus_sha256

    @property
    def refused_knobs(self) -> tuple[str, ...]:
        """The knobs the server refused, which every search left at SOAT's default (`knobs_refused`)."""
        refused = (self.server_profile or {}).get("knobs_refused") or ()
        return tuple(k for k in KNOBS if k in refused)

    @property
    def warnings(self) -> tuple[str, ...]:
        """What qualifies the numbers (the golden set's, the backend's: memory ages a server cannot hold)."""
        return tuple(map(str, self.record.warnings or ()))

    @property
    def run_id(self) -> str:
        return self.grid["run_id"][0]

    @property
    def name(self) -> str:
        return str(self.config.get("name", self.path.parent.name))

    @cached_property
    def best(self) -> str | None:
        ids = self.grid.filter(pl.col("is_best"))["setting_id"].unique().to_list()
        return ids[0] if ids else None

    @cached_property
    def baseline(self) -> str:
        return self.grid.filter(pl.col("is_baseline"))["setting_id"][0]

    @property
    def chosen(self) -> str:
        return self.best or self.baseline

    @property
    def decided(self) -> str:
        """The verdict's setting (`verdict`): what a team deploys; the chosen one in a run written before it."""
        decision = self.record.decision
        return decision["setting_id"] if isinstance(decision, dict) else self.chosen

    @cached_property
    def slices(self) -> list[str]:
        """The golden set's slices, sorted, then `overall`."""
        return sorted(set(self.grid["slice"].to_list()) - {OVERALL}) + [OVERALL]

    @property
    def objective(self) -> tuple[str, str]:
        """(metric, slice) the run maximised."""
        objective = self.config.get("objective") or {}
        return objective.get("metric", "mrr"), objective.get("slice", OVERALL)

    @property
    def metrics(self) -> list[str]:
        """The metrics the run computed, in its order (grid columns named in the `rqsweep.metrics` metadata)."""
        return [m for m in self.definitions if m in self.grid.columns and m not in ("queries", "errors")]

    @property
    def constraints(self) -> list[Constraint]:
        return [Constraint(c["metric"], c.get("slice", "*"), c.get("min"), c.get("max_drop"))
                for c in self.config.get("constraints") or []]

    @property
    def limit(self) -> int:
        # SOAT's default limit: what a config without `search.limit` searched with.
        return int((self.config.get("search") or {}).get("limit", DEFAULT_LIMIT))

    @cached_property
    def _slice_rows(self) -> dict[str, dict[str, dict]]:
        return {}  # setting id -> slice -> row, filled as asked: a report asks for a few settings of many

    def knobs(self, setting_id: str) -> Knobs:
        """The knob values of an evaluated setting, from its grid row's knob columns."""
        row = self.slice_rows(setting_id)[OVERALL]
        return Knobs.from_columns(row)

    def label(self, setting_id: str) -> str:
        return self.knobs(setting_id).label()

    def slice_rows(self, setting_id: str) -> dict[str, dict]:
        """slice -> that setting's grid row."""
        if setting_id not in self._slice_rows:
            rows = self.grid.filter(pl.col("setting_id") == setting_id)
            self._slice_rows[setting_id] = {r["slice"]: r for r in rows.iter_rows(named=True)}
        return self._slice_rows[setting_id]

    def overall(self) -> pl.DataFrame:
        """One row per setting: its `overall` slice row, in evaluation order."""
        return self._overall

    @cached_property
    def _overall(self) -> pl.DataFrame:  # the report asks five times: at 100,000 settings a filter and sort each
        return self.grid.filter(pl.col("slice") == OVERALL).sort("evaluation_order")

    def scan(self, table: str) -> pl.LazyFrame | None:
        """One of the folder's tables (`GRID`, `QUERIES`, `HITS`, `RANKED` of `runfolder.folder`), read lazily;
        None when the run did not write it."""
        path = self.path / table
        return pl.scan_parquet(path) if path.exists() else None

    def read(self, table: str, *predicates: pl.Expr) -> pl.DataFrame | None:
        """The rows of one of the folder's tables that match `predicates` (all without); None when the run did not
        write it. A damaged file is an InputError naming it."""
        scan = self.scan(table)
        if scan is None:
            return None
        with reading_parquet(self.path / table):
            return (scan.filter(*predicates) if predicates else scan).collect()

    def queries(self, setting_ids: list[str]) -> pl.DataFrame:
        """Per-query rows of some settings (read lazily: the table holds every setting's queries)."""
        rows = self.read(QUERIES, pl.col("setting_id").is_in(setting_ids))
        if rows is None:
            raise InputError(self.path / QUERIES, "", "missing: the run folder has no per-query table")
        return rows


def check_finished(path: Path) -> RunRecord:
    """The record of a finished run; InputError, naming the folder and how to finish it, for any other folder."""
    record = RunRecord.read(path)
    if not record.complete:
        # run.json keeps the config's path relative to the run folder (absolute in older runs).
        config = os.path.normpath(path / record.config_path) if record.config_path else "CONFIG"
        raise InputError(path, "", f"an unfinished run (status {record.status!r}): its results are missing or "
                                   f"partial; finish it with `rqsweep {config} --resume {path}`")
    return record


def read_run_folder(path: Path, *, finished: bool = True) -> RunFolder:
    """Read a run folder's record, grid and config; raises InputError when it is not a finished run.

    `finished=False` is for the run itself, which writes its report before marking its folder complete.
    """
    record = check_finished(path) if finished else RunRecord.read(path)
    grid_path = path / GRID
    if not grid_path.exists():
        raise InputError(grid_path, "", "missing: the run folder has no grid")
    with reading_parquet(grid_path):
        metadata = pq.read_schema(grid_path).metadata or {}
        grid = pl.read_parquet(grid_path)
    config = json.loads(metadata.get(b"rqsweep.config", b"{}"))
    embedders = grid["embedder"].unique(maintain_order=True).to_list() if "embedder" in grid.columns else []
    if len(embedders) > 1:
        raise InputError(path, "", "a sweep over several embedders: each embedder's run is a run folder of its own, "
                         "to report on, explain or gate: " + ", ".join(f"embedders/{e}" for e in embedders))
    if grid.is_empty() or not grid["is_baseline"].any():
        raise InputError(grid_path, "", "holds no evaluated baseline setting")
    sweep = config.get("sweep")
    strategy = metadata.get(b"rqsweep.strategy", b"").decode() or (
        sweep.get("strategy", "grid") if isinstance(sweep, dict) else "grid")
    definitions = json.loads(metadata.get(b"rqsweep.metrics", b"{}"))
    profile = metadata.get(b"rqsweep.server_profile")
    validation = metadata.get(b"rqsweep.validation")
    return RunFolder(path, grid, config, metadata.get(b"rqsweep.golden", b"").decode(), strategy, definitions,
                     json.loads(profile) if profile else None, json.loads(validation) if validation else None,
                     record)
