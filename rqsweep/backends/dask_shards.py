"""The embedded backend's work on a Dask cluster: shards of golden queries, each extracted once and kept there.

The index is built here once and scattered to every worker. Each shard's candidates (`plan_queries`) are a
Dask future that stays in its worker's memory between batches of settings; each batch is one scoring task per
shard, and only the shard's small integer positions come back. Dask re-runs the tasks of a worker that dies;
a task Dask cancels because what it needed died with a worker (the candidates, the index when every worker
holding it died) is submitted again with its lost inputs, so results do not depend on which worker ran what.
dask.distributed is used directly rather than through joblib's dask backend: joblib calls are stateless, and
re-sending or re-extracting every shard's candidates for each batch is the cost this design avoids.
"""

from __future__ import annotations

import copy
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from rqsweep.backends.dask_cluster import DaskCluster, cluster_errors
from rqsweep.backends.scoring import PositionsAndTies, join_shards, plan_queries, score_plans, shard_bounds
from rqsweep.engine.batch import SettingsBatch, stack_both_orders
from rqsweep.engine.channels import Candidates
from rqsweep.engine.index import Index
from rqsweep.scope import Scope

SHARDS_PER_WORKER = 4  # smaller shards balance uneven queries and re-run less when a worker dies
RESUBMITS = 20  # tasks sent again after workers' losses, per call, before the run stops (exit 3)
LOST = ("cancelled", "lost")  # a future's status once the cluster cannot give its value any more


def _score_shard(extracted: tuple, batch: SettingsBatch, limit: int) -> PositionsAndTies:
    plans, alternates, _, nudges = extracted
    return score_plans(stack_both_orders(plans, alternates, nudges), batch, limit)


def _candidates_of(extracted: tuple) -> list[Candidates]:
    return extracted[2]


class DaskShards:
    """Golden queries split into shards on a Dask cluster: `score(batch)` answers for every query, in order."""

    def __init__(self, cluster: DaskCluster, index: Index, queries: Sequence[tuple[str, Sequence[str]]],
                 vectors: np.ndarray, limit: int, scope: Scope, log: Callable[[str], None], precision: float = 0.0):
        self.client, self.limit, self.scope, self.log = cluster.client, limit, scope, log
        self.precision = precision  # the embedder's (`precision_of`): the shipped index travels without it
        self.bounds = shard_bounds(len(queries), SHARDS_PER_WORKER * cluster.n_workers)
        self.shares = np.array([b - a for a, b in self.bounds]) / max(len(queries), 1)  # of every query, per shard
        self.queries, self.vectors = queries, vectors
        # The index travels without its embedder: queries arrive embedded. It is kept here to send again if
        # every worker holding it dies.
        self.shipped = copy.copy(index)
        self.shipped.embedder = None
        self.index_future = None
        self.shards: list = [None] * len(self.bounds)
        started = time.monotonic()
        with cluster_errors():
            for n, i in enumerate(self._each(self._shard, range(len(self.bounds)), fetch=False), 1):
                log(f"candidates: shard {n}/{len(self.bounds)} on the cluster, {time.monotonic() - started:.0f}s")

    def _recover(self) -> None:
        """Forget the inputs the cluster lost with a worker, so the next task sends them again: the index when no
        worker holds it any more, and with it the shards' candidates no worker holds (they cannot be recomputed)."""
        from distributed.client import FuturesCancelledError

        while True:
            if self.index_future is not None and self.index_future.status in LOST:
                self.index_future = None
            self.shards = [None if s is None or s.status in LOST else s for s in self.shards]
            try:  # who_has refuses a future cancelled meanwhile: look again
                held = self.client.who_has([f for f in (self.index_future, *self.shards) if f is not None])
                break
            except FuturesCancelledError:
                continue
        if self.index_future is not None and not held.get(self.index_future.key):
            self.index_future = None
        for i, shard in enumerate(self.shards):
            if shard is not None and self.index_future is None and not held.get(shard.key):
                self.shards[i] = None

    def _index(self):
        """The scattered index, scattered again once no worker holds it."""
        if self.index_future is None:
            started = time.monotonic()
            self.index_future = self.client.scatter(self.shipped, broadcast=True, hash=False)
            self.log(f"dask: index scattered to {len(self.client.scheduler_info()['workers'])} workers in "
                     f"{time.monotonic() - started:.1f}s")
        return self.index_future

    def _shard(self, i: int):
        """Shard `i`'s (plans, alternates, candidates, nudges) future, kept on a worker; submitted again once lost."""
        if self.shards[i] is None:
            a, b = self.bounds[i]
            self.shards[i] = self.client.submit(plan_queries, self._index(), list(self.queries[a:b]),
                                                self.vectors[a:b], self.limit, self.scope, precision=self.precision,
                                                pure=False)
        return self.shards[i]

    def _each(self, task: Callable[[int], object], indices: Sequence[int], fetch: bool = True
              ) -> Iterator[tuple[int, object]]:
        """(i, the value of `task(i)`) for each index as it finishes; with `fetch=False`, (i, its finished future),
        its value left on the cluster. What a worker's death cancels (a task's inputs, before the task is
        submitted; the task, before it finished or while its value was being fetched: 'lost dependencies',
        'already forgotten') is sent again, its lost inputs with it; a task's own error is raised here."""
        from distributed import as_completed
        from distributed.client import FutureCancelledError, FuturesCancelledError

        resubmits = 0

        def recovered(exc: Exception) -> None:
            nonlocal resubmits
            resubmits += 1
            if resubmits > RESUBMITS:
                raise exc
            self._recover()

        def submitted(i: int):
            while True:
                try:
                    return task(i)
                except (FutureCancelledError, FuturesCancelledError) as exc:  # an input died with a worker
                    recovered(exc)

        self._recover()  # inputs lost since the last call, with a worker that died after it ended
        futures = {submitted(i): i for i in indices}
        flow = as_completed(futures)
        for future in flow:
            i = futures.pop(future)
            try:
                value = future.result() if fetch or future.status != "finished" else None
            except (FutureCancelledError, FuturesCancelledError) as exc:
                recovered(exc)
                retry = submitted(i)
                futures[retry] = i
                flow.add(retry)
                continue
            yield i, value if fetch else future

    def score(self, batch: SettingsBatch, advance: Callable[[float], None] = lambda _: None) -> PositionsAndTies:
        """Every query's positions for the batch: one task per shard, where that shard's candidates live.
        `advance(settings)` is told each finished shard's part of the batch, in settings' worth of work.
        The batch travels inside each task: scattered, its one copy could die with a worker."""
        parts: list = [None] * len(self.bounds)
        with cluster_errors():
            for i, part in self._each(lambda i: self.client.submit(_score_shard, self._shard(i), batch, self.limit,
                                                                   pure=False), range(len(self.bounds))):
                parts[i] = part
                advance(len(batch) * self.shares[i])
        return join_shards(parts)

    def candidates(self) -> list[Candidates]:
        """Every query's candidates in the index's tie order, in query order: small, fetched for `ranked`."""
        parts: list = [None] * len(self.bounds)
        with cluster_errors():
            for i, part in self._each(lambda i: self.client.submit(_candidates_of, self._shard(i), pure=False),
                                      range(len(self.bounds))):
                parts[i] = part
        return [c for part in parts for c in part]
