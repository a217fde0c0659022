"""Candidates per store and channel, and the shard merge.

Section 2, steps 2 to 4, of the SOAT contract (shared/docs/soat-knowledge-search.md).

None of this depends on `rrf_k`, the half-life or the similarity floor, so a query's candidates are
computed once and re-fused for every setting.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from rqsweep.engine.cosine import cosine_top
from rqsweep.engine.pgsort import TieOrder, insertion_top, postgres_top
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


def vector_channel(source_type: str, vectors: np.ndarray, norms: np.ndarray, rows: np.ndarray,
                   query: np.ndarray, limit: int, tie_order: TieOrder) -> list[Candidate]:
    """Top `limit` rows in scope by cosine similarity (= 1 - pgvector's cosine distance).

    `norms` are pgvector's per-row squared norms (`cosine.squared_norms`), computed once per index.
    """
    if len(rows) == 0:
        return []
    if len(rows) == len(vectors):
        matrix, row_norms = vectors, norms
    else:
        matrix, row_norms = vectors[rows], norms[rows]
    top, distances = cosine_top(matrix, query, limit, tie_order=tie_order, norms=row_norms)
    return [Candidate(source_type, int(rows[t]), 1.0 - float(d)) for t, d in zip(top, distances)]


def lexical_channel(source_type: str, index: LexicalIndex, in_scope: np.ndarray | None, query: str,
                    limit: int, tie_order: TieOrder) -> list[Candidate]:
    """Top `limit` matching rows in scope by ts_rank_cd, in the order PostgreSQL's sort gives ties."""
    rows, ranks = index.search(query)
    if in_scope is not None and len(rows):
        keep = in_scope[rows]
        rows, ranks = rows[keep], ranks[keep]
    if len(rows) == 0:
        return []
    pick = postgres_top if tie_order == "postgres" else insertion_top
    top = pick(ranks, limit, descending=True)
    return [Candidate(source_type, int(rows[t]), float(ranks[t])) for t in top]


def merge_shards(documents: list[Candidate], memories: list[Candidate]) -> tuple[Candidate, ...]:
    """Concatenate documents then memories and stable-sort by score: ties keep documents first."""
    return tuple(sorted(documents + memories, key=lambda c: -c.score))
