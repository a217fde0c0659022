"""rqsweep.engine.cosine against pgvector on a real PostgreSQL 18, plus an exact-arithmetic model.

Distances must be bit-identical to `embedding <=> query`, and `cosine_top` (one query) and
`cosine_top_many` (a batch, both tie orders) must return the rows of `ORDER BY embedding <=> query LIMIT n`
in PostgreSQL's order, ties included.
"""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.engine.cosine import _pg_dot, cosine_distance, cosine_top, cosine_top_many, squared_norms

DIM = 1024


def _literal(vector: np.ndarray) -> str:
    # repr of the exact double image of each float32: pgvector parses it back to the same float32.
    return "[" + ",".join(repr(value) for value in vector.astype(np.float64).tolist()) + "]"


def _feature_hash_like(rng: np.random.Generator, count: int) -> np.ndarray:
    """Sparse L2-normalised vectors like the eval embedder's: a few +-1 and +-0.25 entries."""
    matrix = np.zeros((count, DIM))
    for row in matrix:
        features = rng.integers(1, 40)
        np.add.at(row, rng.integers(0, DIM, features), rng.choice([1.0, -1.0, 0.25, -0.25], features))
        norm = np.linalg.norm(row)
        if norm == 0:
            row[0], norm = 1.0, 1.0
        row /= norm
    return matrix.astype(np.float32)


def _corpus(rng: np.random.Generator) -> np.ndarray:
    dense = rng.standard_normal((900, DIM)).astype(np.float32)
    sparse = _feature_hash_like(rng, 900)
    duplicates = sparse[rng.integers(0, 900, 100)]
    scaled = (dense[rng.integers(0, 900, 50)] * np.float32(2.0)).astype(np.float32)
    nudged = sparse[rng.integers(0, 900, 50)].copy()
    # One ulp up in the first component: mostly from 0 to the smallest subnormal, a rare input.
    nudged[:, 0] = np.nextafter(nudged[:, 0], np.float32(1.0))
    matrix = np.vstack([dense, sparse, duplicates, scaled, nudged]).astype(np.float32)
    return matrix[rng.permutation(len(matrix))]


def _load(pg, table: str, matrix: np.ndarray) -> None:
    pg.execute("CREATE EXTENSION IF NOT EXISTS vector")
    pg.execute(f"DROP TABLE IF EXISTS {table}")
    pg.execute(f"CREATE TABLE {table} (id int, embedding vector({matrix.shape[1]}))")
    with pg.cursor() as cur, cur.copy(f"COPY {table} (id, embedding) FROM STDIN") as copy:
        for row, vector in enumerate(matrix):
            copy.write_row((row, _literal(vector)))


def _bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))


@pytest.fixture(scope="module")
def vector_case(pg_dsn):
    """A 2,000-row 1024-dim table (dense, sparse, duplicates, near-duplicates, a zero vector) and queries."""
    import psycopg

    rng = np.random.default_rng(2024)
    matrix = _corpus(rng)
    matrix[17] = 0.0
    queries = [matrix[3], matrix[int(np.flatnonzero((matrix != 0).sum(1) < 40)[0])],
               (matrix[5] * np.float32(1.5)).astype(np.float32), rng.standard_normal(DIM).astype(np.float32),
               _feature_hash_like(rng, 1)[0], matrix[int(np.flatnonzero((matrix != 0).sum(1) < 40)[7])]]
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        _load(pg, "vectors", matrix)
    return matrix, queries


def test_distances_are_bit_identical(pg, vector_case) -> None:
    matrix, queries = vector_case
    norms = squared_norms(matrix)
    pairs = 0
    for query in queries:
        got = np.array([distance for (distance,) in pg.execute(
            "SELECT embedding <=> %s::vector FROM vectors ORDER BY id", (_literal(query),))], dtype=np.float64)
        mine = cosine_distance(matrix, query, norms=norms)
        assert _bits_equal(got, mine).all(), np.flatnonzero(~_bits_equal(got, mine))[:10]
        assert _bits_equal(cosine_distance(matrix[:50], query), mine[:50]).all()
        pairs += len(got)
    assert pairs >= 10_000
    assert np.isnan(mine[17])


def test_cosine_top_matches_order_by(pg, vector_case) -> None:
    matrix, queries = vector_case
    pg.execute("SET max_parallel_workers_per_gather = 0")  # parallel merges reorder ties (see pgsort)
    plan = "\n".join(row for (row,) in pg.execute(
        "EXPLAIN (COSTS OFF) SELECT id FROM vectors ORDER BY embedding <=> %s::vector LIMIT 10",
        (_literal(queries[0]),)))
    assert re.fullmatch(r"Limit\n\s+->  Sort\n\s+Sort Key: .*<=>.*\n\s+->  Seq Scan on vectors", plan), plan
    norms = squared_norms(matrix)
    kept = np.flatnonzero(np.arange(len(matrix)) % 3 != 1)
    # Column-major, as the index stores it: the sparse queries read their own columns.
    many = {(limit, filtered): cosine_top_many(np.asfortranarray(matrix), np.array(queries), limit, norms=norms,
                                               rows=kept if filtered else None)
            for limit in (1, 10, 100, 1000) for filtered in (False, True)}
    for q, query in enumerate(queries):
        full = cosine_distance(matrix, query, norms=norms)
        # LIMIT 1000 sorts 2,000 or 1,333 rows with quicksort, the other limits use the heap;
        # `, id` is the insertion order.
        cases = [(limit, filtered, order) for limit in (1, 10, 100, 1000)
                 for filtered in (False, True) for order in ("", ", id")]
        arrays = [f"ARRAY(SELECT id FROM vectors {'WHERE id %% 3 <> 1' if filtered else ''} "
                  f"ORDER BY embedding <=> %(q)s::vector{order} LIMIT {limit})"
                  for limit, filtered, order in cases]
        results = pg.execute("SELECT " + ", ".join(arrays), {"q": _literal(query)}).fetchone()
        for (limit, filtered, order), got in zip(cases, results):
            rows = kept if filtered else np.arange(len(matrix))
            tie_order = "insertion" if order else "postgres"
            top, distances = cosine_top(matrix[rows], query, limit, tie_order=tie_order,
                                        norms=norms[rows] if limit != 10 else None)  # both ways
            assert rows[top].tolist() == got, (limit, filtered, tie_order)
            assert _bits_equal(distances, full[rows[top]]).all()
            top, distances = many[(limit, filtered)][q][tie_order]
            assert rows[top].tolist() == got, ("many", limit, filtered, tie_order)
            assert _bits_equal(distances, full[rows[top]]).all()


def test_cosine_top_with_many_exact_ties(pg) -> None:
    # Few distinct directions, each repeated and rescaled: most distances tie bit for bit.
    pg.execute("SET max_parallel_workers_per_gather = 0")
    rng = np.random.default_rng(9)
    for count in (6, 30, 200, 1500):
        base = rng.standard_normal((max(2, count // 10), 64)).astype(np.float32)
        scale = rng.choice(np.array([1.0, 2.0, 0.5, 4.0], dtype=np.float32), count)
        matrix = (base[rng.integers(0, len(base), count)] * scale[:, None]).astype(np.float32)
        matrix[rng.integers(0, count, max(1, count // 50))] = 0.0
        _load(pg, "ties", matrix)
        for query in (base[0], base[-1], rng.standard_normal(64).astype(np.float32)):
            limits = sorted({1, 5, 10, 100, count // 2, count // 2 + 1, count})
            arrays = [f"ARRAY(SELECT id FROM ties ORDER BY embedding <=> %(q)s::vector LIMIT {limit})"
                      for limit in limits if limit >= 1]
            results = pg.execute("SELECT " + ", ".join(arrays), {"q": _literal(query)}).fetchone()
            for limit, got in zip([limit for limit in limits if limit >= 1], results):
                assert cosine_top(matrix, query, limit)[0].tolist() == got, (count, limit)
                many = cosine_top_many(matrix, query[None, :], limit, norms=squared_norms(matrix))
                assert many[0]["postgres"][0].tolist() == got, (count, limit)


def test_cosine_top_with_near_ties(pg) -> None:
    # Copies of one vector with three components rescaled by up to 8 * 2**-18: the distances differ
    # by about as much as float32 rounding does (and often tie exactly), so a float32 estimate
    # orders them differently from pgvector and only the error bound keeps the right rows.
    pg.execute("SET max_parallel_workers_per_gather = 0")
    rng = np.random.default_rng(12)
    base = rng.standard_normal(256).astype(np.float32)
    matrix = np.repeat(base[None, :], 3000, axis=0)
    columns = rng.integers(0, 256, (3000, 3))
    factors = (1 + rng.integers(-8, 9, (3000, 3)) * 2.0**-18).astype(np.float32)
    picked = np.take_along_axis(matrix, columns, axis=1)
    np.put_along_axis(matrix, columns, (picked * factors).astype(np.float32), axis=1)
    _load(pg, "near", matrix)
    nearby = (base + rng.standard_normal(256).astype(np.float32)).astype(np.float32)
    for query in (base, nearby):  # against itself, every distance clamps to 0: one big tie
        arrays = [f"ARRAY(SELECT id FROM near ORDER BY embedding <=> %(q)s::vector{order} LIMIT {limit})"
                  for limit in (1, 10, 100) for order in ("", ", id")]
        results = pg.execute("SELECT " + ", ".join(arrays), {"q": _literal(query)}).fetchone()
        expected = iter(results)
        for limit in (1, 10, 100):
            many = cosine_top_many(matrix, query[None, :], limit, norms=squared_norms(matrix))[0]
            for tie_order in ("postgres", "insertion"):
                want = next(expected)
                assert cosine_top(matrix, query, limit, tie_order=tie_order)[0].tolist() == want
                assert many[tie_order][0].tolist() == want
    # The case is only a test if a float32 estimate alone would get the order wrong.
    estimate = -(matrix @ nearby) / np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    assert np.argsort(estimate, kind="stable")[:100].tolist() != results[-1]


def test_every_tail_length_is_bit_identical(pg) -> None:
    # Dimensions 1..24 and around 1024 cover every shape of the loop's tail (0..7 leftovers).
    pg.execute("CREATE EXTENSION IF NOT EXISTS vector")
    rng = np.random.default_rng(8)
    for dim in [*range(1, 25), 1020, 1021, 1027, 1031]:
        matrix = rng.standard_normal((40, dim)).astype(np.float32)
        query = rng.standard_normal(dim).astype(np.float32)
        got = np.array([distance for (distance,) in pg.execute(
            "SELECT e::vector <=> %s::vector FROM unnest(%s::text[]) AS e",
            (_literal(query), [_literal(row) for row in matrix]))], dtype=np.float64)
        assert _bits_equal(got, cosine_distance(matrix, query)).all(), dim


def _single_rounding_pair() -> tuple[np.float32, np.float32]:
    """float32 `a`, `b` with `a * b` just above 1, by less than 2**-29 (so below double precision)."""
    for step in range(1, 100_000):
        a = np.float32(1 + step * 2.0**-23)
        b = np.float32(1 / float(a))
        excess = Fraction(float(a)) * Fraction(float(b)) - 1
        if 0 < excess < Fraction(1, 2**29):
            return a, b
    raise AssertionError("no such pair")


def test_fused_multiply_add_rounds_once(pg) -> None:
    # dot = fma(a, b * 2**-24, 1): the exact value is just above the float32 midpoint 1 + 2**-24.
    # One rounding (FMA) gives 1 + 2**-23; rounding to double first lands on the midpoint and then
    # on 1.0. pgvector takes the former, and so must we.
    a, b = _single_rounding_pair()
    row = np.array([1.0, a], dtype=np.float32)
    query = np.array([1.0, np.float32(b * 2.0**-24)], dtype=np.float32)
    assert _pg_dot(row[None, :], query)[0] == np.float32(1 + 2.0**-23)
    pg.execute("CREATE EXTENSION IF NOT EXISTS vector")
    (expected,) = pg.execute("SELECT %s::vector <=> %s::vector", (_literal(row), _literal(query))).fetchone()
    assert cosine_distance(row[None, :], query)[0] == expected


def test_extreme_magnitudes_and_zero_vectors(pg) -> None:
    # Tiny, huge and mixed magnitudes take the round-to-odd path, underflowing or overflowing
    # norms give NaN or clamped distances; all must still match bit for bit.
    pg.execute("SET max_parallel_workers_per_gather = 0")
    rng = np.random.default_rng(4)
    rows = []
    for scale in (1e-30, 1e-22, 1e-19, 1e-12, 1.0, 1e12, 1e19, 1e20, 1e25):
        block = rng.standard_normal((5, 37)) * scale
        block[rng.random(block.shape) < 0.5] = 0.0
        rows.append(block)
    rows.append(np.zeros((1, 37)))
    rows.append(rng.standard_normal((3, 37)) * 10.0 ** rng.integers(-40, 30, (3, 37)))
    with np.errstate(over="ignore"):
        matrix = np.vstack(rows).astype(np.float32)
    matrix = matrix[np.isfinite(matrix).all(axis=1)]
    _load(pg, "extremes", matrix)
    for query in [*matrix[::4], rng.standard_normal(37).astype(np.float32)]:
        got = np.array([distance for (distance,) in pg.execute(
            "SELECT embedding <=> %s::vector FROM extremes ORDER BY id", (_literal(query),))], dtype=np.float64)
        assert _bits_equal(got, cosine_distance(matrix, query)).all()
        top = [row for (row,) in pg.execute(
            "SELECT id FROM extremes ORDER BY embedding <=> %s::vector LIMIT 7", (_literal(query),))]
        assert cosine_top(matrix, query, 7)[0].tolist() == top
        assert cosine_top_many(matrix, query[None, :], 7, norms=squared_norms(matrix))[0]["postgres"][0].tolist() == top


# --- exact-arithmetic model, no server ---------------------------------------------------------

def _round_to_float32(value: Fraction) -> Fraction:
    """Correct rounding (ties to even) of an exact value to float32."""
    near = np.float32(float(value))
    candidates = [near, np.nextafter(near, np.float32(-np.inf)), np.nextafter(near, np.float32(np.inf))]
    return min((Fraction(float(c)) for c in candidates),
               key=lambda c: (abs(c - value), int(np.float32(float(c)).view(np.int32)) & 1))


def _reference_dot(a: np.ndarray, b: np.ndarray) -> np.float32:
    """The lane scheme of pgvector's compiled loop in exact arithmetic, rounding once per operation."""
    x, y = [Fraction(float(v)) for v in a], [Fraction(float(v)) for v in b]
    dim, lanes = len(x), [Fraction(0)] * 8
    for start in range(0, dim - dim % 8, 8):
        lanes = [_round_to_float32(lanes[j] + x[start + j] * y[start + j]) for j in range(8)]
    partial = [_round_to_float32(lanes[j + 4] + lanes[j]) for j in range(4)]
    done = dim - dim % 8
    if dim - done >= 4:
        partial = [_round_to_float32(partial[j] + x[done + j] * y[done + j]) for j in range(4)]
        done += 4
    total = _round_to_float32(_round_to_float32(partial[0] + partial[2]) + _round_to_float32(partial[1] + partial[3]))
    for k in range(done, dim):
        total = _round_to_float32(total + x[k] * y[k])
    return np.float32(float(total))


magnitudes = st.sampled_from([1e-30, 1e-20, 1e-3, 1.0, 1e3, 1e15])
vectors = st.integers(1, 40).flatmap(lambda dim: st.tuples(
    st.lists(st.tuples(st.floats(-2, 2, width=32), magnitudes), min_size=dim, max_size=dim),
    st.lists(st.tuples(st.floats(-2, 2, width=32), magnitudes), min_size=dim, max_size=dim)))


@settings(max_examples=150, deadline=None)
@given(pair=vectors)
def test_pg_dot_matches_the_exact_model(pair) -> None:
    a, b = (np.array([value * scale for value, scale in side], dtype=np.float32) for side in pair)
    assert _pg_dot(a[None, :], b)[0] == _reference_dot(a, b)
    assert _pg_dot(a[None, :], a)[0] == _reference_dot(a, a)


def test_norms_and_top_are_consistent_without_a_server() -> None:
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((3000, 96)).astype(np.float32)
    matrix[100:110] = matrix[7]
    query = matrix[7] + np.float32(0.01)
    exact = cosine_distance(matrix, query)
    for tie_order in ("postgres", "insertion"):
        for norms in (None, squared_norms(matrix)):
            top, distances = cosine_top(matrix, query, 12, tie_order=tie_order, norms=norms)
            assert _bits_equal(distances, exact[top]).all()
            assert np.array_equal(np.sort(exact[top]), np.sort(exact)[:12])
    assert cosine_top(matrix, query, 12, tie_order="insertion")[0][:11].tolist() == [7, *range(100, 110)]
    with pytest.raises(ValueError):
        cosine_top(matrix.astype(np.float64), query, 3)
