"""SOAT's fusion, one setting at a time: the reference path of section 2, steps 4 to 7.

Kept deliberately plain (Python lists, stable sorts, float64 arithmetic in SOAT's order): the fast
path in `batch.py` is tested against it, not derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rqsweep.engine.channels import Candidate, Candidates
from rqsweep.engine.recency import decays, recency_factor
from rqsweep.knobs import Knobs, blends


@dataclass(frozen=True)
class Fused:
    """One fused result: which row of which store, its final score and its 1-based channel positions."""

    source_type: str
    row: int
    score: float
    vector_position: int | None
    lexical_position: int | None


def similarity_floor(vector: Sequence[Candidate], min_similarity: float | None) -> list[Candidate]:
    """Inclusive floor on cosine, applied after the top-`limit` cut: it removes, it never refills."""
    if min_similarity is None:
        return list(vector)
    return [c for c in vector if c.score >= min_similarity]


def reciprocal_rank_fusion(vector: Sequence[Candidate], lexical: Sequence[Candidate], rrf_k: int) -> list[Fused]:
    """Sum 1/(rrf_k + position) over the lists holding an item; V before L; stable sort, best first."""
    scores: dict[tuple[str, int], float] = {}
    positions: dict[tuple[str, int], list[int | None]] = {}
    for channel, items in enumerate((vector, lexical)):
        for position, c in enumerate(items, 1):
            ident = (c.source_type, c.row)
            scores[ident] = scores.get(ident, 0.0) + 1.0 / (rrf_k + position)
            positions.setdefault(ident, [None, None])[channel] = position
    fused = [Fused(st, row, s, *positions[(st, row)]) for (st, row), s in scores.items()]
    return sorted(fused, key=lambda f: -f.score)


def recency_blend(fused: Sequence[Fused], memory_age_days: Sequence[float], half_life_days: float) -> list[Fused]:
    """Decay memory scores by `recency_factor`; documents and future timestamps untouched; stable re-sort.

    Equal blended scores put undecayed items before decayed memories (`recency.decays`: the search comes
    after the writes), and otherwise keep the fused order.
    """
    if not blends(half_life_days):
        return list(fused)
    blended = []
    for f in fused:
        memory = f.source_type == "memory"
        age = memory_age_days[f.row] if memory else 0.0
        score = f.score * recency_factor(age, half_life_days)  # x 1.0 is exact: no age, no change
        blended.append((Fused(f.source_type, f.row, score, f.vector_position, f.lexical_position),
                        memory and decays(age)))
    return [f for f, _ in sorted(blended, key=lambda fd: (-fd[0].score, fd[1]))]


def cut_to_limit(ranked: Sequence[Fused], limit: int) -> list[Fused]:
    """The first `limit` results: the pool size is also the number SOAT returns."""
    return list(ranked[:limit])


def fuse(candidates: Candidates, knobs: Knobs, limit: int, memory_age_days: Sequence[float]) -> list[Fused]:
    """Floor, fuse, blend and cut: the ranked list SOAT returns for one setting."""
    vector = similarity_floor(candidates.vector, knobs.min_similarity)
    fused = reciprocal_rank_fusion(vector, candidates.lexical, knobs.rrf_k)
    return cut_to_limit(recency_blend(fused, memory_age_days, knobs.recency_half_life_days), limit)
