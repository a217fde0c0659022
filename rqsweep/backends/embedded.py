"""The embedded backend: SOAT's ranking in process, every setting re-fused from cached candidates."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import polars as pl
from joblib.externals.loky import ProcessPoolExecutor

from rqsweep.backends.base import EMBEDDED_PROFILE, RankedHit, outcome_frame
from rqsweep.config import EmbeddedConfig, EmbedderConfig, JobConfig
from rqsweep.corpus import Corpus
from rqsweep.engine.batch import QueryPlan, SettingsBatch, delay_changes_positions, expected_positions, plan_query
from rqsweep.engine.channels import Candidates
from rqsweep.engine.embed import CachedEmbedder, Embedder, FeatureHashEmbedder, OllamaEmbedder, OpenAIEmbedder
from rqsweep.engine.index import Index
from rqsweep.engine.pgsort import TIE_ORDERS
from rqsweep.engine.recency import SEARCH_DELAY_DAYS
from rqsweep.golden import GoldenSet
from rqsweep.knobs import Knobs
from rqsweep.scope import Scope

_MIN_PARALLEL_WORK = 200_000  # (setting x query) evaluations below which dispatching to workers costs more
_PREPARE_LOG_SECONDS = 5.0

_installed: tuple = ()  # a worker process's copy of the plans, sent once when the worker starts


def _install(plans: Sequence[QueryPlan], alternates: Sequence[QueryPlan], limit: int) -> None:
    global _installed
    _installed = (plans, alternates, limit)


def _score_installed(batch: SettingsBatch):
    return _score(*_installed[:2], batch, _installed[2])


def _score(plans: Sequence[QueryPlan], alternates: Sequence[QueryPlan], batch: SettingsBatch, limit: int):
    """(settings, queries, keys) positions and (settings, queries) tie sensitivity.

    Small integer types: results travel back from worker processes, and limit <= 100.
    """
    width = max((len(p.groups) for p in plans), default=1)
    positions = np.zeros((len(batch), len(plans), width), np.int16)
    tie = np.zeros((len(batch), len(plans)), bool)
    for q, (plan, alternate) in enumerate(zip(plans, alternates)):
        found = expected_positions(plan, batch, limit)
        positions[:, q, : found.shape[1]] = found
        tie[:, q] = (expected_positions(alternate, batch, limit) != found).any(axis=1)
        tie[:, q] |= delay_changes_positions(plan, batch, limit, found, SEARCH_DELAY_DAYS)
    return positions, tie


class EmbeddedBackend:
    """Evaluates a golden set on an `Index`: candidates once per query, then the fast path per setting.

    A query is tie-sensitive under a setting when any expected item's position differs between
    PostgreSQL's tie order and plain insertion order (an accident of storage order, not a signal), or
    in a search `SEARCH_DELAY_SECONDS` after the writes (a decayed memory within
    `delay x ln 2 / half-life` of a neighbour: an accident of timing).
    """

    name = "embedded"
    profile = EMBEDDED_PROFILE
    checkpoint_every = 2000  # settings: a few seconds of work, even on large golden sets

    def __init__(self, index: Index, golden: GoldenSet, limit: int, scope: Scope, workers: int = 1,
                 log: Callable[[str], None] = lambda _: None):
        self.index, self.golden, self.limit, self.scope, self.workers = index, golden, limit, scope, workers
        self.vectors = index.embed_queries([q.query for q in golden.queries])
        self.candidates: list[Candidates] = []  # per query, in the index's tie order: `ranked` re-fuses them
        plans = {order: [] for order in TIE_ORDERS}
        ages = index.memory_age_days()
        started = last = time.monotonic()
        for n, (q, vector) in enumerate(zip(golden.queries, self.vectors), 1):
            keys = [e.key for e in q.expected]
            for order in TIE_ORDERS:
                candidates = index.candidates(q.query, limit, scope, order, vector)
                plans[order].append(plan_query(candidates, index.expected_rows(keys), ages))
                if order == index.tie_order:
                    self.candidates.append(candidates)
            if time.monotonic() - last >= _PREPARE_LOG_SECONDS:
                last = time.monotonic()
                log(f"candidates: {n}/{len(golden.queries)} queries, {last - started:.0f}s")
        self.plans = plans[index.tie_order]
        self.alternates = plans[next(o for o in TIE_ORDERS if o != index.tie_order)]
        self.n_expected = np.array([len(q.expected) for q in golden.queries], np.int64)
        self._pool: ProcessPoolExecutor | None = None

    def evaluate(self, settings: Sequence[Knobs]) -> pl.DataFrame:
        batch = SettingsBatch.from_knobs(settings)
        workers = self.workers if self.workers > 0 else os.cpu_count() or 1
        if workers == 1 or len(settings) * len(self.plans) < _MIN_PARALLEL_WORK:
            parts = [_score(self.plans, self.alternates, batch, self.limit)]
        else:
            if self._pool is None:
                # Workers keep the plans from their start-up; each task carries only its settings.
                self._pool = ProcessPoolExecutor(max_workers=workers, initializer=_install,
                                                 initargs=(self.plans, self.alternates, self.limit))
            step = -(-len(settings) // workers)
            parts = list(self._pool.map(_score_installed, [batch[i : i + step] for i in range(0, len(settings), step)]))
        positions = np.concatenate([p[0] for p in parts])
        tie = np.concatenate([p[1] for p in parts])
        return outcome_frame(settings, [q.id for q in self.golden.queries], positions, self.n_expected,
                             tie_sensitive=tie)

    def ranked(self, knobs: Knobs, query_ids: Sequence[str] | None = None) -> dict[str, list[RankedHit] | str]:
        """Golden queries' ranked lists under one setting (all by default), by the reference path from the
        candidates extracted at start-up (what `Index.search` returns)."""
        wanted = None if query_ids is None else set(query_ids)
        return {q.id: [RankedHit(p, r.key, r.source_type, r.chunk_id, r.score, r.signals.get("vector"),
                                 r.signals.get("lexical"), r.similarity_score, r.recency_factor)
                       for p, r in enumerate(self.index.results(candidates, vector, knobs, self.limit), 1)]
                for q, candidates, vector in zip(self.golden.queries, self.candidates, self.vectors)
                if wanted is None or q.id in wanted}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


EMBEDDERS: dict[str, Callable[[EmbedderConfig], Embedder]] = {
    "feature-hash": lambda e: FeatureHashEmbedder(e.dimensions),
    "openai": lambda e: OpenAIEmbedder(e.base_url or "https://api.openai.com/v1", e.model, api_key_env=e.api_key_env,
                                       dimensions=e.dimensions, batch_size=e.batch_size, timeout=e.timeout),
    "ollama": lambda e: OllamaEmbedder(e.base_url or "http://127.0.0.1:11434", e.model, batch_size=e.batch_size,
                                       timeout=e.timeout),
}


def build_embedder(config: EmbeddedConfig) -> Embedder:
    """The configured embedder, behind the on-disk vector cache when the config names one."""
    embedder = EMBEDDERS[config.embedder.kind](config.embedder)
    return CachedEmbedder(embedder, config.cache_dir) if config.cache_dir else embedder


def build_embedded_backend(config: JobConfig, golden: GoldenSet, corpus: Corpus, *, workers: int,
                           log: Callable[[str], None], run_dir: Path | None = None) -> EmbeddedBackend:
    """Chunk, embed and index the corpus, then extract every golden query's candidates."""
    started = time.monotonic()
    engine = config.backend
    index = Index.build(corpus, build_embedder(engine), engine.chunking, tie_order=engine.tie_order)
    backend = EmbeddedBackend(index, golden, config.limit, config.scope, workers, log)
    log(f"embedded index: {len(index.stores['document'].ids)} chunks, {len(index.stores['memory'].ids)} memories, "
        f"{len(golden.queries)} queries' candidates in {time.monotonic() - started:.1f}s")
    return backend
