"""Where an expected item stands after each step of the reference path: the floor, RRF, the blend, the cut.

`explain` reads these side by side for two settings to say which knob moved an item. Positions are
1-based positions of the item's first slot (any chunk of a document) in that step's list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rqsweep.engine.channels import Candidates
from rqsweep.engine.fusion import Fused, reciprocal_rank_fusion, recency_blend, similarity_floor
from rqsweep.engine.recency import recency_factor
from rqsweep.knobs import Knobs


@dataclass(frozen=True)
class ItemTrace:
    """One expected item's path through one setting's fusion."""

    vector: int | None  # position in the merged vector list before the floor
    similarity: float | None  # its cosine
    floored_out: bool  # the floor (min_similarity) removed its vector candidacy
    lexical: int | None  # position in the merged lexical list
    fused: int | None  # position after RRF (None: no channel holds it)
    fused_score: float | None
    blend_factor: float  # the recency multiplier (1 for documents, or with the blend off)
    blended: int | None  # position after the recency blend
    final: int | None  # position in the returned list (None: cut at `limit`, or never a candidate)


def _first(items: Sequence, rows: set[tuple[str, int]]) -> tuple[int | None, object | None]:
    """The 1-based position of the first of `rows` in a list, and that entry; (None, None) when none is there."""
    return next(((p, c) for p, c in enumerate(items, 1) if (c.source_type, c.row) in rows), (None, None))


def trace_item(candidates: Candidates, rows: set[tuple[str, int]], knobs: Knobs, limit: int,
               memory_age_days: Sequence[float]) -> ItemTrace:
    """Follow the rows of one expected item (every chunk of a document, or one memory) through the steps of
    `fusion.fuse`, under one setting."""
    vector, in_vector = _first(candidates.vector, rows)
    kept = similarity_floor(candidates.vector, knobs.min_similarity)
    lexical, _ = _first(candidates.lexical, rows)
    fused = reciprocal_rank_fusion(kept, candidates.lexical, knobs.rrf_k)
    at_fused, item = _first(fused, rows)
    blended, _ = _first(recency_blend(fused, memory_age_days, knobs.recency_half_life_days), rows)
    factor = 1.0
    if isinstance(item, Fused) and item.source_type == "memory":
        factor = recency_factor(float(memory_age_days[item.row]), knobs.recency_half_life_days)
    return ItemTrace(
        vector=vector, similarity=None if in_vector is None else in_vector.score,
        floored_out=vector is not None and _first(kept, rows)[0] is None,
        lexical=lexical, fused=at_fused, fused_score=item.score if isinstance(item, Fused) else None,
        blend_factor=factor, blended=blended,
        final=blended if blended is not None and blended <= limit else None,
    )
