"""`cosine_top_many` (a batch of queries, both tie orders) against `cosine_top`, its one-query reference.

The corpora are built for exact ties: a few directions, each repeated at power-of-two scales (which leave
pgvector's distance bit for bit unchanged), zero vectors, and queries along a repeated direction. Rows,
their order and the distances' bits must be the same for every query, tie order and scope.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.engine.channels import vector_channels
from tests.reference_paths import vector_channel
from rqsweep.engine.cosine import cosine_top, cosine_top_many, squared_norms
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.pgsort import TIE_ORDERS
from rqsweep.engine.quarter_vectors import QuarterVectors


def _tied_corpus(rng: np.random.Generator, count: int, dim: int, directions: int, sparse: bool) -> np.ndarray:
    base = rng.standard_normal((directions, dim))
    if sparse:
        base *= rng.random((directions, dim)) < 0.2
    scale = rng.choice(np.array([0.25, 0.5, 1.0, 2.0, 8.0]), count)
    matrix = (base[rng.integers(0, directions, count)] * scale[:, None]).astype(np.float32)
    matrix[rng.random(count) < 0.03] = 0.0
    return matrix


def _queries(rng: np.random.Generator, matrix: np.ndarray) -> np.ndarray:
    dim = matrix.shape[1]
    one_hot = np.zeros(dim, np.float32)
    one_hot[rng.integers(0, dim)] = 1.0
    return np.vstack([matrix[rng.integers(0, len(matrix), 3)], rng.standard_normal((2, dim)),
                      one_hot, np.zeros(dim)]).astype(np.float32)


def _assert_same(matrix, queries, limit, rows=None) -> int:
    """Compare every query and tie order; returns how many answers exact ties decided."""
    norms = squared_norms(matrix)
    subset, subset_norms = (matrix, norms) if rows is None else (matrix[rows], norms[rows])
    tied = 0
    for query, got in zip(queries, cosine_top_many(matrix, queries, limit, norms=norms, rows=rows)):
        for order in TIE_ORDERS:
            top, distances = cosine_top(subset, query, limit, tie_order=order, norms=subset_norms)
            assert got[order][0].tolist() == top.tolist(), (order, limit)
            assert got[order][1].view(np.int64).tolist() == distances.view(np.int64).tolist(), (order, limit)
        tied += got["postgres"][0].tolist() != got["insertion"][0].tolist()
    return tied


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 400), dim=st.sampled_from([3, 8, 13, 64, 200]),
       directions=st.integers(1, 6), sparse=st.booleans(), limit=st.integers(1, 60), column_major=st.booleans(),
       scoped=st.booleans())
def test_many_equals_the_reference_on_tied_corpora(seed, count, dim, directions, sparse, limit, column_major,
                                                   scoped) -> None:
    rng = np.random.default_rng(seed)
    matrix = _tied_corpus(rng, count, dim, directions, sparse)
    if column_major:
        matrix = np.asfortranarray(matrix)
    rows = np.flatnonzero(rng.random(count) < 0.7) if scoped else None
    _assert_same(matrix, _queries(rng, matrix), limit, rows)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("per_block", [1, 2, 3])
def test_queries_split_into_small_blocks_get_the_reference_s_answers(seed, per_block, monkeypatch) -> None:
    """Blocks of `per_block` queries (a block's estimates are `_ESTIMATE_CELLS`), dense, sparse and zero queries
    mixed across them: nothing of one block's estimates may leak into the next's."""
    from rqsweep.engine import cosine

    rng = np.random.default_rng(seed)
    matrix = np.asfortranarray(_tied_corpus(rng, 300, 64, 3, sparse=bool(seed % 2)))
    monkeypatch.setattr(cosine, "_ESTIMATE_CELLS", per_block * len(matrix))
    queries = np.vstack([_queries(rng, matrix), _queries(rng, matrix)[::-1]])
    assert len(cosine._blocks(matrix, queries)) == -(-len(queries) // per_block)
    _assert_same(matrix, queries, 10, np.flatnonzero(rng.random(len(matrix)) < 0.8) if seed > 2 else None)


def test_ties_do_decide_the_orders_here() -> None:
    # The property test is only a test of the tie path if ties change answers on such corpora.
    rng = np.random.default_rng(5)
    matrix = np.asfortranarray(_tied_corpus(rng, 3000, 64, 4, sparse=True))
    assert sum(_assert_same(matrix, _queries(rng, matrix), limit) for limit in (5, 10, 50)) >= 3


def _hashed_texts(rng: np.random.Generator, count: int) -> list[str]:
    """Texts of a small vocabulary, a quarter of them repeated (repeats tie exactly), and an empty one (e0)."""
    words = [f"w{i}" for i in range(300)] + ["zürich", "Ωμέγα", "日本語"]
    texts = [" ".join(rng.choice(words, int(rng.integers(1, 40)))) for _ in range(count)] + [""]
    return texts + [texts[i] for i in rng.integers(0, len(texts), count // 4)]


def test_quarter_vectors_give_the_embedders_rows() -> None:
    # One dimension: every feature lands on it. FNV-1a's parity is that of its odd code units, so features made
    # of even ones share a sign, and this text's count outgrows a byte mid-way.
    even = [a + b + c for a in "bdfhjlnpr" for b in "bdfhjlnpr" for c in "bdfhjlnpr"]
    for dims, extra in ((256, []), (1, [" ".join(even[:300])])):
        embedder = FeatureHashEmbedder(dims)
        texts = _hashed_texts(np.random.default_rng(dims), 200) + extra
        dense = embedder.embed(texts)
        stored = QuarterVectors.embed(embedder, texts, portion=7)
        assert stored.counts.dtype == (np.int8 if not extra else np.int16)
        assert np.asarray(stored).view(np.int32).tolist() == dense.view(np.int32).tolist()
        rows = np.random.default_rng(1).integers(0, len(texts), 50)
        assert stored[rows].view(np.int32).tolist() == dense[rows].view(np.int32).tolist()
        assert squared_norms(stored).view(np.int32).tolist() == squared_norms(dense).view(np.int32).tolist()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 300), dims=st.sampled_from([16, 64, 256, 1024]),
       limit=st.integers(1, 60), scoped=st.booleans())
def test_quarter_vectors_equal_the_dense_reference(seed, count, dims, limit, scoped) -> None:
    # Sparse queries (hashed short texts) read the counts' columns, dense ones their product; both against
    # `cosine_top` over the float32 rows.
    rng = np.random.default_rng(seed)
    embedder = FeatureHashEmbedder(dims)
    texts = _hashed_texts(rng, count)
    stored = QuarterVectors.embed(embedder, texts, portion=64)
    queries = np.vstack([embedder.embed([" ".join(rng.choice(texts[0].split() or ["w1"], 2)), texts[-1], "w7"]),
                         rng.standard_normal((2, dims)), np.asarray(stored)[rng.integers(0, len(texts), 2)]]
                        ).astype(np.float32)
    rows = np.flatnonzero(rng.random(len(texts)) < 0.6) if scoped else None
    _assert_same(stored, queries, limit, rows)


def test_quarter_vector_ties_do_decide_the_orders_here() -> None:
    rng = np.random.default_rng(8)
    embedder = FeatureHashEmbedder(256)
    texts = _hashed_texts(rng, 1500)
    stored = QuarterVectors.embed(embedder, texts, portion=500)
    queries = embedder.embed([" ".join(rng.choice(texts[i].split() or ["w1"], 1)) for i in range(40)])
    assert sum(_assert_same(stored, queries, limit) for limit in (5, 10, 50)) >= 3


@pytest.mark.parametrize("store", ["float32", "quarters"])
def test_feature_hash_channels_equal_the_reference(store) -> None:
    # Duplicate texts tie exactly; queries are sparse (a few hashed features), as in a real run.
    words = [f"w{i}" for i in range(300)]
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(words, 30)) for _ in range(1500)]
    texts += [texts[i] for i in rng.integers(0, len(texts), 500)]
    embedder = FeatureHashEmbedder(256)
    vectors = (np.asfortranarray(embedder.embed(texts)) if store == "float32"
               else QuarterVectors.embed(embedder, texts, portion=600))
    norms = squared_norms(vectors)
    queries = [" ".join(rng.choice(words, 2)) for _ in range(60)]
    query_vectors = embedder.embed(queries)
    for rows in (np.arange(len(texts)), np.flatnonzero(rng.random(len(texts)) < 0.5)):
        for limit in (1, 10, 40):
            many = vector_channels("document", vectors, norms, rows, query_vectors, limit)
            for vector, got in zip(query_vectors, many):
                for order in TIE_ORDERS:
                    assert got[order] == vector_channel("document", vectors, norms, rows, vector, limit, order)
