"""The embedding phase, planned before it runs: the texts left to embed once the index cache and the vector cache
have given what they hold, the CPU per text measured on a sample of them, and the wall time at the processes that
embed. `--dry-run` prints it, and a run logs it before it embeds."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rqsweep.backends.embedded_config import EmbeddedConfig
from rqsweep.config import WorkersConfig
from rqsweep.corpus import Corpus
from rqsweep.corpus.model import chunk_contents
from rqsweep.engine.embed import Embedder, with_numerics
from rqsweep.engine.embed.cache import texts_found
from rqsweep.engine.index_cache import rows_found

SAMPLE = 8  # texts embedded to measure the CPU per text: about a second of the local models'


@dataclass(frozen=True)
class EmbeddingEstimate:
    """`rows` chunks and memories, `cached` of them held by a cache, `queries` to embed; the CPU per text and per
    query measured on `sample` of them (None where not measured: a provider embeds, on its own clock); `processes`
    embed the rows at once."""

    rows: int
    cached: int
    queries: int
    cpu_per_row: float | None
    cpu_per_query: float | None
    sample: int
    processes: int = 1

    @property
    def to_embed(self) -> int:
        return self.rows - self.cached

    @property
    def cpu_seconds(self) -> float | None:
        if self.cpu_per_row is None or self.cpu_per_query is None:
            return None
        return self.to_embed * self.cpu_per_row + self.queries * self.cpu_per_query

    @property
    def wall_seconds(self) -> float | None:
        """The rows spread over the processes; the queries embed in one."""
        if self.cpu_seconds is None:
            return None
        return self.to_embed * self.cpu_per_row / self.processes + self.queries * self.cpu_per_query

    def line(self) -> str:
        texts = (f"embedding: {self.to_embed:,} of {self.rows:,} chunks and memories to embed "
                 f"({self.cached:,} in the caches) and {self.queries:,} queries")
        if self.cpu_seconds is None:
            return f"{texts}; not timed here: a provider embeds them"
        return (f"{texts}; {self.cpu_per_row * 1000:,.1f} ms of CPU per text (measured on {self.sample}), "
                f"{self.cpu_per_query * 1000:,.1f} ms per query: about {_duration(self.cpu_seconds)} of CPU, "
                f"{_duration(self.wall_seconds)} of wall time on {self.processes} "
                f"process{'es' if self.processes > 1 else ''}")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate(config: EmbeddedConfig, corpus: Corpus, queries: Sequence[str], embedder: Embedder,
             processes: int = 1, timed: bool = True) -> EmbeddingEstimate:
    """The phase's estimate: the rows the caches of `config.cache_dir` do not hold, and (with `timed`) the CPU of
    `embedder` per text and per query on a sample of the texts left to embed: a model in this process, or behind a
    vector cache that then keeps the sample. The estimate itself reads the caches and never writes them."""
    counts, contents = chunk_contents(corpus.documents, config.chunking)
    memories = corpus.memories.contents
    total = len(contents) + len(memories)
    if config.cache_dir is None:  # every row is left to embed: only the sample is read
        cached, left = 0, _Joined(contents, memories)
    else:
        identity = with_numerics(embedder.identity, embedder)
        built_documents, built_memories = rows_found(Path(config.cache_dir), identity, config.chunking,
                                                     list(corpus.documents.contents), list(memories))
        built = [b for b, n in zip(built_documents, counts.tolist()) for _ in range(n)] + built_memories
        rows = [text for text, b in zip(_Joined(contents, memories), built) if not b]
        in_vectors = texts_found(config.cache_dir, embedder, rows)
        cached = sum(built) + sum(in_vectors)
        left = [text for text, found in zip(rows, in_vectors) if not found]
        queries = [q for q, found in zip(queries, texts_found(config.cache_dir, embedder.queries, queries))
                   if not found]
    if not timed:
        return EmbeddingEstimate(total, cached, len(queries), None, None, 0, processes)
    rows_sample, queries_sample = _spread(left), _spread(queries)
    return EmbeddingEstimate(total, cached, len(queries), _cpu_per_text(embedder, rows_sample),
                             _cpu_per_text(embedder.queries, queries_sample), len(rows_sample), processes)


class _Joined(Sequence[str]):
    """The chunks, then the memories: the index's rows in order, read one at a time."""

    def __init__(self, chunks: Sequence[str], memories: Sequence[str]) -> None:
        self.chunks, self.memories = chunks, memories

    def __len__(self) -> int:
        return len(self.chunks) + len(self.memories)

    def __getitem__(self, i):
        return self.chunks[i] if i < len(self.chunks) else self.memories[i - len(self.chunks)]

    def __iter__(self):
        yield from self.chunks
        yield from self.memories


def embedding_processes(workers: WorkersConfig) -> int:
    """The processes that embed a model's rows: a Dask run's corpus shards' workers, or the loky workers, or this
    one."""
    n = workers.n if workers.n > 0 else os.cpu_count() or 1
    if workers.corpus_shards:
        return min(workers.corpus_shards, n)
    return n if workers.backend == "loky" else 1


def _spread(texts: Sequence[str]) -> list[str]:
    """`SAMPLE` texts spread evenly over `texts`."""
    return [texts[i] for i in range(0, len(texts), max(1, len(texts) // SAMPLE))[:SAMPLE]]


def _cpu_per_text(embedder: Embedder, sample: list[str]) -> float:
    if not sample:
        return 0.0
    embedder.embed(["warm-up: the model loads"])
    started = time.process_time()
    embedder.embed(sample)
    return (time.process_time() - started) / len(sample)
