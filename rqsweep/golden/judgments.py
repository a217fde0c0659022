"""`golden: {judgments: FILE or [FILES]}`: graded (query, item) pairs outside `expected`, as `rqsweep pool` writes
them once a person fills `grade`, or as the judge writes them (`rqsweep.judge`, its `judge` column filled).

A CSV with a header naming query_id, key and grade (other columns, such as the pool's snippet, are read past); a
row whose grade is empty is not graded yet and is skipped. Grades follow the golden set's rules: 1 or more is
relevant, 0 or below is judged not relevant. A person's grade wins over the judge's for the same pair (the two
are compared as agreement, `agreement`); two grades of one pair that differ, by people or by a person and
`expected`, are an error naming both.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from rqsweep.errors import InputError, shown
from rqsweep.golden.rows import decode, grade, read_raw

REQUIRED = ("query_id", "key", "grade")


@dataclass(frozen=True)
class Judgment:
    query_id: str
    key: str
    grade: int
    judge: str  # "" for a person; else the judge that graded it, e.g. "openai-compatible llama3.1:8b"
    file: Path
    where: str  # its line there, for errors


def read_judgments(path: Path) -> tuple[list[Judgment], bytes]:
    """The graded rows of one judgments file, and its bytes (the golden set's hash covers them)."""
    raw = read_raw(path)
    reader = csv.DictReader(io.StringIO(decode(path, raw), newline=""))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(path, "line 1", f"the header names no {', '.join(missing)} (a judgments file has the "
                                         f"columns of `rqsweep pool`'s CSV: {', '.join(REQUIRED)}, judge optional)")
    out = []
    for row in reader:
        where = f"line {reader.line_num}"
        cell = (row.get("grade") or "").strip()
        if not cell:
            continue
        for name in ("query_id", "key"):
            if not (row.get(name) or "").strip():
                raise InputError(path, f"{where}.{name}", f"is empty, for grade {shown(cell)}")
        out.append(Judgment(row["query_id"], row["key"], grade(cell, path, f"{where}.grade"),
                            (row.get("judge") or "").strip(), path, where))
    return out, raw


def merge(judgments: list[Judgment], expected: dict[str, dict[str, int]]) -> list[Judgment]:
    """The judgments a run uses, one per pair, checked against the golden set's `expected` (query id -> key ->
    grade, every query read): a person's over the judge's, and no pair graded two ways by people."""
    people: dict[tuple[str, str], Judgment] = {}
    judged: dict[tuple[str, str], Judgment] = {}
    for j in judgments:
        if j.query_id not in expected:
            raise InputError(j.file, f"{j.where}.query_id", f"{shown(j.query_id)}: no such query in the golden set")
        pair = (j.query_id, j.key)
        labelled = expected[j.query_id].get(j.key)
        if labelled is not None and labelled != j.grade and not j.judge:
            raise InputError(j.file, f"{j.where}.grade", f"{j.grade}: key {shown(j.key)} of query {shown(j.query_id)} "
                                                         f"is graded {labelled} in the golden set's expected")
        if labelled is not None:
            continue
        held = people if not j.judge else judged
        first = held.setdefault(pair, j)
        if first.grade != j.grade and not j.judge:
            raise InputError(j.file, f"{j.where}.grade", f"{j.grade}: key {shown(j.key)} of query {shown(j.query_id)} "
                                                         f"is graded {first.grade} at {first.file.name} {first.where}")
    return [*people.values(), *(j for pair, j in judged.items() if pair not in people)]
