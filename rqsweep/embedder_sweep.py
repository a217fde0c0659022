"""A sweep over several embedders: one ordinary run per embedder, then the union of their tables and whether the
decision holds across them.

Each embedder's run is a whole run folder of its own under `<run>/embedders/<label>/`: its own index and
candidates (built once), state, baseline, constraints, choice, cross-validation and report, resumable,
explainable and gated like any run. So a run over two embedders gives exactly the rows of two single-embedder
runs. The folder above them holds the union of their grid, per-query and ranked-list tables (the `embedder`
column tells their rows apart), the robust choice in run.json, and a report on the decision across embedders.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import polars as pl

from rqsweep.decide.constraints import Robust
from rqsweep.errors import InputError, Interrupted, NoFeasibleSetting
from rqsweep.files import write_text
from rqsweep.inputs import Inputs
from rqsweep.progress import Progress
from rqsweep.report.embedders import EmbedderSweep, blocks
from rqsweep.report.render import Heading, Paragraph, to_html, to_markdown
from rqsweep.runfolder import GRID, HITS, QUERIES, RUN_JSON, RunRecord, holding, mark, run_folder_of
from rqsweep.runfolder.tables import read_metadata, read_table, table_parts, write_grid, write_hits, write_queries

EMBEDDERS_FOLDER = "embedders"


def embedder_runs(run_dir: Path) -> dict[str, Path]:
    """Label -> run folder of each embedder of a sweep over several (empty for any other run folder)."""
    labels = RunRecord.read(run_dir).embedders if (run_dir / RUN_JSON).exists() else None
    return {label: run_dir / EMBEDDERS_FOLDER / label for label in labels or []}


def run_embedders(inputs: Inputs, run_one: Callable, progress: Progress, *, workers: int | None,
                  resume: Path | None, output_dir: Path | None, now: datetime | None):
    """Run (or resume) every embedder's run, then write the combined tables, run.json and report.

    `run_one` is `job.run_inputs`. Returns (run folder, combined grid, robust choice, baseline, summary); ends as
    `job.run` does otherwise: NoFeasibleSetting (after writing) when no setting is
    feasible under every embedder, `Interrupted` naming this folder when a signal stops any embedder's run.
    """
    config = inputs.config
    if config.sweep.storage:
        raise InputError(config.path, "sweep.storage", "a sweep over several embedders keeps each embedder's study in "
                         "its own run folder: a shared study storage takes one embedder per config")
    now = now or datetime.now(timezone.utc)
    run_dir, record = run_folder_of(inputs, resume, (output_dir or config.output_dir) / config.name, now)
    labels = [label for label, _ in config.backend.embedders]
    record = dataclasses.replace(record, embedder=None, embedders=labels)  # several: each run names its own
    with holding(run_dir):
        record.write(run_dir)
        try:
            results = {label: _run_embedder(inputs, label, run_one, progress, record.run_id, run_dir, workers, now)
                       for label in labels}
            return _finish(run_dir, record, inputs, results)
        except BaseException as exc:
            mark(run_dir, "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted(getattr(exc, "signal_number", signal.SIGINT), run_dir, config.path) from None
            raise


def _run_embedder(inputs: Inputs, label: str, run_one: Callable, progress: Progress, run_id: str, run_dir: Path,
                  workers: int | None, now: datetime) -> Path:
    config = dataclasses.replace(inputs.config, backend=inputs.config.backend.only(label))
    folder = run_dir / EMBEDDERS_FOLDER / label
    progress.log(f"embedder {label}: run folder {folder}")
    started = time.monotonic()
    progress = Progress(0, f"{config.name} [{label}]", quiet=progress.quiet, stream=progress.stream)
    if (folder / RUN_JSON).exists():
        where = {"resume": folder}
    else:
        folder.mkdir(parents=True, exist_ok=True)
        where = {"folder": (run_id, folder)}
    try:
        run_one(dataclasses.replace(inputs, config=config), progress, started, workers=workers, now=now, **where)
    except NoFeasibleSetting:
        pass  # its files are written; the robust choice below says what holds
    return folder


def _finish(run_dir: Path, record: RunRecord, inputs: Inputs, results: dict[str, Path]
            ) -> tuple[Path, pl.DataFrame, str, str, str]:
    config = inputs.config
    grids = {label: read_table(folder, GRID) for label, folder in results.items()}
    runs = {label: RunRecord.read(folder) for label, folder in results.items()}
    metadata = _metadata(results, runs)
    grid = pl.concat(grids.values())
    write_grid(run_dir, grid, metadata, None)
    write_queries(run_dir, (part for folder in results.values() for part in table_parts(folder, QUERIES)), metadata)
    write_hits(run_dir, pl.concat(read_table(f, HITS) for f in results.values()), metadata)
    objective = (config.objective.metric, config.objective.slice)
    identities = {label: (run.server_profile or {}).get("embedder", "") for label, run in runs.items()}
    robust = _write_report(run_dir, config.name, record.run_id,
                           EmbedderSweep(grid, config.baseline.id, objective, identities))
    record.finish(
        objective={"metric": objective[0], "slice": objective[1]}, baseline=config.baseline.id,
        strategy=config.sweep.strategy, sweep=config.sweep.source, metrics=list(inputs.metrics),
        per_embedder={label: {"run_folder": f"{EMBEDDERS_FOLDER}/{label}", "embedder": identities[label],
                              "best": (run.best or {}).get("setting_id"), "settings": run.settings,
                              "infeasible": run.infeasible} for label, run in runs.items()},
        robust={"setting_id": robust.setting, "worst_objective": robust.worst,
                "feasible_under_every_embedder": robust.feasible_everywhere},
    ).write(run_dir)
    summary = "\n".join([*(_embedder_line(label, grids[label], config.baseline.id, robust.setting, objective)
                           + f" (run folder {folder})" for label, folder in results.items()),
                         _robust_line(robust, objective)])
    if robust.setting is None:
        raise NoFeasibleSetting(f"{summary}\nResults in {run_dir}", run_dir)
    return run_dir, grid, robust.setting, config.baseline.id, summary


def _write_report(run_dir: Path, name: str, run_id: str, sweep: EmbedderSweep) -> Robust:
    robust = sweep.robust()
    report = [Heading(f"rqsweep report: {name}, {len(sweep.labels)} embedders", 1), Paragraph(
        "Each embedder's own report (best vs baseline, one knob at a time, held-out gain, plots): "
        + ", ".join(f"{EMBEDDERS_FOLDER}/{label}/report.html" for label in sweep.labels) + "."), *blocks(sweep, robust)]
    write_text(run_dir / "report.md", to_markdown(report))
    write_text(run_dir / "report.html", to_html(report, f"rqsweep report: {name} {run_id}"))
    return robust


def write_embedder_report(run_dir: Path) -> tuple[Path, Path]:
    """Rebuild a finished sweep over several embedders' report.md and report.html from its files."""
    info = RunRecord.read(run_dir)
    if not info.complete:
        raise InputError(run_dir / RUN_JSON, "status", f"{info.status!r}: the run is not finished; finish "
                         f"it with rqsweep CONFIG --resume {run_dir}")
    try:
        objective = (info.objective["metric"], info.objective["slice"])
        identities = {label: e["embedder"] for label, e in info.per_embedder.items()}
    except (AttributeError, KeyError, TypeError) as exc:  # a hand-edited record: its keys are the run's
        raise InputError(run_dir / RUN_JSON, "", f"damaged ({type(exc).__name__}: {exc}): a finished sweep over "
                         "several embedders records objective {metric, slice} and per_embedder") from None
    _write_report(run_dir, info.name, info.run_id,
                  EmbedderSweep(read_table(run_dir, GRID), info.baseline, objective, identities))
    return run_dir / "report.md", run_dir / "report.html"


def _embedder_line(label: str, grid: pl.DataFrame, baseline: str, robust: str | None,
                   objective: tuple[str, str]) -> str:
    metric, slice_ = objective
    at = grid.filter(pl.col("slice") == slice_)
    value = dict(zip(at["setting_id"], at[metric]))
    best = at.filter(pl.col("is_best"))["setting_id"].to_list()
    line = f"{label}: {metric}[{slice_}] baseline {value[baseline]:.4f}, "
    line += f"best feasible {best[0]} {value[best[0]]:.4f}" if best else "no feasible setting"
    return line + ("" if robust is None else f", robust choice {value[robust]:.4f}")


def _robust_line(robust: Robust, objective: tuple[str, str]) -> str:
    if robust.setting is None:
        return "Robust choice: none; no setting is feasible under every embedder."
    return (f"Robust choice (feasible under every embedder, best worst {objective[0]}[{objective[1]}]): "
            f"{robust.setting}, worst {robust.worst:.4f}")


def _metadata(results: dict[str, Path], runs: dict[str, RunRecord]) -> dict[str, str]:
    """The first embedder's grid metadata, with every embedder's profile by label."""
    first = next(iter(results.values()))
    metadata = {k: v for k, v in read_metadata(first, GRID).items() if k != "rqsweep.validation"}
    metadata["rqsweep.server_profile"] = json.dumps({label: run.server_profile for label, run in runs.items()})
    metadata["rqsweep.embedders"] = json.dumps(list(results))
    return metadata
