"""Replay's proof: a query's candidate lists at the sweep's limit, rebuilt from one larger search, or why not.

Replay fetches each query once with neutral knobs (`rrf_k = 1`, no floor, no recency blend) and
`limit = L'` >= the sweep's `L`. Every result carries `signals`: its 1-based positions in the merged vector
list V' and lexical list X' (pool size L' per channel per store). The embedded fast path needs V and X at
pool size L. Per channel and store, with Y the store's subsequence of the merged list (its own top-L' list,
in order: the shard merge is a stable sort), the store's top L is `Y[:L]` when one of these holds:

1. `L' == L`: the fetched lists are the ones the sweep's searches get; only visibility matters.
2. Y is complete and shorter than L' (so the store has exactly `n = len(Y)` candidates) and `n <= 2L`:
   PostgreSQL accumulates at most 2 x bound rows before it switches to a bounded heap, so both LIMIT L and
   LIMIT L' quicksort the same n rows in the same physical order and return prefixes of one permutation,
   ties included. This is the only rule for lexical lists: SOAT returns no ts_rank_cd, so ties among
   them cannot be seen, and for n > 2L the bounded heap of LIMIT L may order or pick tied rows differently.
3. Vector only: `Y[:L+1]` is visible and its similarities are strictly decreasing. Then each of the top
   L+1 distances is held by exactly one row (a second row at the same distance would show up as a tie
   within Y[:L+1]), so every correct sort returns exactly Y[:L] for LIMIT L. (Distinct similarities imply
   distinct distances; the converse need not hold, which is why equal similarities are refused.)

The merged lists at L are then the subsequences of V' and X' holding the chosen rows: both merges order rows
by (score, documents first, position in the store's list), and the store lists agree on their prefixes.

A channel's merged list is *seen* up to the longest run of positions 1..P present among the results. It is
*complete* when the answer was not cut (fewer than L' results), or when an item at position P+1 would have
had a fused score of at least 1/(1 + P + 1) (any other term only adds), strictly above the last returned
result's: it would have been returned, so it does not exist.

Assumes what the embedded engine assumes: exact (sequential-scan) vector search, rows in physical order,
no parallel sort, `work_mem` large enough for 2 x limit rows. `verify: K` checks the outcome directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rqsweep.backends.http.mapping import Hit
from rqsweep.engine.channels import Candidate, Candidates
from rqsweep.knobs import Knobs

NEUTRAL = Knobs(rrf_k=1)  # the steepest RRF: a cut result list then shows the longest channel prefixes
CHANNELS = ("vector", "lexical")


@dataclass(frozen=True)
class Rebuilt:
    """A query's candidates at the sweep's limit, in the embedded engine's terms."""

    candidates: Candidates
    hits: dict[str, list[Hit]]  # per source type, row -> the fetched result
    memory_age_days: np.ndarray  # per memory row


class Unprovable(Exception):
    """The fetched results do not determine the candidates at the sweep's limit; says why."""


def fused_score(hit: Hit, rrf_k: int) -> float:
    """SOAT's RRF score with no floor and no blend: V's term added first, then L's."""
    score = 0.0
    if hit.vector is not None:
        score += 1.0 / (rrf_k + hit.vector)
    if hit.lexical is not None:
        score += 1.0 / (rrf_k + hit.lexical)
    return score


def _merged(hits: Sequence[Hit], channel: str, fetched_limit: int) -> tuple[list[Hit], bool]:
    """The channel's merged list as far as it is seen (positions 1..P), and whether that is all of it."""
    by_position: dict[int, Hit] = {}
    for hit in hits:
        position = getattr(hit, channel)
        if position is not None:
            if position in by_position:
                raise Unprovable(f"two results claim {channel} position {position}")
            by_position[position] = hit
    seen = 0
    while seen + 1 in by_position:
        seen += 1
    if len(hits) < fetched_limit:
        if len(by_position) != seen:
            raise Unprovable(f"the uncut answer skips {channel} position {seen + 1}")
        return [by_position[p] for p in range(1, seen + 1)], True
    complete = 1.0 / (NEUTRAL.rrf_k + seen + 1) > fused_score(hits[-1], NEUTRAL.rrf_k)
    return [by_position[p] for p in range(1, seen + 1)], complete


def _store_top(seen: list[Hit], complete: bool, channel: str, store: str, limit: int,
               fetched_limit: int) -> list[Hit]:
    """The store's top `limit` in this channel at pool size `limit` (see the module docstring's rules)."""
    if fetched_limit == limit:
        if complete or len(seen) >= limit:
            return seen[:limit]
        raise Unprovable(f"{store} {channel} list seen to {len(seen)} of up to {limit}")
    if complete and len(seen) < fetched_limit and len(seen) <= 2 * limit:
        return seen[:limit]
    if channel == "vector" and len(seen) > limit:
        head = [h.similarity for h in seen[: limit + 1]]
        if all(s is not None for s in head) and all(a > b for a, b in zip(head, head[1:])):
            return seen[:limit]
        raise Unprovable(f"{store} vector list has tied (or missing) similarities within its top {limit + 1}")
    if channel == "lexical" and complete and len(seen) > 2 * limit:
        raise Unprovable(f"{store} lexical list has {len(seen)} > 2 x {limit} candidates: ties unknowable")
    raise Unprovable(f"{store} {channel} list seen to {len(seen)} rows, not provably complete")


def rebuild(hits: Sequence[Hit], limit: int, fetched_limit: int, now_ms: int,
            stores: Sequence[str] = ("document", "memory")) -> Rebuilt:
    """Candidates at `limit` from the answer to a neutral search at `fetched_limit`; raises `Unprovable`."""
    for i, hit in enumerate(hits):
        if hit.vector is None and hit.lexical is None:
            raise Unprovable(f"results[{i}] has no signals")
        if hit.source_type == "document" and hit.item_id is None:
            raise Unprovable(f"results[{i}] has no chunk_id")
    merged: dict[str, list[Hit]] = {}
    for channel in CHANNELS:
        seen, complete = _merged(hits, channel, fetched_limit)
        chosen: set[tuple[str, str]] = set()
        for store in stores:
            top = _store_top([h for h in seen if h.source_type == store], complete, channel, store, limit,
                             fetched_limit)
            chosen.update(h.identity for h in top)
        merged[channel] = [h for h in seen if h.identity in chosen]
    similarities = [h.similarity for h in merged["vector"]]
    if any(s is None for s in similarities) or any(a < b for a, b in zip(similarities, similarities[1:])):
        raise Unprovable("vector candidates without similarity, or out of similarity order")
    rows: dict[tuple[str, str], int] = {}
    by_store: dict[str, list[Hit]] = {"document": [], "memory": []}
    for hit in merged["vector"] + merged["lexical"]:
        if hit.identity not in rows:
            rows[hit.identity] = len(by_store[hit.source_type])
            by_store[hit.source_type].append(hit)
    if any(h.updated_at_ms is None for h in by_store["memory"]):
        raise Unprovable("a memory result has no updated_at")
    ages = np.array([(now_ms - h.updated_at_ms) / 86_400_000 for h in by_store["memory"]], dtype=np.float64)
    candidates = Candidates(
        tuple(Candidate(h.source_type, rows[h.identity], h.similarity) for h in merged["vector"]),
        # SOAT does not return ts_rank_cd; the fast path reads only lexical positions.
        tuple(Candidate(h.source_type, rows[h.identity], float("nan")) for h in merged["lexical"]),
    )
    return Rebuilt(candidates, by_store, ages)


def expected_rows(rebuilt: Rebuilt, expected: Sequence[tuple[str, str]]) -> list[set[tuple[str, int]]]:
    """Per expected (source type, id), the candidate rows that count as a hit: every chunk of a document."""
    out = []
    for source_type, target in expected:
        out.append({(source_type, row) for row, hit in enumerate(rebuilt.hits[source_type])
                    if hit.target_id == target})
    return out
