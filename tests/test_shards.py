"""Corpus shards merged exactly: the candidates of an index cut into shards are the whole index's, in both tie
orders, on corpora built for exact ties within and across shards (rqsweep.engine.shards)."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rqsweep.config import Chunking
from rqsweep.corpus import Corpus, Document, Memory
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.index import Index
from rqsweep.engine.pgsort import heap_entrants, postgres_top, top_of_entrants
from rqsweep.engine.shards import sharded_candidates, split_corpus
from rqsweep.scope import Scope

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
EMBEDDER = FeatureHashEmbedder(64)
CHUNKING = Chunking("whole")


def tied_corpus(rng: random.Random, n_documents: int, n_memories: int) -> Corpus:
    """Few distinct texts, repeated: equal vectors and equal ts_rank_cd on rows all over the table, so exact ties
    decide the cut of most queries, within shards and across them; some empty texts give zero vectors (NaN)."""
    texts = [" ".join(rng.sample(WORDS, rng.randint(1, 3))) for _ in range(6)] + [""]
    documents = tuple(Document(f"d{i}", rng.choice(texts), tags={"team": rng.choice("ab")})
                      for i in range(n_documents))
    memories = tuple(Memory(f"m{i}", rng.choice(texts) or "alpha", age_days=rng.choice([0.0, 3.0]))
                     for i in range(n_memories))
    return Corpus(documents, memories)


def from_shards(corpus: Corpus, n_shards: int, queries: list[str], vectors: np.ndarray, limit: int,
                       scope: Scope):
    indexes, offsets, first = [], [], {"document": 0, "memory": 0}
    for part in split_corpus(corpus, n_shards):
        indexes.append(Index.build(part, EMBEDDER, CHUNKING, now=NOW))
        offsets.append(dict(first))
        first = {t: first[t] + len(indexes[-1].stores[t].ids) for t in first}

    def on_shards(task, *args, each=None):
        return [task(index, *([] if each is None else [each[i]]), *args) for i, index in enumerate(indexes)]

    found, distances = sharded_candidates(on_shards, offsets, queries, vectors, limit, scope)
    return list(zip(found, distances))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_documents=st.integers(0, 120), n_memories=st.integers(0, 40),
       n_shards=st.integers(1, 5), limit=st.sampled_from([1, 3, 10]), scoped=st.booleans())
def test_shards_merge_to_the_whole_index_in_both_tie_orders(seed, n_documents, n_memories, n_shards, limit, scoped):
    rng = random.Random(seed)
    corpus = tied_corpus(rng, n_documents, n_memories)
    whole = Index.build(corpus, EMBEDDER, CHUNKING, now=NOW)
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 2))) for _ in range(4)] + ["nothing matches"]
    vectors = whole.embed_queries(queries)
    scope = Scope(tags={"team": "a"}) if scoped else Scope()
    want = whole.candidates_many(queries, vectors, limit, scope)
    got = from_shards(corpus, n_shards, queries, vectors, limit, scope)
    for q, (candidates, distances) in enumerate(got):
        assert candidates == want[q]
        for c in candidates["postgres"].lexical:  # the similarity a lexical-only result is given
            assert distances[c.source_type, c.row] == whole.distances(c.source_type, np.array([c.row]), vectors[q])[0]


def test_the_corpus_is_built_for_ties_that_decide_the_order_across_shards():
    # Not vacuous: on the heap path, PostgreSQL's order differs from insertion order for tied rows in both shards.
    corpus = tied_corpus(random.Random(3), 120, 0)
    whole = Index.build(corpus, EMBEDDER, CHUNKING, now=NOW)
    vectors = whole.embed_queries(["alpha beta"])
    both = whole.candidates_many(["alpha beta"], vectors, 10)[0]
    assert both["postgres"] != both["insertion"]
    rows = {c.row for c in both["postgres"].vector}
    assert min(rows) < 60 <= max(rows)  # the top holds rows of both halves of the table
    assert from_shards(corpus, 2, ["alpha beta"], vectors, 10, Scope())[0][0] == both


@pytest.mark.parametrize("descending", [False, True])
def test_heap_entrants_of_shards_replay_to_postgres_top(descending):
    rng = np.random.default_rng(7)
    for _ in range(200):
        keys = rng.integers(0, 6, rng.integers(0, 300)).astype(np.float64)
        keys[rng.random(len(keys)) < 0.05] = np.nan
        limit = int(rng.integers(1, 12))
        edges = np.sort(rng.integers(0, len(keys) + 1, rng.integers(0, 4)))
        parts = np.split(np.arange(len(keys)), edges)
        reported = np.concatenate([p[heap_entrants(keys[p], limit, descending=descending)] for p in parts])
        top = top_of_entrants(keys[reported], len(keys), limit, "postgres", descending=descending)
        assert reported[top].tolist() == postgres_top(keys, limit, descending=descending).tolist()
