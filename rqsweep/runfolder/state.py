"""The resumable state of a run: what it has evaluated, kept so that a killed run resumes where it stopped."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Collection, Iterator, Mapping, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from rqsweep.backends.base import OUTCOME_SCHEMA
from rqsweep.errors import InputError
from rqsweep.files import write_parquet_groups, writing_in
from rqsweep.runfolder.folder import QUERIES, STATE_DIR

# Rows of a part's row groups: a batch of a million (setting, query) rows is turned to Arrow and written a group at a
# time, not beside a whole copy of itself.
PART_ROWS_PER_GROUP = 1 << 16


def whole_settings(rows: pl.DataFrame, at_least: int) -> Iterator[pl.DataFrame]:
    """`rows` (each setting's rows together, as every batch, part and row group holds them) in slices of whole
    settings, each of at least `at_least` rows but the last."""
    ends = np.cumsum(rows["setting_id"].rle().struct.field("len").to_numpy())
    start = 0
    while start < rows.height:
        end = int(ends[min(np.searchsorted(ends, start + at_least), len(ends) - 1)])
        yield rows.slice(start, end - start)
        start = end


class RunState:
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

    @classmethod
    def of(cls, run_dir: Path) -> RunState:
        """The state of a run folder: its `state/` parts, then its queries.parquet."""
        return cls(run_dir / STATE_DIR, OUTCOME_SCHEMA, consolidated=run_dir / QUERIES)

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

    def record(self, rows: pl.DataFrame) -> Path | None:
        """Keep the rows of some settings, every query of each, in a new part; returns its path (None: no rows)."""
        if rows.is_empty():
            return None
        rows = self.as_recorded(rows)
        path = self.folder / f"part-{self._next:06d}.parquet"
        groups = list(whole_settings(rows, PART_ROWS_PER_GROUP))  # slices: views of `rows`
        write_parquet_groups(path, groups, rows_per_group=PART_ROWS_PER_GROUP)
        self._next += 1
        self._units.append((path, None))
        for group in groups:
            self._index(len(self._units) - 1, group)
        return path

    def as_recorded(self, rows: pl.DataFrame) -> pl.DataFrame:
        """Rows as a part holds them: the schema's columns in its types."""
        return rows.select(list(self.schema)).cast(self.schema)

    def made_of(self, parts: Sequence[Path]) -> bool:
        """Whether the state is these parts alone, in this order, each setting in one of them only: then `chunks`
        yields each part's rows as `record` was given them."""
        return self._units == [(p, None) for p in parts] and self._first == self._latest

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
