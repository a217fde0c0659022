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
        from distributed import Client, LocalCluster, as_completed

        self.limit = limit
        self._cluster = None
        for name in ("distributed.client", "distributed.comm"):
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
            self.close()
            raise BackendError(f"Dask: cannot reach a cluster at {workers.address or 'a new LocalCluster'} "
                               f"with {max(workers.n, 1)} worker(s): {exc}") from None
        n_workers = len(self.client.scheduler_info()["workers"])
        dashboard = self.client.dashboard_link if "dashboard" in self.client.scheduler_info().get("services", {}) \
            else None
        log(f"dask: {n_workers} workers at {self.client.scheduler.address}"
            + (f", dashboard {dashboard}" if dashboard else ""))
        # The embedder stays here: queries arrive embedded, so a remote provider's client never travels.
        shipped = copy.copy(index)
        shipped.embedder = None
        started = time.monotonic()
        index_future = self.client.scatter(shipped, broadcast=True, hash=False)
        log(f"dask: index scattered to {n_workers} workers in {time.monotonic() - started:.1f}s")
        self.bounds = shard_bounds(len(queries), SHARDS_PER_WORKER * n_workers)
        self.plans = [self.client.submit(plan_queries, index_future, list(queries[a:b]), vectors[a:b], limit, scope,
                                         pure=False) for a, b in self.bounds]
        started = time.monotonic()
        with _cluster_errors():
            for n, shard in enumerate(as_completed(self.plans), 1):
                if shard.status != "finished":
                    shard.result()  # raises the shard's error here; a finished shard's candidates stay put
                log(f"candidates: shard {n}/{len(self.plans)} on the cluster, {time.monotonic() - started:.0f}s")

    def score(self, batch: SettingsBatch) -> Scored:
        """Every query's positions for the batch: one task per shard, where that shard's candidates live."""
        with _cluster_errors():
            batch_future = self.client.scatter(batch, broadcast=False, hash=False)
            tasks = [self.client.submit(_score_shard, plans, batch_future, self.limit, pure=False)
                     for plans in self.plans]
            return join_shards(self.client.gather(tasks))

    def candidates(self) -> list[Candidates]:
        """Every query's candidates in the index's tie order, in query order: small, fetched for `ranked`."""
        with _cluster_errors():
            parts = self.client.gather([self.client.submit(_candidates_of, shard, pure=False) for shard in self.plans])
        return [c for part in parts for c in part]

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
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
