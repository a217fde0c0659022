"""The row order of PostgreSQL 18's `ORDER BY key [DESC] LIMIT n`, ties included.

SOAT's candidate queries sort on one float key with no tie-break column, over a freshly loaded table
read by a sequential scan, so rows reach the sort in physical (= insertion) order. Among equal keys
the result is then decided by the executor's tuplesort, which is not stable:

* while at most `2 * n` rows have arrived they are only stored; if the input ends there, all of them
  are sorted with PostgreSQL's quicksort (Bentley-McIlroy three-way partitioning with a presorted
  check, insertion sort below 7 elements, median-of-three or ninther pivots, recursion on the
  smaller side) and the first `n` are returned;
* when row `2 * n + 1` arrives, the stored rows are fed, in order, into a bounded max-heap of `n`
  entries (sift-up insertion until it is full, then replace-the-top for every row strictly better
  than the top); every later row is compared with the top only and, unless strictly better,
  dropped; at the end the heap is unwound by repeatedly moving the top behind the shrinking heap.

Float keys compare as PostgreSQL's float comparators do: NaN equals NaN and sorts above every other
value (last for ASC, first for DESC), and -0.0 equals 0.0. A single float key has no abbreviated
key and no specialised comparator, so every variant of the sort compares plain values the same
way; `DESC` just inverts each comparison.

Assumptions, true for SOAT's small candidate queries: no parallel plan, and the at most `2 * n`
rows stored before the heap starts fit in `work_mem` (otherwise PostgreSQL starts the heap
earlier, or spills to disk for very large limits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

# How rows with equal keys are ordered: as PostgreSQL's sort leaves them, or in insertion order.
TieOrder = Literal["postgres", "insertion"]
TIE_ORDERS: tuple[TieOrder, ...] = ("postgres", "insertion")

# Maps row indices to their exact keys (float64 or float32 values, NaN allowed).
ExactKeys = Callable[[np.ndarray], np.ndarray]

_MAGNITUDE = np.int64(2**63 - 1)
# Ordinal of NaN: above the ordinal of +inf, whatever the NaN's sign and payload.
_NAN_ORDINAL = np.int64(0x7FF8_0000_0000_0000)
# Chunk sizes of the vectorised pre-filter in the heap phase: the heap top improves fastest early
# on, so chunks start small and double.
_FIRST_CHUNK = 256
_LARGEST_CHUNK = 1 << 15
# Rows simulated through the heap before checking whether ties can matter at all.
_SIMULATION_BUDGET = 1024
# Above this many rows a quicksort whose leading keys are all distinct is answered by numpy.
_SMALL_SORT = 64


def postgres_top(keys: np.ndarray, limit: int, *, descending: bool) -> np.ndarray:
    """Indices of `keys` (rows in physical order) as `ORDER BY key [DESC] LIMIT limit` returns them.

    Exact for PostgreSQL 18, both on the quicksort path (at most `2 * limit` rows) and on the
    bounded-heap path (top-N heapsort); `limit >= len(keys)` sorts everything.
    """
    keys = np.asarray(keys)
    return postgres_top_approx(keys, 0.0, keys.__getitem__, limit, descending=descending)


def insertion_top(keys: np.ndarray, limit: int, *, descending: bool) -> np.ndarray:
    """Like `postgres_top`, but ties keep insertion order (a stable sort): the documented alternative."""
    keys = np.asarray(keys)
    return insertion_top_approx(keys, 0.0, keys.__getitem__, limit, descending=descending)


def postgres_top_approx(approx: np.ndarray, error_bound: float, exact: ExactKeys, limit: int, *,
                        descending: bool) -> np.ndarray:
    """`postgres_top` over keys that are expensive to compute exactly.

    `approx` holds an estimate of every row's key with `|approx - exact| <= error_bound`, and NaN
    exactly where the exact key is NaN. `exact(rows)` is only called for rows that may matter:
    all rows on the quicksort path, and otherwise the first `limit` rows plus the rows whose
    estimate does not rule out entering the heap.
    """
    approx = np.asarray(approx, dtype=np.float64)
    count = len(approx)
    if limit <= 0 or count == 0:
        return np.empty(0, dtype=np.int64)
    if count <= 2 * limit:
        return _quicksort_top(float_ordinals(exact(np.arange(count)), descending), limit)
    return _heap_top(approx, error_bound, exact, limit, descending)


def insertion_top_approx(approx: np.ndarray, error_bound: float, exact: ExactKeys, limit: int, *,
                         descending: bool) -> np.ndarray:
    """`insertion_top` over estimated keys, with the same contract as `postgres_top_approx`."""
    approx = np.asarray(approx, dtype=np.float64)
    if limit <= 0 or len(approx) == 0:
        return np.empty(0, dtype=np.int64)
    rows, _ = _stable_top(approx, error_bound, exact, limit, descending)
    return rows[:limit]


def _stable_top(approx: np.ndarray, error_bound: float, exact: ExactKeys, limit: int,
                descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """The stable top `limit` rows (and their ordinals), plus the row right after them if any.

    Rows left out are strictly worse than the last one kept, or tie with it but come later.
    """
    rows = _candidates(approx, error_bound, limit, descending)
    ordinals = float_ordinals(exact(rows), descending)
    if len(rows) > limit + 1:
        # Everything strictly better than the (limit+1)-th ordinal, then the earliest of its ties.
        cut = np.partition(ordinals, limit)[limit]
        better = ordinals < cut
        ties = np.flatnonzero(ordinals == cut)[: limit + 1 - int(better.sum())]
        keep = np.sort(np.concatenate([np.flatnonzero(better), ties]))
        rows, ordinals = rows[keep], ordinals[keep]
    order = np.argsort(ordinals, kind="stable")
    return rows[order].astype(np.int64), ordinals[order]


def _candidates(approx: np.ndarray, error_bound: float, limit: int, descending: bool) -> np.ndarray:
    """Rows, in row order, that may be among the best `limit + 1` by exact key (a superset).

    If the (limit+1)-th best estimate is `c`, the (limit+1)-th best exact key is no worse than
    `c` +- bound, and a row whose exact key is at least that good has an estimate within
    `2 * bound` of `c`. NaN is the worst key for ASC and the best for DESC.
    """
    if len(approx) <= limit + 1:
        return np.arange(len(approx))
    nan = np.isnan(approx)
    worse = -approx if descending else approx
    if nan.any():
        worse = np.where(nan, -np.inf if descending else np.inf, worse)
    cut = kth_smallest(worse, limit + 1)
    if error_bound == 0 and not nan.any():
        # Exact keys: all rows strictly better than the cut, and the earliest of those tying with
        # it; on tie-heavy data this keeps the exact work small.
        better = np.flatnonzero(worse < cut)
        ties = np.flatnonzero(worse == cut)[: limit + 1]
        return np.sort(np.concatenate([better, ties]))
    return np.flatnonzero(worse <= cut + 2.0 * error_bound)


def kth_smallest(values: np.ndarray, k: int, *, largest: bool = False) -> float:
    """The `k`-th smallest value (1-based; the `k`-th largest with `largest`), without a full selection
    pass over a long array.

    The `k`-th smallest `t` of any subset bounds the overall one from above: it is `t` itself
    when fewer than `k` values are below `t`, else the `k`-th smallest of those below. An evenly
    strided subset keeps `t` tight even on sorted input.
    """
    def kth(part: np.ndarray) -> float:
        at = len(part) - k if largest else k - 1
        return np.partition(part, at)[at]

    sample = values[:: max(1, len(values) // max(2048, 8 * k))]
    if len(sample) < len(values):
        bound = kth(sample)
        values = values[values > bound] if largest else values[values < bound]
        if len(values) < k:
            return float(bound)
    return float(kth(values))


def ties_irrelevant(sorted_ordinals: np.ndarray, limit: int) -> bool:
    """Whether the first `limit` keys are distinct and strictly better than the next one.

    Then the order among equal keys cannot change the top `limit`, whatever the sort algorithm.
    """
    head = sorted_ordinals[: limit + 1]
    return bool(np.all(head[1:] != head[:-1]))


def float_ordinals(values: np.ndarray, descending: bool) -> np.ndarray:
    """Integers that order and tie exactly like PostgreSQL's float comparison in the query's direction.

    The IEEE bit pattern, read as a sign-magnitude integer, is monotonic in the value; -0.0 maps to
    the same integer as 0.0, and every NaN to one integer above +inf.
    """
    values = np.asarray(values, dtype=np.float64)
    bits = values.view(np.int64)
    ordinals = np.where(bits < 0, -(bits & _MAGNITUDE), bits)
    ordinals = np.where(np.isnan(values), _NAN_ORDINAL, ordinals)
    return -ordinals if descending else ordinals


# --- quicksort path ---------------------------------------------------------------------------

def _quicksort_top(ordinals: np.ndarray, limit: int) -> np.ndarray:
    count = len(ordinals)
    if count > _SMALL_SORT:
        # Only the order among equal keys is in question: if the first `limit` positions hold
        # distinct keys, all strictly below the rest, every correct sort agrees.
        order = np.argsort(ordinals, kind="stable")
        if ties_irrelevant(ordinals[order], limit):
            return order[:limit].astype(np.int64)
    items = list(zip(ordinals.tolist(), range(count)))
    _pg_qsort(items, 0, count)
    return np.fromiter((row for _, row in items[:limit]), dtype=np.int64, count=min(limit, count))


def _med3(items: list[tuple[int, int]], a: int, b: int, c: int) -> int:
    ka, kb, kc = items[a][0], items[b][0], items[c][0]
    if ka < kb:
        return b if kb < kc else (c if ka < kc else a)
    return b if kb > kc else (a if ka < kc else c)


def _pg_qsort(items: list[tuple[int, int]], lo: int, n: int) -> None:
    """Sort `items[lo:lo + n]` by key (element 0) exactly as PostgreSQL's sort template permutes it."""
    while True:
        if n < 7:
            for m in range(lo + 1, lo + n):
                j = m
                while j > lo and items[j - 1][0] > items[j][0]:
                    items[j - 1], items[j] = items[j], items[j - 1]
                    j -= 1
            return
        if all(items[m - 1][0] <= items[m][0] for m in range(lo + 1, lo + n)):
            return
        mid = lo + n // 2
        if n > 7:
            first, last = lo, lo + n - 1
            if n > 40:
                d = n // 8
                first = _med3(items, first, first + d, first + 2 * d)
                mid = _med3(items, mid - d, mid, mid + d)
                last = _med3(items, last - 2 * d, last - d, last)
            mid = _med3(items, first, mid, last)
        items[lo], items[mid] = items[mid], items[lo]
        pivot = items[lo][0]
        # Three-way partition: keys equal to the pivot are parked at both ends ([lo+1, pa) and
        # (pd, end)), smaller keys gather in [pa, pb), larger ones in (pc, pd].
        pa = pb = lo + 1
        pc = pd = lo + n - 1
        while True:
            while pb <= pc and items[pb][0] <= pivot:
                if items[pb][0] == pivot:
                    items[pa], items[pb] = items[pb], items[pa]
                    pa += 1
                pb += 1
            while pb <= pc and items[pc][0] >= pivot:
                if items[pc][0] == pivot:
                    items[pc], items[pd] = items[pd], items[pc]
                    pd -= 1
                pc -= 1
            if pb > pc:
                break
            items[pb], items[pc] = items[pc], items[pb]
            pb += 1
            pc -= 1
        end = lo + n
        # Move the parked equal keys to the middle; the two swapped blocks never overlap.
        d = min(pa - lo, pb - pa)
        items[lo:lo + d], items[pb - d:pb] = items[pb - d:pb], items[lo:lo + d]
        d = min(pd - pc, end - pd - 1)
        items[pb:pb + d], items[end - d:end] = items[end - d:end], items[pb:pb + d]
        smaller, larger = pb - pa, pd - pc
        if smaller <= larger:
            if smaller > 1:
                _pg_qsort(items, lo, smaller)
            if larger <= 1:
                return
            lo, n = end - larger, larger
        else:
            if larger > 1:
                _pg_qsort(items, end - larger, larger)
            if smaller <= 1:
                return
            n = smaller


# --- bounded-heap path ------------------------------------------------------------------------
# The heap is a list of (ordinal, row) pairs with the worst kept row (largest ordinal) at index 0.

def _heap_insert(heap: list[tuple[int, int]], item: tuple[int, int]) -> None:
    heap.append(item)
    j = len(heap) - 1
    while j > 0:
        parent = (j - 1) >> 1
        if item[0] <= heap[parent][0]:
            break
        heap[j] = heap[parent]
        j = parent
    heap[j] = item


def _heap_replace_top(heap: list[tuple[int, int]], item: tuple[int, int], size: int) -> None:
    i = 0
    while True:
        j = 2 * i + 1
        if j >= size:
            break
        if j + 1 < size and heap[j][0] < heap[j + 1][0]:
            j += 1
        if item[0] >= heap[j][0]:
            break
        heap[i] = heap[j]
        i = j
    heap[i] = item


def _heap_offer(heap: list[tuple[int, int]], item: tuple[int, int], limit: int) -> None:
    if len(heap) < limit:
        _heap_insert(heap, item)
    elif item[0] < heap[0][0]:
        _heap_replace_top(heap, item, limit)


def _heap_unwind(heap: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted order, produced by moving the top behind the shrinking heap as PostgreSQL does."""
    size = len(heap)
    while size > 1:
        top = heap[0]
        size -= 1
        _heap_replace_top(heap, heap[size], size)
        heap[size] = top
    return heap


def _heap_top(approx: np.ndarray, error_bound: float, exact: ExactKeys, limit: int,
              descending: bool) -> np.ndarray:
    rows = _heap_entrants(approx, error_bound, limit, descending)
    if len(rows) > _SIMULATION_BUDGET:
        # Input in improving order sends nearly every row through the heap; when no ties decide
        # the result, the plain sorted top is the answer and the simulation is not needed.
        top_rows, ordinals = _stable_top(approx, error_bound, exact, limit, descending)
        if ties_irrelevant(ordinals, limit):
            return top_rows[:limit]
    heap: list[tuple[int, int]] = []
    for item in zip(float_ordinals(exact(rows), descending).tolist(), rows.tolist()):
        _heap_offer(heap, item, limit)
    return np.array([row for _, row in _heap_unwind(heap)], dtype=np.int64)


def _heap_entrants(approx: np.ndarray, error_bound: float, limit: int, descending: bool) -> np.ndarray:
    """Rows, in order, that may enter the heap: the first `limit`, which fill it, then a superset
    of the rows strictly better than the heap top when they arrive.

    When the heap starts (at row `2 * limit + 1`), the stored rows after the first `limit` are
    replayed through the same strictly-better test as every later row, so one rule covers both.
    Whatever the tie order, the heap holds the `limit` best keys seen so far, so its top is the
    `limit`-th best key of the prefix; the `limit`-th best estimate of any earlier prefix (taken
    at the start of each chunk) is within `bound` of a value no better than that top.
    """
    return _entrants(_worse(approx, descending), error_bound, limit)


def heap_entrants(keys: np.ndarray, limit: int, *, descending: bool) -> np.ndarray:
    """Positions (ascending) of exact `keys`, in physical order, that a shard of a table reports so that
    `top_of_entrants` over every shard's report, concatenated in physical order, is the whole table's top.

    All rows when there are at most `2 * limit` (the quicksort path reads them all); otherwise the first `limit`
    and a superset of the rows strictly better than this shard's own heap top when they arrive. A shard's heap top
    is never better than the whole table's at the same row (the table's heap has seen more rows), so every row
    that enters the whole table's heap is reported; the stable top `limit` is among them too (a later row that
    is not strictly better than the top has `limit` earlier rows at least as good).
    """
    keys = np.asarray(keys)
    if len(keys) <= 2 * limit:
        return np.arange(len(keys))
    return _entrants(float_ordinals(keys, descending), None, limit)


def top_of_entrants(keys: np.ndarray, count: int, limit: int, tie_order: TieOrder, *,
                    descending: bool) -> np.ndarray:
    """Positions into `keys` (the shards' `heap_entrants`, concatenated in physical order) of the whole table's
    `ORDER BY key [DESC] LIMIT limit` in `tie_order`; `count` is the whole table's row count.

    Rows left out of a report never enter the heap, and the first `limit` rows of the table are all there (each
    shard reports its first `limit`), so replaying the report through the heap is PostgreSQL's run; the quicksort
    path (`count <= 2 * limit`) has every row.
    """
    keys = np.asarray(keys)
    if limit <= 0 or len(keys) == 0:
        return np.empty(0, dtype=np.int64)
    if tie_order == "insertion":
        return insertion_top(keys, limit, descending=descending)
    if count <= 2 * limit:
        return _quicksort_top(float_ordinals(keys, descending), limit)
    return _heap_top(keys, 0.0, keys.__getitem__, limit, descending)


def _entrants(worse: np.ndarray, error_bound: float | None, limit: int) -> np.ndarray:
    """`_heap_entrants` over keys turned so that smaller is better: estimates within `error_bound`, or exact
    ordinals (None: only a strictly better row can enter)."""
    count = len(worse)
    kept = worse[:limit]
    found = [np.arange(limit)]
    start, chunk = limit, _FIRST_CHUNK
    while start < count:
        stop = min(count, start + chunk)
        part = worse[start:stop]
        threshold = kept.max()
        if error_bound is None:
            hits = np.flatnonzero(part < threshold)
        elif np.isinf(threshold):
            # NaN and infinities share the infinite ends here, so nothing can be ruled out.
            hits = np.arange(stop - start)
        elif error_bound == 0:
            hits = np.flatnonzero(part < threshold)
        else:
            # `<=`: the rounded sum may land on an estimate that the real sum exceeds.
            hits = np.flatnonzero(part <= threshold + 2.0 * error_bound)
        if len(hits):
            found.append(start + hits)
            kept = np.partition(np.concatenate([kept, part[hits]]), limit - 1)[:limit]
        start, chunk = stop, min(2 * chunk, _LARGEST_CHUNK)
    return np.concatenate(found)


def _worse(approx: np.ndarray, descending: bool) -> np.ndarray:
    """Estimates turned so that smaller is better, NaN at the worst (ASC) or best (DESC) end."""
    worse = -approx if descending else approx
    nan = np.isnan(approx)
    if nan.any():
        worse = np.where(nan, -np.inf if descending else np.inf, worse)
    return worse
