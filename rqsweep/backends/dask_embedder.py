"""A remote provider's embeddings as a distributed map: batches over Dask workers, the provider's limits whole.

The texts are cut into chunks of whole batches (the same batches a local run sends), and the chunks run in lanes
(`DaskCluster.run_lanes`), each lane with a share of the embedder's `max_in_flight` and `requests_per_second`:
the provider never sees more than the configured limits from the whole run. Vectors come back here in text
order, where the on-disk cache (a `CachedEmbedder` around this one) stores them: only the coordinator writes
the cache, and workers need no shared disk. The embedder, API key included, travels to the workers.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import numpy as np

from rqsweep.backends.dask_cluster import DaskCluster
from rqsweep.engine.embed import EmbeddingError, RemoteEmbedder
from rqsweep.pacing import RequestLimits

CHUNKS_PER_LANE = 4  # balance between lanes, and a log line per chunk


def embed_chunk(share: RequestLimits, texts: list[str], embedder: RemoteEmbedder) -> np.ndarray:
    """One chunk's vectors, on a worker, within the lane's `share`; waits out its pacing interval before
    returning, so the lane's next chunk cannot start a request early."""
    lane = embedder.within(share)
    vectors = lane.embed(texts)
    lane.pacer.settle()
    return vectors


class DaskEmbedder:
    """Embeds as `inner` does, a call of more than one batch spread over the cluster's workers."""

    def __init__(self, inner: RemoteEmbedder, cluster: DaskCluster, log: Callable[[str], None]):
        self.inner, self.cluster, self.log = inner, cluster, log

    @property
    def identity(self) -> str:
        """The inner embedder's: where the vectors are computed does not change them."""
        return self.inner.identity

    @property
    def queries(self) -> DaskEmbedder:
        return self

    def __repr__(self) -> str:
        return f"DaskEmbedder({self.inner!r})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) <= self.inner.batch_size:
            return self.inner.embed(texts)  # one request: not worth a round of tasks
        lanes = self.inner.limits.split(self.cluster.n_workers)
        batches = math.ceil(len(texts) / self.inner.batch_size)
        size = math.ceil(batches / (CHUNKS_PER_LANE * len(lanes))) * self.inner.batch_size
        chunks = [list(texts[start:start + size]) for start in range(0, len(texts), size)]
        started, done = time.monotonic(), []

        def finished(i: int) -> None:
            done.append(len(chunks[i]))
            self.log(f"embeddings: {sum(done)}/{len(texts)} texts on the cluster, {time.monotonic() - started:.0f}s")

        parts = self.cluster.run_lanes(embed_chunk, chunks, lanes, self.inner, finished=finished)
        widths = {part.shape[1] for part in parts} | ({self.inner.dimensions} - {None})
        if len(widths) != 1:
            raise EmbeddingError(f"{self.identity} returned embeddings of several dimensions {sorted(widths)}")
        self.inner.dimensions = widths.pop()
        return np.concatenate(parts)
