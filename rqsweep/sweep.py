"""One run's sweep: settings evaluated through a backend into the run folder's resumable state, each batch scored
as it comes (queries.parquet's rows, and what the run's end needs of them: `rqsweep.decide.accumulate`), then the
decisions and the grid made of them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import polars as pl

from rqsweep import metrics
from rqsweep.backends import OUTCOME_SCHEMA, Backend
from rqsweep.backends.base import RankedHit
from rqsweep.decide.accumulate import Accumulator, Decided
from rqsweep.decide.constraints import SliceMeans, constraint_values
from rqsweep.decide.holdout import figures, key_of, reads
from rqsweep.decide.query_features import features_table
from rqsweep.decide.verdict import Verdict
from rqsweep.files import ParquetGroups
from rqsweep.inputs import Inputs
from rqsweep.knobs import Knobs
from rqsweep.progress import Progress
from rqsweep.runfolder import RunState
from rqsweep.runfolder.state import whole_settings
from rqsweep.runfolder.tables import QUERY_ROWS_PER_GROUP, Stamp, golden_table, grid_table, open_queries, \
    query_table, write_queries
from rqsweep.search.space import grid
from rqsweep.search.strategy import StudyIdentity, run_grid, run_optimize
from rqsweep.search.study import StudyStorage, study_name
from rqsweep.search.trials import gathered, outcome_attrs


@dataclass(frozen=True)
class Finished:
    """What a run's end made of its state (queries.parquet is already written): the grid and the decisions."""

    grid: pl.DataFrame
    decided: Decided

    @property
    def best(self) -> str | None:
        return self.decided.verdicts.best


class Sweep:
    """One run: evaluates settings through a backend into a resumable state, then scores what it found."""

    def __init__(self, inputs: Inputs, backend: Backend, run_dir: Path, run_id: str, progress: Progress,
                 data_values: dict[str, list[float]] | None = None):
        """`data_values`: knob -> the values its sweep's quantiles took from the data (`rqsweep.search.space.resolve`)."""
        self.inputs, self.backend, self.run_dir, self.run_id = inputs, backend, run_dir, run_id
        self.data_values = data_values
        self.config, self.golden = inputs.config, inputs.golden
        self.state = RunState.of(run_dir)
        self.stamp = Stamp.of(run_id, inputs)
        self.progress = progress
        self.baseline_id = self.config.baseline.id
        self.query_ids = [q.id for q in self.golden.queries]
        self._slice_of = {q.id: q.slice for q in self.golden.queries}
        self._grades = {q.id: q.grades for q in self.golden.queries} if self.golden.graded else None
        self._baseline_rows: pl.DataFrame | None = None
        self._default_search: dict[str, list[RankedHit] | str] | None = None
        self.searching = 0.0  # seconds inside the backend's evaluate: the searches alone
        self._golden_table = golden_table(self.golden)
        # A new run scores each batch as it is evaluated and writes its queries.parquet rows then (`stream`); the
        # end uses them when the state is still just those batches' parts.
        self._queries: ParquetGroups | None = None
        self._streamed: list[Path] = []
        self._scores = self._accumulator(spreads=True)

    def _accumulator(self, *, spreads: bool) -> Accumulator:
        return Accumulator(self.config, self._golden_table, self.golden.slices, self.inputs.metrics, spreads=spreads)

    def evaluate(self, settings: list[Knobs]) -> pl.DataFrame:
        """Evaluate and record the settings not finished yet; returns the rows just evaluated."""
        finished = self.state.finished()
        todo = list({s.id: s for s in settings if s.id not in finished}.values())
        if not todo:
            return pl.DataFrame(schema=OUTCOME_SCHEMA)
        started = time.monotonic()
        rows = self.chosen_on(self.backend.evaluate(todo))
        self.searching += time.monotonic() - started
        part = self.state.record(rows)
        if self._queries is not None and part is not None:
            for table in self.scored_parts(self.state.as_recorded(rows), self._scores):
                self._queries.add(table)
            self._streamed.append(part)
        return rows

    def holdout_figures(self, verdict: Verdict, run_dir: Path) -> dict | None:
        """run.json's `holdout`: the verdict's setting and routing table read once on the locked holdout, searched
        now (`rqsweep.decide.holdout`); None without one."""
        holdout = self.inputs.holdout
        if holdout is None:
            return None
        routes = verdict.routes or {}
        settings = [Knobs.from_id(s) for s in dict.fromkeys([self.baseline_id, verdict.setting, *routes.values()])]
        rows = self.backend.evaluate(settings).filter(pl.col("query_id").is_in([q.id for q in holdout.queries]))
        key = key_of(holdout)
        return figures(rows, holdout, self.baseline_id, verdict.setting, routes, self.config.objective.metric,
                       self.config.relevance_level, key, self.config.holdout, reads(run_dir, key))

    def chosen_on(self, rows: pl.DataFrame) -> pl.DataFrame:
        """The backend's rows of the queries a run chooses on: a locked holdout's are dropped before anything sees
        them (`rqsweep.decide.holdout`)."""
        return rows if self.inputs.holdout is None else rows.filter(pl.col("query_id").is_in(self.query_ids))

    def scored_parts(self, rows: pl.DataFrame, into: Accumulator) -> Iterator[pl.DataFrame]:
        """Some settings' rows (every query of each) as queries.parquet's rows, each part added `into` the run's
        end's accumulator, a row group of whole settings at a time: a batch of a million rows is never scored,
        joined and turned to Arrow at once (0.6 GB)."""
        for frame in whole_settings(rows, QUERY_ROWS_PER_GROUP):
            # As a part read back holds them: a Parquet round trip drops polars' sorted flags, and a column flagged
            # sorted takes group-by means down another summation order (last bits), so a resume adds up the same.
            scored = self.scored(pl.from_arrow(frame.to_arrow()))
            table = query_table(scored, self._golden_table, self.inputs.metrics, self.stamp)
            into.add(scored, table)
            yield table

    def stream(self, metadata: dict[str, str]) -> None:
        """Write queries.parquet as the settings are evaluated, when a grid run starts with nothing recorded. (An
        optimise run evaluates a setting at a time: scoring each alone would cost more than its end's pass.)"""
        if not self.state.settings() and self.config.sweep.strategy == "grid":
            self._queries = open_queries(self.run_dir, metadata)

    def abandon_stream(self) -> None:
        if self._queries is not None:
            self._queries.abandon()

    def rows_of(self, settings: list[Knobs]) -> pl.DataFrame:
        """Per-query rows of these settings, evaluating those not finished yet."""
        fresh = self.evaluate(settings)
        wanted = {s.id for s in settings}
        if set(fresh["setting_id"].unique().to_list()) == wanted:
            return fresh
        return self.state.rows_of(wanted)

    def baseline_rows(self) -> pl.DataFrame:
        if self._baseline_rows is None:
            self._baseline_rows = self.rows_of([self.config.baseline])
        return self._baseline_rows

    def scored(self, rows: pl.DataFrame) -> pl.DataFrame:
        """Backend rows with their slice, first relevant rank and every metric's per-query value."""
        return metrics.score_queries(rows, self.inputs.metrics, self._grades, self.config.relevance_level).with_columns(
            pl.col("query_id").replace_strict(self._slice_of, return_dtype=pl.String).alias("slice"))

    def score(self, settings: list[Knobs]):
        """Objective and constraint values per setting, for Optuna."""
        others = [s for s in settings if s.id != self.baseline_id]
        rows = pl.concat([self.baseline_rows(), *([self.rows_of(others)] if others else [])])
        names = self.inputs.metrics
        means = SliceMeans.from_frame(metrics.slice_metrics(self.scored(rows), names),
                                      rows["setting_id"].unique(maintain_order=True).to_list(), self.golden.slices,
                                      names)
        keys, values = constraint_values(means, self.baseline_id, self.config.constraints, self.golden.slices)
        obj = self.config.objective
        out = []
        for s in settings:
            at = means.settings.index(s.id)
            checked = [(k, float(v)) for k, v in zip(keys, values[at]) if not np.isnan(v)]
            out.append((means.value(s.id, obj.slice, obj.metric) or 0.0,
                        [*checked, ("complete", float(means.errors[at]))]))
        return out

    def run(self, storage: StudyStorage | None = None) -> None:
        """The sweep; an optimise run's study in `storage` (opened already), else in the run folder's journal."""
        sweep = self.config.sweep
        self.baseline_rows()
        if sweep.strategy == "grid":
            settings = grid(sweep, self.config.baseline, self.data_values)
            self.progress.total = len(settings)
            run_grid(settings, self.state.finished(), self.evaluate, self.progress, self.backend.checkpoint_every)
        else:
            self.optimise(storage or StudyStorage(sweep.storage, self.state.folder), coordinator=True)

    def optimise(self, storage: StudyStorage, *, coordinator: bool) -> None:
        """Run (or join, as a worker) the study; with a shared storage, each setting's outcome rides on its trial
        (`rqsweep.search.trials`) and the coordinator records what every worker evaluated."""
        obj = self.config.objective
        identity = StudyIdentity(study_name(self.config.name, self.run_id), f"{obj.metric}[{obj.slice}]", {
            "run_id": self.run_id, "config": self.config.name, "config_sha256": self.config.sha256,
            "golden_sha256": self.golden.sha256, "inputs_sha256": self.inputs.sha256})
        self.progress.total = self.config.sweep.n_trials
        annotate = (lambda knobs: outcome_attrs(self.state.rows_of([knobs.id]), self.query_ids)) if storage.shared \
            else None
        with storage.answering("" if coordinator else
                               "start the worker again once it answers: the study asks its unfinished trials again"):
            study = run_optimize(self.config.sweep, self.config.baseline, self.score, storage, identity,
                                 self.progress, self.progress.log, annotate, coordinator=coordinator)
            if storage.shared and coordinator:
                for rows in gathered(study, self.state.finished(), self.query_ids):
                    self.state.record(rows)

    def default_search(self) -> dict[str, list[RankedHit] | str]:
        """The baseline's ranked lists, searched once: the default search whose features routing by rule reads
        (`rqsweep.decide.query_features`), and the baseline's half of hits.parquet."""
        if self._default_search is None:
            self._default_search = self.backend.ranked(self.config.baseline, self.query_ids)
        return self._default_search

    def finish(self, metadata: dict[str, str]) -> Finished:
        """Score the state, decide and build the grid. A new run's evaluation scored each batch already (`stream`)
        and wrote queries.parquet as it went; otherwise the state is read back a part at a time, scored and
        streamed to queries.parquet, gathering the same (no table of every (setting, query) is held)."""
        n_settings = len(self.state.settings())
        # A long phase at 100,000 settings x 1,000 queries: it shows its own progress.
        scoring = self.progress.phase(n_settings, f"{self.config.name} scoring", "settings")
        if self._queries is not None and self.state.made_of(self._streamed):
            queries_path, scores = self._queries.close(), self._scores
            scoring(n_settings)
        else:
            self.abandon_stream()
            scores = self._accumulator(spreads=False)  # the report reads the noise figures from the folder

            def query_chunks() -> Iterator[pl.DataFrame]:
                for rows in self.state.chunks():
                    for table in self.scored_parts(rows, scores):
                        yield table
                        scoring(table["setting_id"].n_unique())

            queries_path = write_queries(self.run_dir, query_chunks(), metadata)
        decided = scores.decide(
            lambda ids: pl.scan_parquet(queries_path).filter(pl.col("setting_id").is_in(ids)).collect(),
            features_table({q.id: q.query for q in self.golden.queries}, self.default_search()))
        grid_frame = grid_table(decided.slice_rows, decided.settings, decided.verdicts, self.baseline_id,
                                self.inputs.metrics, self.stamp)
        return Finished(grid_frame, decided)
