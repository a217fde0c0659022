"""Replay's proof: a query's candidate lists at the sweep's limit, rebuilt from a few searches, or why not.

Replay searches each query with neutral knobs (`rrf_k = 1`, no floor, no recency blend) and `limit = L'` >=
the sweep's `L`, over every store in scope: the *combined* answer. Every result carries `signals`: its
1-based positions in the merged vector list V' and lexical list X' (pool size L' per channel per store).
When that does not prove a store's lists, replay asks again for that store alone (`include_documents` or
`include_memories` false), at L' and then at L: a *single-store* answer, whose merged lists are the store's
own (one shard: the merge changes nothing). A store's candidate query is the same whether or not the other
store is searched, so its lists at one limit are the same in every answer at that limit.

Each answer is judged on its own, and the first that proves a list wins. Per channel and store, with L' now the
answer's limit and Y the store's subsequence of its merged list (the store's own list at pool size L', in
order: the shard merge is a stable sort), the store's top L is `Y[:L]` when one of these holds:

1. `L' == L`: the answer's lists are the ones the sweep's searches get, ties included; only visibility
   matters (Y seen to L rows, or complete). This is the single-store answer at L's purpose: it settles
   ties that rules 2 and 3 refuse. Its catch is the cut to L fused results: with `rrf_k = 1` the row at V
   position r scores 1/(1 + r) when it has no lexical hit, less than any row at X position b < r, so V is
   seen to L rows only when the lexical list adds few rows of its own (as for short memories).
2. Y is complete and shorter than L' (so the store has exactly `n = len(Y)` candidates) and `n <= 2L`:
   PostgreSQL accumulates at most 2 x bound rows before it switches to a bounded heap, so both LIMIT L and
   LIMIT L' quicksort the same n rows in the same physical order and return prefixes of one permutation,
   ties included. This is the only rule for lexical lists at L' > L: SOAT returns no ts_rank_cd, so ties
   among them cannot be seen, and for n > 2L the bounded heap of LIMIT L may order or pick tied rows
   differently.
3. Vector only: `Y[:L+1]` is visible and its similarities are strictly decreasing. Then each of the top
   L+1 distances is held by exactly one row (a second row at the same distance would show up as a tie
   within Y[:L+1]), so every correct sort returns exactly Y[:L] for LIMIT L. (Distinct similarities imply
   distinct distances; the converse need not hold, which is why equal similarities are refused.)

A channel's merged list is *seen* up to the longest run of positions 1..P present among an answer's
results. It is *complete* when the answer was not cut (fewer results than its limit), or when an item at
position P+1 would have had a fused score of at least 1/(1 + P + 1) (any other term only adds), strictly
above the last returned result's: it would have been returned, so it does not exist.

The merged lists at L interleave the stores' lists as SOAT's shard merge does (a stable sort by score of
documents then memories): a document row d goes before a memory row m iff score(d) >= score(m). Which
holds is read from the combined answer's seen prefix of V' or X' (positions 1..P, P <= its L'); a row in it
also goes before every row outside it, even one outside the other store's top L': a row at position
p <= P follows at most L' - 1 rows, so it precedes one of the other store's L' rows (or all of them that
exist), which scores at least as much as any row that store left out. Outside the prefix, vector rows
are compared by similarity (the merge's own key; equal: the document first); lexical rows cannot be
(no ts_rank_cd), so both stores having lexical rows there is unprovable.

Assumes what the embedded engine assumes: exact (sequential-scan) vector search, rows in physical order,
no parallel sort, `work_mem` large enough for 2 x limit rows; and that the include flags only skip the
other store's queries. `verify: K` checks the outcome directly.
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
class Answer:
    """The results of one neutral search at `fetched_limit` over `stores` (every store in scope, or one)."""

    hits: Sequence[Hit]
    fetched_limit: int
    stores: tuple[str, ...]


@dataclass(frozen=True)
class Rebuilt:
    """A query's candidates at the sweep's limit, in the embedded engine's terms."""

    candidates: Candidates
    hits: dict[str, list[Hit]]  # per source type, row -> the fetched result
    memory_age_days: np.ndarray  # per memory row


class Unprovable(Exception):
    """The fetched results do not determine the candidates at the sweep's limit; says why, and which stores'
    lists are missing (empty when no single-store search can help)."""

    def __init__(self, message: str, stores: Sequence[str] = ()):
        super().__init__(message)
        self.stores = tuple(stores)


def fused_score(hit: Hit, rrf_k: int) -> float:
    """SOAT's RRF score with no floor and no blend: V's term added first, then L's."""
    score = 0.0
    if hit.vector is not None:
        score += 1.0 / (rrf_k + hit.vector)
    if hit.lexical is not None:
        score += 1.0 / (rrf_k + hit.lexical)
    return score


def _merged(answer: Answer, channel: str) -> tuple[list[Hit], bool]:
    """The channel's merged list as far as it is seen (positions 1..P), and whether that is all of it."""
    hits = answer.hits
    if len(hits) > answer.fetched_limit:
        raise Unprovable(f"{len(hits)} results for limit {answer.fetched_limit}")
    by_position: dict[int, Hit] = {}
    for i, hit in enumerate(hits):
        if hit.vector is None and hit.lexical is None:
            raise Unprovable(f"results[{i}] has no signals")
        if hit.source_type == "document" and hit.item_id is None:
            raise Unprovable(f"results[{i}] has no chunk_id")
        position = getattr(hit, channel)
        if position is not None:
            if position in by_position:
                raise Unprovable(f"two results claim {channel} position {position}")
            by_position[position] = hit
    seen = 0
    while seen + 1 in by_position:
        seen += 1
    if len(hits) < answer.fetched_limit:
        if len(by_position) != seen:
            raise Unprovable(f"the uncut answer skips {channel} position {seen + 1}")
        return [by_position[p] for p in range(1, seen + 1)], True
    complete = 1.0 / (NEUTRAL.rrf_k + seen + 1) > fused_score(hits[-1], NEUTRAL.rrf_k)
    return [by_position[p] for p in range(1, seen + 1)], complete


def _store_top(seen: list[Hit], complete: bool, channel: str, store: str, limit: int,
               fetched_limit: int) -> list[Hit]:
    """The store's top `limit` in this channel at pool size `limit` (see the module docstring's rules)."""
    at = f"{store} {channel} list at limit {fetched_limit}"
    if fetched_limit == limit:
        if complete or len(seen) >= limit:
            return seen[:limit]
        raise Unprovable(f"{at} seen to {len(seen)} of up to {limit} rows")
    if complete and len(seen) < fetched_limit and len(seen) <= 2 * limit:
        return seen[:limit]
    if channel == "vector" and len(seen) > limit:
        head = [h.similarity for h in seen[: limit + 1]]
        if all(s is not None for s in head) and all(a > b for a, b in zip(head, head[1:])):
            return seen[:limit]
        raise Unprovable(f"{at} has tied (or missing) similarities within its top {limit + 1}")
    if channel == "lexical" and complete and len(seen) > 2 * limit:
        raise Unprovable(f"{at} has {len(seen)} > 2 x {limit} candidates: ties unknowable")
    raise Unprovable(f"{at} seen to {len(seen)} rows, not provably complete")


def _store_tops(answers: Sequence[Answer], limit: int, stores: Sequence[str]) -> dict[tuple[str, str], list[Hit]]:
    """Per (channel, store), its top `limit`, from the first answer that proves it; else `Unprovable`."""
    seen = [{channel: _merged(answer, channel) for channel in CHANNELS} for answer in answers]
    tops: dict[tuple[str, str], list[Hit]] = {}
    why: dict[tuple[str, str], str] = {}
    for channel in CHANNELS:
        for store in stores:
            for answer, lists in zip(answers, seen):
                if store not in answer.stores:
                    continue  # its silence about a store it did not search proves nothing
                merged, complete = lists[channel]
                try:
                    tops[channel, store] = _store_top([h for h in merged if h.source_type == store], complete,
                                                      channel, store, limit, answer.fetched_limit)
                    break
                except Unprovable as exc:
                    why[channel, store] = str(exc)  # the last answer's reason: the best evidence's
    missing = [(c, s) for c in CHANNELS for s in stores if (c, s) not in tops]
    if missing:
        raise Unprovable("; ".join(why.get(key, f"no search of the {key[1]} store") for key in missing),
                         dict.fromkeys(store for _, store in missing))
    return tops


def _document_first(channel: str, document: Hit, memory: Hit, prefix: dict[tuple[str, str], int]) -> bool:
    """Whether SOAT's shard merge puts `document` before `memory` (see the module docstring)."""
    d, m = prefix.get(document.identity), prefix.get(memory.identity)
    if d is not None or m is not None:  # the combined answer's seen prefix precedes every other row
        return m is None or (d is not None and d < m)
    if channel == "lexical":
        raise Unprovable("the lexical order of document and memory rows past the combined answer's seen list "
                         "is unknown (SOAT returns no ts_rank_cd)")
    if document.similarity is None or memory.similarity is None:
        raise Unprovable("a vector candidate has no similarity")
    return document.similarity >= memory.similarity  # the merge's own key; equal: documents first


def _merge(channel: str, documents: list[Hit], memories: list[Hit], prefix: dict[tuple[str, str], int]) -> list[Hit]:
    """The merged list at the sweep's limit: the stores' lists interleaved, each kept in its own order;
    `prefix` holds the positions of the combined answer's seen merged list."""
    out: list[Hit] = []
    d = m = 0
    while d < len(documents) and m < len(memories):
        if _document_first(channel, documents[d], memories[m], prefix):
            out.append(documents[d])
            d += 1
        else:
            out.append(memories[m])
            m += 1
    return out + documents[d:] + memories[m:]


def rebuild(answers: Sequence[Answer], limit: int, now_ms: int,
            stores: Sequence[str] = ("document", "memory")) -> Rebuilt:
    """Candidates at `limit` from neutral searches; `answers[0]` searched every store in `stores`, any
    others one store each. Raises `Unprovable`."""
    tops = _store_tops(answers, limit, stores)
    merged: dict[str, list[Hit]] = {}
    for channel in CHANNELS:
        prefix = {h.identity: p for p, h in enumerate(_merged(answers[0], channel)[0], 1)}
        merged[channel] = _merge(channel, tops.get((channel, "document"), []), tops.get((channel, "memory"), []),
                                 prefix)
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
