"""The scoring core of the embedded backend, shared by its executors: in this process, over local processes
(joblib), and on a Dask cluster (`dask_shards`). Queries are planned once (`plan_queries`), split into contiguous
shards (`shard_bounds`), each shard scored for a batch of settings (`score_plans`) and the shards joined back in
query order (`join_shards`)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from joblib import Parallel, delayed, parallel_config

from rqsweep.backends.base import NUMERIC_SENSITIVE, TIE_SENSITIVE
from rqsweep.backends.candidate_blocks import CandidateBlocks
from rqsweep.engine.batch import (BothOrders, QueryPlan, SettingsBatch, later_search_changes, nudged_plans,
                                  numeric_changes, plan_query, stack_both_orders, stacked_positions, tie_order_changes)
from rqsweep.engine.channels import Candidates
from rqsweep.engine.index import Index
from rqsweep.engine.pgsort import TIE_ORDERS
from rqsweep.scope import Scope

_EXTRACTION_BLOCK = 256  # queries whose candidates are extracted (and kept) together; progress moves between blocks

# (settings, queries, keys) positions, (settings, queries) sensitivity flags: TIE_SENSITIVE | NUMERIC_SENSITIVE
PositionsAndTies = tuple[np.ndarray, np.ndarray]
Nudges = list[tuple[QueryPlan, QueryPlan] | None]


def plan_queries(index: Index, queries: Sequence[tuple[str, Sequence[str]]], vectors: np.ndarray, limit: int,
                 scope: Scope, progress: Callable[[int], None] = lambda _: None,
                 blocks: CandidateBlocks = CandidateBlocks(None), lexical_done: Callable[[], None] | None = None,
                 precision: float = 0.0) -> tuple[list[QueryPlan], list[QueryPlan], list[Candidates], Nudges]:
    """Each (query, expected keys)'s plan in the index's tie order and in the other one (the tie check), its
    candidates in the index's tie order (for `ranked`), and its plans with the expected items' cosines moved by
    `precision` (`nudged_plans`: the numerics check; none for exact vectors). One extraction serves both orders, and so does one plan
    when their candidates are the same (they differ only where exact ties decide). Each block of queries is
    read from `blocks` when kept there, else extracted and kept; `progress(n)` hears of each block's n queries
    (a `Progress`). With `lexical_done`, every block's lexical candidates are extracted first, then
    `lexical_done()` is called (to let the postings go and make the vectors, before the vector channel's work),
    then the rest."""
    other = next(o for o in TIE_ORDERS if o != index.tie_order)
    plans: list[QueryPlan] = []
    alternates: list[QueryPlan] = []
    kept: list[Candidates] = []
    nudges: Nudges = []
    ages = index.memory_age_days()
    blocked = {start: queries[start:start + _EXTRACTION_BLOCK] for start in range(0, len(queries), _EXTRACTION_BLOCK)}
    found = {start: blocks.load(start, len(block)) for start, block in blocked.items()}
    lexical = {}
    if lexical_done is not None:
        lexical = {start: index.lexical_candidates([text for text, _ in block], limit, scope)
                   for start, block in blocked.items() if found[start] is None}
        lexical_done()
    for start, block in blocked.items():
        extracted = found.pop(start)
        if extracted is None:
            texts, block_vectors = [text for text, _ in block], vectors[start:start + len(block)]
            # A corpus-sharded index extracts both channels on its workers: its candidates_many takes no `lexical`.
            extracted = (index.candidates_many(texts, block_vectors, limit, scope, lexical=lexical.pop(start))
                         if start in lexical else index.candidates_many(texts, block_vectors, limit, scope))
            blocks.save(start, extracted)
        for (_, keys), by_order in zip(block, extracted):
            expected = index.expected_rows(keys)
            candidates = by_order[index.tie_order]
            plans.append(plan_query(candidates, expected, ages))
            alternates.append(plans[-1] if by_order[other] == candidates
                              else plan_query(by_order[other], expected, ages))
            kept.append(candidates)
            if precision > 0:
                nudges.append(nudged_plans(candidates, expected, ages, precision))
        progress(len(block))
    return plans, alternates, kept, nudges


def score_plans(both: BothOrders, batch: SettingsBatch, limit: int) -> PositionsAndTies:
    """(settings, queries, keys) positions and (settings, queries) sensitivity flags, every query at once, from
    plans stacked once (`stack_both_orders`) and reused for every batch.

    Small integer types: results travel back from worker processes, and limit <= 100.
    """
    found = stacked_positions(both.stack, batch, limit)
    tie = tie_order_changes(both, batch, limit, found) | later_search_changes(both, batch, limit, found)
    flags = tie.astype(np.uint8) * TIE_SENSITIVE | numeric_changes(both, batch, limit, found) * np.uint8(
        NUMERIC_SENSITIVE)
    return found.astype(np.int16), flags


def score_in_processes(shards: Sequence[BothOrders], batch: SettingsBatch, limit: int,
                       workers: int) -> PositionsAndTies:
    """`score_plans` over `workers` local loky processes through joblib, one shard of queries each (`stack_shards`)."""
    with parallel_config(backend="loky", n_jobs=workers):
        parts = Parallel()(delayed(score_plans)(shard, batch, limit) for shard in shards)
    return join_shards(parts)


def stack_shards(plans: Sequence[QueryPlan], alternates: Sequence[QueryPlan], nudges: Nudges,
                 n_shards: int) -> list[BothOrders]:
    """`stack_both_orders` of each of `n_shards` contiguous shards of queries (`shard_bounds`)."""
    return [stack_both_orders(plans[a:b], alternates[a:b], nudges[a:b]) for a, b in shard_bounds(len(plans), n_shards)]


def join_shards(parts: Sequence[PositionsAndTies]) -> PositionsAndTies:
    """Shards of queries (in query order) scored for the same settings, as one (settings, queries, ...) result."""
    width = max(p[0].shape[2] for p in parts)
    positions = np.concatenate([np.pad(p[0], ((0, 0), (0, 0), (0, width - p[0].shape[2]))) for p in parts], axis=1)
    return positions, np.concatenate([p[1] for p in parts], axis=1)


def shard_bounds(n_queries: int, n_shards: int) -> list[tuple[int, int]]:
    """`n_shards` contiguous, near-equal (start, stop) ranges of query indices (fewer when queries are few)."""
    edges = np.linspace(0, n_queries, min(n_shards, n_queries) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
