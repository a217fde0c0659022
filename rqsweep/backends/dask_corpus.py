"""The corpus cut into shards on a Dask cluster (`workers.corpus_shards`): each shard's index is built on a worker
and stays there, and the coordinator keeps only the tables' rows (`Catalog`: keys, ids, contents, ages), never the
vectors or postings. Each block of golden queries is one task per shard, returning what it reports
(`engine.shards.shard_reports`); the coordinator merges the reports exactly, PostgreSQL's tie order included, and
then plans and scores as a one-process run does: the grid and queries tables are the same (tests/test_dask.py).

A shard's index is a submitted task, not scattered data: when its worker dies, Dask builds it again elsewhere
from the task (its corpus share travels inside it). With a `cache_dir`, each shard reads and fills the index cache
at that path on its worker's disk, as its embedder does the vector cache: entries are per document, so a rerun, a
resumed or rebuilt shard, or a run cut into other shards reuses what any earlier run built there.
"""

from __future__ import annotations

import sys
import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from rqsweep.backends.dask_cluster import DaskCluster, cluster_errors
from rqsweep.config import Chunking
from rqsweep.corpus import Corpus
from rqsweep.engine.channels import Candidates
from rqsweep.engine.embed import Embedder, with_numerics
from rqsweep.engine.index import Catalog, Index, table_rows
from rqsweep.engine.index_cache import IndexCache
from rqsweep.engine.pgsort import TieOrder
from rqsweep.engine.shards import row_distances_of, sharded_candidates, split_corpus
from rqsweep.scope import Scope


def _build_shard(corpus: Corpus, embedder: Callable[[], Embedder], chunking: Chunking, now: datetime,
                 tie_order: TieOrder, cache_dir: Path | None, cache_mb: float | None) -> Index:
    made = embedder()
    cache = IndexCache(cache_dir, with_numerics(made.identity, made), chunking, _worker_warning, cache_mb) if cache_dir else None
    index = Index.build(corpus, made, chunking, now=now, tie_order=tie_order, cache=cache)
    index.embedder = None  # queries arrive embedded
    return index


def _worker_warning(warning: str) -> None:
    # The index cache's warnings (a damaged file or entry, rebuilt) are the worker's: they go to its log.
    print(f"rqsweep worker: warning: {warning}", file=sys.stderr, flush=True)


def _summary(index: Index) -> tuple[dict[str, int], int, int]:
    """A shard's rows per store, and how many of them it built and took from the index cache."""
    return ({source_type: len(store.ids) for source_type, store in index.stores.items()}, index.rows_built,
            index.rows_reused)


class ShardedIndex(Catalog):
    """An `Index` whose vectors and postings live in shards on the cluster: `candidates_many` asks every shard and
    merges, and keeps the distances of the lexical rows reported, which `results` needs.

    `embedder` embeds the queries here; `shard_embedder()` makes the same embedder on a worker (an embedder
    object need not pickle: the feature hash holds a lock). `cache_dir` is the config's, a path on each worker's
    disk (the index cache is its `index/` folder, kept to `cache_mb` megabytes); `rows_built` and `rows_reused` add up the shards'."""

    def __init__(self, cluster: DaskCluster, corpus: Corpus, embedder: Embedder,
                 shard_embedder: Callable[[], Embedder], chunking: Chunking, now: datetime, tie_order: TieOrder,
                 n_shards: int, log: Callable[[str], None], cache_dir: Path | None = None,
                 cache_mb: float | None = None):
        documents, memories, _ = table_rows(corpus, chunking, now)
        super().__init__(documents, memories, embedder, now, tie_order)
        self.client = cluster.client
        started = time.monotonic()
        with cluster_errors(), warnings.catch_warnings():
            # The shares travel inside their tasks on purpose (Dask rebuilds a lost shard from its task), which
            # Dask warns about as a "large graph".
            warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
            self.shards = [self.client.submit(_build_shard, part, shard_embedder, chunking, now, tie_order, cache_dir,
                                              cache_mb, pure=False) for part in split_corpus(corpus, n_shards)]
            summaries = self.client.gather([self.client.submit(_summary, shard, pure=False) for shard in self.shards])
        sizes = [s for s, _, _ in summaries]
        self.rows_built, self.rows_reused = sum(b for _, b, _ in summaries), sum(r for _, _, r in summaries)
        self.offsets = [{t: sum(s[t] for s in sizes[:i]) for t in sizes[0]} for i in range(len(sizes))]
        log(f"dask: {len(self.shards)} corpus shards indexed on the workers in {time.monotonic() - started:.1f}s")
        self._distances: dict[bytes, dict[tuple[str, int], float]] = {}

    def candidates_many(self, queries: Sequence[str], query_vectors: np.ndarray, limit: int,
                        scope: Scope) -> list[dict[TieOrder, Candidates]]:
        """`Index.candidates_many` of the whole corpus, from a round or three of one task per shard."""
        with cluster_errors():
            found, distances = sharded_candidates(self._on_shards, self.offsets, queries, query_vectors, limit, scope)
        for vector, known in zip(query_vectors, distances):
            # A row's distance depends on the query's vector only, so queries with one vector share the map.
            self._distances.setdefault(vector.tobytes(), {}).update(known)
        return found

    def _on_shards(self, task: Callable[..., object], *args: object, each: Sequence | None = None) -> list:
        """`engine.shards.OnShards`: a task per shard, where its index lives."""
        return self.client.gather([self.client.submit(task, shard, *([] if each is None else [each[i]]), *args,
                                                      pure=False) for i, shard in enumerate(self.shards)])

    def distances(self, source_type: str, rows: np.ndarray, query_vector: np.ndarray) -> np.ndarray:
        """pgvector's distance of rows to this query vector: those of the lexical candidates extracted here are
        known; others (candidates a resumed run read back from its folder) are asked of their shards."""
        known = self._distances.setdefault(query_vector.tobytes(), {})
        missing = {(source_type, int(r)) for r in rows} - known.keys()
        if missing:
            with cluster_errors():
                known.update(row_distances_of(self._on_shards, self.offsets, [missing], query_vector[None, :])[0])
        return np.array([known[source_type, int(r)] for r in rows], dtype=np.float64)
