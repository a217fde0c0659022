"""The embedded backend: SOAT's ranking in process, every setting re-fused from cached candidates."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import polars as pl
from joblib.externals.loky import ProcessPoolExecutor

from rqsweep.backends.base import QUERY_SCHEMA
from rqsweep.config import EmbeddedConfig
from rqsweep.engine.batch import QueryPlan, SettingsBatch, expected_positions
from rqsweep.engine.embed import CachedEmbedder, Embedder, FeatureHashEmbedder, OllamaEmbedder, OpenAIEmbedder
from rqsweep.engine.index import Index
from rqsweep.engine.pgsort import TIE_ORDERS
from rqsweep.engine.scope import Scope
from rqsweep.golden import GoldenSet
from rqsweep.knobs import Knobs
from rqsweep.metrics import RECALL_CUTOFFS, first_relevant_rank
from rqsweep.space import setting_id

_MIN_PARALLEL_WORK = 200_000  # (setting x query) evaluations below which dispatching to workers costs more

_installed: tuple = ()  # a worker process's copy of the plans, sent once when the worker starts


def _install(plans: Sequence[QueryPlan], alternates: Sequence[QueryPlan], limit: int) -> None:
    global _installed
    _installed = (plans, alternates, limit)


def _score_installed(batch: SettingsBatch):
    return _score(*_installed[:2], batch, _installed[2])


def _score(plans: Sequence[QueryPlan], alternates: Sequence[QueryPlan], batch: SettingsBatch, limit: int):
    """(settings, queries) rank, expected items found within each recall cut-off, and tie sensitivity.

    Small integer types: results travel back from worker processes, and limit <= 100.
    """
    shape = (len(batch), len(plans))
    rank, tie = np.zeros(shape, np.int16), np.zeros(shape, bool)
    found = {k: np.zeros(shape, np.int16) for k in RECALL_CUTOFFS}
    for q, (plan, alternate) in enumerate(zip(plans, alternates)):
        positions = expected_positions(plan, batch, limit)
        rank[:, q] = first_relevant_rank(positions)
        for k in RECALL_CUTOFFS:
            found[k][:, q] = ((positions > 0) & (positions <= k)).sum(axis=1)
        tie[:, q] = first_relevant_rank(expected_positions(alternate, batch, limit)) != rank[:, q]
    return rank, found, tie


class EmbeddedBackend:
    """Evaluates a golden set on an `Index`: candidates once per query, then the fast path per setting.

    A query is tie-sensitive under a setting when the first relevant rank differs between
    PostgreSQL's tie order and plain insertion order: an accident of storage order, not a signal.
    """

    name = "embedded"
    checkpoint_every = 2000  # settings: a few seconds of work, even on large golden sets

    def __init__(self, index: Index, golden: GoldenSet, limit: int, scope: Scope, workers: int = 1):
        self.golden, self.limit, self.workers = golden, limit, workers
        vectors = index.embed_queries([q.query for q in golden.queries])
        plans = {order: [] for order in TIE_ORDERS}
        for q, vector in zip(golden.queries, vectors):
            keys = [e.key for e in q.expected]
            for order in TIE_ORDERS:
                plans[order].append(index.plan(q.query, keys, limit, scope, order, vector))
        self.plans = plans[index.tie_order]
        self.alternates = plans[next(o for o in TIE_ORDERS if o != index.tie_order)]
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
        rank = np.concatenate([p[0] for p in parts]).astype(np.int64)
        tie = np.concatenate([p[2] for p in parts])
        expected = np.array([len(q.expected) for q in self.golden.queries], dtype=np.float64)
        # found / |expected| is the same float64 as recall_at's mean of hit flags.
        recalls = {k: np.concatenate([p[1][k] for p in parts]) / expected for k in RECALL_CUTOFFS}
        n_s, n_q = len(settings), len(self.golden.queries)
        per_setting = np.repeat(np.arange(n_s), n_q)
        per_query = np.tile(np.arange(n_q), n_s)
        return pl.DataFrame({
            "setting_id": pl.Series([setting_id(s) for s in settings]).gather(per_setting),
            "query_id": pl.Series([q.id for q in self.golden.queries]).gather(per_query),
            "slice": pl.Series([q.slice for q in self.golden.queries]).gather(per_query),
            "rank": rank.ravel(),
            "recall_at_5": recalls[5].ravel(),
            "recall_at_10": recalls[10].ravel(),
            "error": pl.repeat(None, rank.size, dtype=pl.String, eager=True),
            "tie_sensitive": tie.ravel(),
        }, schema=QUERY_SCHEMA)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def build_embedder(config: EmbeddedConfig) -> Embedder:
    """The configured embedder, behind the on-disk vector cache when the config names one."""
    e = config.embedder
    if e.kind == "feature-hash":
        embedder: Embedder = FeatureHashEmbedder(e.dimensions)
    elif e.kind == "openai":
        embedder = OpenAIEmbedder(e.base_url or "https://api.openai.com/v1", e.model, api_key_env=e.api_key_env,
                                  dimensions=e.dimensions, batch_size=e.batch_size, timeout=e.timeout)
    else:
        embedder = OllamaEmbedder(e.base_url or "http://127.0.0.1:11434", e.model, batch_size=e.batch_size,
                                  timeout=e.timeout)
    return CachedEmbedder(embedder, config.cache_dir) if config.cache_dir else embedder
