"""`ts_rank_cd` with normalization 0 (PostgreSQL 18's calc_rank_cd, tsrank.c), bit for bit.

The document is reduced to the query's lexemes in position order. Covers are found left to right:
from a start entry, the shortest prefix that satisfies the query ends a cover, and the shortest
suffix of that prefix which still satisfies it begins it; the next search starts just after the
cover's first entry. Each cover adds (entries / sum of inverse weights) / (1 + noise words) in
double precision; the sum is returned as a float4.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from rqsweep.engine.tsearch.execute import execute
from rqsweep.engine.tsearch.query import Node, TsQuery

# to_tsvector gives every position weight D, whose default weight is the float4 0.1.
INV_WEIGHT = 1.0 / float(np.float32(0.1))


def ts_rank_cd(vector: Mapping[str, Sequence[int]], query: TsQuery) -> float:
    """``ts_rank_cd(vector, query)`` (normalization 0) as the float4 PostgreSQL returns, widened to float."""
    if query.root is None:
        return 0.0
    doc = sorted((pos, lexeme) for lexeme in query.lexemes() for pos in vector.get(lexeme, ()))
    return rank_entries(query.root, doc)


def rank_entries(root: Node, doc: Sequence[tuple[int, str]]) -> float:
    """ts_rank_cd from the document's (position, lexeme) entries for the query's lexemes, sorted.

    Sorting by lexeme within a position matches PostgreSQL, which orders entries of one position
    by their place in the tsvector (byte order of the lexeme, the same as code point order).
    """
    total = 0.0
    start = 0
    while (cover := _cover(root, doc, start)) is not None:
        begin, end, first, last, start = cover
        total += _cover_weight(begin, end, first, last)
    return float(np.float32(total))


def _cover(root: Node, doc: Sequence[tuple[int, str]], start: int) -> tuple[int, int, int, int, int] | None:
    """(begin, end, first position, last position, next start) of the next cover, or None."""
    n = len(doc)
    while True:
        seen: dict[str, list[int]] = {}
        for end in range(start, n):
            pos, lexeme = doc[end]
            seen.setdefault(lexeme, []).append(pos)
            if execute(root, seen.get):
                last = pos
                break
        else:
            return None
        seen = {}
        begin = end
        while begin >= start:
            pos, lexeme = doc[begin]
            seen.setdefault(lexeme, []).insert(0, pos)
            if execute(root, seen.get):
                if pos <= last:
                    return begin, end, pos, last, begin + 1
                break
            begin -= 1
        start += 1


def _cover_weight(begin: int, end: int, first: int, last: int) -> float:
    """One cover's term: (entries / their inverse weights) / (1 + noise), as PostgreSQL sums it."""
    size = end - begin + 1
    noise = (last - first) - (end - begin)
    if noise < 0:
        # Positions capped at 16383 can make a cover look shorter than its entries.
        noise = (end - begin) // 2
    return (size / inverse_weight_sums(size + 1)[size]) / (1 + noise)


def inverse_weight_sums(count: int) -> list[float]:
    """sums[k] for k < count: k inverse weights added one at a time, as PostgreSQL accumulates them."""
    sums, total = [0.0], 0.0
    for _ in range(1, count):
        total += INV_WEIGHT
        sums.append(total)
    return sums
