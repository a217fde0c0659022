"""The sweep job: config -> golden set and corpus -> backend -> strategy -> grid, per-query table, run.json."""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import polars as pl

from rqsweep import __version__
from rqsweep.backends.base import QUERY_SCHEMA, Backend
from rqsweep.config import METRICS, EmbeddedConfig, JobConfig, Objective, load_config
from rqsweep.constraints import constraint_values, violations
from rqsweep.corpus import Corpus, load_corpus
from rqsweep.errors import InputError, NoFeasibleSetting
from rqsweep.golden import OVERALL, GoldenSet, load_golden
from rqsweep.knobs import Knobs
from rqsweep.metrics import METRIC_DEFINITIONS, slice_metrics
from rqsweep.progress import Progress
from rqsweep.results import LocalRunState, load_run_json, new_run_id, redact, write_json, write_parquet
from rqsweep.space import grid, parse_setting_id, setting_id
from rqsweep.strategy import run_grid, run_optimize



@dataclass
class Inputs:
    config: JobConfig
    golden: GoldenSet
    corpus: Corpus
    corpus_sha256: str | None  # of the corpus file, when it is not inline in the golden set

    @property
    def sha256(self) -> str:
        """Everything a run's results depend on: config, sweep space (a named file too), corpus, golden set."""
        parts = (self.config.sha256, repr(self.config.sweep), self.corpus_sha256 or "", self.golden.sha256)
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def load_inputs(config_path: Path) -> Inputs:
    """Read and cross-check everything a run needs before any search is made."""
    config = load_config(config_path)
    corpus = load_corpus(config.corpus) if config.corpus else None
    golden = load_golden(config.golden, corpus)
    corpus_sha256 = hashlib.sha256(config.corpus.read_bytes()).hexdigest() if config.corpus else None
    slices = set(golden.slices) | {OVERALL, "*"}
    for i, c in enumerate(config.constraints):
        if c.slice not in slices:
            raise InputError(config.path, f"constraints[{i}].slice",
                             f"{c.slice!r}: no such slice in {golden.path.name} (slices: {', '.join(golden.slices)})")
    if config.objective.slice not in slices - {"*"}:
        raise InputError(config.path, "objective.slice", f"{config.objective.slice!r}: no such slice")
    return Inputs(config, golden, corpus or golden.corpus, corpus_sha256)


def build_backend(inputs: Inputs, workers: int, log: Callable[[str], None], run_dir: Path | None = None) -> Backend:
    from rqsweep.backends.embedded import EmbeddedBackend, build_embedder
    from rqsweep.config import HttpConfig
    from rqsweep.engine.index import Index

    cfg, golden, corpus = inputs.config, inputs.golden, inputs.corpus
    if isinstance(cfg.backend, HttpConfig):
        from rqsweep.backends.http import build_http_backend

        # The run folder keeps what seeding created (seed.json), so that --resume does not seed again.
        return build_http_backend(cfg, golden, corpus, run_dir, log)
    started = time.monotonic()
    index = Index.build(corpus, build_embedder(cfg.backend), cfg.backend.chunking, tie_order=cfg.backend.tie_order)
    backend = EmbeddedBackend(index, golden, cfg.limit, cfg.scope, workers)
    log(f"embedded index: {len(index.stores['document'].ids)} chunks, {len(index.stores['memory'].ids)} memories, "
        f"{len(golden.queries)} queries' candidates in {time.monotonic() - started:.1f}s")
    return backend


def _tables(metrics: pl.DataFrame) -> dict[str, dict[str, dict[str, float | None]]]:
    """setting_id -> slice -> metric -> value."""
    out: dict = {}
    for row in metrics.iter_rows(named=True):
        out.setdefault(row["setting_id"], {})[row["slice"]] = {m: row[m] for m in (*METRICS, "errors")}
    return out


@dataclass
class Outcome:
    run_dir: Path
    grid: pl.DataFrame
    best: str | None
    baseline: str
    summary: str


class Sweep:
    """One run: evaluates settings through a backend into a resumable state, then writes the results."""

    def __init__(self, inputs: Inputs, backend: Backend, run_dir: Path, run_id: str, progress: Progress):
        self.inputs, self.backend, self.run_dir, self.run_id = inputs, backend, run_dir, run_id
        self.config, self.golden = inputs.config, inputs.golden
        self.state = LocalRunState(run_dir / "state")
        self.progress = progress
        self.baseline_id = setting_id(self.config.baseline)
        self._baseline_table: dict | None = None

    def evaluate(self, settings: list[Knobs]) -> pl.DataFrame:
        """Evaluate and record the settings not finished yet; returns the rows just evaluated."""
        finished = self.state.finished()
        todo = list({setting_id(s): s for s in settings if setting_id(s) not in finished}.values())
        if not todo:
            return pl.DataFrame(schema=QUERY_SCHEMA)
        rows = self.backend.evaluate(todo)
        self.state.record(rows)
        return rows

    def rows_of(self, settings: list[Knobs]) -> pl.DataFrame:
        """Per-query rows of these settings, evaluating those not finished yet."""
        fresh = self.evaluate(settings)
        wanted = {setting_id(s) for s in settings}
        if set(fresh["setting_id"].unique().to_list()) == wanted:
            return fresh
        return self.state.rows().filter(pl.col("setting_id").is_in(wanted))

    def baseline_table(self) -> dict:
        if self._baseline_table is None:
            rows = self.rows_of([self.config.baseline])
            self._baseline_table = _tables(slice_metrics(rows))[self.baseline_id]
        return self._baseline_table

    def score(self, settings: list[Knobs]):
        """Objective and constraint values per setting, for Optuna."""
        tables = _tables(slice_metrics(self.rows_of(settings)))
        obj = self.config.objective
        out = []
        for s in settings:
            table = tables[setting_id(s)]
            values = [(k, v) for k, _, v in constraint_values(table, self.baseline_table(), self.config.constraints,
                                                              self.golden.slices)]
            values.append(("complete", float(table[OVERALL]["errors"])))
            out.append((table[obj.slice][obj.metric] or 0.0, values))
        return out

    def run(self) -> None:
        sweep = self.config.sweep
        self.baseline_table()
        if sweep.strategy == "grid":
            settings = grid(sweep, self.config.baseline)
            self.progress.total = len(settings)
            run_grid(settings, self.state.finished(), self.evaluate, self.progress, self.backend.checkpoint_every)
        else:
            self.progress.total = sweep.n_trials
            run_optimize(sweep, self.config.baseline, self.score, self.run_dir / "state" / "optuna.journal",
                         self.progress)

    def finish(self) -> tuple[pl.DataFrame, pl.DataFrame, str | None, dict[str, int]]:
        """The grid and per-query tables, the best setting, and how many settings each constraint rejected."""
        rows = self.state.rows()
        metrics = slice_metrics(rows)
        tables = _tables(metrics)
        order = list(dict.fromkeys(rows["setting_id"].to_list()))
        obj = self.config.objective
        baseline = tables[self.baseline_id]
        verdicts, best, best_value = {}, None, None
        for sid in order:
            table = tables[sid]
            found = violations(table, baseline, self.config.constraints, self.golden.slices, table[OVERALL]["errors"])
            verdicts[sid] = found
            value = table[obj.slice][obj.metric]
            if found or value is None:
                continue
            # Equal objectives keep the earlier setting, except that the baseline wins a tie: no knob
            # should move without a measured gain.
            if best_value is None or value > best_value or (value == best_value and sid == self.baseline_id):
                best, best_value = sid, value
        knobs = {sid: parse_setting_id(sid) for sid in order}
        grid_frame = metrics.join(pl.DataFrame({
            "setting_id": order,
            "evaluation_order": list(range(len(order))),
            "rrf_k": [knobs[s].rrf_k for s in order],
            "min_similarity": pl.Series([knobs[s].min_similarity for s in order], dtype=pl.Float64),
            "recency_half_life_days": [knobs[s].recency_half_life_days for s in order],
            "feasible": [not verdicts[s] for s in order],
            "violations": ["; ".join(t for _, t in verdicts[s]) for s in order],
            "is_baseline": [s == self.baseline_id for s in order],
            "is_best": [s == best for s in order],
        }), on="setting_id")
        grid_frame = grid_frame.with_columns(
            pl.lit(self.run_id).alias("run_id"),
            pl.lit(self.config.sha256).alias("config_sha256"),
            pl.lit(self.golden.sha256).alias("golden_sha256"),
        ).select(
            "run_id", "setting_id", "rrf_k", "min_similarity", "recency_half_life_days", "slice", "queries",
            *METRICS, "errors", "tie_sensitive", "feasible", "violations", "is_baseline", "is_best",
            "evaluation_order", "config_sha256", "golden_sha256",
        ).sort("evaluation_order", "slice")
        queries = rows.with_columns(pl.lit(self.run_id).alias("run_id")).select(
            "run_id", "setting_id", "query_id", "slice", "rank", "recall_at_5", "recall_at_10", "error",
            "tie_sensitive")
        rejected: dict[str, int] = {}
        for found in verdicts.values():
            for key, _ in found:
                rejected[key] = rejected.get(key, 0) + 1
        return grid_frame, queries, best, rejected


def _metadata(inputs: Inputs) -> dict[str, str]:
    return {
        "rqsweep.version": __version__,
        "rqsweep.config": json.dumps(redact(inputs.config.raw), default=str),
        "rqsweep.metrics": json.dumps(METRIC_DEFINITIONS),
        "rqsweep.golden": str(inputs.golden.path),
        "rqsweep.strategy": inputs.config.sweep.strategy,
    }


def _versions() -> dict[str, str]:
    import numpy
    import optuna

    return {"rqsweep": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
            "polars": pl.__version__, "optuna": optuna.__version__}


def summarise(grid_frame: pl.DataFrame, best: str | None, baseline: str, objective: Objective,
              rejected: dict[str, int]) -> str:
    """The end-of-run text: best beside baseline per slice, and how many settings failed which constraint."""

    def rows(sid: str) -> dict[str, dict]:
        return {r["slice"]: r for r in grid_frame.filter(pl.col("setting_id") == sid).iter_rows(named=True)}

    def fmt(v: float | None) -> str:
        return "  -   " if v is None else f"{v:.4f}"

    n = grid_frame["setting_id"].n_unique()
    base_rows = rows(baseline)
    shown = best or baseline
    best_rows = rows(shown)
    if best is None:
        lines = [f"No feasible setting among {n} evaluated."]
    else:
        before, after = base_rows[objective.slice][objective.metric], best_rows[objective.slice][objective.metric]
        lines = [f"Best feasible setting: {parse_setting_id(best).label()}  "
                 f"({objective.metric}[{objective.slice}] {fmt(before)} -> {fmt(after)})"]
    lines += [
        f"Baseline: {parse_setting_id(baseline).label()}",
        f"{'slice':<16}{'queries':>8}   {'recall@5':^17}   {'recall@10':^17}   {'MRR':^17}",
        f"{'':<16}{'':>8}   {'base -> best':^17}   {'base -> best':^17}   {'base -> best':^17}",
    ]
    for s in sorted(set(base_rows) - {OVERALL}) + [OVERALL]:
        cells = "   ".join(f"{fmt(base_rows[s][m])} -> {fmt(best_rows[s][m])}" for m in METRICS)
        lines.append(f"{s:<16}{base_rows[s]['queries']:>8}   {cells}")
    ties = [f"{s} {r['tie_sensitive']}" for s, r in sorted(best_rows.items())
            if s != OVERALL and r.get("tie_sensitive")]
    if ties:
        lines.append("Tie-sensitive queries at this setting (rank depends on storage order): " + ", ".join(ties))
    infeasible = grid_frame.filter((pl.col("slice") == OVERALL) & ~pl.col("feasible")).height
    lines.append(f"{infeasible} of {n} settings infeasible.")
    for key, count in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
        label, _, kind = key.partition(":")
        reason = {"min": "below its floor", "max_drop": "dropped too far vs the baseline"}.get(kind, "")
        lines.append(f"  {count:>6}  {label} {reason}".rstrip())
    return "\n".join(lines)


def dry_run(config_path: Path) -> str:
    """Validate the config and golden set and say what a run would do, without making any search."""
    inputs = load_inputs(config_path)
    config, golden = inputs.config, inputs.golden
    sweep = config.sweep
    if sweep.strategy == "grid":
        settings = grid(sweep, config.baseline)
        n = len(settings) + (config.baseline not in settings)
    else:
        n = sweep.n_trials + 1
    corpus = inputs.corpus
    lines = [
        f"config {config.path} ({config.name}): valid",
        f"golden set {golden.path}: {len(golden.queries)} queries in {len(golden.slices)} slices "
        f"({', '.join(golden.slices)})",
        f"corpus: {len(corpus.documents)} documents, {len(corpus.memories)} memories",
        f"strategy {sweep.strategy} ({sweep.source}): at most {n} settings, the baseline included",
        f"(setting x query) evaluations: {n * len(golden.queries)}; "
        + ("on the embedded backend, one candidate extraction per query" if isinstance(config.backend, EmbeddedConfig)
           else "over HTTP, one search each in direct mode, about one per query in replay mode"),
    ]
    lines += [f"warning: {w}" for w in golden.warnings]
    return "\n".join(lines)


def run(config_path: Path, *, workers: int | None = None, resume: Path | None = None, quiet: bool = False,
        output_dir: Path | None = None, now: datetime | None = None) -> Outcome:
    """Run (or resume) a sweep end to end and write its results; raises NoFeasibleSetting after writing."""
    started = time.monotonic()
    inputs = load_inputs(config_path)
    config = inputs.config
    progress = Progress(0, config.name, quiet=quiet)
    now = now or datetime.now(timezone.utc)
    started_at = now.isoformat()
    if resume is not None:
        previous = load_run_json(resume)
        if previous.get("inputs_sha256") != inputs.sha256:
            raise InputError(resume / "run.json", "inputs_sha256",
                             f"{previous.get('inputs_sha256')!r} differs from the current inputs' {inputs.sha256!r}: "
                             "the config, sweep, corpus or golden set changed since this run started")
        run_dir, run_id, started_at = resume, previous["run_id"], previous.get("started_at", started_at)
    else:
        run_id = new_run_id(config.sha256, inputs.golden.sha256, now)
        run_dir = (output_dir or config.output_dir) / config.name / run_id
        run_dir.mkdir(parents=True, exist_ok=False)
    for w in inputs.golden.warnings:
        progress.log(f"warning: {w}")
    try:
        backend = build_backend(inputs, config.workers if workers is None else workers, progress.log, run_dir)
    except BaseException:
        if resume is None:  # nothing was evaluated: leave no half-made run folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    info = {
        "run_id": run_id, "name": config.name, "status": "running", "started_at": started_at,
        "config_path": str(config.path), "config": redact(config.raw), "config_sha256": config.sha256,
        "golden_path": str(inputs.golden.path), "golden_sha256": inputs.golden.sha256,
        "inputs_sha256": inputs.sha256, "versions": _versions(), "warnings": list(inputs.golden.warnings),
    }
    if resume is not None:
        info["resumed_at"] = now.isoformat()
    write_json(run_dir / "run.json", info)
    prepared = time.monotonic()
    sweep = Sweep(inputs, backend, run_dir, run_id, progress)
    try:
        sweep.run()
    finally:
        backend.close()
    evaluated = time.monotonic()
    grid_frame, queries, best, rejected = sweep.finish()
    metadata = _metadata(inputs)
    write_parquet(run_dir / "grid.parquet", grid_frame, metadata)
    write_parquet(run_dir / "queries.parquet", queries, metadata)
    summary = summarise(grid_frame, best, sweep.baseline_id, config.objective, rejected)

    def table(sid: str | None) -> dict | None:
        if sid is None:
            return None
        rows = grid_frame.filter(pl.col("setting_id") == sid)
        knobs = parse_setting_id(sid)
        return {"setting_id": sid, "rrf_k": knobs.rrf_k, "min_similarity": knobs.min_similarity,
                "recency_half_life_days": knobs.recency_half_life_days,
                "slices": {r["slice"]: {k: r[k] for k in ("queries", *METRICS, "errors", "tie_sensitive")}
                           for r in rows.iter_rows(named=True)}}

    info.update({
        "status": "complete", "finished_at": datetime.now(timezone.utc).isoformat(),
        "backend": backend.name, "strategy": config.sweep.strategy, "sweep": config.sweep.source,
        "settings": grid_frame["setting_id"].n_unique(),
        "infeasible": grid_frame.filter((pl.col("slice") == OVERALL) & ~pl.col("feasible")).height,
        "objective": {"metric": config.objective.metric, "slice": config.objective.slice},
        "timings_seconds": {"prepare": round(prepared - started, 3), "evaluate": round(evaluated - prepared, 3),
                            "total": round(time.monotonic() - started, 3)},
        "best": table(best), "baseline": table(sweep.baseline_id),
    })
    write_json(run_dir / "run.json", info)
    outcome = Outcome(run_dir, grid_frame, best, sweep.baseline_id, summary)
    if best is None:
        raise NoFeasibleSetting(summary + f"\nResults in {run_dir}", run_dir)
    return outcome
