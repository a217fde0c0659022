"""A corpus split into shards of consecutive rows, each indexed on its own, and the exact merge of what they report.

Both channels' keys are per row (a vector's cosine to the query, a chunk's ts_rank_cd), so a shard computes them
exactly as the whole index would. What a shard cannot know is PostgreSQL's order among ties, which depends on every
row before. `sharded_candidates` asks the shards in up to three rounds:

1. per query and store, the vector channel's best `limit + 1` rows (few need the exact arithmetic) and the lexical
   channel's heap entrants (`pgsort.heap_entrants`: cheap, its ranks are exact anyway);
2. where the merged best `limit + 1` distances are not all distinct (exact ties decide), the vector channel's heap
   entrants for that query and store: the rows that can enter the whole table's top-N heap, which the coordinator
   replays in physical order (`pgsort.top_of_entrants`);
3. the distances of the lexical candidates to their query, for the similarity of lexical-only results.

The result is `Index.candidates_many`'s, tie order included (tests/test_shards.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from rqsweep.corpus import Corpus, Table
from rqsweep.engine.channels import Candidate, Candidates, merge_shards
from rqsweep.engine.cosine import cosine_entrants_many, cosine_head_many
from rqsweep.engine.index import Index
from rqsweep.engine.pgsort import TIE_ORDERS, TieOrder, float_ordinals, heap_entrants, ties_irrelevant, top_of_entrants
from rqsweep.scope import Scope

STORES = ("document", "memory")


@dataclass(frozen=True)
class Report:
    """One channel of one store of one shard, for one query: the shard's rows and their exact keys (cosine distance,
    or ts_rank_cd), out of `count` rows the channel's query reads (in scope; lexical: also matching)."""

    rows: np.ndarray
    keys: np.ndarray
    count: int


ShardReport = dict[tuple[str, str], Report]  # (source_type, channel) -> Report, for one query
# `on_shards(task, *args, each=None)` runs `task(shard's index, each[shard], *args)` (without `each[shard]` when
# `each` is None) on every shard, results in shard order: in this process, or on a cluster.
OnShards = Callable[..., list]


def split_corpus(corpus: Corpus, n_shards: int) -> list[Corpus]:
    """`n_shards` corpora of consecutive documents and consecutive memories, near-equal in count, whose
    tables concatenated in shard order are the whole corpus's (fewer shards when the corpus is smaller)."""
    n = max(1, min(n_shards, max(len(corpus.documents), len(corpus.memories))))

    def cut(items: Table) -> list[Table]:
        edges = np.linspace(0, len(items), n + 1).round().astype(int)
        return [items[a:b] for a, b in zip(edges[:-1], edges[1:])]

    return [Corpus(d, m) for d, m in zip(cut(corpus.documents), cut(corpus.memories))]


def _in_scope(store, scope: Scope) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A store's rows in scope, the same or None when every row is (what `cosine_*_many` take), and the mask."""
    rows, mask = store.in_scope(scope)
    return rows, (None if len(rows) == len(store.ids) else rows), mask


def first_reports(index: Index, queries: Sequence[str], vectors: np.ndarray, limit: int,
                  scope: Scope) -> list[ShardReport]:
    """Round 1 on one shard: per query, each store's vector best `limit + 1` (best first) and lexical entrants."""
    found: list[ShardReport] = [{} for _ in queries]
    for source_type, store in index.stores.items():
        rows, subset, mask = _in_scope(store, scope)
        heads = (cosine_head_many(store.vectors, vectors, limit, norms=store.norms, rows=subset) if len(rows)
                 else [(rows, np.empty(0))] * len(queries))
        for report, (at, distances), query in zip(found, heads, queries):
            report[source_type, "vector"] = Report(rows[at], distances, len(rows))
            matching, ranks = store.lexical.search(query)
            if mask is not None and len(matching):
                keep = mask[matching]
                matching, ranks = matching[keep], ranks[keep]
            at = heap_entrants(ranks, limit, descending=True)
            report[source_type, "lexical"] = Report(matching[at].astype(np.int64), ranks[at], len(matching))
    return found


def vector_entrants(index: Index, wanted: Sequence[tuple[int, str]], vectors: np.ndarray, limit: int,
                    scope: Scope) -> list[Report]:
    """Round 2 on one shard: the vector channel's heap entrants for each (query, store) of `wanted`."""
    found: dict[tuple[int, str], Report] = {}
    for source_type in STORES:
        queries = [q for q, t in wanted if t == source_type]
        if not queries:
            continue
        store = index.stores[source_type]
        rows, subset, _ = _in_scope(store, scope)
        entrants = (cosine_entrants_many(store.vectors, vectors[queries], limit, norms=store.norms, rows=subset)
                    if len(rows) else [(rows, np.empty(0))] * len(queries))
        for q, (at, distances) in zip(queries, entrants):
            found[q, source_type] = Report(rows[at], distances, len(rows))
    return [found[w] for w in wanted]


def row_distances(index: Index, wanted: Sequence[tuple[int, str, np.ndarray]], vectors: np.ndarray
                  ) -> list[np.ndarray]:
    """Round 3 on one shard: pgvector's distance of each (query, store, this shard's rows) of `wanted`."""
    return [index.distances(source_type, rows, vectors[q]) for q, source_type, rows in wanted]


def _joined(parts: Sequence[Report], offsets: Sequence[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """The shards' reports as one, rows numbered in the whole table."""
    return (np.concatenate([p.rows + offset for p, offset in zip(parts, offsets)]),
            np.concatenate([p.keys for p in parts]), sum(p.count for p in parts))


def _untied_head(parts: Sequence[Report], offsets: Sequence[int], limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The whole table's best `limit` rows and distances from the shards' best `limit + 1` when they are distinct
    with the next one (then every sort agrees); None when exact ties decide."""
    rows, keys, _ = _joined(parts, offsets)
    ordinals = float_ordinals(keys, descending=False)
    best = np.lexsort((rows, ordinals))[:limit + 1]
    if not ties_irrelevant(ordinals[best], limit):
        return None
    return rows[best[:limit]], keys[best[:limit]]


def sharded_candidates(on_shards: OnShards, offsets: Sequence[dict[str, int]], queries: Sequence[str],
                       vectors: np.ndarray, limit: int, scope: Scope
                       ) -> tuple[list[dict[TieOrder, Candidates]], list[dict[tuple[str, int], float]]]:
    """`Index.candidates_many` of the whole corpus from its shards (`offsets`: each shard's first row per store in
    the whole table), and per query the distance of each lexical candidate (see the module docstring)."""
    reports = on_shards(first_reports, list(queries), vectors, limit, scope)
    shard_offsets = {t: [o[t] for o in offsets] for t in STORES}
    heads = {(q, t): _untied_head([r[q][t, "vector"] for r in reports], shard_offsets[t], limit)
             for q in range(len(queries)) for t in STORES}
    tied = [key for key, head in heads.items() if head is None]
    entrants = on_shards(vector_entrants, tied, vectors, limit, scope) if tied else []
    for n, (q, t) in enumerate(tied):
        for r, shard in zip(reports, entrants):
            r[q][t, "vector"] = shard[n]
    found = []
    for q in range(len(queries)):
        lists: dict[TieOrder, dict[str, list[list[Candidate]]]] = {o: {"vector": [], "lexical": []}
                                                                    for o in TIE_ORDERS}
        for t in STORES:
            for channel in ("vector", "lexical"):
                head = heads[q, t] if channel == "vector" else None
                rows, keys, count = _joined([r[q][t, channel] for r in reports], shard_offsets[t])
                for order in TIE_ORDERS:
                    if head is not None:
                        picked_rows, picked = head
                    else:
                        top = top_of_entrants(keys, count, limit, order, descending=channel == "lexical")
                        picked_rows, picked = rows[top], keys[top]
                    lists[order][channel].append([
                        Candidate(t, int(row), 1.0 - float(key) if channel == "vector" else float(key))
                        for row, key in zip(picked_rows, picked)])
        found.append({order: Candidates(merge_shards(*lists[order]["vector"]), merge_shards(*lists[order]["lexical"]))
                      for order in TIE_ORDERS})
    lexical = [{(c.source_type, c.row) for order in TIE_ORDERS for c in by_order[order].lexical} for by_order in found]
    return found, row_distances_of(on_shards, offsets, lexical, vectors)


def row_distances_of(on_shards: OnShards, offsets: Sequence[dict[str, int]],
                     wanted: Sequence[set[tuple[str, int]]], vectors: np.ndarray) -> list[dict[tuple[str, int], float]]:
    """Per query, pgvector's distance of each (source_type, row) of `wanted[query]` (rows of the whole table), asked
    of the shard holding it: one task per shard."""
    asked: list[list[tuple[int, str, np.ndarray]]] = [[] for _ in offsets]
    for q, rows in enumerate(wanted):
        for t in STORES:
            mine = np.array(sorted(r for s, r in rows if s == t), dtype=np.int64)
            starts = np.array([o[t] for o in offsets])
            owner = np.searchsorted(starts, mine, side="right") - 1
            for shard in range(len(offsets)):
                local = mine[owner == shard] - starts[shard]
                if len(local):
                    asked[shard].append((q, t, local))
    answers = on_shards(row_distances, vectors, each=asked)
    distances: list[dict[tuple[str, int], float]] = [{} for _ in wanted]
    for shard, (questions, got) in enumerate(zip(asked, answers)):
        for (q, t, local), d in zip(questions, got):
            distances[q].update(zip(((t, int(r) + offsets[shard][t]) for r in local), d.tolist()))
    return distances
