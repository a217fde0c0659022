"""Candidates per store and channel, and the shard merge.

Section 2, steps 2 to 4, of the SOAT contract (shared/docs/soat-knowledge-search.md).

None of this depends on `rrf_k`, the half-life or the similarity floor, so a query's candidates are
computed once and re-fused for every setting.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from rqsweep.engine.cosine import cosine_top_many
from rqsweep.engine.pgsort import TIE_ORDERS, TieOrder, insertion_top, postgres_top
from rqsweep.engine.tsearch import LexicalIndex


@dataclass(frozen=True)
class Candidate:
    """A row of one store as a channel returned it; `score` is its cosine or its ts_rank_cd."""

    source_type: str
    row: int
    score: float


@dataclass(frozen=True)
class Candidates:
    """One query's merged channel lists, best first, before the similarity floor (each up to 2 x limit)."""

    vector: tuple[Candidate, ...]
    lexical: tuple[Candidate, ...]


def vector_channels(source_type: str, vectors: np.ndarray, norms: np.ndarray, rows: np.ndarray,
                    queries: np.ndarray, limit: int) -> list[dict[TieOrder, list[Candidate]]]:
    """Top `limit` rows in scope by cosine similarity (= 1 - pgvector's cosine distance), for every query of
    `queries` in both tie orders, in one pass (`cosine_top_many`; tests tie it to `cosine_top`, query by query).

    Both orders share one list (the same object) when ties cannot tell them apart.
    """
    if len(rows) == 0:
        return [{order: [] for order in TIE_ORDERS} for _ in queries]
    tops = cosine_top_many(vectors, queries, limit, norms=norms, rows=None if len(rows) == len(vectors) else rows)
    lists: list[dict[TieOrder, list[Candidate]]] = []
    for top in tops:
        made: dict[int, list[Candidate]] = {}
        for order in TIE_ORDERS:
            if id(top[order]) not in made:
                made[id(top[order])] = [Candidate(source_type, int(rows[t]), 1.0 - float(d))
                                        for t, d in zip(*top[order])]
        lists.append({order: made[id(top[order])] for order in TIE_ORDERS})
    return lists


def lexical_channels(source_type: str, index: LexicalIndex, in_scope: np.ndarray | None, query: str, limit: int,
                     tie_orders: tuple[TieOrder, ...] = TIE_ORDERS) -> dict[TieOrder, list[Candidate]]:
    """Top `limit` matching rows in scope by ts_rank_cd, in the order PostgreSQL's sort gives ties, in each of
    `tie_orders`, from one search."""
    rows, ranks = index.search(query)
    if in_scope is not None and len(rows):
        keep = in_scope[rows]
        rows, ranks = rows[keep], ranks[keep]
    if len(rows) == 0:
        return {order: [] for order in tie_orders}
    picks = {"postgres": postgres_top, "insertion": insertion_top}
    return {order: [Candidate(source_type, int(rows[t]), float(ranks[t]))
                    for t in picks[order](ranks, limit, descending=True)] for order in tie_orders}


def merge_shards(documents: list[Candidate], memories: list[Candidate]) -> tuple[Candidate, ...]:
    """Concatenate documents then memories and stable-sort by score: ties keep documents first."""
    return tuple(sorted(documents + memories, key=lambda c: -c.score))
