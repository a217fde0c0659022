"""File I/O in one place: reading the files users hand rqsweep (with their encoding and syntax errors), and
writing every output atomically.

YAML files may not use aliases (`*name`): a 1 kB file of nested aliases ("billion laughs") expands to
gigabytes as soon as its value is copied or printed, so they are refused before any value is built.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rqsweep.errors import InputError, OutputError, shown


class _Alias(Exception):
    def __init__(self, where: str):
        self.where = where


class _DuplicateKey(Exception):
    def __init__(self, where: str, line: int, first: int):
        self.where, self.line, self.first = where, line, first


class _BadDate(Exception):
    def __init__(self, where: str, node: ScalarNode, problem: str):
        self.where, self.value, self.line, self.problem = where, node.value, node.start_mark.line + 1, problem


_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def _check_nodes(root: Node) -> dict[int, str]:
    """Refuse aliases and duplicate keys, walking the composed nodes in document order; returns the key path of
    each date or time (by node id), for the error of an impossible one.

    An alias is a node met twice. YAML keeps the last of two equal keys, silently; here they are an error.
    """
    dates = {}
    seen: set[int] = set()
    stack = [(root, "")]
    while stack:
        node, where = stack.pop()
        if id(node) in seen:
            raise _Alias(where)
        seen.add(id(node))
        if isinstance(node, MappingNode):
            children, lines = [], {}
            for key, value in node.value:
                name = key.value if isinstance(key, ScalarNode) else "?"
                path = f"{where}.{name}" if where else name
                if isinstance(key, ScalarNode):
                    if (key.tag, key.value) in lines:
                        raise _DuplicateKey(path, key.start_mark.line + 1, lines[key.tag, key.value])
                    lines[key.tag, key.value] = key.start_mark.line + 1
                children += [(key, path), (value, path)]
            stack.extend(reversed(children))
        elif isinstance(node, SequenceNode):
            stack.extend(reversed([(child, f"{where}[{i}]") for i, child in enumerate(node.value)]))
        elif node.tag == _TIMESTAMP:
            dates[id(node)] = where
    return dates


# libyaml's parser where PyYAML has it: 2.4x less CPU on large golden sets (benchmarks/HISTORY.md), and it
# refuses deep nesting with a YAMLError where the pure-Python parser recurses into a RecursionError.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UserLoader(_SafeLoader):
    """YAML's safe loader, checking the composed document before it builds any value."""

    def construct_document(self, node: Node) -> object:
        self._dates = _check_nodes(node)
        return super().construct_document(node)

    def construct_yaml_timestamp(self, node: ScalarNode) -> object:
        """YAML's date or time; an impossible one (2026-02-30) is a ValueError that names no file, made a _BadDate."""
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            raise _BadDate(self._dates[id(node)], node, str(exc)) from None


_UserLoader.add_constructor(_TIMESTAMP, _UserLoader.construct_yaml_timestamp)


def _first_alias_line(text: str) -> int:
    """The 1-based line of the document's first alias (node marks give the anchor's line, not the alias's)."""
    events = yaml.parse(text, Loader=_SafeLoader)
    return next(e.start_mark.line + 1 for e in events if isinstance(e, yaml.AliasEvent))


def read_data(path: Path, what: str) -> tuple[bytes, object]:
    """The bytes and the parsed content of a YAML, JSON or JSON-lines file (chosen by its suffix).

    Every failure is an `InputError` naming the file (and the line where the parser says).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, "", f"cannot read {what}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "", f"not UTF-8 text (byte {exc.start})") from None
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(path, f"line {n}", f"not valid JSON: {exc.msg}") from None
        return raw, rows
    if suffix == ".json":
        try:
            return raw, json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, "", f"not valid JSON: {exc.msg} (line {exc.lineno})") from None
        except RecursionError:
            raise InputError(path, "", "not valid JSON: nested too deeply") from None
    return raw, load_yaml(text, path)


def json_lines(path: Path, what: str) -> Iterator[tuple[int, object]]:
    """`read_data`'s rows of a JSON-lines file, each with its line number, read a line at a time (a corpus file
    can be larger than the memory its rows take once read). Its errors, and the first in the file is raised."""
    try:
        file = path.open("rb")
    except OSError as exc:
        raise InputError(path, "", f"cannot read {what}: {exc.strerror}") from None
    with file:
        n = offset = 0
        for raw in file:  # cut at b"\n" only: no UTF-8 sequence holds that byte
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(path, "", f"not UTF-8 text (byte {offset + exc.start})") from None
            offset += len(raw)
            for line in text.splitlines():  # str.splitlines' line ends, as read_data counts them
                n += 1
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise InputError(path, f"line {n}", f"not valid JSON: {exc.msg}") from None
                    yield n, row


def load_yaml(text: str, path: Path) -> object:
    """YAML text read from `path` (a whole file, or a page's front matter): aliases and duplicate keys refused."""
    try:
        return yaml.load(text, Loader=_UserLoader)
    except _Alias as exc:
        raise InputError(path, exc.where, f"a YAML alias (line {_first_alias_line(text)}): rqsweep's files accept "
                                          "no YAML aliases (*name); write the value out") from None
    except _DuplicateKey as exc:
        raise InputError(path, exc.where, f"duplicate key (line {exc.line}; first at line {exc.first})") from None
    except _BadDate as exc:
        raise InputError(path, exc.where, f"{shown(exc.value)}: not a valid date or time ({exc.problem}; line "
                                          f"{exc.line}); quote it if it is text") from None
    except yaml.YAMLError as exc:
        raise InputError(path, "", f"not valid YAML: {exc}") from None


@contextlib.contextmanager
def writing_in(folder: Path, name: str | None = None) -> Iterator[None]:
    """Turn the block's OSError (a read-only folder, a full disk, a file-size limit) into an OutputError naming
    the folder, and the file `name` in it when given."""
    try:
        yield
    except OSError as exc:
        what = f"cannot write {name} in {folder}" if name else f"cannot write in {folder}"
        raise OutputError(f"{what}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _atomic(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` to write; fsynced and renamed onto `path` when the block ends well."""
    with writing_in(path.parent, path.name):
        path.parent.mkdir(parents=True, exist_ok=True)
        # Created as any new file is, 0666 less the umask (mkstemp's files are 0600 whatever the umask); the
        # kernel applies the umask, so it is never read (reading it means setting it, for every thread).
        tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        try:
            yield tmp
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # a read-only folder refuses this too
                tmp.unlink(missing_ok=True)
            raise


@contextlib.contextmanager
def reading_parquet(path: Path) -> Iterator[None]:
    """Turn what a damaged Parquet file makes polars or pyarrow raise (truncated, random bytes) into an InputError
    naming the file."""
    try:
        yield
    except FileNotFoundError:
        raise InputError(path, "", "missing") from None
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, pa.ArrowException, OSError) as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(path, "", f"damaged: cannot be read as Parquet ({detail}); restore it from a copy, "
                                   "or run again") from None


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically: a temporary file in the same folder, fsynced, then renamed."""
    with _atomic(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write numpy arrays atomically as one .npz file (read back with `np.load`)."""
    with _atomic(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def write_json(path: Path, data: object) -> None:
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def _plain(kind: pa.DataType) -> pa.DataType:
    """polars' large_string and large_list as plain string and list, which read everywhere (older readers too)."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_list(kind) or pa.types.is_list(kind):
        return pa.list_(pa.field(kind.value_field.name, _plain(kind.value_type)))
    return kind


def _arrow(frame: pl.DataFrame, metadata: dict[str, str] | None) -> pa.Table:
    table = frame.to_arrow()
    table = table.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in table.schema]))
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    return table


ROWS_PER_WRITE = 1 << 16


def write_parquet(path: Path, frame: pl.DataFrame, metadata: dict[str, str] | None = None) -> None:
    """`frame` as a Parquet file, turned to Arrow (a copy) ROWS_PER_WRITE rows at a time: grid.parquet's whole copy
    was 0.3 GB at 100,000 settings. Each slice is gathered first, since a slice of a list column holds all of its
    child values, and Arrow would copy them all for every slice."""
    write_parquet_groups(path, (frame[lo:lo + ROWS_PER_WRITE].select(pl.all().gather(pl.int_range(pl.len())))
                                for lo in range(0, max(frame.height, 1), ROWS_PER_WRITE)), metadata, ROWS_PER_WRITE)


class ParquetGroups:
    """A Parquet file written atomically from frames made one at a time, so that the whole table is never in memory:
    `add` each frame, then `close` (the file appears at `path`) or `abandon` (nothing appears). A run's job keeps one
    open through its evaluation, so the file is written as the rows are made.

    Frames (all of one schema) are gathered into row groups of at least `rows_per_group` rows (the last may be
    smaller) and a frame is never split: a reader of one row group gets whole frames.
    `statistics`: the columns whose row groups get min/max statistics (all when True), which let a filtered
    read skip row groups; the data, schema and metadata do not depend on it.
    """

    def __init__(self, path: Path, metadata: dict[str, str] | None = None, rows_per_group: int = 1 << 20,
                 statistics: bool | list[str] = True):
        self.path, self._metadata, self._rows_per_group, self._statistics = path, metadata, rows_per_group, statistics
        self._files = contextlib.ExitStack()
        self._tmp = self._files.enter_context(_atomic(path))
        # pyarrow writes a row group on a thread (it releases the GIL) while the next frames are made: at most one
        # row group is written while the next is gathered.
        self._background = self._files.enter_context(ThreadPoolExecutor(1))
        self._writer: pq.ParquetWriter | None = None
        self._writing: Future | None = None
        self._pending: list[pl.DataFrame] = []
        self._held = 0

    def add(self, frame: pl.DataFrame) -> None:
        self._pending.append(frame)
        self._held += frame.height
        if self._held >= self._rows_per_group:
            with self._failing():
                self._flush()

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """An error of the block abandons the file, through the atomic write (which names the file of an OSError)."""
        try:
            yield
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self._end()
            if not self._files.__exit__(type(exc), exc, exc.__traceback__):
                raise

    def _flush(self) -> None:
        table = _arrow(pl.concat(self._pending), self._metadata)
        self._pending, self._held = [], 0
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._tmp, table.schema, write_statistics=self._statistics)
        else:
            table = table.cast(self._writer.schema)
        if self._writing is not None:
            self._writing.result()
        self._writing = self._background.submit(self._writer.write_table, table,
                                                row_group_size=max(table.num_rows, 1))

    def close(self) -> Path:
        """Write what is gathered and put the file in place; ValueError when no frame was added."""
        with self._failing():
            if self._pending:
                self._flush()
            if self._writer is None:
                raise ValueError(f"no rows to write to {self.path}")
            self._end()
        self._files.close()
        return self.path

    def abandon(self) -> None:
        """Leave nothing behind (the temporary file is deleted); a no-op once closed or abandoned."""
        with contextlib.suppress(Exception):  # the error of a row group being written is moot
            self._end()
        self._files.__exit__(_Abandoned, _Abandoned(), None)

    def _end(self) -> None:
        """Wait for the row group being written (raising its error) and close the writer."""
        writing, writer, self._writing, self._writer = self._writing, self._writer, None, None
        try:
            if writing is not None:
                writing.result()
        finally:
            # Never close the writer under its row group being written (pyarrow then crashes): a signal can land
            # in the wait above, and its exception comes here first.
            if writing is not None:
                wait([writing])
            if writer is not None:
                writer.close()


class _Abandoned(Exception):
    """Thrown into the atomic write of an abandoned `ParquetGroups`, so that it deletes its temporary file."""


def write_parquet_groups(path: Path, frames: Iterable[pl.DataFrame], metadata: dict[str, str] | None = None,
                         rows_per_group: int = 1 << 20, statistics: bool | list[str] = True) -> None:
    """Write a Parquet file atomically from frames made one at a time (at least one), as `ParquetGroups` does."""
    groups = ParquetGroups(path, metadata, rows_per_group, statistics)
    try:
        for frame in frames:
            groups.add(frame)
    except BaseException:
        groups.abandon()
        raise
    groups.close()


ROWS_PER_PASS = 1_000_000


def in_passes(frame: pl.LazyFrame, *columns: str) -> Iterator[pl.DataFrame]:
    """`frame`'s `columns`, ROWS_PER_PASS rows at a time: what is aggregated pass by pass holds one pass's rows,
    where label health's whole scan of queries.parquet at 100,000 settings held every row's strings at once
    (1.7 GB). An empty frame is one empty pass."""
    for start in range(0, max(frame.select(pl.len()).collect().item(), 1), ROWS_PER_PASS):
        yield frame.slice(start, ROWS_PER_PASS).select(*columns).collect()
