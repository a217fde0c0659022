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

import polars as pl

from rqsweep import metrics
from rqsweep.backends import build_backend
from rqsweep.config import JobConfig
from rqsweep.decide.cross_validation import summary_lines
from rqsweep.decide.holdout import lines as holdout_lines
from rqsweep.decide.leaks import leaks
from rqsweep.decide.verdict import decide, in_sample_rows, numeric_range
from rqsweep.embedder_sweep import run_embedders
from rqsweep.errors import BackendError, BackendRefused, Interrupted, NoFeasibleSetting, OutputError, SearchesFailed
from rqsweep.golden import OVERALL
from rqsweep.inputs import Inputs, load_inputs, with_study
from rqsweep.knobs import Knobs
from rqsweep.progress import Progress
from rqsweep.report import write_report
from rqsweep.report.document import Made
from rqsweep.report.knob_ranges import knob_ranges
from rqsweep.report.label_health import run_label_health
from rqsweep.report.routing import summary_lines as routing_lines
from rqsweep.report.summary import summarise
from rqsweep.runfolder import QUERIES, RunRecord, holding, mark, run_folder_of
from rqsweep.runfolder.folder import remove_if_bare
from rqsweep.runfolder.record import setting_summary
from rqsweep.runfolder.tables import (hits_table, knobs_of, table_metadata, write_grid, write_hits, write_judgments,
                                      write_label_health, write_ranked, write_routing, write_settings)
from rqsweep.search.space import resolve
from rqsweep.search.strategy import BUDGET
from rqsweep.search.study import StudyStorage
from rqsweep.search.trials import joined_study
from rqsweep.sweep import Sweep


@dataclass
class RunResult:
    run_dir: Path
    grid: pl.DataFrame
    best: str | None
    baseline: str
    summary: str


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
        decided = done.decided
        chosen = done.best or sweep.baseline_id
        label, metric = metrics.get(config.objective.metric).label, config.objective.metric
        verdict = decide(done.best, sweep.baseline_id, decided.routing, decided.kept,
                         None if decided.routing is not None else
                         in_sample_rows(run_dir / QUERIES, done.best, sweep.baseline_id, metric), metric, label)
        # The ranked lists behind the two settings a reader compares: 2 x |golden| more searches.
        named = {sid: knobs_of(decided.settings, sid) for sid in dict.fromkeys([sweep.baseline_id, chosen])}
        extremes = backend.numeric_extremes(named[verdict.setting])
        decision = verdict.as_json(label, numeric_range(
            None if extremes is None else tuple(map(sweep.chosen_on, extremes)), sweep.scored,
            done.grid.filter(pl.col("setting_id") == verdict.setting), inputs.metrics))
        holdout = sweep.holdout_figures(verdict, run_dir)
        ranked = {sid: sweep.default_search() if sid == sweep.baseline_id else backend.ranked(knobs, sweep.query_ids)
                  for sid, knobs in named.items()}
        if config.ranked == "all":  # |golden| more searches per setting, one setting's lists in memory at a time
            write_ranked(run_dir, (
                hits_table({row["setting_id"]: backend.ranked(Knobs.from_columns(row), sweep.query_ids)},
                           sweep.baseline_id, chosen,
                           inputs.golden, sweep.stamp)
                for row in decided.settings.iter_rows(named=True)), metadata)
    finally:
        sweep.abandon_stream()  # a no-op once queries.parquet is written
        backend.close()
    write_hits(run_dir, hits_table(ranked, sweep.baseline_id, chosen, inputs.golden, sweep.stamp), metadata)
    write_judgments(run_dir, inputs.golden, config.relative, metadata)
    write_grid(run_dir, done.grid, metadata, None if decided.validation is None else decided.validation.as_json())
    write_settings(run_dir, done.grid, (config.objective.metric, config.objective.slice), inputs.metrics, metadata)
    held_out = [*decision["lines"], *([] if holdout is None else holdout_lines(holdout, label)),
                *([] if decided.validation is None else summary_lines(decided.validation, label))]
    if verdict.applied is not None:
        routing = {**verdict.applied.record(run_id), "decision": decision}
        write_routing(run_dir, routing)
        held_out += routing_lines(routing, label, run_dir)
    ranges = knob_ranges(run_dir, done.grid, done.best)
    summary = summarise(done.grid, done.best, sweep.baseline_id, (config.objective.metric, config.objective.slice),
                        inputs.metrics, decided.verdicts.rejected(), named, held_out,
                        ranges.warnings())
    scored = time.monotonic()
    record = replace(record, decision=decision, holdout=holdout)
    record.write(run_dir)
    write_label_health(run_dir, run_label_health(run_dir, sweep.baseline_id, chosen, decided.tallies,
                                                 leaks(inputs.golden.queries, inputs.corpus)), metadata)
    write_report(run_dir, finished=False, phase=progress.phase, made=Made(decided.noise, ranges))
    sweep.state.discard_parts()  # queries.parquet holds every row now, and stands in for them on --resume
    # The marker that the folder is finished, written after every other file: readers check it.
    record.finish(
        server_profile=backend.profile, backend=backend.name, strategy=config.sweep.strategy,
        sweep=config.sweep.source, metrics=list(inputs.metrics), settings=decided.settings.height,
        infeasible=done.grid.filter((pl.col("slice") == OVERALL) & ~pl.col("feasible")).height,
        objective={"metric": config.objective.metric, "slice": config.objective.slice},
        timings_seconds={"prepare": round(prepared - started, 3), "evaluate": round(evaluated - prepared, 3),
                         "search": round(sweep.searching, 3), "score": round(scored - evaluated, 3),
                         "report": round(time.monotonic() - scored, 3), "total": round(time.monotonic() - started, 3)},
        best=None if done.best is None else setting_summary(done.grid, named[done.best], inputs.metrics),
        baseline=setting_summary(done.grid, config.baseline, inputs.metrics),
        validation=None if decided.validation is None else decided.validation.as_json(),
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
