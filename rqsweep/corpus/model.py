"""The corpus SOAT searches: documents (cut into chunks) and memories (short facts with ages), from the rows of
rqsweep's corpus files (YAML, JSON, JSON lines) and of the golden layouts that carry a corpus."""

from __future__ import annotations

import hashlib
import json
import math
from array import array
from itertools import chain
from dataclasses import dataclass, field, fields
from functools import cached_property
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from rqsweep.config import Chunking
from rqsweep.corpus.texts import ROWS_READ_AT_ONCE, Texts, TextsWriter, sequence_equal
from rqsweep.errors import InputError, shown
from rqsweep.files import json_lines, read_data

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


class Table(Sequence):
    """Rows of one kind (`Document` or `Memory`) as columns: the contents in a `Texts` file, the other fields
    (keys, paths, titles, stores, tags, ages: a few dozen bytes a row) in lists. A row is made when it is read;
    iteration reads the contents a portion at a time, and a slice is a view that reads nothing."""

    def __init__(self, kind: type, columns: Mapping[str, list], contents: Texts):
        self.kind, self.columns, self.contents = kind, dict(columns), contents

    @classmethod
    def of(cls, kind: type, items: Iterable) -> "Table":
        builder = TableBuilder(kind)
        builder.add(items)
        return builder.finish()

    def __len__(self) -> int:
        return len(self.contents)

    def _row(self, i: int, content: str):
        return self.kind(content=content, **{name: column[i] for name, column in self.columns.items()})

    def __getitem__(self, i):
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            if step != 1:
                return Table.of(self.kind, [self[j] for j in range(lo, hi, step)])
            return Table(self.kind, {name: column[lo:hi] for name, column in self.columns.items()},
                         self.contents.view(lo, hi))
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self._row(i, self.contents[i])

    def __iter__(self) -> Iterator:
        lo = 0
        for contents in self.contents.portions():
            yield from map(self._row, range(lo, lo + len(contents)), contents)
            lo += len(contents)

    __eq__ = sequence_equal
    __hash__ = None

    def __repr__(self) -> str:
        return f"Table({self.kind.__name__}, {len(self)} rows)"


class TableBuilder:
    """A `Table` made a portion of rows at a time: each portion's contents go to the file as it is added."""

    def __init__(self, kind: type):
        self.kind = kind
        self.columns: dict[str, list] = {f.name: [] for f in fields(kind) if f.name != "content"}
        self._contents = TextsWriter()

    def add(self, items: Iterable) -> None:
        items = list(items)
        for name, column in self.columns.items():
            column.extend(getattr(item, name) for item in items)
        self._contents.add(item.content for item in items)

    def finish(self) -> Table:
        return Table(self.kind, self.columns, self._contents.finish())


@dataclass(frozen=True)
class Corpus:
    """Documents and memories, each a `Table` (rows given as any sequence are made one)."""

    documents: Table
    memories: Table

    def __post_init__(self) -> None:
        for name, kind in (("documents", Document), ("memories", Memory)):
            rows = getattr(self, name)
            if not isinstance(rows, Table):
                object.__setattr__(self, name, Table.of(kind, rows))

    def keys(self) -> set[str]:
        return set(self.documents.columns["key"]) | set(self.memories.columns["key"])

    @cached_property
    def sha256(self) -> str:
        """Of what is searched, however it was written (its own file or inline in SOAT's golden.json): two runs
        with the same hash searched the same documents and memories."""
        # The bytes of json.dumps([[documents], [memories]]), made a block of rows at a time: the whole text
        # of a million-chunk corpus would take about its file's size twice over, beside the corpus.
        digest = hashlib.sha256(b"[")
        for n, items in enumerate((self.documents, self.memories)):
            digest.update(b", [" if n else b"[")
            names = [f.name for f in fields(items.kind)] if items else []
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
    if max(text, default="") < "\U00010000":
        return [text[s : s + size] for s in range(0, len(text), step)]
    units = text.encode("utf-16-le", "surrogatepass")
    n = len(units) // 2
    # A window can split a surrogate pair; the lone half reaches the server as U+FFFD.
    return [
        units[2 * s : 2 * min(s + size, n)].decode("utf-16-le", "replace")
        for s in range(0, n, step)
    ]


def _pieces(content: str, chunking: Chunking) -> list[str]:
    """SOAT's chunk strategies: `whole` is one chunk; `size` is overlapping fixed windows."""
    if chunking.strategy == "whole":
        return [content]
    return _utf16_slices(content, chunking.chunk_size, chunking.chunk_size - chunking.chunk_overlap)


def chunk_id(document_key: str, i: int) -> str:
    """The id of a document's i-th chunk (from 0)."""
    return f"{document_key}#{i}"


def chunk_document(doc: Document, chunking: Chunking) -> list[Chunk]:
    return [Chunk(chunk_id(doc.key, i), doc.key, piece) for i, piece in enumerate(_pieces(doc.content, chunking))]


def chunk_contents(documents: Table, chunking: Chunking) -> tuple[np.ndarray, Texts]:
    """How many chunks each document has, and every chunk's text in order (`chunk_document`'s), a portion of
    documents at a time. A `whole` chunk is its document's content, so that column is the documents' own."""
    if chunking.strategy == "whole":
        return np.ones(len(documents), np.int64), documents.contents
    writer, counts = TextsWriter(), [np.zeros(0, np.int64)]
    for contents in documents.contents.portions():
        pieces = [_pieces(content, chunking) for content in contents]
        counts.append(np.fromiter(map(len, pieces), np.int64, len(pieces)))
        writer.add(chain.from_iterable(pieces))
    return np.concatenate(counts), writer.finish()


def memory_updated_at(age_days: float, now: datetime) -> datetime:
    """The `updated_at` a memory of this age has, from one clock reading (SOAT's eval backdates this way)."""
    return now - timedelta(milliseconds=round(age_days * 86_400_000))


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


def _document(row: object, file: Path, where: str) -> Document:
    row = _known_fields(row, {"key", "path", "title", "content", "tags", "metadata"}, file, where)
    return Document(
        key=_text(row, "key", file, where), content=_text(row, "content", file, where),
        path=_text(row, "path", file, where, required=False), title=_text(row, "title", file, where, required=False),
        tags=_tags(row.get("tags"), file, f"{where}.tags"),
    )


def _memory(row: object, file: Path, where: str) -> Memory:
    row = _known_fields(row, {"key", "content", "tags", "age_days", "memory", "store"}, file, where)
    age = age_days(row.get("age_days", 0), file, f"{where}.age_days")
    store = row.get("store", row.get("memory", "default"))
    if not isinstance(store, str) or not store:
        raise InputError(file, f"{where}.store", f"expected a store name, got {shown(store)}")
    return Memory(
        key=_text(row, "key", file, where), content=_text(row, "content", file, where),
        store=store, tags=_tags(row.get("tags"), file, f"{where}.tags"), age_days=age,
    )


def _unique_keys(corpus: Corpus, file: Path, where_is: Callable[[str, int], str]) -> Corpus:
    """The corpus, once no key repeats (documents' first, then memories')."""
    n = len(corpus.documents)
    seen: dict[str, int] = {}
    for i, key in enumerate(chain(corpus.documents.columns["key"], corpus.memories.columns["key"])):
        first = seen.setdefault(key, i)
        if first != i:
            where = [where_is("documents", j) if j < n else where_is("memories", j - n) for j in (i, first)]
            raise InputError(file, f"{where[0]}.key", f"duplicate key {shown(key)} (first at {where[1]})")
    return corpus


def corpus_from_rows(documents: object, memories: object, file: Path,
                     where_is: Callable[[str, int], str] = lambda kind, i: f"{kind}[{i}]") -> Corpus:
    """Validate raw document and memory rows (rqsweep's format and SOAT's golden corpus alike); `where_is` names
    the i-th row of a kind in errors."""
    if not isinstance(documents, list) or not isinstance(memories, list):
        raise InputError(file, "corpus", "expected lists under `documents` and `memories`")
    docs = [_document(row, file, where_is("documents", i)) for i, row in enumerate(documents)]
    mems = [_memory(row, file, where_is("memories", i)) for i, row in enumerate(memories)]
    return _unique_keys(Corpus(docs, mems), file, where_is)


_LINE_KINDS = {"document": "documents", "memory": "memories"}
_LINE_FIELDS = {"source_type", "key", "path", "title", "content", "tags", "metadata", "age_days", "memory", "store"}


def _read_corpus_lines(path: Path) -> Corpus:
    """JSON lines of documents and memories (each row a document unless its `source_type` says memory), read and
    validated a portion of rows at a time: only the rows' small fields stay in memory, their contents go to the
    tables' files. Errors are the other formats' (file, line, field, value); with several bad lines, the first
    in the file is named."""
    tables = {"documents": TableBuilder(Document), "memories": TableBuilder(Memory)}
    pending: dict[str, list] = {"documents": [], "memories": []}
    lines = {"documents": array("q"), "memories": array("q")}
    for n, row in json_lines(path, "corpus"):
        row = _known_fields(row, _LINE_FIELDS, path, f"line {n}")
        source_type = row.get("source_type", "document")
        kind = _LINE_KINDS.get(source_type) if isinstance(source_type, str) else None
        if kind is None:
            raise InputError(path, f"line {n}.source_type", f"expected document or memory, got "
                                                               f"{shown(row['source_type'])}")
        make = _document if kind == "documents" else _memory
        pending[kind].append(make({k: v for k, v in row.items() if k != "source_type"}, path, f"line {n}"))
        lines[kind].append(n)
        if len(pending[kind]) == ROWS_READ_AT_ONCE:
            tables[kind].add(pending[kind])
            pending[kind] = []
    for kind, rows in pending.items():
        tables[kind].add(rows)
    corpus = Corpus(tables["documents"].finish(), tables["memories"].finish())
    return _unique_keys(corpus, path, lambda kind, i: f"line {lines[kind][i]}")


def read_corpus_file(path: Path) -> Corpus:
    """rqsweep's corpus file: YAML or JSON with `documents` and `memories`, or JSON lines of both."""
    if path.suffix.lower() == ".jsonl":
        return _read_corpus_lines(path)
    _, data = read_data(path, "corpus")
    data = _known_fields(data, {"documents", "memories"}, path, "")
    return corpus_from_rows(data.get("documents", []), data.get("memories", []), path)
