"""run.json: a run's record, and the contract with whatever schedules runs (the nightly job reads it).

This file is its schema: one field of `RunRecord` per key, in the order run.json writes them. A run writes it when
it starts (`begin`, or `resume` for a folder it continues), rewrites its status when it ends early (`mark`) and
writes it whole when it is finished (`finish`): `"status": "complete"`, written after every other file of the
folder, is the marker readers check. Keys a field's `when` says are written:

- `start`: from the start on;
- `given`: from the start on, when not None;
- `finish`: once the run is complete (None written as null: a run without a feasible setting has `"best": null`).

A key is added by adding its field here (and setting it where the value is known); readers get it as an attribute.
A run.json from an older release lacks some keys: they read as None.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Mapping, Sequence

import polars as pl

from rqsweep import __version__
from rqsweep.config import SECRET_KEY
from rqsweep.errors import InputError
from rqsweep.files import write_json
from rqsweep.inputs import Inputs
from rqsweep.knobs import Knobs
from rqsweep.runfolder.folder import RUN_JSON, check_run_folder, new_run_folder
from rqsweep.scrub import redact_url

Status = Literal["running", "interrupted", "failed", "complete"]


def _start(default=None, when: str = "start"):
    return field(default=default, metadata={"when": when})


def _finish():
    return field(default=None, metadata={"when": "finish"})


@dataclass(frozen=True)
class RunRecord:
    run_id: str | None = _start()
    name: str | None = _start()
    status: Status | None = _start()
    started_at: str | None = _start()  # ISO 8601, UTC; a resumed run keeps its first start
    config_path: str | None = _start()  # relative to the run folder, where `rqsweep explain` finds it (absolute before)
    config: dict | None = _start()  # the config as read, secrets redacted
    config_sha256: str | None = _start()
    golden_path: str | None = _start()  # relative to the config's folder, as the config names it
    golden_layout: str | None = _start()  # which of the golden set formats it was read as
    golden_sha256: str | None = _start()
    corpus_sha256: str | None = _start()  # the corpus searched (`Corpus.sha256`: its content, not its file's bytes)
    inputs_sha256: str | None = _start()  # config, sweep, corpus and golden set: `--resume` refuses a change
    versions: dict | None = _start()  # rqsweep, python, numpy, polars, optuna
    warnings: list | None = _start()  # the golden set's, and the backend's (memory ages HTTP cannot seed)
    embedder: str | None = _start()  # the embedder's label (`backend.embedder`); null over HTTP
    embedders: list | None = _start(when="given")  # a sweep over several embedders: their labels (`embedder_sweep`)
    storage: str | None = _start(when="given")  # an optimise run's study URL, password redacted
    resumed_at: str | None = _start(when="given")  # the latest `--resume`
    # Knob -> the values its sweep's quantiles took from the data (`rqsweep.search.space.resolve`): a resumed run sweeps these.
    data_values: dict | None = _start(when="given")
    server_profile: dict | None = _finish()  # what ranked (`backends.base`)
    finished_at: str | None = _finish()
    backend: str | None = _finish()
    strategy: str | None = _finish()  # grid | optimize
    sweep: str | None = _finish()  # the sweep's file name, or "inline"
    metrics: list | None = _finish()
    settings: int | None = _finish()  # settings evaluated, the baseline included
    infeasible: int | None = _finish()
    objective: dict | None = _finish()  # {metric, slice}
    # prepare: inputs, index and candidates; evaluate: the searches and their checkpoints, of which search: the
    # backend's evaluation alone; score: the per-query table, the grid, the held-out estimate and the ranked lists;
    # report: report.md and report.html; total.
    timings_seconds: dict | None = _finish()
    best: dict | None = _finish()  # {setting_id, knobs, slices: {slice: {queries, metrics, errors, tie_sensitive}}}
    baseline: dict | str | None = _finish()  # the same for the baseline; its id in a sweep over several embedders
    validation: dict | None = _finish()  # the held-out estimate (`CrossValidation.as_json`); null when off
    # What to deploy and the test it rests on (`verdict.Verdict.as_json`): written as soon as it is made, so that
    # the run's own report, written before the folder is marked complete, states it.
    decision: dict | None = _start(when="given")
    holdout: dict | None = _start(when="given")  # the locked holdout's figures and reads (`rqsweep.decide.holdout.figures`)
    # A sweep over several embedders (`embedder_sweep`, which writes its own record's keys): each embedder's run
    # folder, best and counts, and the setting feasible under every embedder with the best worst objective.
    per_embedder: dict | None = _start(when="given")
    robust: dict | None = _start(when="given")

    @classmethod
    def begin(cls, inputs: Inputs, run_id: str, run_dir: Path, now: datetime) -> RunRecord:
        """The record of a run starting in `run_dir`."""
        config = inputs.config
        return cls(
            run_id=run_id, name=config.name, status="running", started_at=now.isoformat(),
            config_path=os.path.relpath(config.path, run_dir), config=redact(config.raw),
            config_sha256=config.sha256, golden_path=config.relative(inputs.golden.path),
            golden_layout=inputs.golden.layout, golden_sha256=inputs.golden.sha256,
            corpus_sha256=inputs.corpus.sha256, inputs_sha256=inputs.sha256,
            versions=_versions(), warnings=list(inputs.golden.warnings),
            embedder=getattr(config.backend, "label", None),
            storage=redact_url(config.sweep.storage) if config.sweep.storage else None)

    def resume(self, inputs: Inputs, run_dir: Path, now: datetime) -> RunRecord:
        """The record of this run continued with `inputs`; InputError when they are not the ones it started with."""
        if self.inputs_sha256 != inputs.sha256:
            raise InputError(run_dir / RUN_JSON, "inputs_sha256",
                             f"{self.inputs_sha256!r} differs from the current inputs' {inputs.sha256!r}: "
                             "the config, sweep, corpus or golden set changed since this run started")
        self.check_embedder(inputs, run_dir)
        begun = RunRecord.begin(inputs, self.run_id, run_dir, now)
        return replace(begun, started_at=self.started_at or begun.started_at, resumed_at=now.isoformat(),
                       data_values=self.data_values)

    def check_embedder(self, inputs: Inputs, run_dir: Path) -> None:
        """InputError when `inputs`' config gives another embedder than this run's, its bytes unchanged: a config
        without `embedder:` meant the feature hash before the local model became the default."""
        label = getattr(inputs.config.backend, "label", None)
        if self.embedder is not None and self.embedder != label:
            raise InputError(run_dir / RUN_JSON, "embedder",
                             f"{self.embedder!r} made this run, but its unchanged config now gives {label!r} (a "
                             "config without `embedder:` meant the feature hash before the local model became "
                             "the default): this run can be neither continued nor recomputed; start a new one")

    def finish(self, **values) -> RunRecord:
        """The complete record: `values` are the `finish` fields."""
        return replace(self, status="complete", finished_at=datetime.now(timezone.utc).isoformat(), **values)

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def as_json(self) -> dict:
        out = {}
        for f in fields(self):
            value, when = getattr(self, f.name), f.metadata["when"]
            if when == "start" or (when == "given" and value is not None) or (when == "finish" and self.complete):
                out[f.name] = value
        return out

    def write(self, run_dir: Path) -> None:
        write_json(run_dir / RUN_JSON, self.as_json())

    @classmethod
    def from_json(cls, data: Mapping) -> RunRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls, run_dir: Path) -> RunRecord:
        """The run.json of `run_dir`; InputError when there is none or it is not a record."""
        check_run_folder(run_dir)
        path = run_dir / RUN_JSON
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(path, "", f"not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(path, "", f"expected a JSON object, got {type(data).__name__}")
        return cls.from_json(data)


def run_folder_of(inputs: Inputs, resume: Path | None, parent: Path, now: datetime) -> tuple[Path, RunRecord]:
    """A run's folder and its record as the run (re)starts: the folder `resume` names, refused when the inputs
    changed since it started, or a new one under `parent`."""
    if resume is None:
        run_id, run_dir = new_run_folder(parent, inputs.sha256, now)
        return run_dir, RunRecord.begin(inputs, run_id, run_dir, now)
    return resume, RunRecord.read(resume).resume(inputs, resume, now)


def mark(run_dir: Path, status: Status) -> bool:
    """Rewrite an unfinished run's status (`interrupted`, `failed`); a run that ended after writing `complete` is
    finished all the same and keeps it. False when the folder holds no record (a new run removed it)."""
    if not (run_dir / RUN_JSON).exists():
        return False
    record = RunRecord.read(run_dir)
    if not record.complete:
        replace(record, status=status).write(run_dir)
    return True


def setting_summary(grid: pl.DataFrame, knobs: Knobs, metrics: Sequence[str]) -> dict:
    """run.json's `best` or `baseline`: a setting's knobs and its grid rows, slice by slice."""
    rows = grid.filter(pl.col("setting_id") == knobs.id)
    return {"setting_id": knobs.id, **knobs.columns(),
            "slices": {r["slice"]: {k: r[k] for k in ("queries", *metrics, "errors", "tie_sensitive", "numeric_sensitive")}
                       for r in rows.iter_rows(named=True)}}


def redact(value: object) -> object:
    """A copy of a config with every secret-looking key's value replaced, and every URL's password."""
    if isinstance(value, dict):
        return {k: ("***" if SECRET_KEY.search(str(k)) and v is not None else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def _versions() -> dict[str, str]:
    import numpy
    import optuna

    return {"rqsweep": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
            "polars": pl.__version__, "optuna": optuna.__version__}
