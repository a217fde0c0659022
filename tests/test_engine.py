"""The embedded engine's public surface: build, search (SOAT-shaped), scope, limit, clock, tie orders."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.corpus import Chunk, Chunking, Corpus, Document, Memory, chunk_document, chunk_id
from rqsweep.engine.batch import SettingsBatch, expected_positions
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine import index as index_module
from rqsweep.engine.index import Catalog, ChunkIds, Index, Rows, clamp_limit
from rqsweep.scope import Scope
from rqsweep.knobs import KnobError, Knobs

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def corpus() -> Corpus:
    return Corpus(
        documents=(
            Document("doc-a", "alpha beta gamma " * 80, path="/team/a.md", tags={"team": "core"}),
            Document("doc-b", "beta delta", path="/ops/b.md", tags={"team": "ops"}),
        ),
        memories=(
            Memory("mem-old", "beta pager number 100", store="facts", age_days=400),
            Memory("mem-new", "beta pager number 199", store="facts", age_days=2),
            Memory("mem-other", "unrelated words", store="people", age_days=0),
        ),
    )


@pytest.fixture(scope="module")
def index() -> Index:
    return Index.build(corpus(), FeatureHashEmbedder(256), Chunking("size", 1000, 200), now=NOW)


def test_size_chunking_follows_soat_windows():
    chunks = chunk_document(Document("d", "x" * 1801), Chunking("size", 1000, 200))
    assert [len(c.content) for c in chunks] == [1000, 1000, 201]
    assert [c.chunk_id for c in chunks] == ["d#0", "d#1", "d#2"]
    # 801..1000 characters make two chunks, the second a short tail.
    assert len(chunk_document(Document("d", "y" * 801), Chunking("size", 1000, 200))) == 2
    assert chunk_document(Document("d", "z" * 5000), Chunking("whole")) == [Chunk("d#0", "d", "z" * 5000)]


def test_size_chunking_counts_utf16_units_like_javascript():
    text = "😀" * 600  # 1,200 UTF-16 units
    chunks = chunk_document(Document("d", text), Chunking("size", 1000, 200))
    assert [len(c.content) for c in chunks] == [500, 200]


@pytest.mark.parametrize("raw, clamped", [(None, 10), (0, 10), (-3, 10), (7.9, 7), (100, 100), (250, 100),
                                          ("12", 10), (float("nan"), 10), (True, 10)])
def test_limit_is_clamped_as_soat_does(raw, clamped):
    assert clamp_limit(raw) == clamped


def test_search_returns_soat_shaped_results(index):
    results = index.search("beta pager", Knobs(), limit=10)
    assert results and len(results) <= 10
    first = results[0]
    assert first.source_type in ("document", "memory")
    assert all(set(r.signals) <= {"vector", "lexical"} and r.signals for r in results)
    assert all(-1.0 <= r.similarity_score <= 1.0 for r in results)
    docs = [r for r in results if r.source_type == "document"]
    assert all(r.chunk_id and r.chunk_id.startswith(r.key + "#") for r in docs)
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    # Lexical-only hits carry a raw cosine too.
    lexical = [r for r in results if "lexical" in r.signals]
    assert lexical and all(isinstance(r.similarity_score, float) for r in lexical)


def test_several_chunks_of_one_document_each_take_a_slot(index):
    results = index.search("alpha gamma", Knobs(), limit=10)
    assert sum(r.key == "doc-a" for r in results) >= 2


def test_scope_filters_both_stores(index):
    keys = {r.key for r in index.search("beta", Knobs(), 10, Scope(tags={"team": "ops"}))}
    assert "doc-a" not in keys and "doc-b" in keys
    assert not {"mem-old", "mem-new"} & {r.key for r in index.search(
        "beta pager", Knobs(), 10, Scope(include_memories=False))}
    only_people = index.search("beta pager", Knobs(), 10, Scope(memory_stores=("people",), include_documents=False))
    assert {r.key for r in only_people} <= {"mem-other"}
    paths = index.search("beta", Knobs(), 10, Scope(document_paths=("/ops/",), include_memories=False))
    assert {r.key for r in paths} == {"doc-b"}
    with pytest.raises(ValueError):
        Scope(include_documents=False, include_memories=False)


def test_memory_ages_come_from_one_injected_clock(index):
    ages = index.memory_age_days()
    assert ages.tolist() == [400.0, 2.0, 0.0]
    later = index.memory_age_days(NOW + timedelta(days=1))
    assert later.tolist() == [401.0, 3.0, 1.0]
    updated = {r.key: r.updated_at for r in index.search("beta pager number", Knobs(), 10)}
    assert updated["mem-new"] == NOW - timedelta(days=2)


def test_recency_blend_demotes_the_stale_twin(index):
    def order(knobs):
        return [r.key for r in index.search("beta pager number", knobs, 10) if r.key.startswith("mem-")]

    assert order(Knobs(recency_half_life_days=30)).index("mem-new") < order(
        Knobs(recency_half_life_days=30)).index("mem-old")


def test_knob_values_are_validated():
    for bad in ({"rrf_k": 0}, {"rrf_k": 2.5}, {"min_similarity": 1.5}, {"min_similarity": -0.1},
                {"recency_half_life_days": -1}, {"recency_half_life_days": float("inf")}, {"rrf_k": True}):
        with pytest.raises(KnobError):
            Knobs(**bad)


def test_tie_orders_differ_where_postgres_sorts_ties_unstably():
    """Identical memories tie exactly in both channels; PostgreSQL's quicksort does not keep insertion order."""
    n = 7
    mems = tuple(Memory(f"m{i}", "the same fact about pagers", age_days=0) for i in range(n))
    other = (Memory("x", "pagers elsewhere entirely different text here", age_days=0),)
    c = Corpus((), mems + other)
    pg = Index.build(c, FeatureHashEmbedder(64), now=NOW, tie_order="postgres")
    ins = Index.build(c, FeatureHashEmbedder(64), now=NOW, tie_order="insertion")
    pg_order = [r.key for r in pg.search("same fact pagers", Knobs(), 3)]
    ins_order = [r.key for r in ins.search("same fact pagers", Knobs(), 3)]
    assert ins_order == ["m0", "m1", "m2"]
    assert pg_order != ins_order
    # The batch call sees the same difference for the expected item.
    batch = SettingsBatch.from_knobs([Knobs()])
    target = pg_order[0]
    a = expected_positions(pg.plan("same fact pagers", [target], 3), batch, 3)
    b = expected_positions(ins.plan("same fact pagers", [target], 3, tie_order="insertion"), batch, 3)
    assert a.tolist() == [[1]] and a.tolist() != b.tolist()


def test_batch_ranks_equal_search_for_many_settings(index):
    settings = [Knobs(k, f, h) for k in (1, 10, 60) for f in (None, 0.1, 0.3) for h in (0, 1, 30)]
    batch = SettingsBatch.from_knobs(settings)
    for query, key in [("beta pager number", "mem-new"), ("alpha", "doc-a"), ("delta", "doc-b")]:
        got = expected_positions(index.plan(query, [key], 10), batch, 10)[:, 0]
        want = [next((p for p, r in enumerate(index.search(query, s, 10), 1) if r.key == key), 0) for s in settings]
        assert got.tolist() == want, query
    assert np.isfinite(index.memory_age_days()).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "ab", "é", "a\ud800", "\U0001f600", ""]), max_size=12),
       st.lists(st.sampled_from(["m", "b", "a\udc00"]), max_size=5, unique=True),
       st.lists(st.sampled_from(["a", "b", "ab", "é", "a\ud800", "a\udc00", "m", "zz", ""]), max_size=6),
       st.integers(1, 4))
def test_expected_rows_are_every_row_of_the_key(document_keys, memory_keys, wanted, keys_at_once):
    """Each wanted key's rows in both tables, keys repeated (a document's chunks), shared between the tables,
    missing, empty or holding lone surrogates, encoded a few at a time: what a scan of every row finds."""
    def rows(keys):
        return Rows("x", list(keys), list(keys), [""] * len(keys), [{}] * len(keys), [""] * len(keys),
                    np.zeros(len(keys), np.int64))
    with mock.patch.object(index_module, "_KEYS_AT_ONCE", keys_at_once):
        catalog = Catalog(rows(document_keys), rows(memory_keys), FeatureHashEmbedder(8), datetime.now(timezone.utc))
    scan = [{(kind, row) for kind, keys in (("document", document_keys), ("memory", memory_keys))
             for row, key in enumerate(keys) if key == k} for k in wanted]
    assert catalog.expected_rows(wanted) == scan


SETTINGS = [Knobs(k, f, h) for k in (1, 60) for f in (None, 0.3) for h in (0, 30)]
QUERIES = ["beta pager number", "alpha", "delta", "unrelated beta"]


def test_an_index_without_postings_ranks_candidates_as_the_index_does(index):
    bare = index.without_postings()
    assert [s.lexical for s in bare.stores.values()] == [None, None]
    assert all(s.lexical is not None for s in index.stores.values())  # the index itself keeps them
    for query in QUERIES:
        vector = index.embed_queries([query])[0]
        candidates = index.candidates(query, 10, query_vector=vector)
        for knobs in SETTINGS:
            assert bare.results(candidates, vector, knobs, 10) == index.search(query, knobs, 10), (query, knobs)


def ties_corpus() -> Corpus:
    """Exact ties in both channels (the same text under several keys, in both tables): the tie orders differ."""
    return Corpus(tuple(Document(f"doc-{i}", "beta pager alpha", path=f"/t/{i}.md") for i in range(6)) +
                  (Document("doc-x", "alpha beta gamma delta"),),
                  tuple(Memory(f"mem-{i}", "beta pager alpha", store="facts", age_days=i % 3) for i in range(6)))


SCOPES = [Scope(), Scope(include_documents=False), Scope(memory_stores=("facts",), document_paths=("/t/",))]


@pytest.mark.parametrize("make", [corpus, ties_corpus])
@pytest.mark.parametrize("scope", SCOPES, ids=["all", "memories", "stores-paths"])
def test_lexical_candidates_taken_first_and_the_postings_dropped_give_the_index_s_candidates(make, scope):
    """The job's order: every query's lexical channel, then the postings go, then the vector channel."""
    whole = Index.build(make(), FeatureHashEmbedder(256), Chunking("size", 1000, 200), now=NOW)
    dropped = Index.build(make(), FeatureHashEmbedder(256), Chunking("size", 1000, 200), now=NOW)
    vectors = whole.embed_queries(QUERIES)
    want = whole.candidates_many(QUERIES, vectors, 10, scope)
    lexical = dropped.lexical_candidates(QUERIES, 10, scope)
    dropped.drop_postings()
    assert [s.lexical for s in dropped.stores.values()] == [None, None]
    got = dropped.candidates_many(QUERIES, vectors, 10, scope, lexical)
    assert got == want
    if make is ties_corpus and scope == Scope():
        assert any(by_order["postgres"] != by_order["insertion"] for by_order in want)  # the corpus has its ties
    for query, vector, by_order in zip(QUERIES, vectors, got):
        for knobs in SETTINGS:
            assert dropped.results(by_order[dropped.tie_order], vector, knobs, 10) == \
                whole.search(query, knobs, 10, scope), (query, knobs)


def _golden(queries):
    from pathlib import Path

    from rqsweep.golden import Expected, GoldenQuery, GoldenSet

    return GoldenSet(Path("golden.json"), "", tuple(GoldenQuery(f"q{i}", "s", query, (Expected("memory", "mem-new"),))
                                                    for i, query in enumerate(queries)), None, ())


def test_the_embedded_backend_lets_the_postings_go_once_its_candidates_are_extracted(index):
    from rqsweep.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(index, _golden(QUERIES), 10, Scope())
    assert [s.lexical for s in backend.index.stores.values()] == [None, None]
    assert all(s.lexical is not None for s in index.stores.values())  # not owned: a copy lets them go
    for knobs in SETTINGS:
        ranked = backend.ranked(knobs)
        for i, query in enumerate(QUERIES):
            assert [(h.key, h.chunk, h.score, h.vector, h.lexical, h.similarity_score, h.blend_factor)
                    for h in ranked[f"q{i}"]] == \
                [(r.key, r.chunk_id, r.score, r.signals.get("vector"), r.signals.get("lexical"), r.similarity_score,
                  r.recency_factor) for r in index.search(query, knobs, 10)], (query, knobs)


@pytest.mark.parametrize("make", [corpus, ties_corpus])
def test_a_backend_owning_its_index_drops_the_postings_before_the_vector_channel_and_scores_the_same(make,
                                                                                                    monkeypatch):
    from rqsweep.backends import scoring
    from rqsweep.backends.embedded import EmbeddedBackend

    monkeypatch.setattr(scoring, "_EXTRACTION_BLOCK", 3)  # several blocks: all lexical first, then each vector block
    build = lambda: Index.build(make(), FeatureHashEmbedder(256), Chunking("size", 1000, 200), now=NOW)  # noqa: E731
    kept, owned_index = build(), build()
    postings_seen: list[bool] = []
    original = Index.candidates_many

    def watched(self, *args, **kwargs):
        postings_seen.append(any(s.lexical is not None for s in self.stores.values()))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Index, "candidates_many", watched)
    golden = _golden(QUERIES * 2)
    owned = EmbeddedBackend(owned_index, golden, 10, Scope(), owned=True)
    assert postings_seen == [False, False, False]  # 8 queries in blocks of 3, the postings gone before each
    assert [s.lexical for s in owned_index.stores.values()] == [None, None]  # in place
    reference = EmbeddedBackend(kept, golden, 10, Scope())
    assert owned.candidates == reference.candidates
    assert owned.evaluate(SETTINGS).equals(reference.evaluate(SETTINGS))
    for knobs in SETTINGS:
        assert owned.ranked(knobs) == reference.ranked(knobs)


@pytest.mark.parametrize("make", [corpus, ties_corpus])
def test_a_model_s_vectors_left_for_later_are_the_build_s_and_so_are_the_candidates(make, monkeypatch):
    from tests.test_index_cache import DenseEmbedder

    monkeypatch.setattr(index_module, "_EMBED_PORTION", 4)  # several portions in both passes
    whole = Index.build(make(), DenseEmbedder(), Chunking("size", 1000, 200), now=NOW)
    later = Index.build(make(), DenseEmbedder(), Chunking("size", 1000, 200), now=NOW, vectors_later=True)
    assert [(s.vectors, s.norms) for s in later.stores.values()] == [(None, None), (None, None)]
    vectors = whole.embed_queries(QUERIES)
    lexical = later.lexical_candidates(QUERIES, 10, Scope())
    later.drop_postings()
    later.embed_vectors()
    for source_type, store in later.stores.items():
        built = whole.stores[source_type]
        assert store.vectors.flags.f_contiguous and store.vectors.dtype == built.vectors.dtype == np.float32
        assert store.vectors.tobytes("F") == built.vectors.tobytes("F") and store.norms.tobytes() == built.norms.tobytes()
    assert later.candidates_many(QUERIES, vectors, 10, Scope(), lexical) == whole.candidates_many(QUERIES, vectors, 10)


def test_the_feature_hash_s_vectors_are_made_in_the_build_even_when_asked_for_later():
    later = Index.build(corpus(), FeatureHashEmbedder(256), Chunking("size", 1000, 200), now=NOW, vectors_later=True)
    whole = Index.build(corpus(), FeatureHashEmbedder(256), Chunking("size", 1000, 200), now=NOW)
    for source_type, store in later.stores.items():  # read from the runs the lexical index reads: no second pass
        built = whole.stores[source_type].vectors
        assert store.vectors is not None and store.vectors.counts.tobytes("F") == built.counts.tobytes("F")
        assert store.vectors.divisors.tobytes() == built.divisors.tobytes()


@pytest.mark.parametrize("dense, later", [(True, True), (True, False), (False, True), (False, False)])
def test_the_vectors_progress_hears_of_every_row_once_where_the_vectors_are_made(dense, later, monkeypatch):
    from tests.test_index_cache import DenseEmbedder, Told

    monkeypatch.setattr(index_module, "_EMBED_PORTION", 4)
    monkeypatch.setattr(index_module, "_CUT_PORTION", 4)
    told = Told()
    index = Index.build(corpus(), DenseEmbedder() if dense else FeatureHashEmbedder(64), Chunking("size", 1000, 200),
                        now=NOW, vectors_later=later, progress=told)
    rows = sum(len(s.ids) for s in index.stores.values())
    left = dense and later  # only a model's vectors wait for `embed_vectors`
    assert told.phases == ([] if left else [(rows, told.phases[0][1])])
    index.embed_vectors()
    (total, portions), = told.phases
    assert total == sum(portions) == rows and len(portions) >= 2 and max(portions) <= 4  # by portions, both tables
    index.embed_vectors()  # nothing left: no second phase
    assert len(told.phases) == 1


@pytest.mark.parametrize("make", [corpus, ties_corpus])
def test_an_owning_backend_makes_a_model_s_vectors_once_the_postings_are_gone_and_scores_the_same(make,
                                                                                                   monkeypatch):
    from rqsweep.backends import scoring
    from rqsweep.backends.embedded import EmbeddedBackend
    from tests.test_index_cache import DenseEmbedder

    monkeypatch.setattr(scoring, "_EXTRACTION_BLOCK", 3)
    build = lambda later: Index.build(make(), DenseEmbedder(), Chunking("size", 1000, 200), now=NOW,  # noqa: E731
                                      vectors_later=later)
    later, kept = build(True), build(False)
    seen: list[tuple[str, bool, bool]] = []  # (step, postings held, vectors held) as each step starts
    state = lambda index: (any(s.lexical is not None for s in index.stores.values()),  # noqa: E731
                           all(s.vectors is not None for s in index.stores.values()))
    for name in ("lexical_candidates", "embed_vectors", "candidates_many"):
        original = getattr(Index, name)
        monkeypatch.setattr(Index, name, lambda self, *a, _o=original, _n=name, **k: (seen.append((_n, *state(self))),
                                                                                     _o(self, *a, **k))[1])
    golden = _golden(QUERIES * 2)
    owned = EmbeddedBackend(later, golden, 10, Scope(), owned=True)
    # 8 queries in blocks of 3: every block's lexical channel over the postings, then the vectors made without
    # them, then each block's vector channel.
    assert seen == [("lexical_candidates", True, False)] * 3 + [("embed_vectors", False, False)] + \
        [("candidates_many", False, True)] * 3
    reference = EmbeddedBackend(kept, golden, 10, Scope())
    assert owned.candidates == reference.candidates
    assert owned.evaluate(SETTINGS).equals(reference.evaluate(SETTINGS))
    for knobs in SETTINGS:
        assert owned.ranked(knobs) == reference.ranked(knobs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b#1", "é", "a\ud800", ""]), st.integers(0, 3)), max_size=8))
def test_chunk_ids_are_made_as_a_list_of_them_would_hold_them(documents):
    """Documents without chunks among them (first, last, in a row): each row's id, from either end, and slices."""
    keys, counts = [k for k, _ in documents], np.array([n for _, n in documents], np.int64)
    ids = ChunkIds(keys, counts)
    want = [chunk_id(k, i) for k, n in documents for i in range(n)]
    assert len(ids) == len(want) and ids == want
    assert [ids[i] for i in range(-len(want), len(want))] == want + want
    assert ids[1:-1] == want[1:-1]
    for outside in (len(want), -len(want) - 1):
        with pytest.raises(IndexError):
            ids[outside]
