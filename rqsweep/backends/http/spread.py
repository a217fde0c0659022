"""Direct mode's searches spread over a Dask cluster, `max_in_flight` and `requests_per_second` kept whole.

A batch's (setting, query) searches are cut into chunks that run in lanes (`DaskCluster.run_lanes`): each lane
has a share of the run's limits (`RequestLimits.split`) and runs one chunk at a time, on whichever worker Dask
picks, so the run as a whole never has more than `max_in_flight` searches in flight nor starts more than
`requests_per_second`. A chunk's task opens its own client on the worker with its lane's share and the
coordinator's credentials (the token in use, and a login's password to renew it; both print as `***`),
searches, waits out its pacing interval (so the lane's next chunk cannot start early) and returns each
search's outcome and its request counts. A split by lanes, not a shared semaphore or token bucket on the
scheduler: those cost a scheduler round trip per search, and a dead worker's lease would hold a slot until
it timed out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from rqsweep.backends.dask_cluster import DaskCluster
from rqsweep.backends.http.auth import Target
from rqsweep.backends.http.client import SoatClient, Stats
from rqsweep.backends.http.direct import SearchOutcome, Searcher
from rqsweep.backends.http.mapping import Dialect, PreparedQuery, SearchScope
from rqsweep.knobs import Knobs
from rqsweep.pacing import RequestLimits

CHUNKS_PER_LANE = 4  # a lane's chunks: balance between lanes, and progress within a batch


@dataclass(frozen=True)
class WorkerSearches:
    """What a worker needs to search as the coordinator does (no secret in its repr)."""

    target: Target
    client: dict  # SoatClient's keyword arguments besides the limits: timeout, retries, backoff, ...
    limit: int
    scope: SearchScope
    dialect: Dialect


def search_chunk(share: RequestLimits, searches: Sequence[tuple[PreparedQuery, Knobs]],
                 setup: WorkerSearches) -> tuple[list[SearchOutcome], tuple[int, int, int]]:
    """One chunk's outcomes, on a worker, within `share`; and (requests, retries, failures) it made."""
    client = SoatClient(setup.target, max_in_flight=share.max_in_flight,
                        requests_per_second=share.requests_per_second, reached=True, **setup.client)
    try:
        searcher = Searcher(client, setup.limit, setup.scope, setup.dialect)
        outcomes = client.map(lambda search: searcher.outcome(*search), searches)
        client.pacer.settle()
    finally:
        client.close()
    return outcomes, (client.stats.requests, client.stats.retries, client.stats.failures)


class SpreadSearches:
    """`direct(settings, queries)` as `Searcher.direct` answers it, the searches run on a Dask cluster."""

    def __init__(self, cluster: DaskCluster, setup: WorkerSearches, limits: RequestLimits, stats: Stats,
                 advance: Callable[[float], None]):
        self.cluster, self.setup, self.limits, self.stats, self.advance = cluster, setup, limits, stats, advance

    def direct(self, settings: Sequence[Knobs], queries: Sequence[PreparedQuery]) -> dict[tuple[int, int], SearchOutcome]:
        """Every (setting index, query index) searched on the cluster, within the run's limits."""
        pairs = [(s, q) for s in range(len(settings)) for q in range(len(queries))]
        lanes = self.limits.split(self.cluster.n_workers)
        n_chunks = min(len(pairs), CHUNKS_PER_LANE * len(lanes))
        chunks = [pairs[i::n_chunks] for i in range(n_chunks)]
        results = self.cluster.run_lanes(search_chunk, [[(queries[q], settings[s]) for s, q in c] for c in chunks],
                                         lanes, self.setup,
                                         finished=lambda i: self.advance(len(chunks[i]) / len(queries)))
        found: dict[tuple[int, int], SearchOutcome] = {}
        for chunk, (outcomes, (requests, retries, failures)) in zip(chunks, results):
            found.update(zip(chunk, outcomes))
            self.stats.add(requests=requests, retries=retries, failures=failures)
        return found

    def close(self) -> None:
        self.cluster.close()
