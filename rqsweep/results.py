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
from typing import Collection, Iterator, Mapping, Protocol, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from rqsweep.backends.base import RankedHit
from rqsweep.config import SECRET_KEY
from rqsweep.constraints import Verdicts
from rqsweep.errors import InputError
from rqsweep.files import write_parquet, writing_in
from rqsweep.golden import GoldenSet
from rqsweep.inputs import Inputs
from rqsweep.knobs import KNOBS, Knobs
from rqsweep.scrub import redact_url

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


def run_folder_of(inputs: Inputs, resume: Path | None, parent: Path, now: datetime) -> tuple[str, Path, dict | None]:
    """(run id, folder, its run.json or None) of a run: the folder `resume` names, refused when the inputs changed
    since it started, or a new one under `parent`."""
    if resume is None:
        return (*new_run_folder(parent, inputs.config.sha256, inputs.golden.sha256, now), None)
    previous = load_run_json(resume)
    if previous.get("inputs_sha256") != inputs.sha256:
        raise InputError(resume / "run.json", "inputs_sha256",
                         f"{previous.get('inputs_sha256')!r} differs from the current inputs' {inputs.sha256!r}: "
                         "the config, sweep, corpus or golden set changed since this run started")
    return previous["run_id"], resume, previous


def new_run_folder(parent: Path, config_sha256: str, golden_sha256: str, now: datetime) -> tuple[str, Path]:
    """Create a run's folder under `parent`; returns (run id, folder).

    The id is the UTC time, then a short hash of the inputs: runs sort by time, and equal inputs share a
    suffix. Runs of the same inputs started in the same second get `-2`, `-3`, ... after it.
    """
    digest = hashlib.sha256(f"{config_sha256}:{golden_sha256}".encode()).hexdigest()[:8]
    first = f"{now:%Y%m%dT%H%M%SZ}-{digest}"
    run_id, n = first, 1
    with writing_in(parent):
        parent.mkdir(parents=True, exist_ok=True)
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
    with writing_in(run_dir, LOCK_FILE):
        lock = open(run_dir / LOCK_FILE, "a")
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(run_dir, "", f"another rqsweep process holds this run folder (its {LOCK_FILE}): "
                                          "wait for it to end, or stop it first") from None
        yield


class RunState(Protocol):
    """Where a run keeps what it has evaluated, so that a killed run resumes where it stopped.

    The local implementation below keeps Parquet parts in the run folder; a shared one (an Optuna
    RDB storage on PostgreSQL) can stand behind the same calls.
    """

    def finished(self) -> set[str]: ...  # settings evaluated without a failed search

    def record(self, rows: pl.DataFrame) -> None: ...

    def rows_of(self, setting_ids: Collection[str]) -> pl.DataFrame: ...

    def chunks(self) -> Iterator[pl.DataFrame]: ...


class LocalRunState:
    """Per-query rows in numbered Parquet parts under `<run>/state/`; each part is written atomically and holds
    whole settings (every query of each).

    `schema` is the backend contract's row schema: the state keeps what backends return, untouched.
    A part's number orders it: where two parts hold the same setting, the higher-numbered one supersedes
    the other, and the setting keeps the place of its first evaluation. A new part takes the number after
    the highest, so a gap left by a deleted part never makes it overwrite another.

    `consolidated` is the run's per-query table (queries.parquet), which a finished run writes in row groups
    of whole settings and which holds every column of `schema`: once it is written the parts are deleted
    and it stands first in their place, so a finished study can grow (`--resume`) without a second copy.

    Nothing is held in memory but which setting is where: rows are read back part by part.

    A setting is finished when none of its searches failed: a failed search (a server that died, a
    timeout) is work left for `--resume`, whose new rows replace the failed ones.
    """

    def __init__(self, folder: Path, schema: Mapping[str, pl.DataType], consolidated: Path | None = None):
        self.folder, self.schema = folder, dict(schema)
        with writing_in(folder.parent):
            folder.mkdir(parents=True, exist_ok=True)
        parts = sorted((_part_number(p), p) for p in folder.glob("part-*.parquet"))
        self._next = parts[-1][0] + 1 if parts else 0
        # (file, row group): a part is read whole, the consolidated table a row group at a time.
        self._units: list[tuple[Path, int | None]] = []
        if consolidated is not None and consolidated.exists():
            self._units += [(consolidated, g) for g in range(_row_groups(consolidated))]
        self._units += [(p, None) for _, p in parts]
        self._first: dict[str, int] = {}  # setting -> unit of its first evaluation, in evaluation order
        self._latest: dict[str, int] = {}  # setting -> unit holding its rows
        self._finished: set[str] = set()
        for unit in range(len(self._units)):
            self._index(unit, self._read(unit, ["setting_id", "error"]))

    def _index(self, unit: int, rows: pl.DataFrame) -> None:
        ok = rows.group_by("setting_id", maintain_order=True).agg(pl.col("error").is_null().all())
        for sid, complete in ok.iter_rows():
            self._first.setdefault(sid, unit)
            self._latest[sid] = unit
            (self._finished.add if complete else self._finished.discard)(sid)

    def _read(self, unit: int, columns: Sequence[str] | None = None) -> pl.DataFrame:
        path, group = self._units[unit]
        columns = list(columns or self.schema)
        try:
            if group is None:
                rows = pl.read_parquet(path, columns=columns)
            else:
                rows = pl.from_arrow(pq.ParquetFile(path).read_row_group(group, columns=columns))
            return rows.cast({c: self.schema[c] for c in columns})
        except (pl.exceptions.PolarsError, pa.ArrowException, OSError) as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            remedy = ("delete it to have its settings re-evaluated by --resume" if group is None else
                      "delete it and its run's state is lost: the run must start again")
            raise InputError(path, "", f"unreadable state ({problem}): {remedy}") from None

    def finished(self) -> set[str]:
        return set(self._finished)

    def settings(self) -> list[str]:
        """Every setting recorded, in the order of its first evaluation."""
        return list(self._first)

    def record(self, rows: pl.DataFrame) -> None:
        """Keep the rows of some settings, every query of each, in a new part."""
        if rows.is_empty():
            return
        rows = rows.select(list(self.schema)).cast(self.schema)
        path = self.folder / f"part-{self._next:06d}.parquet"
        write_parquet(path, rows)
        self._next += 1
        self._units.append((path, None))
        self._index(len(self._units) - 1, rows)

    def rows_of(self, setting_ids: Collection[str]) -> pl.DataFrame:
        """The rows of some recorded settings, read from the parts that hold them."""
        wanted: dict[int, list[str]] = {}
        for sid in setting_ids:
            wanted.setdefault(self._latest[sid], []).append(sid)
        frames = [self._read(unit).filter(pl.col("setting_id").is_in(ids)) for unit, ids in sorted(wanted.items())]
        return pl.concat(frames) if frames else pl.DataFrame(schema=self.schema)

    def chunks(self) -> Iterator[pl.DataFrame]:
        """Every setting's rows, settings in the order of their first evaluation, a part's worth at a time."""
        by_first: dict[int, list[str]] = {}
        for sid, unit in self._first.items():
            by_first.setdefault(unit, []).append(sid)
        for unit, own in by_first.items():
            moved = [sid for sid in own if self._latest[sid] != unit]
            rows = self._read(unit)
            if moved or len(own) != rows["setting_id"].n_unique():
                kept = rows.filter(pl.col("setting_id").is_in(set(own) - set(moved)))
                rank = {sid: n for n, sid in enumerate(own)}
                rows = (pl.concat([kept, self.rows_of(moved)])
                        .with_columns(pl.col("setting_id").replace_strict(rank, return_dtype=pl.Int64).alias("_at"))
                        .sort("_at", maintain_order=True).drop("_at"))
            yield rows

    def discard_parts(self) -> None:
        """Delete the parts, once the consolidated table (a finished run's queries.parquet) holds every row."""
        for path, group in self._units:
            if group is None:
                path.unlink(missing_ok=True)


def _row_groups(path: Path) -> int:
    try:
        return pq.ParquetFile(path).num_row_groups
    except (pa.ArrowException, OSError) as exc:
        raise InputError(path, "", f"unreadable per-query table ({exc}): the run's state is lost; start the "
                                   "run again") from None


def _part_number(path: Path) -> int:
    match = re.fullmatch(r"part-(\d+)\.parquet", path.name)
    if match is None:
        raise InputError(path, "", "not a state part's name (part-<number>.parquet): move it out of the state folder")
    return int(match[1])


def load_run_json(run_dir: Path) -> dict:
    path = run_dir / "run.json"
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(path, "", "not a run folder (no run.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, "", f"not valid JSON: {exc}") from None
    if not isinstance(info, dict):
        raise InputError(path, "", f"expected a JSON object, got {type(info).__name__}")
    return info


def setting_knobs(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per setting (setting_id and the knob columns) from per-query rows, in the order settings first
    appear: a frame, not objects, since a run's end holds one row per setting of a million-setting grid."""
    return rows.select("setting_id", *KNOBS).unique("setting_id", keep="first", maintain_order=True)


def knobs_of(settings: pl.DataFrame, setting_id: str) -> Knobs:
    """The knobs of one setting of a `setting_knobs` frame."""
    return Knobs(*settings.row(by_predicate=pl.col("setting_id") == setting_id)[1:])


def grid_table(slice_metrics: pl.DataFrame, settings: pl.DataFrame, verdicts: Verdicts, baseline_id: str,
               metric_names: Sequence[str], stamp: Mapping[str, str]) -> pl.DataFrame:
    """grid.parquet: one row per (setting, slice), settings in evaluation order (the order of `settings`, a
    `setting_knobs` frame, which is the order of `verdicts`' rows). `violations` lists the constraint keys a
    setting breaks, on each of its rows (`recall_at_10[billing]:min`, `mrr[factual]:max_drop`, `incomplete`).

    `stamp` holds the run-wide columns (run_id, config_sha256, golden_sha256).
    """
    per_setting = settings.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("evaluation_order"),
        pl.Series("feasible", verdicts.feasible(), dtype=pl.Boolean),
        verdicts.violations(),
        (pl.col("setting_id") == baseline_id).alias("is_baseline"),
        (pl.col("setting_id") == verdicts.best).alias("is_best") if verdicts.best is not None
        else pl.lit(False).alias("is_best"),
    )
    grid = slice_metrics.join(per_setting, on="setting_id").with_columns(
        pl.lit(stamp["run_id"]).alias("run_id"), pl.lit(stamp["config_sha256"]).alias("config_sha256"),
        pl.lit(stamp["golden_sha256"]).alias("golden_sha256"))
    return grid.select(
        "run_id", "setting_id", *KNOBS, "slice", "queries",
        *metric_names, "errors", "tie_sensitive", "feasible", "violations", "is_baseline", "is_best",
        "evaluation_order", "config_sha256", "golden_sha256",
    ).sort("evaluation_order", "slice")


def golden_table(golden: GoldenSet) -> pl.DataFrame:
    """What each golden query is: its slice, text, expected keys and their grades, in the golden set's order."""
    return pl.DataFrame({
        "query_id": [q.id for q in golden.queries],
        "slice": [q.slice for q in golden.queries],
        "query": [q.query for q in golden.queries],
        "expected": pl.Series([[e.key for e in q.expected] for q in golden.queries], dtype=pl.List(pl.String)),
        "grades": pl.Series([list(q.grades) for q in golden.queries], dtype=pl.List(pl.Int64)),
    })


def query_table(scored: pl.DataFrame, golden: pl.DataFrame, metric_names: Sequence[str], run_id: str) -> pl.DataFrame:
    """queries.parquet: one row per (setting, query), with the query's text, expected keys and their grades, each
    expected key's position, the first relevant rank and every metric's per-query value. `golden` is `golden_table`'s."""
    return (scored.join(golden, on="query_id", how="left", maintain_order="left")
            .with_columns(pl.lit(run_id).alias("run_id"))
            .select("run_id", "setting_id", *KNOBS, "query_id", "slice",
                    "query", "expected", "grades", "positions", "rank", *metric_names, "error", "tie_sensitive"))


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
