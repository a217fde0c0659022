"""The persistent index cache: a rerun builds only what changed, and its index is the cold build's, bit for bit."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import tempfile
import tracemalloc
from contextlib import closing
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.config import Chunking
from rqsweep.corpus import Corpus, Document, Memory, chunk_document
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.index import Index
from rqsweep.engine.index_cache import BuiltRows, IndexCache, encode_part
from rqsweep.engine.quarter_vectors import QuarterVectors
from tests.minijob import write_job

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
CHUNKING = Chunking("size", 200, 40)


class CountingEmbedder(FeatureHashEmbedder):
    """The feature hash, counting the texts it embeds (a build takes their quarter counts)."""

    def __init__(self, dimensions: int = 64) -> None:
        super().__init__(dimensions)
        self.embedded = 0

    def quarter_blocks(self, texts, runs=None):
        self.embedded += len(texts)
        return super().quarter_blocks(texts, runs)


class DenseEmbedder:
    """An embedder without quarter counts, whose store keeps float32 rows: the feature hash's, through `embed`."""

    def __init__(self, dimensions: int = 48) -> None:
        self._inner = FeatureHashEmbedder(dimensions)
        self.identity, self.queries, self.embedded = f"dense-test/{dimensions}", self, 0

    def embed(self, texts):
        self.embedded += len(texts)
        return self._inner.embed(texts)


class Told:
    """A `VectorsProgress` that records each phase's total and what each phase was told."""

    def __init__(self) -> None:
        self.phases: list[tuple[int, list[int]]] = []

    def __call__(self, total: int):
        self.phases.append((total, []))
        return self.phases[-1][1].append


def corpus(n_documents: int = 100, seed: int = 0) -> Corpus:
    rnd = random.Random(seed)
    words = ["pager", "rotation", "VPN-4012", "on-call", "Café", "w12", "backup", "<b>bold</b>", "x.example.com"]
    docs = tuple(Document(f"doc-{i}", " ".join(rnd.choice(words) for _ in range(rnd.randint(0, 90))))
                 for i in range(n_documents))
    mems = tuple(Memory(f"mem-{i}", f"the pager number is {i}", age_days=float(i)) for i in range(10))
    return Corpus(docs, mems)


def build(c: Corpus, cache: IndexCache | None, embedder=None) -> Index:
    return Index.build(c, embedder or CountingEmbedder(), CHUNKING, NOW, cache=cache)


def entry(value: float, dimensions: int = 2500) -> BuiltRows:
    """A one-row entry of float32 rows whose lexemes are one part, ("pager",)."""
    return BuiltRows.split(np.full((1, dimensions), value, np.float32), np.ones(1, np.float32), np.ones(1, np.uint32),
                           [encode_part(("pager",))], [0, 1])[0]


def arrays(vectors) -> list[tuple]:
    """What a store keeps of its vectors, array by array: type, dtype, shape, layout and bytes."""
    parts = [vectors.counts, vectors.divisors] if isinstance(vectors, QuarterVectors) else [vectors]
    return [(type(vectors), a.dtype, a.shape, a.flags.f_contiguous, a.tobytes("A")) for a in parts]


def assert_same_index(a: Index, b: Index) -> None:
    for kind in ("document", "memory"):
        x, y = a.stores[kind], b.stores[kind]
        assert (x.ids, x.keys, x.contents, x.paths) == (y.ids, y.keys, y.contents, y.paths)
        assert arrays(x.vectors) == arrays(y.vectors)  # the same store type, bit for bit
        assert x.norms.tobytes() == y.norms.tobytes()
        assert x.lexical._vocab == y.lexical._vocab
        assert len(x.lexical._segments) == len(y.lexical._segments)
        for s, t in zip(x.lexical._segments, y.lexical._segments):
            for name in ("_lexemes", "_lex_groups", "_lex_entries", "_group_row", "_group_count", "_pos"):
                assert np.array_equal(getattr(s, name), getattr(t, name)), name
    for query in ("pager rotation", "VPN-4012", "bold or backup", '"on-call pager"'):
        assert a.search(query) == b.search(query)


def test_an_unchanged_corpus_builds_nothing(tmp_path):
    c = corpus()
    cold = build(c, None)
    first = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    assert (first.rows_built, first.rows_reused) == (cold.rows_built, 0)
    embedder = CountingEmbedder()
    rerun = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING), embedder)
    assert (rerun.rows_built, rerun.rows_reused, embedder.embedded) == (0, cold.rows_built, 0)
    assert_same_index(rerun, cold)
    assert_same_index(first, cold)


def test_one_percent_changed_rebuilds_that_one_percent(tmp_path):
    c = corpus(200)
    build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    changed = [5, 150]
    docs = list(c.documents)
    for i in changed:
        docs[i] = replace(docs[i], content=docs[i].content + " rotation changed")
    edited = Corpus(tuple(docs), c.memories)
    embedder = CountingEmbedder()
    rerun = build(edited, IndexCache(tmp_path, "feature-hash/64", CHUNKING), embedder)
    expected = sum(len(chunk_document(docs[i], CHUNKING)) for i in changed)
    assert rerun.rows_built == embedder.embedded == expected
    assert rerun.rows_reused == len(rerun.stores["document"].ids) + len(rerun.stores["memory"].ids) - expected
    assert_same_index(rerun, build(edited, None))


def edge_corpus() -> Corpus:
    """Documents across portions: empty ones, repeats, a long one of many chunks, a lone surrogate, tags."""
    c = corpus(40, seed=3)
    docs = list(c.documents)
    docs[4] = replace(docs[4], content="")
    docs[9] = replace(docs[9], content=docs[2].content)
    docs[12] = replace(docs[12], content=" ".join(["rotation pager on-call w12"] * 60))
    docs[20] = replace(docs[20], content="pager \ud800 rotation <b>x</b>")
    return Corpus(tuple(docs), (*c.memories, Memory("mem-again", c.memories[0].content, age_days=2.0)))


@pytest.mark.parametrize("make", [CountingEmbedder, DenseEmbedder], ids=["feature-hash", "dense"])
def test_the_cached_build_is_the_plain_build_cold_rerun_and_changed(tmp_path, monkeypatch, make):
    """Portions of 7 rows and reads of 5, so portions end inside groups' reach and blocks cross them: the index
    built with the cache equals the one built without it, store types included, filling it, from it unchanged,
    and with documents changed, and only the changed rows are embedded."""
    from rqsweep.engine import index as engine_index
    from rqsweep.engine import index_cache
    monkeypatch.setattr(engine_index, "_CUT_PORTION", 7)
    monkeypatch.setattr(engine_index, "_EMBED_PORTION", 7)
    monkeypatch.setattr(index_cache, "_LOOKUP", 5)
    c = edge_corpus()
    identity = make().identity
    plain = build(c, None, make())
    cold = build(c, IndexCache(tmp_path, identity, CHUNKING), make())
    # A repeat of content stored by an earlier portion (document 9 of 2, the last memory of the first) is read back.
    repeats = len(chunk_document(c.documents[9], CHUNKING)) + 1
    assert (cold.rows_built, cold.rows_reused) == (plain.rows_built - repeats, repeats)
    assert_same_index(cold, plain)
    embedder = make()
    rerun = build(c, IndexCache(tmp_path, identity, CHUNKING), embedder)
    assert (rerun.rows_built, rerun.rows_reused, embedder.embedded) == (0, plain.rows_built, 0)
    assert_same_index(rerun, plain)
    docs = list(c.documents)
    for i in (0, 12, 39):
        docs[i] = replace(docs[i], content=docs[i].content + " changed")
    edited = Corpus(tuple(docs), c.memories)
    embedder = make()
    changed = build(edited, IndexCache(tmp_path, identity, CHUNKING), embedder)
    expected = sum(len(chunk_document(docs[i], CHUNKING)) for i in (0, 12, 39))
    assert changed.rows_built == embedder.embedded == expected
    assert_same_index(changed, build(edited, None, make()))


_PIECES = ["pager", "on-call", "SKU-4711", "w12", "Café", "ΣΑΣ", "<b>", "</b>", "https://a.b/c", " ", "\n", "\x1c",
           "\u3000", "..", "\ud800", "Ⱥ" * 1000]  # the last lower-cases past 2047 bytes: a lexeme too long to keep


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=25).map("".join), st.lists(st.booleans(), min_size=6, max_size=6))
def test_any_texts_read_back_as_built(text, changed):
    """Texts of every kind the lexical port reads apart (tags, URLs, lexemes too long to keep, lone surrogates),
    some changed between two builds: the second, from the cache, equals a build without it."""
    whole = Chunking("whole")
    docs = tuple(Document(f"doc-{i}", text[i:] + f" {i}") for i in range(6))
    first = Corpus(docs, (Memory("m", text, age_days=1.0),))
    edited = Corpus(tuple(replace(d, content=d.content + " w12") if flip else d for d, flip in zip(docs, changed)),
                    first.memories)
    with tempfile.TemporaryDirectory() as folder:
        Index.build(first, FeatureHashEmbedder(64), whole, NOW, cache=IndexCache(Path(folder), "fh", whole))
        rerun = Index.build(edited, FeatureHashEmbedder(64), whole, NOW, cache=IndexCache(Path(folder), "fh", whole))
    assert rerun.rows_reused == changed.count(False) + 1
    assert_same_index(rerun, Index.build(edited, FeatureHashEmbedder(64), whole, NOW))


def test_entries_of_another_store_type_or_width_are_rebuilt(tmp_path):
    """An entry under the same key that does not hold what this build keeps (float32 rows where quarter counts
    are kept, counts of other dimensions, or the other way round) is not read back: its rows are built again."""
    c = corpus(20)
    build(c, IndexCache(tmp_path, "shared", CHUNKING), DenseEmbedder(64))
    for make in (CountingEmbedder, lambda: CountingEmbedder(48), DenseEmbedder):
        index = build(c, IndexCache(tmp_path, "shared", CHUNKING), make())
        assert index.rows_reused == 0
        assert_same_index(index, build(c, None, make()))


def test_an_entry_whose_rows_do_not_add_up_is_rebuilt_with_a_warning(tmp_path):
    """An intact entry (its checksum matches) whose rows' part counts do not add up to its own is rebuilt."""
    c = corpus(30)
    cache = IndexCache(tmp_path, "feature-hash/64", CHUNKING)
    build(c, cache)
    key = cache.document_key(c.documents[3].content)
    with closing(sqlite3.connect(cache.path)) as conn, conn:
        (blob,) = conn.execute("SELECT rows FROM built WHERE key = ?", (key,)).fetchone()
        bad = BuiltRows.from_bytes(blob)
        lengths = np.frombuffer(bad.lengths, "<u4").copy()
        lengths[0] += 1  # one part more than the entry holds, its checksum made anew
        conn.execute("UPDATE built SET rows = ? WHERE key = ?",
                     (bad._replace(lengths=lengths.tobytes()).to_bytes(), key))
    warnings: list[str] = []
    rebuilt = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING, warnings.append))
    assert len(warnings) == 1 and "1 inconsistent" in warnings[0]
    assert rebuilt.rows_built == len(chunk_document(c.documents[3], CHUNKING))
    assert_same_index(rebuilt, build(c, None))


def test_a_rerun_reads_the_texts_of_new_rows_only(tmp_path, monkeypatch):
    """A build from the cache reads back the rows it finds and reads no chunk text of theirs: only the changed
    documents' chunks are read (for the lexical index and the feature hash alike)."""
    from rqsweep.engine import index as engine_index
    read, texts_of = [], engine_index._texts_of
    monkeypatch.setattr(engine_index, "_texts_of", lambda texts, rows: read.extend(texts_of(texts, rows)) or
                        texts_of(texts, rows))
    c = corpus(60)
    build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    read.clear()
    build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    assert read == []
    docs = list(c.documents)
    docs[7] = replace(docs[7], content=docs[7].content + " rotation changed")
    build(Corpus(tuple(docs), c.memories), IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    assert read == [chunk.content for chunk in chunk_document(docs[7], CHUNKING)]


def test_filling_the_cache_parses_new_texts_once(tmp_path, monkeypatch):
    """The first run reads its texts as a build without the cache does (each distinct run parsed once, the lexical
    index built from those parts, not from lexemes read back); a rerun parses nothing, each distinct stored part
    added once."""
    from rqsweep.engine.tsearch import parser
    parts, runs = [], []
    add, run_lexemes = parser.RunCache.add, parser._run_lexemes
    monkeypatch.setattr(parser.RunCache, "add", lambda self, words: parts.append(words) or add(self, words))
    monkeypatch.setattr(parser, "_run_lexemes", lambda run, anywhere=True: runs.append(run) or run_lexemes(run, anywhere))
    c = corpus()
    build(c, None)
    without = len(parts), len(runs)
    parts.clear(), runs.clear()
    first = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    # One run cache serves documents and memories alike: a run both hold is parsed once, not twice.
    assert first.rows_built and len(parts) <= without[0] and len(runs) <= without[1]
    parts.clear(), runs.clear()
    rerun = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    # Nothing is parsed: each distinct part read back is added once, no more than the texts' own parts.
    assert rerun.rows_reused and runs == [] and 0 < len(parts) <= without[0]


def test_a_build_from_the_cache_holds_its_rows_once(tmp_path, monkeypatch):
    """Read back a few entries at a time, each block put into the index's array and let go before the next is read:
    the build from the cache peaks at about the array, not the array beside every entry read."""
    from rqsweep.engine import index as engine_index
    from rqsweep.engine import index_cache
    c = corpus(300)
    build(c, IndexCache(tmp_path, "dense-test/4096", CHUNKING), DenseEmbedder(4096))
    peaks, read = [], engine_index._read_and_embed

    def measured(*args):
        tracemalloc.start()
        try:
            out = read(*args)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        return out
    monkeypatch.setattr(engine_index, "_read_and_embed", measured)
    monkeypatch.setattr(index_cache, "_LOOKUP", 64)
    index = build(c, IndexCache(tmp_path, "dense-test/4096", CHUNKING), DenseEmbedder(4096))
    assert index.rows_built == 0
    held = index.stores["document"].vectors.nbytes
    assert held > 10_000_000 and peaks[0] < 1.3 * held, (peaks, held)


def test_past_its_bound_the_least_recently_used_entries_go(tmp_path):
    """Entries are kept to the bound's megabytes of stored rows; a build's reads count as uses, so the entry read
    last outlives one stored after it but never read."""
    rows = {name.encode(): entry(i) for i, name in enumerate("abcde")}
    size = len(rows[b"a"].to_bytes())
    cache = IndexCache(tmp_path, "feature-hash/2500", CHUNKING, max_mb=3.5 * size / 1e6)
    for key in (b"a", b"b", b"c"):
        cache.store({key: rows[key]})
    assert [key for key, _ in cache.entries([b"a"])] == [b"a"]  # a is used again: b is now the oldest
    cache.store({b"d": rows[b"d"]})
    assert sorted(key for key, _ in cache.entries(rows)) == [b"a", b"c", b"d"]
    cache.store({b"e": rows[b"e"]})  # that read touched a, c and d in key order: a is now the oldest
    kept = dict(cache.entries(rows))
    assert sorted(kept) == [b"c", b"d", b"e"]
    assert kept[b"e"] == rows[b"e"]


def test_entries_exactly_at_the_bound_all_stay(tmp_path):
    """Stored rows that add up to the bound exactly are all kept; one byte under, the least recently used goes."""
    rows = {f"{i:02d}".encode(): entry(i, 2496) for i in range(13)}
    total = sum(len(entry.to_bytes()) for entry in rows.values())
    assert int(total / 1e6 * 1e6) != total  # a bound in megabytes that float arithmetic leaves a byte short
    cache = IndexCache(tmp_path, "feature-hash/2500", CHUNKING, max_mb=total / 1e6)
    cache.store(rows)
    assert sorted(key for key, _ in cache.entries(rows)) == sorted(rows)
    cache = IndexCache(tmp_path, "feature-hash/2500", CHUNKING, max_mb=(total - 1) / 1e6)
    cache.store({b"12": rows[b"12"]})
    assert sorted(key for key, _ in cache.entries(rows)) == sorted(rows)[1:]  # ties in use time go by key


@pytest.mark.parametrize("layout", ["entries", "built"])
def test_a_file_of_an_earlier_format_is_emptied_not_misread(tmp_path, layout):
    """A file from before this format (float32 rows and lexemes as strings, in an `entries` table before use times
    were kept, or in `built`) is emptied with one warning and filled again; the next build reuses every row."""
    path = IndexCache(tmp_path, "feature-hash/64", CHUNKING).path
    path.unlink()
    c = corpus(20)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"CREATE TABLE {layout} (key BLOB PRIMARY KEY, rows BLOB NOT NULL)")
        conn.execute(f"INSERT INTO {layout} VALUES (?, ?)",
                     (IndexCache(tmp_path / "other", "feature-hash/64", CHUNKING).document_key(c.documents[0].content),
                      b"RQX1" + bytes(200)))
    warnings: list[str] = []
    rebuilt = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING, warnings.append))
    assert len(warnings) == 1 and "format 0, not 2" in warnings[0] and str(path) in warnings[0]
    assert rebuilt.rows_reused == 0
    assert_same_index(rebuilt, build(c, None))
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)
        assert {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} == {
            "built", "used"}
    warnings.clear()
    rerun = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING, warnings.append))
    assert (warnings, rerun.rows_built) == ([], 0)


def test_other_chunking_or_embedder_reuses_nothing(tmp_path):
    c = corpus(20)
    build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    other = Index.build(c, CountingEmbedder(), Chunking("size", 100, 20), NOW,
                        cache=IndexCache(tmp_path, "feature-hash/64", Chunking("size", 100, 20)))
    assert other.rows_reused == 10  # the memories, which are not chunked
    wider = FeatureHashEmbedder(128)
    assert Index.build(c, wider, CHUNKING, NOW, cache=IndexCache(tmp_path, wider.identity, CHUNKING)).rows_reused == 0


def test_the_chunk_overlap_alone_is_in_a_documents_key(tmp_path):
    c = corpus(20)
    build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING))
    overlap = replace(CHUNKING, chunk_overlap=CHUNKING.chunk_overlap // 2)
    rerun = Index.build(c, CountingEmbedder(), overlap, NOW, cache=IndexCache(tmp_path, "feature-hash/64", overlap))
    assert rerun.rows_reused == 10  # the memories, which are not chunked
    assert_same_index(rerun, Index.build(c, CountingEmbedder(), overlap, NOW))


def test_two_embedders_of_the_same_width_share_no_entry(tmp_path):
    class Doubled(DenseEmbedder):  # other float32 rows of the same width, under another identity
        def __init__(self) -> None:
            super().__init__(48)
            self.identity = "doubled-test/48"

        def embed(self, texts):
            return 2 * super().embed(texts)

    c = corpus(20)
    build(c, IndexCache(tmp_path, DenseEmbedder(48).identity, CHUNKING), DenseEmbedder(48))
    rerun = build(c, IndexCache(tmp_path, Doubled().identity, CHUNKING), Doubled())
    assert rerun.rows_reused == 0
    assert_same_index(rerun, build(c, None, Doubled()))


def test_a_damaged_cache_file_is_rebuilt_with_a_warning(tmp_path):
    c = corpus(30)
    cache = IndexCache(tmp_path, "feature-hash/64", CHUNKING)
    build(c, cache)
    cache.path.write_bytes(b"not a database, " * 500)
    for suffix in ("-wal", "-shm"):
        cache.path.with_name(cache.path.name + suffix).unlink(missing_ok=True)
    warnings: list[str] = []
    rebuilt = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING, warnings.append))
    assert len(warnings) == 1 and "damaged" in warnings[0] and str(cache.path) in warnings[0]
    assert rebuilt.rows_reused == 0
    assert_same_index(rebuilt, build(c, None))
    assert build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING)).rows_built == 0


def test_a_damaged_entry_is_rebuilt_with_a_warning(tmp_path):
    c = corpus(30)
    cache = IndexCache(tmp_path, "feature-hash/64", CHUNKING)
    build(c, cache)
    key = cache.document_key(c.documents[3].content)
    with sqlite3.connect(cache.path) as conn:
        (blob,) = conn.execute("SELECT rows FROM built WHERE key = ?", (key,)).fetchone()
        conn.execute("UPDATE built SET rows = ? WHERE key = ?", (blob[:len(blob) // 2], key))
    warnings: list[str] = []
    rebuilt = build(c, IndexCache(tmp_path, "feature-hash/64", CHUNKING, warnings.append))
    assert len(warnings) == 1 and "damaged entry" in warnings[0]
    assert rebuilt.rows_built == len(chunk_document(c.documents[3], CHUNKING))
    assert_same_index(rebuilt, build(c, None))


def test_the_job_says_what_it_reused(tmp_path):
    config = write_job(tmp_path, backend={"kind": "embedded", "cache_dir": "cache",
                                          "embedder": {"kind": "feature-hash", "dimensions": 256}})
    lines = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "rqsweep", str(config)], capture_output=True, text=True,
                              cwd=tmp_path)
        assert done.returncode in (0, 4), done.stderr
        lines.append(next(line for line in done.stderr.splitlines() if "embedded index:" in line))
    assert "(0 reused from the index cache, 9 built)" in lines[0]
    assert "(9 reused from the index cache, 0 built)" in lines[1]
    assert [p.name[:16] for p in Path(tmp_path, "cache", "index").glob("*.sqlite3")] == ["feature-hash_256"]
    first, second = (pl.read_parquet(run / "grid.parquet").drop("run_id")
                     for run in sorted(Path(tmp_path, "results", "mini").iterdir()))
    assert first.height > 0 and first.equals(second)


def test_explain_builds_its_index_from_the_runs_cache(tmp_path):
    from rqsweep import job
    from rqsweep.report.explain import Recompute
    from rqsweep.runfolder import read_run_folder
    config = write_job(tmp_path, backend={"kind": "embedded", "cache_dir": "cache",
                                          "embedder": {"kind": "feature-hash", "dimensions": 256}})
    index = Recompute(read_run_folder(job.run(config, quiet=True).run_dir)).index()
    assert (index.rows_built, index.rows_reused) == (0, 9)


@pytest.mark.parametrize("blob", [b"", b"PK\x03\x04 truncated", b"\x00" * 64])
def test_unreadable_entries_are_value_errors(blob):
    with pytest.raises(ValueError):
        BuiltRows.from_bytes(blob)


def test_the_vectors_progress_counts_rows_read_back_as_made(tmp_path):
    cache, c = IndexCache(tmp_path, CountingEmbedder().identity, CHUNKING), corpus()
    for _ in range(2):  # cold, then every row from the cache
        told = Told()
        index = Index.build(c, CountingEmbedder(), CHUNKING, NOW, cache=cache, vectors_later=True, progress=told)
        (total, portions), = told.phases
        assert total == sum(portions) == index.rows_built + index.rows_reused
    assert index.rows_built == 0
