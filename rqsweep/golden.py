"""Golden sets: labelled queries `{slice, query, expected}` in rqsweep's format or SOAT's golden.json."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from rqsweep.corpus import Corpus, corpus_from_rows
from rqsweep.errors import InputError, shown
from rqsweep.files import read_data

OVERALL = "overall"
SOAT_GOLDEN_VERSIONS = (1,)  # versions of SOAT's golden.json whose layout this module reads
SourceType = Literal["document", "memory"]


@dataclass(frozen=True)
class Expected:
    source_type: SourceType
    key: str


@dataclass(frozen=True)
class GoldenQuery:
    id: str
    slice: str
    query: str
    expected: tuple[Expected, ...]


@dataclass(frozen=True)
class GoldenSet:
    path: Path
    sha256: str
    queries: tuple[GoldenQuery, ...]
    corpus: Corpus | None  # SOAT's golden.json carries its corpus inline
    warnings: tuple[str, ...]

    @cached_property
    def slices(self) -> list[str]:
        return sorted({q.slice for q in self.queries})


def _string(row: dict, name: str, path: Path, where: str) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, f"{where}.{name}", f"expected a non-empty string, got {shown(value)}")
    return value


def _own_rows(rows: object, path: Path) -> list[tuple[str, str, str, list[tuple[str | None, str]]]]:
    if not isinstance(rows, list):
        raise InputError(path, "", "expected a list of {id?, slice, query, expected} rows")
    out = []
    for i, row in enumerate(rows):
        where = f"[{i}]"
        if not isinstance(row, dict):
            raise InputError(path, where, f"expected a mapping, got {shown(row)}")
        unknown = sorted(set(row) - {"id", "slice", "query", "expected"})
        if unknown:
            raise InputError(path, f"{where}.{unknown[0]}", "unknown field (allowed: id, slice, query, expected)")
        qid = row.get("id", f"q{i + 1:04d}")
        if not isinstance(qid, (str, int)) or isinstance(qid, bool):
            raise InputError(path, f"{where}.id", f"expected a string, got {shown(qid)}")
        expected = row.get("expected")
        keys = expected if isinstance(expected, list) else [expected]
        if not keys or not all(isinstance(k, str) and k for k in keys):
            raise InputError(path, f"{where}.expected",
                             f"expected a key or a non-empty list of keys, got {shown(expected)}")
        out.append((str(qid), _string(row, "slice", path, where), _string(row, "query", path, where),
                    [(None, k) for k in keys]))
    return out


def _soat_rows(data: dict, path: Path) -> list[tuple[str, str, str, list[tuple[str | None, str]]]]:
    queries = data.get("queries")
    if not isinstance(queries, list):
        raise InputError(path, "queries", "expected a list")
    out = []
    for i, row in enumerate(queries):
        where = f"queries[{i}]"
        if not isinstance(row, dict):
            raise InputError(path, where, f"expected a mapping, got {shown(row)}")
        expected = row.get("expected")
        if not isinstance(expected, list) or not expected:
            raise InputError(path, f"{where}.expected", f"expected a non-empty list, got {shown(expected)}")
        items = []
        for j, item in enumerate(expected):
            ewhere = f"{where}.expected[{j}]"
            if not isinstance(item, dict) or item.get("source_type") not in ("document", "memory"):
                raise InputError(path, ewhere, f"expected {{source_type: document|memory, key}}, got {shown(item)}")
            items.append((item["source_type"], _string(item, "key", path, ewhere)))
        out.append((_string(row, "id", path, where), _string(row, "kind", path, where),
                    _string(row, "query", path, where), items))
    return out


def _check_soat_version(data: dict, path: Path) -> None:
    """Refuse a golden.json of another version: its fields could mean something else than we read."""
    version = data.get("version")
    if isinstance(version, bool) or version not in SOAT_GOLDEN_VERSIONS:
        found = shown(version) if "version" in data else "missing"
        supported = ", ".join(str(v) for v in SOAT_GOLDEN_VERSIONS)
        raise InputError(path, "version",
                         f"{found}: not a SOAT golden-set version rqsweep reads (supported: {supported})")


def load_golden(path: Path, corpus: Corpus | None = None) -> GoldenSet:
    """Load and validate a golden set against its corpus (given, or inline in SOAT's format).

    Every expected key must exist, ids must be unique and slice names non-empty; duplicate
    query texts are allowed but reported in `warnings`.
    """
    raw, data = read_data(path, "golden set")
    inline = None
    if isinstance(data, dict) and "queries" in data:
        _check_soat_version(data, path)
        c = data.get("corpus")
        if not isinstance(c, dict):
            raise InputError(path, "corpus", "SOAT golden.json needs a `corpus` with documents and memories")
        inline = corpus_from_rows(c.get("documents", []), c.get("memories", []), path)
        rows = _soat_rows(data, path)
    else:
        rows = _own_rows(data, path)
    if corpus is None:
        corpus = inline
    if corpus is None:
        raise InputError(path, "", "no corpus: name one in the config, or use SOAT's golden.json with its corpus")
    types = {d.key: "document" for d in corpus.documents} | {m.key: "memory" for m in corpus.memories}
    if not rows:
        raise InputError(path, "", "the golden set has no queries")
    queries, ids = [], {}
    for i, (qid, slice_, text, items) in enumerate(rows):
        where = f"queries[{i}]" if inline is not None else f"[{i}]"
        if qid in ids:
            raise InputError(path, f"{where}.id", f"duplicate query id {shown(qid)} (first at {ids[qid]})")
        ids[qid] = where
        if slice_ == OVERALL:
            raise InputError(path, f"{where}.slice", f"{OVERALL!r} is reserved for the figure over all queries")
        expected = []
        for j, (stype, key) in enumerate(items):
            if key not in types:
                raise InputError(path, f"{where}.expected[{j}]",
                                 f"key {shown(key)} (query {shown(qid)}) does not exist in the corpus")
            if stype is not None and stype != types[key]:
                raise InputError(path, f"{where}.expected[{j}]", f"key {shown(key)} is a {types[key]}, not a {stype}")
            expected.append(Expected(types[key], key))
        queries.append(GoldenQuery(qid, slice_, text, tuple(dict.fromkeys(expected))))
    dupes = [t for t, n in Counter(q.query for q in queries).items() if n > 1]
    warnings = tuple(f"query text {shown(t)} appears more than once" for t in dupes)
    return GoldenSet(path, hashlib.sha256(raw).hexdigest(), tuple(queries), inline, warnings)
