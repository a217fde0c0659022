"""The corpus's texts out of memory: the `Texts` file, the `Table` of rows over it, the JSON-lines corpus read a
portion at a time, and what is built from them, each tied to the whole-file read and the in-memory path."""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rqsweep.cli import main
from rqsweep.config import Chunking
from rqsweep.corpus import Corpus, Document, Memory, Table, Texts, chunk_contents, chunk_document, corpus_from_rows
from rqsweep.corpus import memory_updated_at, model, texts
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.index import Index, _read_and_embed
from rqsweep.errors import InputError
from rqsweep.files import read_data
from tests.minijob import write_job
from tests.test_build_shared_cut import _state

_SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
# Unicode of every plane, lone surrogates, and what JSON escapes or a line reader splits at.
_TEXT = st.text(st.one_of(st.characters(exclude_categories=()), _SURROGATE,
                          st.sampled_from(["a", " ", "\n", "\r", "\u2028", "\x85", '"', "\\", "😀", "é"])),
                max_size=12)


@pytest.fixture
def small_portions(monkeypatch):
    """Portions of 3 rows, so that every test crosses portion edges."""
    monkeypatch.setattr(texts, "ROWS_READ_AT_ONCE", 3)
    monkeypatch.setattr(model, "ROWS_READ_AT_ONCE", 3)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_TEXT, max_size=12), st.integers(-14, 14), st.integers(-14, 14))
def test_texts_read_back_as_written_by_row_slice_view_portion_and_pickle(small_portions, strings, lo, hi):
    column = Texts.of(strings)
    assert len(column) == len(strings)
    assert [column[i] for i in range(len(strings))] == strings
    assert [column[i] for i in range(-len(strings), 0)] == strings
    assert list(column) == strings and column == strings
    assert column[lo:hi] == strings[lo:hi] and column[lo:hi:2] == strings[lo:hi:2]
    assert list(column.view(lo, hi)) == strings[lo:hi]
    assert [t for part in column.portions() for t in part] == strings
    assert all(len(part) <= 3 for part in column.portions())
    assert list(pickle.loads(pickle.dumps(column.view(lo, hi)))) == strings[lo:hi]
    with pytest.raises(IndexError):
        column[len(strings)]


def test_an_empty_column_and_an_empty_view_read_nothing():
    assert list(Texts.of([])) == [] and Texts.of([])[:] == []
    column = Texts.of(["ab", "", "c"])
    assert column[1] == "" and column[1:2] == [""]
    assert list(column.view(2, 1)) == [] and list(pickle.loads(pickle.dumps(column.view(3, 3)))) == []


_TAGS = st.one_of(st.none(), st.dictionaries(_TEXT, _TEXT, max_size=2))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_TEXT, _TEXT, _TEXT, _TAGS), max_size=9), st.integers(0, 9), st.integers(0, 9))
def test_a_table_is_its_rows(small_portions, rows, lo, hi):
    documents = [Document(f"d{i}", c, path=p, title=t, tags=tags or {}) for i, (c, p, t, tags) in enumerate(rows)]
    table = Table.of(Document, documents)
    assert table == documents and list(table) == documents and len(table) == len(documents)
    assert [table[i] for i in range(-len(documents), len(documents))] == documents + documents
    assert list(table[lo:hi]) == documents[lo:hi] and list(table[lo:hi:3]) == documents[lo:hi:3]
    assert list(pickle.loads(pickle.dumps(table[lo:hi]))) == documents[lo:hi]
    assert table.columns["key"] == [d.key for d in documents]


# ---------------------------------------------------------------------------------- JSON lines, read as a stream

def _read_whole(path: Path) -> Corpus:
    """The JSON-lines read before the stream (63e672d): the whole file decoded and parsed, then validated."""
    _, data = read_data(path, "corpus")
    kinds, lines = {"documents": [], "memories": []}, {"documents": [], "memories": []}
    for n, row in enumerate(data, 1):
        row = model._known_fields(row, model._LINE_FIELDS, path, f"line {n}")
        kind = model._LINE_KINDS.get(row.get("source_type", "document")) if isinstance(row.get("source_type", ""), str) else None
        if kind is None:  # (63e672d raised TypeError on an unhashable source_type)
            raise InputError(path, f"line {n}.source_type", f"expected document or memory, got "
                                                            f"{model.shown(row['source_type'])}")
        kinds[kind].append({k: v for k, v in row.items() if k != "source_type"})
        lines[kind].append(n)
    return corpus_from_rows(kinds["documents"], kinds["memories"], path, lambda kind, i: f"line {lines[kind][i]}")


def _whole_hash(corpus: Corpus) -> str:
    rows = [[asdict(d) for d in corpus.documents], [asdict(m) for m in corpus.memories]]
    return hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _outcome(read, path: Path):
    """What a read gives: its rows and hash (or the hash's error), or its error."""
    try:
        corpus = read(path)
    except InputError as exc:
        return "error", str(exc)
    try:
        digest = corpus.sha256
    except UnicodeEncodeError as exc:  # a lone surrogate: the hash's own limit, the same on either read
        digest = repr(exc)
    return tuple(corpus.documents), tuple(corpus.memories), digest


_KEY = st.sampled_from(["a", "b", "c", "d", "é", "k\ud800", "😀"])
_VALUE = st.one_of(_TEXT, st.none(), st.integers(-1, 3), st.floats(allow_nan=True), st.booleans(),
                   st.dictionaries(_TEXT, _TEXT, max_size=2), st.lists(_TEXT, max_size=2))


@st.composite
def _row(draw, bad: bool) -> dict:
    """A document or memory row; `bad`, any field may hold any value, or a field no row has."""
    row: dict = {"key": draw(_KEY), "content": draw(_TEXT.filter(str.strip))}
    memory = draw(st.booleans())
    if memory or draw(st.booleans()):
        row["source_type"] = "memory" if memory else "document"
    optional = (["age_days", "store", "memory", "tags"] if memory else ["path", "title", "tags", "metadata"])
    for name in draw(st.lists(st.sampled_from(optional), unique=True)):
        row[name] = draw({"age_days": st.floats(0, 1e4), "tags": _TAGS, "metadata": _VALUE,
                          "store": _TEXT.filter(bool), "memory": _TEXT.filter(bool)}.get(name, _TEXT))
    if bad:
        name = draw(st.sampled_from([*row, *optional, "source_type", "extra", "age_days"]))
        row[name] = draw(_VALUE)
    return row


def _line(row: dict, raw: bool) -> bytes:
    """A row as JSON, its non-ASCII written raw when `raw`, unless it holds a lone surrogate (which UTF-8 cannot
    hold) or a line end of str.splitlines (which cuts the line: a bad line)."""
    text = json.dumps(row, ensure_ascii=not raw)
    try:
        return text.encode() if len(text.splitlines()) == 1 else json.dumps(row).encode()
    except UnicodeEncodeError:
        return json.dumps(row).encode()


@st.composite
def _corpus_file(draw) -> bytes:
    """JSON lines ending in LF, CRLF or CR, with raw non-ASCII, and at most one bad line (bad JSON, bad UTF-8, a
    raw line separator in a string, or a bad row): with several, the stream names the first in the file, and
    after a blank line it names rows by their line in the file (tests below)."""
    rows = draw(st.lists(_row(False), max_size=8))
    lines = [_line(r, draw(st.booleans())) for r in rows]
    bad = draw(st.sampled_from(["none", "row", "json", "utf-8"]))
    at = draw(st.integers(0, len(lines)))
    if bad == "row":
        lines.insert(at, _line(draw(_row(True)), draw(st.booleans())))
    elif bad == "json":
        lines.insert(at, draw(st.sampled_from([b"{", b'{"key": }', b"[1, 2", b"nul",
                                                       '{"key": "a", "content": "x\u2028y"}'.encode()])))
    elif bad == "utf-8":
        lines.insert(at, draw(st.sampled_from([b'{"key": "\xff"}', b"\xe2\x82", b'{"content": "\xed\xa0\x80"}'])))
    ends = [draw(st.sampled_from([b"\n", b"\r\n", b"\r"])) for _ in lines]
    return b"".join(line + end for line, end in zip(lines, ends))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_corpus_file())
def test_the_streamed_read_is_the_whole_files(small_portions, tmp_path_factory, raw):
    """Rows, errors (file, line, field, value) and the corpus hash, as the whole-file read gave them."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_bytes(raw)
    assert _outcome(model.read_corpus_file, path) == _outcome(_read_whole, path)


def test_with_several_bad_lines_the_stream_names_the_first_in_the_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"source_type": "memory", "key": "m", "content": "x", "age_days": -1}\n{"key": "d"}\n')
    with pytest.raises(InputError, match=r"corpus.jsonl: line 1.age_days: expected a finite number >= 0, got -1"):
        model.read_corpus_file(path)
    with pytest.raises(InputError, match=r"line 2.content"):
        _read_whole(path)  # the whole-file read validated every document first
    path.write_bytes(b'{"key": \n\xff\n')
    with pytest.raises(InputError, match=r"corpus.jsonl: line 1: not valid JSON"):
        model.read_corpus_file(path)
    with pytest.raises(InputError, match=r"corpus.jsonl: not UTF-8 text \(byte 9\)"):
        _read_whole(path)


def test_after_blank_lines_a_row_is_named_by_its_line_in_the_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"key": "a", "content": "x"}\n\n  \n{"key": "b", "content": " "}\n')
    with pytest.raises(InputError, match=r"corpus.jsonl: line 4.content: expected a non-empty string, got ' '"):
        model.read_corpus_file(path)
    with pytest.raises(InputError, match=r"line 2.content"):
        _read_whole(path)  # the whole-file read counted rows, not lines, past a blank line
    path.write_text('{"key": "a", "content": "x"}\n\n{"key": "b",\n')
    with pytest.raises(InputError, match=r"corpus.jsonl: line 3: not valid JSON"):
        model.read_corpus_file(path)


def test_a_missing_corpus_file_is_named(tmp_path):
    with pytest.raises(InputError, match=r"nope.jsonl: cannot read corpus: No such file"):
        model.read_corpus_file(tmp_path / "nope.jsonl")


def test_a_duplicate_key_names_both_lines_documents_first(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"source_type": "memory", "key": "k", "content": "x"}\n{"key": "k", "content": "y"}\n')
    with pytest.raises(InputError, match=r"line 1.key: duplicate key 'k' \(first at line 2\)"):
        model.read_corpus_file(path)


# --------------------------------------------------------------------------------------- what is built from them

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_TEXT.filter(str.strip), max_size=8), st.sampled_from([Chunking("whole"), Chunking("size", 3, 1),
                                                                         Chunking("size", 5, 0), Chunking("size", 4, 3)]))
def test_chunks_are_chunk_documents_a_portion_at_a_time(small_portions, contents, chunking):
    documents = [Document(f"d{i}", c) for i, c in enumerate(contents)]
    counts, chunks = chunk_contents(Table.of(Document, documents), chunking)
    reference = [chunk_document(d, chunking) for d in documents]
    assert counts.tolist() == [len(cs) for cs in reference]
    assert list(chunks) == [c.content for cs in reference for c in cs]


def _corpus(n: int) -> Corpus:
    words = ["vpn", "pager", "certificate", "backup", "night", "😀", "é", "w12", "<b>", "on-call"]
    rng = np.random.default_rng(n)
    documents = [Document(f"doc-{i}", " ".join(rng.choice(words, 9 + i % 30)), path=f"/p/{i % 3}",
                          tags={"team": str(i % 2)} if i % 4 else {}) for i in range(n)]
    memories = [Memory(f"mem-{i}", " ".join(rng.choice(words, 5)), store=f"s{i % 2}", age_days=float(i % 7))
                for i in range(n // 3)]
    return Corpus(documents, memories)


@pytest.mark.parametrize("chunking", [Chunking("size", 30, 5), Chunking("whole")])  # whole: one chunk a document
def test_the_index_is_the_one_built_from_texts_in_memory(small_portions, chunking):
    """Every store's rows, vectors and postings, as chunk_document's chunks and plain lists of texts give them."""
    corpus, now = _corpus(40), datetime(2026, 12, 1, tzinfo=timezone.utc)
    embedder = FeatureHashEmbedder(64)
    index = Index.build(corpus, embedder, chunking, now=now)
    chunks = [(d, c) for d in corpus.documents for c in chunk_document(d, chunking)]
    expected = {
        "document": ([c.chunk_id for _, c in chunks], [d.key for d, _ in chunks], [c.content for _, c in chunks],
                     [d.tags for d, _ in chunks], [d.path for d, _ in chunks], [round(now.timestamp() * 1000)] * len(chunks)),
        "memory": ([m.key for m in corpus.memories], [m.key for m in corpus.memories],
                   [m.content for m in corpus.memories], [m.tags for m in corpus.memories],
                   [m.store for m in corpus.memories],
                   [round(memory_updated_at(m.age_days, now).timestamp() * 1000) for m in corpus.memories]),
    }
    for source_type, (ids, keys, contents, tags, paths, stamps) in expected.items():
        store = index.stores[source_type]
        assert (store.ids, store.keys, list(store.contents), store.tags, store.paths) == (ids, keys, contents, tags, paths)
        assert store.updated_at_ms.tolist() == stamps
        vectors, lexical = _read_and_embed(embedder, contents)
        assert _state(store.vectors) == _state(vectors) and _state(store.lexical) == _state(lexical)
    result = index.search("vpn certificate", limit=5)[0]
    store = index.stores[result.source_type]
    assert result.content == store.contents[store.keys.index(result.key)]


def test_a_run_on_json_lines_is_the_run_on_the_same_corpus_as_json(tmp_path):
    corpus = _corpus(60)
    targets = [corpus.documents[3], corpus.memories[2], corpus.documents[7], corpus.memories[5]]
    golden = [{"id": f"q{i}", "slice": "s", "query": " ".join(t.content.split()[:3]), "expected": t.key}
              for i, t in enumerate(targets)]
    outputs = {}
    for name, text in [("json", json.dumps({"documents": [asdict(d) for d in corpus.documents],
                                            "memories": [asdict(m) for m in corpus.memories]})),
                       ("jsonl", "".join(json.dumps(asdict(d)) + "\n" for d in corpus.documents)
                        + "".join(json.dumps({"source_type": "memory", **asdict(m)}) + "\n" for m in corpus.memories))]:
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"corpus.{name}").write_text(text)
        (folder / "golden.jsonl").write_text("".join(json.dumps(g) + "\n" for g in golden))
        config = write_job(folder, corpus=f"corpus.{name}", golden="golden.jsonl", validation=False)
        assert main([str(config), "--quiet"]) == 0
        (run,) = (folder / "results").glob("*/*/grid.parquet")
        outputs[name] = {table: pl.read_parquet(run.parent / f"{table}.parquet").drop("run_id", "config_sha256",
                                                                                              strict=False)
                         for table in ("grid", "queries", "hits")}
        outputs[name]["sha256"] = json.loads((run.parent / "run.json").read_text())["corpus_sha256"]
    assert outputs["json"]["sha256"] == outputs["jsonl"]["sha256"] == corpus.sha256
    assert outputs["json"]["grid"]["mrr"].max() > 0
    for table in ("grid", "queries", "hits"):
        assert outputs["json"][table].equals(outputs["jsonl"][table]), table
