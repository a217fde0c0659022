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
import logging
import time
from contextlib import contextmanager
from typing import Callable, Sequence

import numpy as np

from rqsweep.backends.embedded import Scored, _score, join_shards, plan_queries, shard_bounds
from rqsweep.config import WorkersConfig
from rqsweep.engine.batch import SettingsBatch
from rqsweep.engine.channels import Candidates
from rqsweep.engine.index import Index
from rqsweep.errors import BackendError
from rqsweep.scope import Scope

SHARDS_PER_WORKER = 4  # smaller shards balance uneven queries and re-run less when a worker dies
CONNECT_SECONDS = 30


def _score_shard(extracted: tuple, batch: SettingsBatch, limit: int) -> Scored:
    plans, alternates, _ = extracted
    return _score(plans, alternates, batch, limit)


def _candidates_of(extracted: tuple) -> list[Candidates]:
    return extracted[2]


class DaskShards:
    """Golden queries split into shards on a Dask cluster: `score(batch)` answers for every query, in order."""

    def __init__(self, index: Index, queries: Sequence[tuple[str, Sequence[str]]], vectors: np.ndarray, limit: int,
                 scope: Scope, workers: WorkersConfig, log: Callable[[str], None]):
        self.limit = limit
        self.client, self._cluster = None, None
        try:
            self._connect(workers, log)
            with _cluster_errors():
                self.shards = self._extract(index, queries, vectors, scope, log)
        except BaseException:
            self.close()  # a LocalCluster's processes must not outlive a failed start
            raise

    def _connect(self, workers: WorkersConfig, log: Callable[[str], None]) -> None:
        from distributed import Client, LocalCluster  # first: importing it sets its loggers' levels

        for name in ("distributed.client", "distributed.comm", "distributed.batched", "distributed.core"):
            # Their reconnection tracebacks would bury the BackendError that says what happened and what to do.
            logging.getLogger(name).setLevel(logging.CRITICAL)
        try:
            if workers.address is None:
                self._cluster = LocalCluster(n_workers=workers.n if workers.n > 0 else None, threads_per_worker=1,
                                             processes=True, dashboard_address=":0")
                self.client = Client(self._cluster)
            else:
                self.client = Client(workers.address, timeout=CONNECT_SECONDS)
                self.client.wait_for_workers(max(workers.n, 1), timeout=CONNECT_SECONDS)
        except (OSError, TimeoutError) as exc:
            raise BackendError(f"Dask: cannot reach a cluster at {workers.address or 'a new LocalCluster'} "
                               f"with {max(workers.n, 1)} worker(s): {exc}") from None
        info = self.client.scheduler_info()
        dashboard = f", dashboard {self.client.dashboard_link}" if "dashboard" in info.get("services", {}) else ""
        log(f"dask: {len(info['workers'])} workers at {self.client.scheduler.address}{dashboard}")

    def _extract(self, index: Index, queries: Sequence[tuple[str, Sequence[str]]], vectors: np.ndarray,
                 scope: Scope, log: Callable[[str], None]) -> list:
        """Futures of each shard's (plans, alternates, candidates), computed and kept on the workers."""
        from distributed import as_completed

        n_workers = len(self.client.scheduler_info()["workers"])
        # The embedder stays here: queries arrive embedded, so a remote provider's client never travels.
        shipped = copy.copy(index)
        shipped.embedder = None
        started = time.monotonic()
        index_future = self.client.scatter(shipped, broadcast=True, hash=False)
        log(f"dask: index scattered to {n_workers} workers in {time.monotonic() - started:.1f}s")
        shards = [self.client.submit(plan_queries, index_future, list(queries[a:b]), vectors[a:b], self.limit, scope,
                                     pure=False) for a, b in shard_bounds(len(queries), SHARDS_PER_WORKER * n_workers)]
        started = time.monotonic()
        for n, shard in enumerate(as_completed(shards), 1):
            if shard.status != "finished":
                shard.result()  # raises the shard's error here; a finished shard's candidates stay put
            log(f"candidates: shard {n}/{len(shards)} on the cluster, {time.monotonic() - started:.0f}s")
        return shards

    def score(self, batch: SettingsBatch) -> Scored:
        """Every query's positions for the batch: one task per shard, where that shard's candidates live."""
        with _cluster_errors():
            batch_future = self.client.scatter(batch, broadcast=False, hash=False)
            tasks = [self.client.submit(_score_shard, shard, batch_future, self.limit, pure=False)
                     for shard in self.shards]
            return join_shards(self.client.gather(tasks))

    def candidates(self) -> list[Candidates]:
        """Every query's candidates in the index's tie order, in query order: small, fetched for `ranked`."""
        with _cluster_errors():
            parts = self.client.gather([self.client.submit(_candidates_of, shard, pure=False) for shard in self.shards])
        return [c for part in parts for c in part]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()


@contextmanager
def _cluster_errors():
    """A lost scheduler (or a shard that killed worker after worker) becomes a BackendError: exit 3."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    try:
        yield
    except (OSError, TimeoutError, CancelledError, KilledWorker) as exc:
        raise BackendError(f"Dask: the cluster stopped answering ({type(exc).__name__}: {exc}); finished settings "
                           "are saved, `--resume RUN_DIR` continues from them") from None
