"""A golden set as its layout gives it, before validation: rows of id, slice, query and graded keys."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rqsweep.corpus import Corpus
from rqsweep.errors import InputError, shown

# Said by every refusal of a layout, so that the user learns what would have been read.
FORMATS = ("formats read: rqsweep's rows in YAML or JSON lines (.yaml, .yml, .jsonl: {id?, slice, query, expected}); "
           "CSV or TSV with a header naming query and expected (id, slice and synthetic optional, ';' between keys, key=grade "
           "for a grade); SOAT's golden.json (versions 1 to 4); a BEIR folder (corpus.jsonl, queries.jsonl, "
           "qrels/<split>.tsv); TREC qrels with a topics file (golden: {path: QRELS, topics: TOPICS})")


@dataclass
class Row:
    file: Path  # where the row was read, for errors
    where: str  # its key path or line there
    id: str
    slice: str | None  # None: the layout has none (BEIR, TREC) and the config's slice rule gives it
    query: str
    expected: list[tuple[str | None, str, int]]  # (source type when the layout says it, key, grade)
    fields: dict = field(default_factory=dict)  # the query's other fields, for a slice rule by field
    synthetic: str | None = None  # the generator that drafted the row (`rqsweep draft`); None: written by a person


@dataclass
class Layout:
    name: str  # e.g. "BEIR (split test)"
    rows: list[Row]
    corpus: Corpus | None  # when the layout carries its corpus
    raw: list[bytes]  # every file read, in a fixed order: what the golden set's hash covers
    unjudged: tuple[str, ...] = ()  # ids of a qrels layout's queries that its qrels do not judge (not run)


def read_raw(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(path, "", f"cannot read golden set: {exc.strerror}") from None


def decode(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, "", f"not UTF-8 text (byte {exc.start})") from None


def unsupported(path: Path, what: str) -> InputError:
    return InputError(path, "", f"{what}; {FORMATS}")


def text(row: dict, name: str, path: Path, where: str) -> str:
    value = row.get(name)
    if value is None:  # a key with nothing after it in YAML, an empty CSV cell: not the "None" a message would echo
        raise InputError(path, f"{where}.{name}", "is empty or missing")
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, f"{where}.{name}", f"expected a non-empty string, got {shown(value)}")
    return value


def is_grade(cell: str) -> bool:
    """An integer grade written as text (`str.isdigit` also takes `²`, which `int` refuses)."""
    return re.fullmatch(r"\s*-?[0-9]+\s*", cell) is not None


_GRADES = range(-2**63, 2**63)  # what the runs' Int64 columns hold


def grade(value: object, path: Path, where: str) -> int:
    """A relevance grade: an integer (qrels write them as text)."""
    number = int(value) if isinstance(value, str) and is_grade(value) else value
    if isinstance(number, bool) or not isinstance(number, int):
        raise InputError(path, where, f"expected an integer relevance grade, got {shown(value)}")
    if number not in _GRADES:
        raise InputError(path, where, f"{number}: a relevance grade must fit in 64 bits (-2**63 to 2**63 - 1)")
    return number
