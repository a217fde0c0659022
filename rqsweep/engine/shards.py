"""A corpus split into shards of consecutive rows, each indexed on its own, and the exact merge of what they report.

Both channels' keys are per row (a vector's cosine to the query, a chunk's ts_rank_cd), so a shard computes
them exactly as the whole index would. What a shard cannot know is PostgreSQL's order among ties, which depends
on every row before: each shard reports, per query, store and channel, the rows that can enter the whole table's
top-N heap (`pgsort.heap_entrants`: its own heap's entrants, a superset) with their exact keys, and the
coordinator replays them in physical order (`pgsort.top_of_entrants`). The result is `Index.candidates_many`'s,
tie order included (tests/test_shards.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rqsweep.corpus import Corpus
from rqsweep.engine.channels import Candidate, Candidates, merge_shards
from rqsweep.engine.cosine import cosine_entrants_many
from rqsweep.engine.index import Index
from rqsweep.engine.pgsort import TIE_ORDERS, TieOrder, heap_entrants, top_of_entrants
from rqsweep.scope import Scope

CHANNELS = ("vector", "lexical")


@dataclass(frozen=True)
class Report:
    """One channel of one store of one shard, for one query: rows (the shard's, ascending) and exact keys
    (cosine distance, or ts_rank_cd), out of `count` rows the channel's query reads (in scope; lexical: matching).
    `distances`: pgvector's distance of each lexical row to the query, for the similarity of lexical-only results."""

    rows: np.ndarray
    keys: np.ndarray
    count: int
    distances: np.ndarray | None = None


ShardReport = dict[tuple[str, str], Report]  # (source_type, channel) -> Report, for one query


def split_corpus(corpus: Corpus, n_shards: int) -> list[Corpus]:
    """`n_shards` corpora of consecutive documents and consecutive memories, near-equal in count, whose
    tables concatenated in shard order are the whole corpus's (fewer shards when the corpus is smaller)."""
    n = max(1, min(n_shards, max(len(corpus.documents), len(corpus.memories))))

    def cut(items: tuple) -> list[tuple]:
        edges = np.linspace(0, len(items), n + 1).round().astype(int)
        return [items[a:b] for a, b in zip(edges[:-1], edges[1:])]

    return [Corpus(d, m) for d, m in zip(cut(corpus.documents), cut(corpus.memories))]


def shard_reports(index: Index, queries: Sequence[str], vectors: np.ndarray, limit: int,
                  scope: Scope) -> list[ShardReport]:
    """What a shard's index reports for each query (`vectors`: the queries embedded): see the module docstring."""
    found: list[ShardReport] = [{} for _ in queries]
    for source_type, store in index.stores.items():
        rows, mask = store.in_scope(scope)
        entrants = (cosine_entrants_many(store.vectors, vectors, limit, norms=store.norms,
                                         rows=None if len(rows) == len(store.ids) else rows) if len(rows)
                    else [(rows, np.empty(0))] * len(queries))
        for report, (at, distances) in zip(found, entrants):
            report[source_type, "vector"] = Report(rows[at], distances, len(rows))
        for report, query, vector in zip(found, queries, vectors):
            matching, ranks = store.lexical.search(query)
            if mask is not None and len(matching):
                keep = mask[matching]
                matching, ranks = matching[keep], ranks[keep]
            at = heap_entrants(ranks, limit, descending=True)
            reported = matching[at].astype(np.int64)
            report[source_type, "lexical"] = Report(reported, ranks[at], len(matching),
                                                    index.distances(source_type, reported, vector))
    return found


def merge_reports(shards: Sequence[ShardReport], offsets: Sequence[dict[str, int]], limit: int
                  ) -> tuple[dict[TieOrder, Candidates], dict[tuple[str, int], float]]:
    """One query's candidates in both tie orders from every shard's report (shards in row order; `offsets`: each
    shard's first row per store in the whole table), and the distance of every lexical row reported."""
    lists: dict[TieOrder, dict[str, list[list[Candidate]]]] = {o: {c: [] for c in CHANNELS} for o in TIE_ORDERS}
    distances: dict[tuple[str, int], float] = {}
    for source_type in ("document", "memory"):
        for channel in CHANNELS:
            parts = [shard[source_type, channel] for shard in shards]
            rows = np.concatenate([p.rows + offset[source_type] for p, offset in zip(parts, offsets)])
            keys = np.concatenate([p.keys for p in parts])
            count = sum(p.count for p in parts)
            if channel == "lexical":
                distances.update(zip(((source_type, int(r)) for r in rows),
                                     np.concatenate([p.distances for p in parts]).tolist()))
            for order in TIE_ORDERS:
                top = top_of_entrants(keys, count, limit, order, descending=channel == "lexical")
                lists[order][channel].append([
                    Candidate(source_type, int(rows[t]), 1.0 - float(keys[t]) if channel == "vector"
                              else float(keys[t])) for t in top])
    return {order: Candidates(merge_shards(*lists[order]["vector"]), merge_shards(*lists[order]["lexical"]))
            for order in TIE_ORDERS}, distances
