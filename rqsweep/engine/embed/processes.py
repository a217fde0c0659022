"""A model's texts embedded over local processes (joblib's loky workers), each loading the model once and running it
on its own thread: two cores embed about twice one core's texts per second, where a second thread in one process
costs more CPU than it saves (`benchmarks/embedders.py`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rqsweep.engine.embed.protocol import Embedder, numerics_of, precision_of, texts_per_step


class ProcessEmbedder:
    """`inner`'s vectors, each call's texts cut into `processes` contiguous parts embedded at once in loky worker
    processes (a part of one text or none runs here). The vectors are `inner`'s: a text's vector does not depend on
    its batch (tested for each local model)."""

    def __init__(self, inner: Embedder, processes: int) -> None:
        if processes < 2:
            raise ValueError(f"processes must be >= 2, got {processes}")
        self.inner, self.processes = inner, processes
        self.identity = inner.identity
        self.dimensions = getattr(inner, "dimensions", None)
        self.queries = self if inner.queries is inner else ProcessEmbedder(inner.queries, processes)

    @property
    def numerics(self) -> str | None:
        return numerics_of(self.inner)

    @property
    def precision(self) -> float:
        return precision_of(self.inner)

    @property
    def texts_per_step(self) -> int | None:
        step = texts_per_step(self.inner)
        return None if step is None else step * self.processes

    def __repr__(self) -> str:
        return f"ProcessEmbedder({self.inner!r}, processes={self.processes})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) < 2:
            return self.inner.embed(texts)
        from joblib import Parallel, delayed

        cuts = np.linspace(0, len(texts), min(self.processes, len(texts)) + 1).round().astype(int)
        parts = [list(texts[lo:hi]) for lo, hi in zip(cuts[:-1], cuts[1:])]
        return np.concatenate(Parallel(n_jobs=len(parts), backend="loky")(
            delayed(self.inner.embed)(part) for part in parts))
