"""Run folders: resumable state, and the tables a run writes: the grid, the per-query table, the ranked lists.

Every table is assembled here from what the backend returned (positions) and what the metrics made
of them; `rqsweep.files` writes them atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Iterator, Mapping, Protocol, Sequence

import polars as pl

from rqsweep.backends.base import RankedHit
from rqsweep.config import SECRET_KEY
from rqsweep.errors import InputError
from rqsweep.files import write_parquet
from rqsweep.golden import GoldenSet
from rqsweep.knobs import KNOBS, Knobs
from rqsweep.study import redact_url

LOCK_FILE = "run.lock"


def redact(value: object) -> object:
    """A copy of a config with every secret-looking key's value replaced, and every URL's password."""
    if isinstance(value, dict):
        return {k: ("***" if SECRET_KEY.search(str(k)) and v is not None else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def new_run_folder(parent: Path, config_sha256: str, golden_sha256: str, now: datetime) -> tuple[str, Path]:
    """Create a run's folder under `parent`; returns (run id, folder).

    The id is the UTC time, then a short hash of the inputs: runs sort by time, and equal inputs share a
    suffix. Runs of the same inputs started in the same second get `-2`, `-3`, ... after it.
    """
    digest = hashlib.sha256(f"{config_sha256}:{golden_sha256}".encode()).hexdigest()[:8]
    first = f"{now:%Y%m%dT%H%M%SZ}-{digest}"
    parent.mkdir(parents=True, exist_ok=True)
    run_id, n = first, 1
    while True:
        try:
            (parent / run_id).mkdir()  # atomic: of two processes, one gets the name
            return run_id, parent / run_id
        except FileExistsError:
            n += 1
            run_id = f"{first}-{n}"


@contextlib.contextmanager
def holding(run_dir: Path) -> Iterator[None]:
    """Hold the run folder's lock (an flock on its run.lock) for the block: one process runs a folder at a time.

    The lock file stays: removing it would let a third process lock a new file while the second holds the old.
    """
    with open(run_dir / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(run_dir, "", f"another rqsweep process holds this run folder (its {LOCK_FILE}): "
                                          "wait for it to end, or stop it first") from None
        yield


class RunState(Protocol):
    """Where a run keeps what it has evaluated, so that a killed run resumes where it stopped.

    The local implementation below keeps Parquet parts in the run folder; a shared one (an Optuna
    RDB storage on PostgreSQL) can stand behind the same three calls.
    """

    def finished(self) -> set[str]: ...  # settings evaluated without a failed search

    def record(self, rows: pl.DataFrame) -> None: ...

    def rows(self) -> pl.DataFrame: ...


class LocalRunState:
    """Per-query rows in numbered Parquet parts under `<run>/state/`; each part is written atomically.

    `schema` is the backend contract's row schema: the state keeps what backends return, untouched.
    A part's number orders it: where two parts hold the same (setting, query), the higher-numbered one
    supersedes the other, and a setting keeps the place of its first evaluation. A new part takes the
    number after the highest, so a gap left by a deleted part never makes it overwrite another.

    A setting is finished when none of its searches failed: a failed search (a server that died, a
    timeout) is work left for `--resume`, whose new rows replace the failed ones.
    """

    def __init__(self, folder: Path, schema: Mapping[str, pl.DataType]):
        self.folder, self.schema = folder, dict(schema)
        folder.mkdir(parents=True, exist_ok=True)
        parts = sorted((_part_number(p), p) for p in folder.glob("part-*.parquet"))
        self._next = parts[-1][0] + 1 if parts else 0
        # Kept in memory too: optimisers ask for rows of finished settings after every batch.
        self._parts = [_read_part(p, self.schema) for _, p in parts]
        self._current: pl.DataFrame | None = None
        self._finished = set(_complete_settings(self.rows()))

    def finished(self) -> set[str]:
        return set(self._finished)

    def record(self, rows: pl.DataFrame) -> None:
        """Keep the rows of some settings, every query of each, in a new part."""
        if rows.is_empty():
            return
        rows = rows.select(list(self.schema)).cast(self.schema)
        write_parquet(self.folder / f"part-{self._next:06d}.parquet", rows)
        self._next += 1
        self._parts.append(rows)
        self._current = None
        complete = _complete_settings(rows)
        self._finished.update(complete)
        self._finished.difference_update(set(rows["setting_id"].unique().to_list()) - complete)

    def rows(self) -> pl.DataFrame:
        """One row per (setting, query): the latest part's, settings in the order they were first evaluated."""
        if self._current is None:
            if not self._parts:
                return pl.DataFrame(schema=self.schema)
            rows = pl.concat(self._parts).with_row_index("at")
            self._current = (
                rows.with_columns(pl.col("at").min().over("setting_id").alias("first"))
                .filter(pl.col("at") == pl.col("at").max().over("setting_id", "query_id"))
                .sort("first", "at")
                .drop("at", "first")
            )
        return self._current


def _complete_settings(rows: pl.DataFrame) -> set[str]:
    """The settings among `rows` without a failed search."""
    ok = rows.group_by("setting_id").agg(pl.col("error").is_null().all().alias("ok")).filter("ok")
    return set(ok["setting_id"].to_list())


def _part_number(path: Path) -> int:
    match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
    if match is None:
        raise InputError(path, "", "not a state part's name (part-<number>.parquet): move it out of the state folder")
    return int(match[1])


def _read_part(path: Path, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    try:
        return pl.read_parquet(path).select(list(schema)).cast(schema)
    except (pl.exceptions.PolarsError, OSError) as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(path, "", f"unreadable state part ({problem}): delete it to have its settings "
                                   "re-evaluated by --resume") from None


def load_run_json(run_dir: Path) -> dict:
    path = run_dir / "run.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(path, "", "not a run folder (no run.json)") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, "", f"not valid JSON: {exc.msg}") from None


def settings_of(rows: pl.DataFrame) -> dict[str, Knobs]:
    """Setting id -> knobs, from the knob columns of per-query rows, in the order the settings first appear."""
    first = rows.select("setting_id", *KNOBS).unique("setting_id", keep="first", maintain_order=True)
    return {r[0]: Knobs(*r[1:]) for r in first.iter_rows()}


def grid_table(slice_metrics: pl.DataFrame, knobs: Mapping[str, Knobs], verdicts: Mapping[str, list[tuple[str, str]]],
               best: str | None, baseline_id: str, metric_names: Sequence[str], stamp: Mapping[str, str]) -> pl.DataFrame:
    """grid.parquet: one row per (setting, slice), settings in evaluation order (the order of `knobs`).

    `stamp` holds the run-wide columns (run_id, config_sha256, golden_sha256).
    """
    order = list(knobs)
    per_setting = pl.DataFrame({"setting_id": order, **{
        name: pl.Series([k.columns()[name] for k in knobs.values()], dtype=dtype)
        for name, dtype in (("rrf_k", pl.Int64), ("min_similarity", pl.Float64),
                            ("recency_half_life_days", pl.Float64))}}).with_columns(
        pl.Series("evaluation_order", range(len(order)), pl.Int64),
        pl.Series("feasible", [not verdicts[s] for s in order], pl.Boolean),
        pl.Series("violations", ["; ".join(t for _, t in verdicts[s]) for s in order], pl.String),
        pl.Series("is_baseline", [s == baseline_id for s in order], pl.Boolean),
        pl.Series("is_best", [s == best for s in order], pl.Boolean),
    )
    grid = slice_metrics.join(per_setting, on="setting_id").with_columns(
        pl.lit(stamp["run_id"]).alias("run_id"), pl.lit(stamp["config_sha256"]).alias("config_sha256"),
        pl.lit(stamp["golden_sha256"]).alias("golden_sha256"))
    return grid.select(
        "run_id", "setting_id", "rrf_k", "min_similarity", "recency_half_life_days", "slice", "queries",
        *metric_names, "errors", "tie_sensitive", "feasible", "violations", "is_baseline", "is_best",
        "evaluation_order", "config_sha256", "golden_sha256",
    ).sort("evaluation_order", "slice")


def golden_table(golden: GoldenSet) -> pl.DataFrame:
    """What each golden query is: its slice, text and expected keys, in the golden set's order."""
    return pl.DataFrame({
        "query_id": [q.id for q in golden.queries],
        "slice": [q.slice for q in golden.queries],
        "query": [q.query for q in golden.queries],
        "expected": pl.Series([[e.key for e in q.expected] for q in golden.queries], dtype=pl.List(pl.String)),
    })


def query_table(scored: pl.DataFrame, golden: GoldenSet, metric_names: Sequence[str], run_id: str) -> pl.DataFrame:
    """queries.parquet: one row per (setting, query), with the query's text, expected keys, each expected key's
    position, the first relevant rank and every metric's per-query value."""
    return (scored.join(golden_table(golden), on="query_id", how="left", maintain_order="left")
            .with_columns(pl.lit(run_id).alias("run_id"))
            .select("run_id", "setting_id", "rrf_k", "min_similarity", "recency_half_life_days", "query_id", "slice",
                    "query", "expected", "positions", "rank", *metric_names, "error", "tie_sensitive"))


HITS_SCHEMA = {
    "run_id": pl.String, "setting_id": pl.String, "is_baseline": pl.Boolean, "is_chosen": pl.Boolean,
    "query_id": pl.String, "position": pl.Int64, "key": pl.String, "source_type": pl.String, "chunk": pl.String,
    "score": pl.Float64, "vector": pl.Int64, "lexical": pl.Int64, "similarity_score": pl.Float64,
    "blend_factor": pl.Float64, "expected": pl.Boolean, "error": pl.String,
}


def hits_table(ranked: Mapping[str, Mapping[str, list[RankedHit] | str]], baseline_id: str, chosen_id: str,
               golden: GoldenSet, run_id: str) -> pl.DataFrame:
    """hits.parquet: the ranked lists of the baseline and the chosen setting for every query.

    `ranked`: setting id -> query id -> its hits, or the error of a failed search (one row, no position).
    """
    expected = {q.id: {e.key for e in q.expected} for q in golden.queries}
    rows = []
    for sid, lists in ranked.items():
        for qid, hits in lists.items():
            common = {"run_id": run_id, "setting_id": sid, "is_baseline": sid == baseline_id,
                      "is_chosen": sid == chosen_id, "query_id": qid}
            if isinstance(hits, str):
                rows.append({**common, "error": hits})
                continue
            for h in hits:
                rows.append({**common, **asdict(h), "expected": h.key in expected[qid], "error": None})
    return pl.DataFrame(rows, schema=HITS_SCHEMA)
