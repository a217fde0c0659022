"""rqsweep's own golden rows: YAML or JSON lines, and CSV or TSV with named columns. A row may name the generator
that drafted it (`synthetic`, as `rqsweep draft` writes it); a person's row leaves it out."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from rqsweep.errors import InputError, shown
from rqsweep.golden.rows import Layout, Row, decode, grade, text, unsupported

FIELDS = ("id", "slice", "query", "expected", "synthetic")


def _expected(value: object, path: Path, where: str) -> list[tuple[str | None, str, int]]:
    """A key, a list of keys (grade 1 each), or a mapping key -> grade (a CSV cell's (key, grade) pairs)."""
    if value is None:
        raise InputError(path, where, "is empty or missing")
    pairs = value.items() if isinstance(value, dict) else value if isinstance(value, tuple) else None
    if pairs is not None:
        items = [(k, grade(g, path, f"{where}.{k}")) for k, g in pairs]
    else:
        items = [(k, 1) for k in (value if isinstance(value, list) else [value])]
    if not items or not all(isinstance(k, str) and k for k, _ in items):
        raise InputError(path, where, f"expected a key, a non-empty list of keys or a mapping key -> grade, "
                                      f"got {shown(value)}")
    return [(None, k, g) for k, g in items]


def _rows(rows: list[tuple[object, str]], path: Path) -> list[Row]:
    """Rows of (row, where it is). Every row gives an id, or none does: a default id (q0001, ...) could be
    another row's."""
    named = next((where for row, where in rows if isinstance(row, dict) and "id" in row), None)
    return [_row(row, i, path, where, named) for i, (row, where) in enumerate(rows)]


def _row(row: object, i: int, path: Path, where: str, named: str | None) -> Row:
    if not isinstance(row, dict):
        raise InputError(path, where, f"expected a mapping, got {shown(row)}")
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise InputError(path, f"{where}.{unknown[0]}", f"unknown field (allowed: {', '.join(FIELDS)})")
    if named and "id" not in row:
        raise InputError(path, f"{where}.id", f"no id, where {named} has one: give every row an id, or none")
    qid = row.get("id", f"q{i + 1:04d}")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool):
        raise InputError(path, f"{where}.id", f"expected a string, got {shown(qid)}")
    slice_ = text(row, "slice", path, where) if row.get("slice") is not None else None
    synthetic = text(row, "synthetic", path, where) if row.get("synthetic") is not None else None
    return Row(path, where, str(qid), slice_, text(row, "query", path, where),
               _expected(row.get("expected"), path, f"{where}.expected"), synthetic=synthetic)


def read_rows(path: Path, data: object, raw: bytes) -> Layout:
    """rqsweep's rows, as YAML or JSON (lines) gave them."""
    if not isinstance(data, list):
        raise unsupported(path, f"expected a list of {{id?, slice, query, expected}} rows, got {shown(data, 40)}")
    return Layout("rqsweep", _rows([(row, f"[{i}]") for i, row in enumerate(data)], path), None, [raw])


def _split_keys(cell: str) -> tuple[tuple[str, str], ...] | list[str]:
    """`a;b` -> [a, b]; `a=3;b=1` -> ((a, "3"), (b, "1")) (every key graded, or none)."""
    keys = [k.strip() for k in cell.split(";") if k.strip()]
    if keys and all("=" in k for k in keys):
        return tuple((k.rpartition("=")[0].strip(), k.rpartition("=")[2].strip()) for k in keys)
    return keys


def read_table(path: Path, raw: bytes) -> Layout:
    """CSV (.csv) or TSV (.tsv) with a header row naming its columns: query and expected, id, slice and synthetic
    optional."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.DictReader(io.StringIO(decode(path, raw), newline=""), delimiter=delimiter)
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in ("query", "expected") if c not in header]
    if missing:
        line = delimiter.join(header)
        other = next((s for s in ";,\t" if s != delimiter and {"query", "expected"} <= {c.strip() for c in
                                                                                     line.split(s)}), None)
        if other:
            raise InputError(path, "line 1", f"the header {shown(line, 60)} separates its columns with {other!r}: a "
                                             ".csv file's columns are separated by ',' and a .tsv file's by tabs (';' "
                                             "separates the keys of an expected cell)")
        raise unsupported(path, f"line 1: the header {shown(','.join(header), 60)} names no {' and no '.join(missing)} "
                                "column")
    unknown = [h for h in header if h not in FIELDS]
    if unknown:
        raise InputError(path, "line 1", f"unknown column {shown(unknown[0])} (allowed: {', '.join(FIELDS)})")
    twice = [n for n, h in enumerate(header, 1) if h in header[:n - 1]]
    if twice:  # DictReader would keep the last column of that name, silently
        name = header[twice[0] - 1]
        raise InputError(path, "line 1", f"column {shown(name)} is named twice (columns {header.index(name) + 1} and "
                                         f"{twice[0]})")
    reader.fieldnames = header
    rows = []
    for cells in reader:
        where = f"line {reader.line_num}"
        if None in cells:
            raise InputError(path, where, f"{len(header) + len(cells[None])} cells, the header names {len(header)}")
        row = {k: v.strip() for k, v in cells.items() if v is not None and v.strip()}
        if "expected" in row:
            keys = row["expected"]
            row["expected"] = _split_keys(keys)
            if isinstance(row["expected"], list) and "=" in keys:
                raise InputError(path, f"{where}.expected", f"{shown(keys)}: grade every key (key=grade) or none")
        rows.append((row, where))
    return Layout("CSV" if path.suffix.lower() == ".csv" else "TSV", _rows(rows, path), None, [raw])
