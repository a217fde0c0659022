"""The sweep job, wiring only: config -> golden set and corpus -> backend -> metrics -> strategy and constraints ->
the run folder and the report."""

from __future__ import annotations

import contextlib
import signal
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np
import polars as pl

from rqsweep import metrics
from rqsweep.backends import OUTCOME_SCHEMA, Backend, build_backend
from rqsweep.decide.constraints import SliceMeans, choose_best, constraint_values
from rqsweep.embedder_sweep import run_embedders
from rqsweep.config import JobConfig
from rqsweep.errors import BackendError, BackendRefused, Interrupted, NoFeasibleSetting, OutputError, SearchesFailed
from rqsweep.files import ParquetGroups
from rqsweep.golden import OVERALL
from rqsweep.inputs import Inputs, load_inputs, with_study
from rqsweep.knobs import Knobs
from rqsweep.decide.noise import SliceNoise, baseline_values, noise_of, setting_spreads
from rqsweep.progress import Progress
from rqsweep.report import write_report
from rqsweep.report.document import Made
from rqsweep.report.knob_ranges import knob_ranges
from rqsweep.report.label_health import Tally, run_label_health, tally
from rqsweep.report.routing import summary_lines as routing_lines
from rqsweep.report.summary import summarise
from rqsweep.decide.routing import Routing, route
from rqsweep.runfolder import QUERIES, RunRecord, RunState, holding, mark, run_folder_of
from rqsweep.runfolder.folder import remove_if_bare
from rqsweep.runfolder.record import setting_summary
from rqsweep.runfolder.state import whole_settings
from rqsweep.runfolder.tables import (QUERY_ROWS_PER_GROUP, Stamp, golden_table, grid_table, hits_table, knobs_of,
                                      open_queries, query_table, setting_knobs, table_metadata, write_grid, write_hits,
                                      write_queries, write_label_health, write_ranked, write_routing, write_settings)
from rqsweep.search.space import grid, resolve
from rqsweep.search.strategy import BUDGET, StudyIdentity, run_grid, run_optimize
from rqsweep.search.study import StudyStorage, study_name
from rqsweep.search.trials import gathered, joined_study, outcome_attrs
from rqsweep.decide.cross_validation import CrossValidation, FoldSums, PartSums, cross_validate, summary_lines
from rqsweep.decide.holdout import figures, key_of, lines as holdout_lines, reads
from rqsweep.decide.verdict import Verdict, decide, in_sample_rows, numeric_range


@dataclass
class RunResult:
    run_dir: Path
    grid: pl.DataFrame
    best: str | None
    baseline: str
    summary: str


@dataclass
class Finished:
    """What a run's end made of its state (queries.parquet is already written): the grid, the chosen setting,
    and how many settings each constraint rejected."""

    grid: pl.DataFrame
    settings: pl.DataFrame  # one row per setting: setting_id and its knobs, in evaluation order
    best: str | None
    rejected: dict[str, int]
    validation: CrossValidation | None  # the held-out estimate of the gain, when `validation:` asks for one
    routing: Routing | None  # one setting per slice, validated by nested cross-validation (with `validation:`)
    kept: Routing | None  # the same with the baseline as every fold's global setting (`verdict`)
    tallies: list[Tally]  # label health's, of every setting's rows
    noise: list[SliceNoise] | None  # the report's noise figures, when the evaluation made them (`Sweep.stream`)


def _owned(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with string columns holding bytes of their own. Polars' strings are views: a group-by's or a
    unique's keys point into the buffers of the rows they came from, so the few rows a run keeps of each batch
    held every batch's bytes (0.6 GB of them at 100,000 settings x 165 queries). A concatenation writes new ones."""
    return frame.with_columns(pl.col(pl.String) + "")


@dataclass(frozen=True)
class Scores:
    """What the run's end needs of some settings' per-query rows, besides queries.parquet's rows themselves: their
    slice means, knobs, fold sums (with `validation:`), label health's tally and the noise figures' spreads (made
    as they are evaluated, once the baseline's values are known)."""

    slices: pl.DataFrame
    knobs: pl.DataFrame
    folds: PartSums | None
    tally: Tally
    spreads: pl.DataFrame | None = None


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
        self.searching = 0.0  # seconds inside the backend's evaluate: the searches alone
        self._golden_table = golden_table(self.golden)
        validation = self.config.validation
        self._folds = None if validation is None else FoldSums(self._golden_table, self.golden.slices,
                                                               inputs.metrics, validation, 0)
        # A new run scores each batch as it is evaluated and writes its queries.parquet rows then (`stream`); the
        # end uses them when the state is still just those batches' parts.
        self._queries: ParquetGroups | None = None
        self._streamed: list[Path] = []
        self._scores: list[Scores] = []
        self._noise_base: pl.DataFrame | None = None  # the baseline's values, from its batch (the first)

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
            names = self.inputs.metrics
            for table, scores in self.scored_parts(self.state.as_recorded(rows)):
                self._queries.add(table)
                if self._noise_base is None and (table["setting_id"] == self.baseline_id).any():
                    self._noise_base = _owned(baseline_values(table.lazy(), self.baseline_id, names))
                if self._noise_base is not None:
                    scores = replace(scores, spreads=_owned(setting_spreads(table.lazy(), self._noise_base,
                                                                            self.baseline_id, names)))
                self._scores.append(scores)
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

    def scored_parts(self, rows: pl.DataFrame) -> Iterator[tuple[pl.DataFrame, Scores]]:
        """Some settings' rows (every query of each) as queries.parquet's rows, and what the end needs of them, a row
        group of whole settings at a time: a batch of a million rows is never scored, joined and turned to Arrow at
        once (0.6 GB)."""
        for frame in whole_settings(rows, QUERY_ROWS_PER_GROUP):
            # As a part read back holds them: a Parquet round trip drops polars' sorted flags, and a column flagged
            # sorted takes group-by means down another summation order (last bits), so a resume adds up the same.
            frame = pl.from_arrow(frame.to_arrow())
            scored = self.scored(frame)
            table = query_table(scored, self._golden_table, self.inputs.metrics, self.stamp)
            held = tally(table)
            yield table, Scores(_owned(metrics.slice_metrics(scored, self.inputs.metrics)),
                                _owned(setting_knobs(frame)), None if self._folds is None else self._folds.part(scored),
                                Tally(_owned(held.counts), _owned(held.ranks), _owned(held.settings)))

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

    def finish(self, metadata: dict[str, str]) -> Finished:
        """Score the state, choose and build the grid. A new run's evaluation scored each batch already (`stream`)
        and wrote queries.parquet as it went; otherwise the state is read back a part at a time, scored and
        streamed to queries.parquet, gathering the same (no table of every (setting, query) is held)."""
        names, obj = self.inputs.metrics, self.config.objective
        n_settings = len(self.state.settings())
        # A long phase at 100,000 settings x 1,000 queries: it shows its own progress.
        scoring = self.progress.phase(n_settings, f"{self.config.name} scoring", "settings")
        noise = None
        if self._queries is not None and self.state.made_of(self._streamed):
            queries_path, parts = self._queries.close(), self._scores
            self._scores = []  # kept by the sweep past its end, they would sit under the report (0.1 GB)
            if all(p.spreads is not None for p in parts):
                noise = noise_of(self._noise_base, pl.concat([p.spreads for p in parts]), names)
            scoring(n_settings)
        else:
            self.abandon_stream()
            parts = []

            def query_chunks() -> Iterator[pl.DataFrame]:
                for rows in self.state.chunks():
                    for table, scores in self.scored_parts(rows):
                        parts.append(scores)
                        yield table
                        scoring(scores.knobs.height)

            queries_path = write_queries(self.run_dir, query_chunks(), metadata)
        per_slice, knobs = [p.slices for p in parts], [p.knobs for p in parts]
        folds = None if self.config.validation is None else FoldSums(self._golden_table, self.golden.slices, names,
                                                                     self.config.validation, n_settings)
        if folds is not None:
            for p in parts:
                folds.extend(p.folds)
        slice_rows, settings = pl.concat(per_slice), pl.concat(knobs)
        means = SliceMeans.from_frame(slice_rows, settings["setting_id"].to_list(), self.golden.slices, names)
        verdicts = choose_best(means, self.baseline_id, (obj.metric, obj.slice), self.config.constraints,
                               self.golden.slices)
        grid_frame = grid_table(slice_rows, settings, verdicts, self.baseline_id, names, self.stamp)
        def rows_of(ids: list[str]) -> pl.DataFrame:
            return pl.scan_parquet(queries_path).filter(pl.col("setting_id").is_in(ids)).collect()

        objective = (obj.metric, obj.slice)
        cv = None if folds is None else cross_validate(folds, rows_of, self.baseline_id, objective,
                                                       self.config.constraints)
        routes, kept = ((None, None) if folds is None else
                        (route(folds, rows_of, self.baseline_id, objective, self.config.constraints, fixed)
                         for fixed in (None, self.baseline_id)))
        return Finished(grid_frame, settings, verdicts.best, verdicts.rejected(), cv, routes, kept,
                        [p.tally for p in parts], noise)


def run(config_path: Path, *, workers: int | None = None, resume: Path | None = None, quiet: bool = False,
        output_dir: Path | None = None, now: datetime | None = None, n_trials: int | None = None,
        storage: str | None = None) -> RunResult:
    """Run (or resume) a sweep end to end and write its results; raises NoFeasibleSetting after writing.

    The run holds its folder's lock throughout: a second process on the folder gets an InputError. Ended
    early, it marks its run.json "interrupted" (KeyboardInterrupt, or `Interrupted` from a signal handler)
    or "failed", keeps its finished settings, and raises an interrupt again as `Interrupted` naming the folder.
    `n_trials` and `storage` override the sweep's `optimize` section (neither is part of the inputs hash, so
    `--resume RUN_DIR --n-trials N` grows a finished study).
    """
    started = time.monotonic()
    progress = Progress(0, "rqsweep", quiet=quiet)
    inputs = with_study(load_inputs(config_path, progress.log), n_trials, storage)
    if len(getattr(inputs.config.backend, "embedders", ())) > 1:
        return RunResult(*run_embedders(inputs, run_inputs, progress, workers=workers, resume=resume,
                                        output_dir=output_dir, now=now))
    return run_inputs(inputs, progress, started, workers=workers, resume=resume, output_dir=output_dir, now=now)


def run_inputs(inputs: Inputs, progress: Progress, started: float, *, workers: int | None = None,
               resume: Path | None = None, output_dir: Path | None = None, now: datetime | None = None,
               folder: tuple[str, Path] | None = None) -> RunResult:
    """`run` on inputs already read; `folder`: the (run id, folder) of a new run, made by the caller (an embedder
    sweep's run of one embedder), instead of a new one under the output folder."""
    config = inputs.config
    progress.label = config.name
    now = now or datetime.now(timezone.utc)
    if folder is not None:
        run_dir, record = folder[1], RunRecord.begin(inputs, *folder, now)
    else:
        run_dir, record = run_folder_of(inputs, resume, (output_dir or config.output_dir) / config.name, now)
    with holding(run_dir):
        try:
            return _run_in(run_dir, inputs, record, progress, started, resumed=resume is not None, workers=workers)
        except BaseException as exc:
            interrupt = _interrupt_behind(exc)
            marked = True
            with contextlib.suppress(OutputError):  # a full or read-only disk refuses this too: run.json stays
                marked = mark(run_dir, "failed" if interrupt is None else "interrupted")
            if not marked:
                raise  # a new run that ended before it began leaves no folder
            if interrupt is not None:
                raise Interrupted(getattr(interrupt, "signal_number", signal.SIGINT), run_dir, config.path) from None
            kind, until = ((BackendError, "the backend answers again") if isinstance(exc, BackendError) else
                           (OutputError, "the folder can be written again (space freed, or made writable)"))
            if isinstance(exc, BackendRefused):
                raise BackendRefused(f"{exc}; finished work is kept in {run_dir}; this is no passing outage: --resume "
                                     "meets the same answer until what it names is fixed") from None
            if isinstance(exc, (BackendError, OutputError)) and not isinstance(exc, SearchesFailed):
                raise kind(f"{exc}; finished work is kept in {run_dir}; once {until}, "
                           f"continue with: rqsweep {config.path} --resume {run_dir}") from None
            raise


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The interrupt that ended the run: `exc` itself, or one that a library's cleanup turned into another error
    (Optuna's journal lock, interrupted while releasing, raises FileNotFoundError)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None


def _run_in(run_dir: Path, inputs: Inputs, record: RunRecord, progress: Progress, started: float, *, resumed: bool,
            workers: int | None) -> RunResult:
    """The run in its locked folder; `record` is its run.json as it starts."""
    config, run_id = inputs.config, record.run_id
    for w in inputs.golden.warnings:
        progress.log(f"warning: {w}")
    record.write(run_dir)  # before the backend: a seed it starts can be resumed
    try:
        # A study's database first: one that cannot be reached stops the run before the index is built.
        storage = StudyStorage(config.sweep.storage, None) if config.sweep.storage else None
        backend = build_backend(config, inputs.searched, inputs.corpus, log=progress.log, run_dir=run_dir,
                                workers=config.workers if workers is None else replace(config.workers, n=workers),
                                advance=progress.part, phase=progress.phase)
    except BaseException as exc:
        # Nothing was evaluated: leave no half-made run folder behind, unless it records writes to a server or
        # the candidates extracted so far.
        if resumed or not remove_if_bare(run_dir):
            resume = "" if isinstance(exc, BackendRefused) else f": continue with --resume {run_dir}"
            progress.log(f"run folder kept (it records the start's work: writes to the server, or candidates "
                         f"extracted){resume}")
        raise
    if backend.warnings:  # the report reads them from run.json
        record = replace(record, warnings=[*(record.warnings or []), *backend.warnings])
        record.write(run_dir)
    if config.sweep.data_knobs() and record.data_values is None:  # a resumed run sweeps the values it started with
        try:
            record = replace(record, data_values=resolve(config.sweep, backend))
        except BaseException:
            backend.close()
            raise
        record.write(run_dir)
    for knob, values in (record.data_values or {}).items():
        progress.log(f"{knob} from the data: {', '.join(f'{v:g}' for v in values)}")
    prepared = time.monotonic()
    sweep = Sweep(inputs, backend, run_dir, run_id, progress, record.data_values)
    metadata = table_metadata(inputs, backend.profile)
    try:
        sweep.stream(metadata)
        sweep.run(storage)
        evaluated = time.monotonic()
        done = sweep.finish(metadata)
        chosen = done.best or sweep.baseline_id
        label, metric = metrics.get(config.objective.metric).label, config.objective.metric
        verdict = decide(done.best, sweep.baseline_id, done.routing, done.kept,
                         None if done.routing is not None else
                         in_sample_rows(run_dir / QUERIES, done.best, sweep.baseline_id, metric), metric, label)
        # The ranked lists behind the two settings a reader compares: 2 x |golden| more searches.
        named = {sid: knobs_of(done.settings, sid) for sid in dict.fromkeys([sweep.baseline_id, chosen])}
        extremes = backend.numeric_extremes(named[verdict.setting])
        decision = verdict.as_json(label, numeric_range(
            None if extremes is None else tuple(map(sweep.chosen_on, extremes)), sweep.scored,
            done.grid.filter(pl.col("setting_id") == verdict.setting), inputs.metrics))
        holdout = sweep.holdout_figures(verdict, run_dir)
        ranked = {sid: backend.ranked(knobs, sweep.query_ids) for sid, knobs in named.items()}
        if config.ranked == "all":  # |golden| more searches per setting, one setting's lists in memory at a time
            write_ranked(run_dir, (
                hits_table({row["setting_id"]: backend.ranked(Knobs.from_columns(row), sweep.query_ids)},
                           sweep.baseline_id, chosen,
                           inputs.golden, sweep.stamp)
                for row in done.settings.iter_rows(named=True)), metadata)
    finally:
        sweep.abandon_stream()  # a no-op once queries.parquet is written
        backend.close()
    write_hits(run_dir, hits_table(ranked, sweep.baseline_id, chosen, inputs.golden, sweep.stamp), metadata)
    write_grid(run_dir, done.grid, metadata, None if done.validation is None else done.validation.as_json())
    write_settings(run_dir, done.grid, (config.objective.metric, config.objective.slice), inputs.metrics, metadata)
    held_out = [*decision["lines"], *([] if holdout is None else holdout_lines(holdout, label)),
                *([] if done.validation is None else summary_lines(done.validation, label))]
    if verdict.applied is not None:
        routing = {**verdict.applied.record(run_id), "decision": decision}
        write_routing(run_dir, routing)
        held_out += routing_lines(routing, label)
    ranges = knob_ranges(run_dir, done.grid, done.best)
    summary = summarise(done.grid, done.best, sweep.baseline_id, (config.objective.metric, config.objective.slice),
                        inputs.metrics, done.rejected, named, held_out,
                        ranges.warnings())
    scored = time.monotonic()
    record = replace(record, decision=decision, holdout=holdout)
    record.write(run_dir)
    write_label_health(run_dir, run_label_health(run_dir, sweep.baseline_id, chosen, done.tallies), metadata)
    write_report(run_dir, finished=False, phase=progress.phase, made=Made(done.noise, ranges))
    sweep.state.discard_parts()  # queries.parquet holds every row now, and stands in for them on --resume
    # The marker that the folder is finished, written after every other file: readers check it.
    record.finish(
        server_profile=backend.profile, backend=backend.name, strategy=config.sweep.strategy,
        sweep=config.sweep.source, metrics=list(inputs.metrics), settings=done.settings.height,
        infeasible=done.grid.filter((pl.col("slice") == OVERALL) & ~pl.col("feasible")).height,
        objective={"metric": config.objective.metric, "slice": config.objective.slice},
        timings_seconds={"prepare": round(prepared - started, 3), "evaluate": round(evaluated - prepared, 3),
                         "search": round(sweep.searching, 3), "score": round(scored - evaluated, 3),
                         "report": round(time.monotonic() - scored, 3), "total": round(time.monotonic() - started, 3)},
        best=None if done.best is None else setting_summary(done.grid, named[done.best], inputs.metrics),
        baseline=setting_summary(done.grid, config.baseline, inputs.metrics),
        validation=None if done.validation is None else done.validation.as_json(),
    ).write(run_dir)
    outcome = RunResult(run_dir, done.grid, done.best, sweep.baseline_id, summary)
    failed = _failed_searches(run_dir, done.grid, config)
    if failed:
        raise SearchesFailed(f"{summary}\n{failed}", run_dir)
    if done.best is None:
        raise NoFeasibleSetting(summary + f"\nResults in {run_dir}", run_dir)
    return outcome


def _failed_searches(run_dir: Path, grid: pl.DataFrame, config: JobConfig) -> str | None:
    """What failed for good in a finished run, why (the commonest errors, with a query of each) and how to retry
    it; None when every search answered."""
    overall = grid.filter(pl.col("slice") == OVERALL)
    n = int(overall["errors"].sum())
    if n == 0:
        return None
    reasons = (pl.scan_parquet(run_dir / QUERIES).filter(pl.col("error").is_not_null())
               .group_by("error").agg(pl.len().alias("n"), pl.col("query").first(), pl.col("query_id").first())
               .sort("n", descending=True).head(3).collect())
    lines = [f"{n} searches failed for good, in {overall.filter(pl.col('errors') > 0).height} of {overall.height} "
             "settings (they count as incomplete):"]
    lines += [f"  {r['n']} x {r['error']} (e.g. query {r['query']!r}, id {r['query_id']})"
              for r in reasons.iter_rows(named=True)]
    lines.append(f"once the backend answers again, retry them with: rqsweep {config.path} --resume {run_dir}")
    return "\n".join(lines)


def work(config_path: Path, storage_url: str, study: str, *, workers: int | None = None, quiet: bool = False) -> int:
    """Join a running study as a worker (any machine with the same inputs); returns the settings it evaluated.

    Its searches reach the coordinator through the study: each setting's positions ride on its trial.
    """
    inputs = with_study(load_inputs(config_path), None, storage_url)
    storage = StudyStorage(storage_url, None)
    progress = Progress(0, f"{inputs.config.name} worker", quiet=quiet)
    with storage.answering():
        attrs = joined_study(storage, study, inputs.sha256, config_path, log=progress.log)
    inputs = with_study(inputs, attrs.get(BUDGET), None)  # the coordinator's budget, which it spends
    with tempfile.TemporaryDirectory(prefix="rqsweep-worker-") as tmp:
        backend = build_backend(inputs.config, inputs.searched, inputs.corpus, log=progress.log, run_dir=Path(tmp),
                                workers=inputs.config.workers if workers is None
                                else replace(inputs.config.workers, n=workers))
        try:
            sweep = Sweep(inputs, backend, Path(tmp), attrs["run_id"], progress)
            sweep.optimise(storage, coordinator=False)
            return len(sweep.state.finished() - {sweep.baseline_id})
        finally:
            backend.close()


def collect(run_dir: Path, storage_url: str | None = None, *, quiet: bool = False) -> RunResult:
    """Write a run's results from its study (what every worker evaluated), searching no further."""
    record = RunRecord.read(run_dir)
    # n_trials 0: the study's budget is already spent or abandoned; only gathering and writing remain.
    return run(run_dir / record.config_path, resume=run_dir, quiet=quiet, n_trials=0,
               storage=storage_url or record.storage)
