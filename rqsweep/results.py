"""Run folders: resumable state, and the Parquet grid, per-query table and run.json, written atomically."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Protocol

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from rqsweep.backends.base import QUERY_SCHEMA
from rqsweep.config import SECRET_KEY
from rqsweep.errors import InputError


def redact(value: object) -> object:
    """A copy of a config with every secret-looking key's value replaced."""
    if isinstance(value, dict):
        return {k: ("***" if SECRET_KEY.search(str(k)) and v is not None else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def new_run_id(config_sha256: str, golden_sha256: str, now: datetime) -> str:
    """UTC time, then a short hash of the inputs: runs sort by time, and equal inputs share a suffix."""
    digest = hashlib.sha256(f"{config_sha256}:{golden_sha256}".encode()).hexdigest()[:8]
    return f"{now:%Y%m%dT%H%M%SZ}-{digest}"


def _atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically: a temporary file in the same folder, fsynced, then renamed."""
    _atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: Path, data: object) -> None:
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_parquet(path: Path, frame: pl.DataFrame, metadata: dict[str, str] | None = None) -> None:
    table = frame.to_arrow()
    # polars writes large_string; plain string reads everywhere (older readers included).
    table = table.cast(pa.schema([
        pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type) for f in table.schema
    ]))
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    _atomic(path, lambda tmp: pq.write_table(table, tmp))


class RunState(Protocol):
    """Where a run keeps what it has evaluated, so that a killed run resumes where it stopped.

    The local implementation below keeps Parquet parts in the run folder; a shared one (an Optuna
    RDB storage on PostgreSQL) can stand behind the same three calls.
    """

    def finished(self) -> set[str]: ...

    def record(self, rows: pl.DataFrame) -> None: ...

    def rows(self) -> pl.DataFrame: ...


class LocalRunState:
    """Per-query rows in numbered Parquet parts under `<run>/state/`; each part is written atomically."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._parts = sorted(folder.glob("part-*.parquet"))
        # Kept in memory too: optimisers ask for rows of finished settings after every batch.
        self._rows = [pl.read_parquet(p).cast(QUERY_SCHEMA) for p in self._parts]
        self._finished = set()
        for rows in self._rows:
            self._finished.update(rows["setting_id"].unique().to_list())

    def finished(self) -> set[str]:
        return set(self._finished)

    def record(self, rows: pl.DataFrame) -> None:
        if rows.is_empty():
            return
        path = self.folder / f"part-{len(self._parts):06d}.parquet"
        rows = rows.select(list(QUERY_SCHEMA)).cast(QUERY_SCHEMA)
        write_parquet(path, rows)
        self._parts.append(path)
        self._rows.append(rows)
        self._finished.update(rows["setting_id"].unique().to_list())

    def rows(self) -> pl.DataFrame:
        if not self._rows:
            return pl.DataFrame(schema=QUERY_SCHEMA)
        return pl.concat(self._rows)


def load_run_json(run_dir: Path) -> dict:
    path = run_dir / "run.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(path, "", "not a run folder (no run.json)") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, "", f"not valid JSON: {exc.msg}") from None
