"""The Dask cluster a run works on: joined (or started here), named in the log with its dashboard, its losses
turned into backend failures, and lanes of tasks that keep a run's request limits whole (rqsweep.pacing)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Sequence, TypeVar

from rqsweep.config import WorkersConfig
from rqsweep.errors import BackendError
from rqsweep.pacing import RequestLimits

CONNECT_SECONDS = 30

Chunk = TypeVar("Chunk")
Result = TypeVar("Result")


class DaskCluster:
    """A client of the configured cluster: an existing one at `workers.address`, else a LocalCluster of
    `workers.n` processes here (closed with this object)."""

    def __init__(self, workers: WorkersConfig, log: Callable[[str], None]):
        from distributed import Client, LocalCluster  # first: importing it sets its loggers' levels

        for name in ("distributed.client", "distributed.comm", "distributed.batched", "distributed.core"):
            # Their reconnection tracebacks would bury the BackendError that says what happened and what to do.
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self.client, self._local = None, None
        try:
            if workers.address is None:
                # Its workers print to this terminal: a task's error reaches the user once, as the run's message.
                self._local = LocalCluster(n_workers=workers.n if workers.n > 0 else None, threads_per_worker=1,
                                           processes=True, dashboard_address=":0", silence_logs=logging.CRITICAL)
                self.client = Client(self._local)
            else:
                self.client = Client(workers.address, timeout=CONNECT_SECONDS)
                self.client.wait_for_workers(max(workers.n, 1), timeout=CONNECT_SECONDS)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise BackendError(f"Dask: cannot reach a cluster at {workers.address or 'a new LocalCluster'} "
                               f"with {max(workers.n, 1)} worker(s): {exc}") from None
        except BaseException:
            self.close()
            raise
        info = self.client.scheduler_info()
        dashboard = f", dashboard {self.client.dashboard_link}" if "dashboard" in info.get("services", {}) else ""
        log(f"dask: {len(info['workers'])} workers at {self.client.scheduler.address}{dashboard}")

    @property
    def n_workers(self) -> int:
        return len(self.client.scheduler_info()["workers"])

    def run_lanes(self, task: Callable[..., Result], chunks: Sequence[Chunk], lanes: Sequence[RequestLimits],
                  *shared: object, finished: Callable[[int], None] = lambda _: None) -> list[Result]:
        """`task(lane's limits, chunk, *shared)` for every chunk, results in chunk order.

        Each lane runs one chunk at a time and takes the next chunk when its last one is done, so at any moment
        at most `len(lanes)` tasks run, each within its lane's share: the run's limits hold whichever workers
        run them. `finished(i)` is called as chunk `i` comes back (progress).
        """
        from distributed import as_completed

        results: list = [None] * len(chunks)
        todo = iter(range(len(chunks)))
        running: dict = {}  # future -> (lane, chunk index)
        flow = as_completed()

        def next_on(lane: int) -> None:
            i = next(todo, None)
            if i is not None:
                future = self.client.submit(task, lanes[lane], chunks[i], *shared, pure=False)
                running[future] = (lane, i)
                flow.add(future)

        with cluster_errors():
            try:
                for lane in range(len(lanes)):
                    next_on(lane)
                for future in flow:
                    lane, i = running.pop(future)
                    results[i] = future.result()  # a task's error (a BackendError: exit 3) stops the run here
                    finished(i)
                    next_on(lane)
            finally:
                for future in running:
                    future.cancel()
        return results

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self._local is not None:
            self._local.close()


@contextmanager
def cluster_errors():
    """A lost scheduler (or a task that killed worker after worker) becomes a BackendError: exit 3."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    try:
        yield
    except (OSError, TimeoutError, CancelledError, KilledWorker) as exc:
        raise BackendError(f"Dask: the cluster stopped answering ({type(exc).__name__}: {exc})") from None
