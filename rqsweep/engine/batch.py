"""The fast path: where each expected item lands, for many knob settings of one query at once.

It takes fusion.py's steps, by the same names, each knob in one of them: `similarity_floor`
(min_similarity), `reciprocal_rank_fusion` (rrf_k), `recency_blend` (recency_half_life_days) and
`cut_to_limit` (limit); `expected_positions` chains them as `fusion.fuse` does.

A query's candidates (its merged vector list V and lexical list L) do not depend on the knobs, and
`min_similarity` only truncates V (V is sorted by similarity, so the inclusive floor keeps a prefix).
Per query we tabulate, for each distinct `rrf_k` and each V prefix length a setting keeps, the fused score
and the position every item takes in SOAT's fused order (score descending, ties in first-insertion
order). The recency blend then re-sorts stably, so the final order is (blended score descending,
undecayed before decayed, fused position ascending), and an item's final position is one plus the
number of items before it.

Arithmetic follows SOAT's: `1/(rrf_k + r)` per list, V's term added before L's, the decay factor
`recency.recency_factor` (1 for documents and for memories not older than zero days), and
`recency.decays` for which memories a search after their write has decayed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from rqsweep.engine.channels import Candidates
from rqsweep.engine.recency import decays, recency_factor
from rqsweep.knobs import Knobs

_BLOCK = 512  # settings per block: keeps the (settings x items) work arrays in cache
_ABSENT = np.int64(1 << 40)  # larger than any position; `% _ABSENT` maps it back to 0


@dataclass(frozen=True)
class SettingsBatch:
    """Knob settings as columns; `min_similarity` is NaN where the floor is off.

    The distinct `rrf_k` and half-life values (and each setting's index into them) are derived once
    here, since every query's evaluation needs them.
    """

    rrf_k: np.ndarray
    min_similarity: np.ndarray
    half_life: np.ndarray

    def __post_init__(self) -> None:
        ks, k_index = np.unique(self.rrf_k, return_inverse=True)
        hs, h_index = np.unique(self.half_life, return_inverse=True)
        floor = np.where(np.isnan(self.min_similarity), -np.inf, self.min_similarity)
        for name, value in (("distinct_rrf_k", ks), ("k_index", k_index), ("distinct_half_life", hs),
                            ("h_index", h_index), ("floor", floor)):
            object.__setattr__(self, name, value)

    @classmethod
    def from_knobs(cls, settings: Sequence[Knobs]) -> "SettingsBatch":
        return cls(
            np.array([s.rrf_k for s in settings], dtype=np.int64),
            np.array([np.nan if s.min_similarity is None else s.min_similarity for s in settings], dtype=np.float64),
            np.array([s.recency_half_life_days for s in settings], dtype=np.float64),
        )

    def __len__(self) -> int:
        return len(self.rrf_k)

    def __getitem__(self, part: slice | np.ndarray) -> "SettingsBatch":
        return SettingsBatch(self.rrf_k[part], self.min_similarity[part], self.half_life[part])


@dataclass(frozen=True)
class QueryPlan:
    """A query's candidates as arrays over its distinct items, in V order then lexical-only in L order."""

    v_pos: np.ndarray  # 1-based position in the unfloored V, 0 when not a vector candidate
    l_pos: np.ndarray  # 1-based position in L, 0 when not a lexical candidate
    v_similarity: np.ndarray  # V's similarities, non-increasing
    age_days: np.ndarray  # memory age for the recency blend; NaN for documents (never decayed)
    groups: tuple[np.ndarray, ...]  # per expected key, the items that count as a hit for it
    decayed: np.ndarray  # memories the blend decays (`recency.decays`): undecayed items win equal scores

    def searched_later(self, delay_days: float) -> "QueryPlan":
        """The same candidates searched `delay_days` later: every memory is that much older."""
        age = self.age_days + delay_days
        return replace(self, age_days=age, decayed=_decayed(age))


def _decayed(age_days: np.ndarray) -> np.ndarray:
    return np.array([decays(a) for a in age_days.tolist()], dtype=bool)


def plan_query(candidates: Candidates, expected: Sequence[set[tuple[str, int]]],
               memory_age_days: np.ndarray) -> QueryPlan:
    """Index a query's candidates; `expected` holds, per expected key, the (source_type, row) pairs it covers."""
    items: dict[tuple[str, int], int] = {}
    for c in candidates.vector + candidates.lexical:
        items.setdefault((c.source_type, c.row), len(items))
    m = len(items)
    v_pos, l_pos = np.zeros(m, np.int64), np.zeros(m, np.int64)
    for positions, channel in ((v_pos, candidates.vector), (l_pos, candidates.lexical)):
        for p, c in enumerate(channel, 1):
            positions[items[(c.source_type, c.row)]] = p
    age = np.full(m, np.nan)
    for (source_type, row), i in items.items():
        if source_type == "memory":
            age[i] = memory_age_days[row]
    groups = tuple(np.array(sorted(items[x] for x in group if x in items), dtype=np.int64) for group in expected)
    sims = np.array([c.score for c in candidates.vector], dtype=np.float64)
    return QueryPlan(v_pos, l_pos, sims, age, groups, _decayed(age))


def similarity_floor(plan: QueryPlan, settings: SettingsBatch) -> np.ndarray:
    """`min_similarity`: how many of V's candidates each setting keeps (the inclusive floor keeps a prefix)."""
    return np.searchsorted(-plan.v_similarity, -settings.floor, side="right")


@dataclass(frozen=True)
class FusedTables:
    """Per (distinct rrf_k, kept V prefix length) and item: the fused score and the 0-based fused-order position.

    Rows are flattened as `k_index * len(prefixes) + prefix index`. An item absent for a prefix (dropped by the
    floor and not a lexical candidate) has score -1, so it sorts after every present item.
    """

    score: np.ndarray
    position: np.ndarray
    prefixes: np.ndarray  # the tabulated V prefix lengths, increasing

    def rows(self, k_index: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """Each setting's row, from its index into the distinct rrf_k values and its kept prefix length."""
        return k_index * len(self.prefixes) + np.searchsorted(self.prefixes, kept)


def reciprocal_rank_fusion(plan: QueryPlan, rrf_ks: np.ndarray, prefixes: np.ndarray) -> FusedTables:
    """`rrf_k`: SOAT's fused order for each distinct rrf_k and each kept V prefix length in `prefixes`.

    Only the prefixes some setting's floor keeps are built: without a floor, just the whole of V.
    """
    in_v = plan.v_pos > 0
    kept = in_v[None, :] & (plan.v_pos[None, :] <= prefixes[:, None])  # (prefix, item)
    in_l = plan.l_pos > 0
    k = rrf_ks.astype(np.float64)[:, None, None]
    with np.errstate(divide="ignore"):
        v_term = np.where(kept[None], 1.0 / (k + plan.v_pos[None, None, :]), 0.0)
        l_term = np.where(in_l[None, None, :], 1.0 / (k + plan.l_pos[None, None, :]), 0.0)
    present = kept | in_l[None, :]
    fused = np.where(present[None], v_term + l_term, -1.0)
    insertion = np.where(kept, plan.v_pos[None, :], len(plan.v_pos) + 1 + plan.l_pos[None, :])
    order = np.lexsort((np.broadcast_to(insertion[None], fused.shape), -fused), axis=-1)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(order.shape[-1])[None, None, :], axis=-1)
    m = len(plan.v_pos)
    return FusedTables(fused.reshape(-1, m), position.reshape(-1, m), prefixes)


def recency_blend(plan: QueryPlan, settings: SettingsBatch, fused: FusedTables, row: np.ndarray,
                  targets: np.ndarray) -> np.ndarray:
    """`recency_half_life_days`: (settings, targets) 1-based position of each target after the blend, 0 if absent.

    The blend re-sorts stably: an item's position is one plus the number of items before it in the order
    (blended score descending, undecayed before decayed, fused position ascending). Without it, or with no
    decayed memory among the candidates, the final order is the fused order.
    """
    present = fused.score[:, targets] >= 0
    rank = np.where(present, fused.position[:, targets] + 1, 0)[row]  # the fused order: a table lookup
    hs = settings.distinct_half_life
    if not plan.decayed.any() or not (hs > 0).any():
        return rank
    # Half-lives with the same factors (every one, when all ages are 0) rank alike: one factor row for them.
    ages = plan.age_days[plan.decayed].tolist()
    rows_of: dict[tuple[float, ...], int] = {}
    factor_index = np.array([rows_of.setdefault(tuple(recency_factor(a, h) for a in ages), len(rows_of))
                             for h in hs.tolist()])
    factors = np.ones((len(rows_of), len(plan.v_pos)))
    factors[:, plan.decayed] = list(rows_of)
    tie_order = fused.position + plan.decayed * np.int64(len(plan.v_pos))  # a decayed memory loses equal scores
    blended = np.flatnonzero(hs[settings.h_index] > 0)
    # Settings sharing a fused table row and a factor row rank alike: each such pair is ranked once.
    pairs, pair_of = np.unique(row[blended] * len(factors) + factor_index[settings.h_index[blended]],
                               return_inverse=True)
    pair_rank = np.empty((len(pairs), len(targets)), np.int64)
    for start in range(0, len(pairs), _BLOCK):
        block = pairs[start : start + _BLOCK]
        rows = block // len(factors)
        d, order = fused.score[rows] * factors[block % len(factors)], tie_order[rows]
        for t, item in enumerate(targets):
            de, oe = d[:, item : item + 1], order[:, item : item + 1]
            ahead = ((d > de) | ((d == de) & (order < oe))).sum(axis=1)
            pair_rank[start : start + _BLOCK, t] = np.where(present[rows, t], ahead + 1, 0)
    rank[blended] = pair_rank[pair_of.ravel()]
    return rank


def cut_to_limit(plan: QueryPlan, rank: np.ndarray, targets: np.ndarray, limit: int) -> np.ndarray:
    """`limit`: targets placed past it are absent; each expected key takes the first slot any of its items holds."""
    rank[rank > limit] = 0
    out = np.zeros((len(rank), len(plan.groups)), dtype=np.int64)
    for g, group in enumerate(plan.groups):
        if len(group):
            cols = rank[:, np.searchsorted(targets, group)]
            out[:, g] = np.where(cols > 0, cols, _ABSENT).min(axis=1) % _ABSENT
    return out


def expected_positions(plan: QueryPlan, settings: SettingsBatch, limit: int) -> np.ndarray:
    """(settings, expected keys) int64: 1-based position of each key's first slot in the cut list, 0 if absent."""
    if len(plan.v_pos) == 0 or not any(len(g) for g in plan.groups):
        return np.zeros((len(settings), len(plan.groups)), dtype=np.int64)
    kept = similarity_floor(plan, settings)
    fused = reciprocal_rank_fusion(plan, settings.distinct_rrf_k, np.unique(kept))
    targets = np.unique(np.concatenate([g for g in plan.groups if len(g)]))
    rank = recency_blend(plan, settings, fused, fused.rows(settings.k_index, kept), targets)
    return cut_to_limit(plan, rank, targets, limit)


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
    blended = np.flatnonzero(settings.half_life > 0)
    if later.decayed.any() and len(blended):
        changed[blended] = (expected_positions(later, settings[blended], limit) != positions[blended]).any(axis=1)
    return changed
