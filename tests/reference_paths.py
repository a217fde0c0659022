"""Reference paths the tests tie the engine's fast paths to, query by query and setting by setting: the product
calls only the fast ones (`vector_channels`, `lexical_channels`, `stacked_positions`' change-with-time check)."""

from __future__ import annotations

import numpy as np

from rqsweep.engine.batch import QueryPlan, SettingsBatch, expected_positions
from rqsweep.engine.channels import Candidate, lexical_channels
from rqsweep.engine.cosine import cosine_top
from rqsweep.engine.pgsort import TieOrder
from rqsweep.engine.tsearch import LexicalIndex
from rqsweep.knobs import blends


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
    return lexical_channels(source_type, index, in_scope, query, limit, (tie_order,))[tie_order]


def delay_changes_positions(plan: QueryPlan, settings: SettingsBatch, limit: int, positions: np.ndarray,
                            delay_days: float) -> np.ndarray:
    """(settings,) bool: whether some expected key's position differs in the same search `delay_days` later.

    `positions` are `expected_positions(plan, settings, limit)`. As the delay grows, decayed memories only
    fall against undecayed items and (in exact arithmetic) keep their order among themselves, so, with no
    memory dated in the future, positions move one way and a change at any shorter delay shows at this one.
    Only settings with the blend on can change, and only when the later search decays some memory.
    """
    later = plan.searched_later(delay_days)
    changed = np.zeros(len(settings), dtype=bool)
    blended = np.flatnonzero(blends(settings.half_life))
    if later.decayed.any() and len(blended):
        changed[blended] = (expected_positions(later, settings[blended], limit) != positions[blended]).any(axis=1)
    return changed
