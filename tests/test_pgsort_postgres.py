"""pgsort against a real PostgreSQL 18: `ORDER BY key [DESC] LIMIT n` on freshly loaded rows full of ties.

Each data set is loaded into a fresh table (so physical order = insertion order), then one statement
asks for every limit, direction and filter at once: each `ARRAY(SELECT ... LIMIT n)` is its own
Limit -> Sort -> Seq Scan, exactly the shape of SOAT's candidate queries.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from rqsweep.engine.pgsort import insertion_top, postgres_top

SIZES = [1, 2, 3, 6, 7, 8, 13, 40, 41, 42, 100, 333, 1000, 5000]
FILTER = "id % 3 <> 1"


def _patterns(rng: np.random.Generator, count: int) -> dict[str, np.ndarray]:
    three = rng.choice([0.1, 0.2, 0.3], count)
    half = count // 2
    return {
        "three values": three,
        "all equal": np.full(count, 0.5),
        "presorted": np.sort(three),
        "reverse sorted": np.sort(three)[::-1],
        "organ pipe": np.concatenate([np.arange(half), np.arange(count - half)[::-1]]) // 3 / 10,
        "ten levels": rng.integers(0, 10, count) / 10,
        "sawtooth": np.arange(count) % 7 / 7,
        "mostly distinct": np.round(rng.random(count), 3),
    }


def _limits(count: int) -> list[int]:
    around_half = {count // 2 - 1, count // 2, count // 2 + 1, count, count + 1}
    return sorted(limit for limit in {1, 5, 10, 20, 100} | around_half if limit >= 1)


def _load(pg, column_type: str, values: np.ndarray) -> None:
    pg.execute("DROP TABLE IF EXISTS sortcase")
    pg.execute(f"CREATE TABLE sortcase (id int, score {column_type})")
    with pg.cursor() as cur, cur.copy("COPY sortcase (id, score) FROM STDIN") as copy:
        for row, value in enumerate(values.tolist()):
            copy.write_row((row, repr(value)))


def _queries(count: int) -> list[tuple[int, bool, bool]]:
    return [(limit, descending, filtered) for limit in _limits(count)
            for descending in (False, True) for filtered in (False, True)]


def _batched_sql(queries: list[tuple[int, bool, bool]], table: str = "sortcase") -> str:
    arrays = [
        f"ARRAY(SELECT id FROM {table} {'WHERE ' + FILTER if filtered else ''} "
        f"ORDER BY score {'DESC' if descending else ''} LIMIT {limit})"
        for limit, descending, filtered in queries
    ]
    return "SELECT " + ", ".join(arrays)


@pytest.fixture()
def serial_pg(pg):
    # Parallel plans merge the workers' sorted runs, which changes the order of ties; SOAT's
    # corpora are far too small for a parallel plan, and so are these tables, but make sure.
    pg.execute("SET max_parallel_workers_per_gather = 0")
    return pg


@pytest.mark.parametrize("column_type", ["float8", "float4"])
def test_order_by_limit_matches_postgres(serial_pg, column_type: str) -> None:
    rng = np.random.default_rng(20240518 if column_type == "float8" else 7)
    dtype = np.float64 if column_type == "float8" else np.float32
    checked = 0
    for count in SIZES:
        for name, values in _patterns(rng, count).items():
            values = values.astype(dtype)
            _load(serial_pg, column_type, values)
            queries = _queries(count)
            results = serial_pg.execute(_batched_sql(queries)).fetchone()
            kept = np.flatnonzero(np.arange(count) % 3 != 1)
            for (limit, descending, filtered), got in zip(queries, results):
                rows = kept if filtered else np.arange(count)
                expected = rows[postgres_top(values[rows], limit, descending=descending)]
                assert got == expected.tolist(), (name, count, limit, descending, filtered)
                checked += 1
    assert checked > 2000


def test_special_float_values_match_postgres(serial_pg) -> None:
    rng = np.random.default_rng(11)
    specials = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.0, -1.0, 0.5])
    for count in (5, 30, 200, 1500):
        values = rng.choice(specials, count)
        _load(serial_pg, "float8", values)
        queries = _queries(count)
        results = serial_pg.execute(_batched_sql(queries)).fetchone()
        kept = np.flatnonzero(np.arange(count) % 3 != 1)
        for (limit, descending, filtered), got in zip(queries, results):
            rows = kept if filtered else np.arange(count)
            assert got == rows[postgres_top(values[rows], limit, descending=descending)].tolist()


def test_insertion_top_is_order_by_key_then_id(serial_pg) -> None:
    values = np.random.default_rng(5).choice([0.1, 0.2, 0.3], 700)
    _load(serial_pg, "float8", values)
    for limit in (1, 10, 100, 700):
        for direction in ("", "DESC"):
            got = [row for (row,) in serial_pg.execute(
                f"SELECT id FROM sortcase ORDER BY score {direction}, id LIMIT {limit}")]
            assert got == insertion_top(values, limit, descending=direction == "DESC").tolist()


def test_plans_are_a_sort_under_a_limit_with_the_expected_method(serial_pg) -> None:
    # If the plan shape or the heap threshold (more than 2 x limit rows) changed, the model would
    # no longer apply: fail loudly.
    count = 333
    _load(serial_pg, "float8", np.random.default_rng(1).choice([0.1, 0.2], count))
    queries = _queries(count)
    plan = "\n".join(row for (row,) in serial_pg.execute(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF) " + _batched_sql(queries)))
    assert len(re.findall(r"->  Limit .*\n\s+->  Sort .*\n\s+Sort Key: .*\n\s+Sort Method: .*\n"
                          r"\s+->  Seq Scan on sortcase", plan)) == len(queries)
    methods = re.findall(r"Sort Method: (top-N heapsort|quicksort)", plan)
    filtered_count = int(np.count_nonzero(np.arange(count) % 3 != 1))
    expected = ["top-N heapsort" if (filtered_count if filtered else count) > 2 * limit else "quicksort"
                for limit, _, filtered in queries]
    assert methods == expected


def test_ts_rank_cd_order_matches_postgres(serial_pg) -> None:
    # A computed float4 key with the typical repeated values (0.1, 0.2, ...), as SOAT's lexical channel.
    rng = np.random.default_rng(3)
    words = ["pager", "primary", "held", "rotation", "alpha", "beta", "gamma", "delta"]
    bodies = [" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(3000)]
    serial_pg.execute("DROP TABLE IF EXISTS docs")
    serial_pg.execute("CREATE TABLE docs (id int, body text)")
    with serial_pg.cursor() as cur, cur.copy("COPY docs (id, body) FROM STDIN") as copy:
        for row, body in enumerate(bodies):
            copy.write_row((row, body))
    rank = "ts_rank_cd(to_tsvector('simple', body), websearch_to_tsquery('simple', %(q)s))"
    match = "to_tsvector('simple', body) @@ websearch_to_tsquery('simple', %(q)s)"
    for query in ("pager", "primary pager", "held or beta", '"alpha beta"'):
        ranked = serial_pg.execute(f"SELECT id, {rank} FROM docs WHERE {match} ORDER BY id", {"q": query}).fetchall()
        ids = np.array([row for row, _ in ranked])
        ranks = np.array([value for _, value in ranked], dtype=np.float32)
        assert len(np.unique(ranks)) < len(ranks) / 10
        for limit in (1, 10, 100, len(ids) // 2, len(ids)):
            got = [row for (row,) in serial_pg.execute(
                f"SELECT id FROM docs WHERE {match} ORDER BY {rank} DESC LIMIT {limit}", {"q": query})]
            assert got == ids[postgres_top(ranks, limit, descending=True)].tolist(), (query, limit)
