"""The embedded backend's work on a Dask cluster: shards of golden queries, each extracted once and kept there.

The index is built here once and scattered to every worker. Each shard's candidates (`plan_queries`) are a
Dask future that stays in its worker's memory between batches of settings; each batch is one scoring task per
shard, and only the shard's small integer positions come back. Dask re-runs the tasks of a worker that dies
(recomputing the lost candidates from the scattered index), so results do not depend on which worker ran what.
dask.distributed is used directly rather than through joblib's dask backend: joblib calls are stateless, and
re-sending or re-extracting every shard's candidates for each batch is the cost this design avoids.
"""

from __future__ import annotations

import copy
import time
from typing import Callable, Sequence

import numpy as np

from rqsweep.backends.dask_cluster import DaskCluster, cluster_errors
from rqsweep.backends.embedded import Scored, _score, join_shards, plan_queries, shard_bounds
from rqsweep.engine.batch import SettingsBatch
from rqsweep.engine.channels import Candidates
from rqsweep.engine.index import Index
from rqsweep.scope import Scope

SHARDS_PER_WORKER = 4  # smaller shards balance uneven queries and re-run less when a worker dies


def _score_shard(extracted: tuple, batch: SettingsBatch, limit: int) -> Scored:
    plans, alternates, _ = extracted
    return _score(plans, alternates, batch, limit)


def _candidates_of(extracted: tuple) -> list[Candidates]:
    return extracted[2]


class DaskShards:
    """Golden queries split into shards on a Dask cluster: `score(batch)` answers for every query, in order."""

    def __init__(self, cluster: DaskCluster, index: Index, queries: Sequence[tuple[str, Sequence[str]]],
                 vectors: np.ndarray, limit: int, scope: Scope, log: Callable[[str], None]):
        self.client, self.limit = cluster.client, limit
        bounds = shard_bounds(len(queries), SHARDS_PER_WORKER * cluster.n_workers)
        self.shares = np.array([b - a for a, b in bounds]) / max(len(queries), 1)  # of every query, per shard
        with cluster_errors():
            self.shards = self._extract(index, queries, vectors, bounds, scope, log)

    def _extract(self, index: Index, queries: Sequence[tuple[str, Sequence[str]]], vectors: np.ndarray,
                 bounds: list[tuple[int, int]], scope: Scope, log: Callable[[str], None]) -> list:
        """Futures of each shard's (plans, alternates, candidates), computed and kept on the workers."""
        from distributed import as_completed

        # The index travels without its embedder: queries arrive embedded.
        shipped = copy.copy(index)
        shipped.embedder = None
        started = time.monotonic()
        index_future = self.client.scatter(shipped, broadcast=True, hash=False)
        log(f"dask: index scattered to {len(self.client.scheduler_info()['workers'])} workers in "
            f"{time.monotonic() - started:.1f}s")
        shards = [self.client.submit(plan_queries, index_future, list(queries[a:b]), vectors[a:b], self.limit, scope,
                                     pure=False) for a, b in bounds]
        started = time.monotonic()
        for n, shard in enumerate(as_completed(shards), 1):
            if shard.status != "finished":
                shard.result()  # raises the shard's error here; a finished shard's candidates stay put
            log(f"candidates: shard {n}/{len(shards)} on the cluster, {time.monotonic() - started:.0f}s")
        return shards

    def score(self, batch: SettingsBatch, advance: Callable[[float], None] = lambda _: None) -> Scored:
        """Every query's positions for the batch: one task per shard, where that shard's candidates live.
        `advance(settings)` is told each finished shard's part of the batch, in settings' worth of work."""
        from distributed import as_completed

        with cluster_errors():
            batch_future = self.client.scatter(batch, broadcast=False, hash=False)
            tasks = {self.client.submit(_score_shard, shard, batch_future, self.limit, pure=False): i
                     for i, shard in enumerate(self.shards)}
            parts: list = [None] * len(tasks)
            for task in as_completed(tasks):
                parts[tasks[task]] = task.result()
                advance(len(batch) * self.shares[tasks[task]])
            return join_shards(parts)

    def candidates(self) -> list[Candidates]:
        """Every query's candidates in the index's tie order, in query order: small, fetched for `ranked`."""
        with cluster_errors():
            parts = self.client.gather([self.client.submit(_candidates_of, shard, pure=False) for shard in self.shards])
        return [c for part in parts for c in part]
