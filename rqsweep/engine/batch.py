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
from rqsweep.engine.recency import SEARCH_DELAY_DAYS, decays, recency_factor
from rqsweep.knobs import Knobs, blends

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

    @property
    def expected_in_candidates(self) -> bool:
        """Whether some expected item is a candidate: otherwise every key is absent under every setting."""
        return any(len(g) for g in self.groups)

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


def nudged_plans(candidates: Candidates, expected: Sequence[set[tuple[str, int]]], memory_age_days: np.ndarray,
                 delta: float) -> tuple[QueryPlan, QueryPlan] | None:
    """The query's plans with every expected item's cosine moved up by `delta`, then down (the vector list sorted
    again each time): the best and the worst case for its expected keys when the vectors' last bits may move a
    cosine by `delta` against the others. None when no expected item is a vector candidate (nothing to move)."""
    hits = set().union(*expected)
    if delta <= 0 or not any((c.source_type, c.row) in hits for c in candidates.vector):
        return None

    def moved(by: float) -> QueryPlan:
        vector = [replace(c, score=c.score + by) if (c.source_type, c.row) in hits else c for c in candidates.vector]
        vector.sort(key=lambda c: -c.score)  # stable: items left equal keep their order
        return plan_query(Candidates(tuple(vector), candidates.lexical), expected, memory_age_days)

    return moved(delta), moved(-delta)


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
    if not plan.expected_in_candidates:
        return np.zeros((len(settings), len(plan.groups)), dtype=np.int64)
    kept = similarity_floor(plan, settings)
    fused = reciprocal_rank_fusion(plan, settings.distinct_rrf_k, np.unique(kept))
    targets = np.unique(np.concatenate([g for g in plan.groups if len(g)]))
    rank = recency_blend(plan, settings, fused, fused.rows(settings.k_index, kept), targets)
    return cut_to_limit(plan, rank, targets, limit)


@dataclass(frozen=True)
class PlanStack:
    """Many queries' plans as arrays with one row per (query, target item).

    `stacked_positions` then ranks every query's targets with a few array operations per batch, where
    `expected_positions` pays Python work per query. Row r is the target `item[r]` of its query (a candidate
    some expected key counts); items are padded with 0 to the widest query (in neither list).
    """

    plans: tuple[QueryPlan, ...]
    v_pos: np.ndarray  # (rows, items): the V positions of the row's query's items, 0 when not in V
    l_pos: np.ndarray  # (rows, items): likewise in L
    decayed: np.ndarray  # (rows, items): a memory the blend decays (`recency.decays`)
    age_days: np.ndarray  # (rows, items): the item's age (NaN for documents and padding)
    item: np.ndarray  # (rows,) the target's column
    query: np.ndarray  # (rows,) the target's query
    v_similarity: np.ndarray  # (queries, longest V): V's similarities, NaN after the end (no floor keeps it)
    aged: np.ndarray  # (queries,) some decayed candidate is older than 0 days: the blend changes its score
    member_rows: np.ndarray  # the rows of each (query, key) with a target, one run per key, keys in slot order
    key_starts: np.ndarray  # where each such key's run starts in `member_rows`
    key_slots: np.ndarray  # each such key's slot in a flattened (queries, width) output
    width: int  # the most expected keys of any query


def stack_plans(plans: Sequence[QueryPlan]) -> PlanStack:
    """Stack queries' plans for `stacked_positions`."""
    items = max((len(p.v_pos) for p in plans), default=0)
    longest_v = max((len(p.v_similarity) for p in plans), default=0)
    width = max((len(p.groups) for p in plans), default=1)
    v_pos, l_pos = np.zeros((len(plans), items), np.int64), np.zeros((len(plans), items), np.int64)
    decayed, age_days = np.zeros((len(plans), items), bool), np.full((len(plans), items), np.nan)
    v_similarity = np.full((len(plans), longest_v), np.nan)
    members, key_starts, key_slots = [], [], []
    n_members = 0
    for q, plan in enumerate(plans):
        m = len(plan.v_pos)
        v_pos[q, :m], l_pos[q, :m], decayed[q, :m], age_days[q, :m] = plan.v_pos, plan.l_pos, plan.decayed, plan.age_days
        v_similarity[q, : len(plan.v_similarity)] = plan.v_similarity
        for g, group in enumerate(plan.groups):
            if len(group):
                key_starts.append(n_members)
                key_slots.append(q * width + g)
                members.append(group + q * items)
                n_members += len(group)
    # A row per (query, target item), queries in order and each query's targets ascending.
    targets, member_rows = np.unique(np.concatenate(members or [np.zeros(0, np.int64)]), return_inverse=True)
    query, item = np.divmod(targets, max(items, 1))
    return PlanStack(tuple(plans), v_pos[query], l_pos[query], decayed[query], age_days[query], item, query,
                     v_similarity, (decayed & (age_days > 0)).any(axis=1), member_rows.ravel(),
                     np.array(key_starts, np.int64), np.array(key_slots, np.int64), width)


_NOT_LISTED = np.int64(1 << 40)  # the position of an item not in a list: after every listed one
_UNIT_BLOCK = 1 << 14  # (units, items) cells ranked at once under the blend: keeps each contest's work arrays small


@dataclass(frozen=True)
class _Contest:
    """Under one similarity floor, with the blend on or off, what each target's rank depends on besides rrf_k.

    An item in the kept V and in L at or before the target's positions in both (a position past the end for a
    list it is not in) scores at least the target's for every rrf_k (1/(rrf_k + r) and the sum are rounded
    monotonically): when it also wins a tie it is always ahead; one at or after them in both that loses a tie is
    never ahead. The others (`undecided`, flattened row by row) are compared per rrf_k. A tie is won by coming
    first (V in V order, then lexical-only items in L order) and, with the blend on, first by being undecayed.
    """

    present: np.ndarray  # (rows,) the target is in the kept V or in L
    always_ahead: np.ndarray  # (rows,)
    target_v: np.ndarray  # (rows,) the target's kept V position, 0 when not in the kept V
    target_l: np.ndarray  # (rows,)
    row: np.ndarray  # (undecided,) the row each undecided item contests
    v_pos: np.ndarray  # (undecided,) its kept V position, 0 when not in the kept V
    l_pos: np.ndarray  # (undecided,)
    wins_tie: np.ndarray  # (undecided,) it goes before the target on an equal score
    bounds: np.ndarray  # (rows + 1,) where each row's run starts in the flattened arrays


def _contest(stack: PlanStack, kept: np.ndarray, blend: bool) -> _Contest:
    """The `_Contest` of each target when each query keeps `kept[query]` of its V candidates.

    With `blend`, every decayed candidate's factor is 1 (the caller's promise: an age of 0 days), so blended
    scores are the fused scores and the blend only reorders ties.
    """
    in_v = (stack.v_pos > 0) & (stack.v_pos <= kept[stack.query, None])
    v = np.where(in_v, stack.v_pos, _NOT_LISTED)
    l = np.where(stack.l_pos > 0, stack.l_pos, _NOT_LISTED)
    rows = np.arange(len(stack.item))
    vt, lt = v[rows, stack.item][:, None], l[rows, stack.item][:, None]
    listed = (v < _NOT_LISTED) | (l < _NOT_LISTED)
    listed[rows, stack.item] = False  # the target itself
    present = (vt[:, 0] < _NOT_LISTED) | (lt[:, 0] < _NOT_LISTED)
    insertion = np.where(in_v, stack.v_pos, stack.v_pos.shape[1] + 1 + stack.l_pos)  # V first, then lexical-only
    wins_tie = insertion < insertion[rows, stack.item][:, None]
    if blend:
        decayed, target_decayed = stack.decayed, stack.decayed[rows, stack.item][:, None]
        wins_tie = (decayed < target_decayed) | ((decayed == target_decayed) & wins_tie)
    at_least = (v <= vt) & (l <= lt)
    at_most = (v >= vt) & (l >= lt)
    always_ahead = (listed & at_least & wins_tie).sum(axis=1)
    row, column = np.nonzero(listed & ~(at_least & wins_tie) & ~(at_most & ~wins_tie))
    bounds = np.searchsorted(row, np.arange(len(stack.item) + 1))
    return _Contest(present, always_ahead, np.where(in_v, stack.v_pos, 0)[rows, stack.item],
                    stack.l_pos[rows, stack.item], row, np.where(in_v, stack.v_pos, 0)[row, column],
                    stack.l_pos[row, column], wins_tie[row, column], bounds)


def _reciprocals(positions: int, rrf_k: np.ndarray) -> np.ndarray:
    """(positions, rrf_k values) each list position's fused term 1/(rrf_k + r), as SOAT adds it; 0 at position 0,
    not in the list. Position-major, so that gathering positions copies whole rows."""
    reciprocal = 1.0 / (np.arange(positions)[:, None] + rrf_k.astype(np.float64)[None, :])
    reciprocal[0] = 0.0
    return reciprocal


def _fused_ranks(stack: PlanStack, contest: _Contest, rrf_k: np.ndarray, limit: int) -> np.ndarray:
    """(rows, rrf_k values) uint8 1-based position of each row's target in its query's order, 0 when absent or
    past `limit`."""
    positions = max(stack.v_pos.max(initial=0), stack.l_pos.max(initial=0)) + 1
    reciprocal = _reciprocals(positions, rrf_k)
    target = reciprocal[contest.target_v] + reciprocal[contest.target_l]
    # An item that wins a tie is ahead on an equal score too: it needs more than the float just below the target's.
    bars = np.stack([target, np.nextafter(target, -np.inf)], axis=1).reshape(-1, len(rrf_k))
    ahead = np.zeros((len(contest.row) + 1, len(rrf_k)), np.int32)
    np.cumsum(reciprocal[contest.v_pos] + reciprocal[contest.l_pos] > bars[2 * contest.row + contest.wins_tie],
              axis=0, out=ahead[1:])
    rank = contest.always_ahead[:, None] + (ahead[contest.bounds[1:]] - ahead[contest.bounds[:-1]]) + 1
    return _cut(rank, contest.present[:, None], limit)


def _cut(rank: np.ndarray, present: np.ndarray, limit: int) -> np.ndarray:
    """`rank` where the target is present and within `limit` (at most 100: SOAT's cap), else 0, as uint8."""
    return np.where(present & (rank <= limit), rank, 0).astype(np.uint8)


def stacked_positions(stack: PlanStack, settings: SettingsBatch, limit: int) -> np.ndarray:
    """(settings, queries, width) uint8: `expected_positions` of every stacked query, keys padded with 0.

    Each distinct (blend on, floor, rrf_k) is ranked once over every query at once. Where the blend changes
    scores (half-life > 0 and a decayed memory older than 0 days among the query's candidates), the query's
    blended settings are ranked by `_blended_positions` (every aged query at once; tests tie it to
    `expected_positions`, query by query).
    """
    floors, floor_index = np.unique(settings.floor, return_inverse=True)
    n_ks, blend = len(settings.distinct_rrf_k), blends(settings.half_life)
    # By blend, then floor: one contest each (the blend's own only if some query keeps its scores under it).
    groups = ((blend & ~stack.aged.all()) * len(floors) + floor_index) * n_ks
    codes, code_of = np.unique(groups + settings.k_index, return_inverse=True)
    kept_by_floor = (stack.v_similarity[None] >= floors[:, None, None]).sum(axis=-1)  # (floors, queries)
    n_queries = len(stack.plans)
    found = np.zeros((len(codes), n_queries * stack.width), np.uint8)
    for group in np.unique(codes // n_ks).tolist():
        contest = _contest(stack, kept_by_floor[group % len(floors)], group >= len(floors))
        in_group = np.flatnonzero(codes // n_ks == group)
        step = max(1, (1 << 20) // max(1, len(contest.row), len(stack.item)))  # bounded work arrays
        for start in range(0, len(in_group), step):
            part = in_group[start : start + step]
            rank = _fused_ranks(stack, contest, settings.distinct_rrf_k[codes[part] % n_ks], limit)
            if len(stack.key_starts):
                found[np.ix_(part, stack.key_slots)] = _first_slots(stack, rank[stack.member_rows]).T
    out = found[code_of.ravel()]
    blended = np.flatnonzero(blend)
    if len(blended) and stack.aged.any():
        slots, first = _blended_positions(stack, settings[blended], limit)
        out[np.ix_(blended, slots)] = first.T
    return out.reshape(len(settings), n_queries, stack.width)


def _first_slots(stack: PlanStack, member_rank: np.ndarray) -> np.ndarray:
    """(keys, ...) uint8 each stacked key's first slot, 0 when none, from `member_rank`: the uint8 positions of
    `stack.member_rows` (0 when absent or past the limit) along axis 0."""
    # Less one, wrapping: an absent row (255) comes after every position.
    shifted = member_rank - np.uint8(1)
    runs = np.diff(stack.key_starts, append=len(shifted))
    first = shifted if len(runs) == len(shifted) else shifted[stack.key_starts]  # every key one member: as it is
    # Most keys have one member: a pass per depth over the longer keys, where reduceat costs a pass per key.
    for depth in range(1, runs.max(initial=1)):
        longer = np.flatnonzero(runs > depth)
        first[longer] = np.minimum(first[longer], shifted[stack.key_starts[longer] + depth])
    first += np.uint8(1)  # absent wraps round to 0
    return first


def _blended_positions(stack: PlanStack, settings: SettingsBatch, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The aged queries' keys under settings that all blend: their slots in a flattened (queries, width) output
    and (slots, settings) their positions.

    Each target is ranked against every item of its query in the order (blended score descending, undecayed
    first, fused position ascending), blended = fused score x `recency_factor`, as `recency_blend` computes
    it: per distinct V prefix its query keeps (floors that keep the same prefix rank alike), all aged queries'
    targets at once. The items whose order against the target the knobs decide are placed, per rrf_k, on
    either side of the half-life where they cross it (`_undecided_ahead`).
    """
    floors, floor_index = np.unique(settings.floor, return_inverse=True)
    ks, hs = settings.distinct_rrf_k, settings.distinct_half_life
    pairs, pair_of = np.unique(settings.k_index * len(hs) + settings.h_index, return_inverse=True)
    rows = np.flatnonzero(stack.aged[stack.query])
    kept = (stack.v_similarity[None] >= floors[:, None, None]).sum(axis=-1)[:, stack.query[rows]]  # (floors, rows)
    # A unit is a target row with one prefix its query keeps under some floor.
    units, unit_of = np.unique(np.arange(len(rows)) * (stack.v_pos.shape[1] + 1) + kept, return_inverse=True)
    unit_of = unit_of.reshape(kept.shape)
    unit_row, unit_kept = rows[units // (stack.v_pos.shape[1] + 1)], units % (stack.v_pos.shape[1] + 1)
    unit_rank = np.zeros((len(units) + 1, len(pairs)), np.uint8)  # the last, never ranked, for other queries' rows
    step = max(1, _UNIT_BLOCK // max(1, stack.v_pos.shape[1]))
    for start in range(0, len(units), step):
        block = slice(start, min(start + step, len(units)))
        unit_rank[block] = _rank_units(stack, unit_row[block], unit_kept[block], ks, hs, pairs, limit)
    if not len(stack.key_starts):
        return stack.key_slots, np.zeros((0, len(settings)), np.uint8)
    # int32 indices: unit_rank holds far fewer than 2**31 cells, and (members, settings) of them is the widest array.
    row_unit = np.full((len(stack.item), len(floors)), len(units), np.int32)  # each row's unit under each floor
    row_unit[rows] = unit_of.T
    at = row_unit[stack.member_rows][:, floor_index.ravel()] * np.int32(len(pairs)) + pair_of.ravel().astype(np.int32)
    first = _first_slots(stack, unit_rank.ravel()[at])  # (keys, settings); C order: fast
    aged = stack.aged[stack.key_slots // stack.width]
    return stack.key_slots[aged], first[aged]


def _rank_units(stack: PlanStack, unit_row: np.ndarray, unit_kept: np.ndarray, ks: np.ndarray, hs: np.ndarray,
                pairs: np.ndarray, limit: int) -> np.ndarray:
    """(units, pairs) uint8 the position of each unit's target (the row `unit_row` with `unit_kept` of its V kept)
    under each (rrf_k, half-life) pair, index `pairs` into (ks, hs), 0 when absent or past `limit`."""
    v, l, decayed, age = stack.v_pos[unit_row], stack.l_pos[unit_row], stack.decayed[unit_row], stack.age_days[unit_row]
    each, item = np.arange(len(unit_row)), stack.item[unit_row]
    positions = max(v.max(initial=0), l.max(initial=0)) + 1
    reciprocal = _reciprocals(positions, ks)
    in_v = (v > 0) & (v <= unit_kept[:, None])
    present = in_v | (l > 0)
    v_kept = np.where(in_v, v, 0)
    insertion = np.where(in_v, v, v.shape[1] + 1 + l)  # V first, then lexical-only
    others = present.copy()
    others[each, item] = False  # the target itself
    ahead, undecided = _blend_decided(age, decayed, in_v, l, insertion, item, others, hs)
    # Scores and ties only where the order depends on rrf_k and the half-life: the undecided items and the targets.
    unit, column = np.nonzero(undecided)
    # An item contests its target alike under every prefix of the target's row that keeps (or drops) both alike:
    # one contest for all of them.
    key = ((unit_row[unit] * v.shape[1] + column) * 2 + in_v[unit, item[unit]]) * 2 + in_v[unit, column]
    keys, contest = np.unique(key, return_inverse=True)
    contest = contest.ravel()
    sample = np.empty(len(keys), np.int64)
    sample[contest] = np.arange(len(contest))  # an undecided item of each contest
    sample_unit, sample_column = unit[sample], column[sample]
    target_item = item[sample_unit]
    # (contests, rrf_k values): each contest's item's and target's fused score.
    target_fused = reciprocal[v_kept[sample_unit, target_item]] + reciprocal[l[sample_unit, target_item]]
    contest_fused = reciprocal[v_kept[sample_unit, sample_column]] + reciprocal[l[sample_unit, sample_column]]
    target_decayed, contest_decayed = decayed[sample_unit, target_item], decayed[sample_unit, sample_column]
    first_in = insertion[sample_unit, sample_column] < insertion[sample_unit, target_item]
    before = (contest_fused > target_fused) | ((contest_fused == target_fused) & first_in[:, None])
    contest_wins = (contest_decayed < target_decayed)[:, None] | ((contest_decayed == target_decayed)[:, None] & before)
    won = _undecided_ahead(target_fused, contest_fused, contest_wins,
                           np.where(target_decayed, age[sample_unit, target_item], 0.0),  # the age each factor decays
                           np.where(contest_decayed, age[sample_unit, sample_column], 0.0), hs, contest, unit,
                           len(unit_row))
    rank = won[:, pairs // len(hs), pairs % len(hs)]  # int32, as `ahead` below: the widest (units, pairs) arrays
    rank += (ahead + 1).astype(np.int32)[:, None]
    return _cut(rank, present[each, item, None], limit)


def _blend_decided(age_days: np.ndarray, decayed: np.ndarray, in_v: np.ndarray, l_pos: np.ndarray,
                   insertion: np.ndarray, item: np.ndarray, others: np.ndarray,
                   half_lives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (unit, item): how many items are ahead of the unit's target under every rrf_k and half-life, and
    which items' order against it depends on them (`undecided`).

    An item at or before the target in both lists has a fused score at least the target's for every rrf_k
    (`_Contest`); if moreover its factor is 1 (no positive age) or equal to the target's (the same age), its
    blended score is at least the target's too (rounding is monotonic), and it is ahead when it also wins an
    equal score: undecayed against decayed, or as decayed as the target and first in insertion order (an equal
    fused score then leaves the insertion order to decide). The mirror case is never ahead. So is an item at or
    after the target in both lists whose factor is below the target's by more than `_MARGIN` in ln under every
    one of the batch's `half_lives` (all > 0): rounding cannot close that gap while age / half-life stays below
    `_EXPONENT_CAP`, so no tie is possible; and the mirror case, above it by as much, is always ahead.
    """
    rows = np.arange(len(item))
    unit_v = np.where(in_v, insertion, _NOT_LISTED)
    unit_l = np.where(l_pos > 0, l_pos, _NOT_LISTED)
    at_least = (unit_v <= unit_v[rows, item][:, None]) & (unit_l <= unit_l[rows, item][:, None])
    at_most = (unit_v >= unit_v[rows, item][:, None]) & (unit_l >= unit_l[rows, item][:, None])
    target_decayed, target_insertion = decayed[rows, item][:, None], insertion[rows, item][:, None]
    wins = (decayed < target_decayed) | ((decayed == target_decayed) & (insertion < target_insertion))
    loses = (decayed > target_decayed) | ((decayed == target_decayed) & (insertion > target_insertion))
    unit_factor = ~(age_days > 0)  # recency_factor is 1 under every half-life (NaN: not > 0)
    same_age = age_days == age_days[rows, item][:, None]
    decays = np.where(age_days > 0, age_days, 0.0)  # the age each factor decays
    apart = decays - decays[rows, item][:, None]  # ln(target's factor / item's) = ln 2 apart / h
    clear = (np.log(2.0) * np.abs(apart) / half_lives.max() > _MARGIN) & (
        np.maximum(decays, decays[rows, item][:, None]) / half_lives.min() < _EXPONENT_CAP)
    ahead = others & at_least & ((wins & (unit_factor | same_age)) | (clear & (apart < 0)))
    behind = others & at_most & ((loses & (unit_factor[rows, item][:, None] | same_age)) | (clear & (apart > 0)))
    return ahead.sum(axis=1), others & ~ahead & ~behind


_MARGIN = 1e-9  # in ln(score): rounding moves a blended score's log by less than 1e-12 below _EXPONENT_CAP
_EXPONENT_CAP = 900.0  # age / half-life: the factor 2^-(age/half-life) stays far from subnormal numbers below it


def _undecided_ahead(target_fused: np.ndarray, contest_fused: np.ndarray, wins: np.ndarray, target_age: np.ndarray,
                     contest_age: np.ndarray, half_lives: np.ndarray, contest: np.ndarray, unit: np.ndarray,
                     n_units: int) -> np.ndarray:
    """(units, rrf_k values, half-lives) how many of each unit's undecided items are ahead of its target.

    The items are placed once per contest (rows of the (contests, rrf_k values) arrays), then counted once per
    undecided item: item o, of unit `unit[o]`, contests its target as contest `contest[o]` does.

    Item j (fused score F_j, the age a_j its factor decays, 0 for none) is ahead of the target t under a half-life
    h when fl(F_j c_j) > fl(F_t c_t), c = `recency_factor` (the product as `recency_blend` takes it), or when
    the two are equal and j wins the tie (`wins`). In exact arithmetic that is g(u) = ln F_j - ln F_t -
    ln 2 (a_j - a_t) u > 0 with u = 1/h: linear in u, so over the half-lives sorted by u an item is ahead on a
    prefix or a suffix, found by binary search, and each (rrf_k, item) costs a few operations however many
    half-lives there are. Rounding (the division, C's pow, the product, numpy's log here) moves the scores' logs
    by far less than `_MARGIN` while age / half-life stays below `_EXPONENT_CAP`; the half-lives within
    `_MARGIN` of the crossing (exact ties among them) or past the cap are compared exactly, as `recency_blend`
    compares them.
    """
    n, n_ks = target_fused.shape
    n_hs = len(half_lives)
    by_u = half_lives[::-1]
    u = 1.0 / by_u  # increasing
    slope = np.log(2.0) * (contest_age - target_age)  # (n,)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.log(contest_fused)  # (n, rrf_k values); an absent target (0) is never ranked
        gap -= np.log(target_fused)
        crossing, half_width = gap / slope[:, None], (_MARGIN / np.abs(slope))[:, None]  # g = slope (crossing - u)
        # g within the margin for u in [low, high]
        low, high = crossing - half_width, np.add(crossing, half_width, out=crossing)
        capped = np.searchsorted(u, _EXPONENT_CAP / np.maximum(contest_age, target_age), side="right")  # (n,)
    # Older than the target (slope > 0): ahead below `low`, exact up to `high`, behind after; younger: the other
    # way round.
    exact_from = np.searchsorted(u, low, side="left")
    # Few runs hold a half-life (the margin is narrow): the run's end is searched for those only.
    exact_to = exact_from.copy()
    banded = np.flatnonzero(np.append(u, np.inf)[exact_from] <= high)
    exact_to.ravel()[banded] = np.searchsorted(u, high.ravel()[banded], side="right")
    # An item's run ahead is [0, edge) when it is not younger, [edge, n_hs) when it is (or shorter: past the cap).
    younger = slope < 0
    edge = np.where(younger[:, None], exact_to, exact_from)
    level = np.flatnonzero(slope == 0)  # g = gap under every half-life
    if len(level):
        within = np.abs(gap[level]) <= _MARGIN
        exact_from[level], exact_to[level] = np.where(within, 0, n_hs), n_hs
        edge[level] = np.where(~within & (gap[level] > 0), n_hs, 0)
    # Runs of half-lives compared exactly, flattened as (contest, rrf_k); and the younger items' runs that end early.
    exact_from, exact_to, runs_of = exact_from.ravel(), exact_to.ravel(), np.arange(n * n_ks)
    cut_young = np.zeros((0, 3), np.int64)  # (contest, rrf_k, half-life where its run ahead ends)
    guarded = np.flatnonzero(capped < n_hs)
    if len(guarded):  # past the cap every half-life is compared exactly: the runs end there, an exact one follows
        cap = np.repeat(capped[guarded], n_ks)
        flat = (guarded[:, None] * n_ks + np.arange(n_ks)).ravel()
        exact_to[flat] = np.maximum(exact_from[flat], np.minimum(exact_to[flat], cap))
        old, cut = guarded[~younger[guarded]], guarded[younger[guarded]]
        edge[old] = np.minimum(edge[old], capped[old, None])
        ends = np.maximum(edge[cut], capped[cut, None])
        cut_young = np.stack([np.repeat(cut, n_ks), np.tile(np.arange(n_ks), len(cut)), ends.ravel()], axis=1)
        exact_from, exact_to = np.concatenate([exact_from, cap]), np.concatenate([exact_to, np.full_like(cap, n_hs)])
        runs_of = np.concatenate([runs_of, flat])
    # Exact comparisons won, each a run of one half-life: (contest, rrf_k, half-life).
    won_exactly = np.zeros((0, 3), np.int64)
    some = np.flatnonzero(exact_to > exact_from)
    lengths = exact_to[some] - exact_from[some]
    which = np.repeat(some, lengths)
    if len(which):
        i = exact_from[which] + np.arange(len(which)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        j, k = np.divmod(runs_of[which], n_ks)
        involved = np.zeros(n, bool)
        involved[j] = True
        ages = np.unique(np.concatenate([target_age[involved], contest_age[involved]]))
        factors = np.array([[recency_factor(a, x) for x in by_u.tolist()] for a in ages.tolist()])  # a call each
        target = target_fused[j, k] * factors[np.searchsorted(ages, target_age[j]), i]
        score = contest_fused[j, k] * factors[np.searchsorted(ages, contest_age[j]), i]
        won = (score > target) | ((score == target) & wins[j, k])
        won_exactly = np.stack([j[won], k[won], i[won]], axis=1)
    # Each (unit, rrf_k)'s count over the half-lives (in u order) as the running sum of +1 where an item's run of
    # half-lives ahead starts and -1 where it ends, in cells (unit, rrf_k, half-life): the items come unit by unit.
    size, k_cell = n_units * n_ks * (n_hs + 1), np.arange(n_ks) * (n_hs + 1)
    unit_cell = unit * (n_ks * (n_hs + 1))
    young = younger[contest]
    starting, ending = np.flatnonzero(young), np.flatnonzero(~young)  # the runs that start at `edge`; that end there
    runs = np.bincount(_cells(edge, contest, starting, unit_cell, k_cell), minlength=size)
    runs -= np.bincount(_cells(edge, contest, ending, unit_cell, k_cell), minlength=size)
    runs = runs.reshape(n_units, n_ks, n_hs + 1)
    runs[:, :, 0] += np.bincount(unit[ending], minlength=n_units)[:, None]  # the runs that start at the first
    uncut = starting[~(younger & (capped < n_hs))[contest[starting]]]
    runs[:, :, n_hs] -= np.bincount(unit[uncut], minlength=n_units)[:, None]  # the runs that end after the last
    j, k, h = np.concatenate([cut_young, won_exactly, won_exactly + (0, 0, 1)]).T
    sign = np.repeat([-1, 1, -1], [len(cut_young), len(won_exactly), len(won_exactly)])
    at, original = _undecided_of(j, contest, n)
    np.add.at(runs, (unit[original], k[at], h[at]), sign[at])
    # One running sum through every cell: each (unit, rrf_k)'s run of cells adds up to 0, so they do not leak.
    count = np.cumsum(runs.ravel(), dtype=np.int32).reshape(n_units, n_ks, n_hs + 1)
    return count[:, :, n_hs - 1 :: -1]  # half-lives increasing, as `half_lives`


def _cells(edge: np.ndarray, contest: np.ndarray, items: np.ndarray, unit_cell: np.ndarray,
           k_cell: np.ndarray) -> np.ndarray:
    """The cells (unit, rrf_k, `edge`) of `items` (undecided items) under every rrf_k, in place in one array."""
    cells = edge[contest[items]]
    cells += unit_cell[items, None]
    cells += k_cell
    return cells.ravel()


def _undecided_of(j: np.ndarray, contest: np.ndarray, n_contests: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (a, o) of an entry a of `j` (contests) and an undecided item o of that contest."""
    order = np.argsort(j, kind="stable")
    per = np.bincount(j, minlength=n_contests)
    original = np.flatnonzero(per[contest] > 0)
    reps = per[contest[original]]
    first = np.cumsum(per) - per
    at = np.repeat(first[contest[original]] - np.cumsum(reps) + reps, reps) + np.arange(reps.sum())
    return order[at], np.repeat(original, reps)


@dataclass(frozen=True)
class BothOrders:
    """Queries' plans stacked once for both tie orders, the later search and the numerics: `stack` in the index's
    tie order, the other order's plans only for the queries (`differs`) whose candidates exact ties reorder
    (`alternate`), the same plans searched `SEARCH_DELAY_DAYS` later (`later`), and, for the queries (`nudged`)
    with an expected vector candidate, their plans with its cosine moved up and down (`nudged_plans`)."""

    stack: PlanStack
    differs: np.ndarray
    alternate: PlanStack
    later: PlanStack
    nudged: np.ndarray
    favoured: PlanStack
    disfavoured: PlanStack


def stack_both_orders(plans: Sequence[QueryPlan], alternates: Sequence[QueryPlan],
                      nudges: Sequence[tuple[QueryPlan, QueryPlan] | None] = ()) -> BothOrders:
    """Stack `plans` and, of `alternates` (the same queries in the other tie order), those that are not the very
    same plan object (`scoring.plan_queries` shares one plan when both orders' candidates agree); of `nudges`
    (per query, `nudged_plans` or None; none at all for exact vectors), those that are given."""
    differs = np.array([q for q, (plan, other) in enumerate(zip(plans, alternates)) if other is not plan], np.int64)
    nudged = np.array([q for q, pair in enumerate(nudges) if pair is not None], np.int64)
    return BothOrders(stack_plans(plans), differs, stack_plans([alternates[q] for q in differs.tolist()]),
                      stack_plans([plan.searched_later(SEARCH_DELAY_DAYS) for plan in plans]), nudged,
                      *(stack_plans([nudges[q][side] for q in nudged.tolist()]) for side in (0, 1)))


def tie_order_changes(both: BothOrders, settings: SettingsBatch, limit: int, found: np.ndarray) -> np.ndarray:
    """(settings, queries) bool: whether some expected key's position differs in the other tie order.

    `found` is `stacked_positions(both.stack, settings, limit)`; only the queries in `both.differs` can differ.
    """
    changed = np.zeros((len(settings), len(both.stack.plans)), dtype=bool)
    if len(both.differs):
        other = stacked_positions(both.alternate, settings, limit)
        changed[:, both.differs] = (other != found[:, both.differs, : other.shape[2]]).any(axis=2)
    return changed


def numeric_changes(both: BothOrders, settings: SettingsBatch, limit: int, found: np.ndarray) -> np.ndarray:
    """(settings, queries) bool: whether some expected key's position differs when its cosines move up or down by
    the embedder's precision (`nudged_plans`). `found` is `stacked_positions(both.stack, settings, limit)`."""
    changed = np.zeros((len(settings), len(both.stack.plans)), dtype=bool)
    if len(both.nudged):
        here = found[:, both.nudged]
        for stack in (both.favoured, both.disfavoured):
            moved = stacked_positions(stack, settings, limit)
            changed[:, both.nudged] |= (moved != here[:, :, : moved.shape[2]]).any(axis=2)
    return changed


def later_search_changes(both: BothOrders, settings: SettingsBatch, limit: int, found: np.ndarray) -> np.ndarray:
    """(settings, queries) bool: `delay_changes_positions` at `SEARCH_DELAY_DAYS` of every query at once.

    `found` is `stacked_positions(both.stack, settings, limit)`. Only settings with the blend on can change.
    """
    changed = np.zeros((len(settings), len(both.stack.plans)), dtype=bool)
    blended = np.flatnonzero(blends(settings.half_life))
    if len(blended):
        later = stacked_positions(both.later, settings[blended], limit)
        changed[blended] = (later != found[blended]).any(axis=2)
    return changed
