"""The corpus SOAT searches: documents (cut into chunks) and memories (short facts with ages), from the rows of
rqsweep's corpus files (YAML, JSON, JSON lines) and of the golden layouts that carry a corpus."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from functools import cached_property
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Mapping

from rqsweep.config import Chunking
from rqsweep.errors import InputError, shown
from rqsweep.files import read_data

_ROWS_HASHED_AT_ONCE = 4096


# Slots: a million documents or chunks cost about 60 bytes less each than with an instance dict.
@dataclass(frozen=True, slots=True)
class Document:
    key: str
    content: str
    path: str = ""
    title: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Memory:
    key: str
    content: str
    store: str = "default"
    tags: Mapping[str, str] = field(default_factory=dict)
    age_days: float = 0.0


@dataclass(frozen=True)
class Corpus:
    documents: tuple[Document, ...]
    memories: tuple[Memory, ...]

    def keys(self) -> set[str]:
        return {d.key for d in self.documents} | {m.key for m in self.memories}

    @cached_property
    def sha256(self) -> str:
        """Of what is searched, however it was written (its own file or inline in SOAT's golden.json): two runs
        with the same hash searched the same documents and memories."""
        # The bytes of json.dumps([[documents], [memories]]), made a block of rows at a time: the whole text
        # of a million-chunk corpus would take about its file's size twice over, beside the corpus.
        digest = hashlib.sha256(b"[")
        for n, items in enumerate((self.documents, self.memories)):
            digest.update(b", [" if n else b"[")
            names = [f.name for f in fields(type(items[0]))] if items else []
            for lo in range(0, len(items), _ROWS_HASHED_AT_ONCE):
                # asdict's rows, without its deep copies: one dumps per block, its brackets cut.
                rows = [{name: getattr(item, name) for name in names} for item in items[lo:lo + _ROWS_HASHED_AT_ONCE]]
                text = json.dumps(rows, sort_keys=True, ensure_ascii=False)[1:-1]
                digest.update(((", " if lo else "") + text).encode())
            digest.update(b"]")
        digest.update(b"]")
        return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Chunk:
    chunk_id: str
    document_key: str
    content: str


def _utf16_slices(text: str, size: int, step: int) -> list[str]:
    """JavaScript's `text.slice(s, s + size)` for s = 0, step, ... while s < length, in UTF-16 units."""
    if all(ord(c) < 0x10000 for c in text):
        return [text[s : s + size] for s in range(0, len(text), step)]
    units = text.encode("utf-16-le", "surrogatepass")
    n = len(units) // 2
    # A window can split a surrogate pair; the lone half reaches the server as U+FFFD.
    return [
        units[2 * s : 2 * min(s + size, n)].decode("utf-16-le", "replace")
        for s in range(0, n, step)
    ]


def chunk_document(doc: Document, chunking: Chunking) -> list[Chunk]:
    """SOAT's chunk strategies: `whole` is one chunk; `size` is overlapping fixed windows."""
    if chunking.strategy == "whole":
        pieces = [doc.content]
    else:
        pieces = _utf16_slices(doc.content, chunking.chunk_size, chunking.chunk_size - chunking.chunk_overlap)
    return [Chunk(f"{doc.key}#{i}", doc.key, piece) for i, piece in enumerate(pieces)]


def memory_updated_at(memory: Memory, now: datetime) -> datetime:
    """The `updated_at` a memory of this age has, from one clock reading (SOAT's eval backdates this way)."""
    return now - timedelta(milliseconds=round(memory.age_days * 86_400_000))


_NO_TAGS: Mapping[str, str] = {}  # shared by every row without tags (a mapping nothing writes to): 64 bytes each


def _tags(value: object, file: Path, where: str) -> Mapping[str, str]:
    if value is None:
        return _NO_TAGS
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError(file, where, f"tags must map strings to strings, got {shown(value)}")
    return dict(value)


def _text(row: dict, name: str, file: Path, where: str, *, required: bool = True) -> str:
    value = row.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InputError(file, f"{where}.{name}", f"expected a non-empty string, got {shown(value)}")
    return value


def _known_fields(row: object, allowed: set[str], file: Path, where: str) -> dict:
    if not isinstance(row, dict):
        raise InputError(file, where, f"expected a mapping, got {shown(row)}")
    unknown = sorted(set(row) - allowed)
    if unknown:
        raise InputError(file, f"{where}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    return row


def age_days(value: object, file: Path, where: str) -> float:
    """A memory's age in days, as a corpus row or a page's front matter gives it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise InputError(file, where, f"expected a finite number >= 0, got {shown(value)}")
    return float(value)


def corpus_from_rows(documents: object, memories: object, file: Path,
                     where_is: Callable[[str, int], str] = lambda kind, i: f"{kind}[{i}]") -> Corpus:
    """Validate raw document and memory rows (rqsweep's format and SOAT's golden corpus alike); `where_is` names
    the i-th row of a kind in errors."""
    if not isinstance(documents, list) or not isinstance(memories, list):
        raise InputError(file, "corpus", "expected lists under `documents` and `memories`")
    docs, mems, seen = [], [], {}
    for i, row in enumerate(documents):
        where = where_is("documents", i)
        row = _known_fields(row, {"key", "path", "title", "content", "tags", "metadata"}, file, where)
        docs.append(Document(
            key=_text(row, "key", file, where), content=_text(row, "content", file, where),
            path=_text(row, "path", file, where, required=False), title=_text(row, "title", file, where, required=False),
            tags=_tags(row.get("tags"), file, f"{where}.tags"),
        ))
    for i, row in enumerate(memories):
        where = where_is("memories", i)
        row = _known_fields(row, {"key", "content", "tags", "age_days", "memory", "store"}, file, where)
        age = age_days(row.get("age_days", 0), file, f"{where}.age_days")
        store = row.get("store", row.get("memory", "default"))
        if not isinstance(store, str) or not store:
            raise InputError(file, f"{where}.store", f"expected a store name, got {shown(store)}")
        mems.append(Memory(
            key=_text(row, "key", file, where), content=_text(row, "content", file, where),
            store=store, tags=_tags(row.get("tags"), file, f"{where}.tags"), age_days=age,
        ))
    for where, item in [(where_is("documents", i), d) for i, d in enumerate(docs)] + [
        (where_is("memories", i), m) for i, m in enumerate(mems)
    ]:
        if item.key in seen:
            raise InputError(file, f"{where}.key", f"duplicate key {shown(item.key)} (first at {seen[item.key]})")
        seen[item.key] = where
    return Corpus(tuple(docs), tuple(mems))


def _corpus_lines(rows: list, file: Path) -> tuple[list, list, Callable[[str, int], str]]:
    """JSON lines of documents and memories: each row a document unless its `source_type` says memory."""
    kinds: dict[str, list] = {"documents": [], "memories": []}
    lines: dict[str, list[int]] = {"documents": [], "memories": []}
    for n, row in enumerate(rows, 1):
        row = _known_fields(row, {"source_type", "key", "path", "title", "content", "tags", "metadata", "age_days",
                                  "memory", "store"}, file, f"line {n}")
        kind = {"document": "documents", "memory": "memories"}.get(row.get("source_type", "document"))
        if kind is None:
            raise InputError(file, f"line {n}.source_type", f"expected document or memory, got "
                                                            f"{shown(row['source_type'])}")
        kinds[kind].append({k: v for k, v in row.items() if k != "source_type"})
        lines[kind].append(n)
    return kinds["documents"], kinds["memories"], lambda kind, i: f"line {lines[kind][i]}"


def read_corpus_file(path: Path) -> Corpus:
    """rqsweep's corpus file: YAML or JSON with `documents` and `memories`, or JSON lines of both."""
    _, data = read_data(path, "corpus")
    if path.suffix.lower() == ".jsonl":
        documents, memories, where_is = _corpus_lines(data, path)
        return corpus_from_rows(documents, memories, path, where_is)
    data = _known_fields(data, {"documents", "memories"}, path, "")
    return corpus_from_rows(data.get("documents", []), data.get("memories", []), path)
