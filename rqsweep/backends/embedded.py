"""The embedded backend: SOAT's ranking in process, every setting re-fused from cached candidates."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import polars as pl

from rqsweep.backends.base import EMBEDDED_PROFILE, RankedHit, outcome_frame
from rqsweep.backends.dask_cluster import DaskCluster
from rqsweep.backends.candidate_blocks import CandidateBlocks
from rqsweep.backends.embed_estimate import embedding_processes, estimate
from rqsweep.backends.embedded_config import EmbeddedConfig, EmbedderConfig
from rqsweep.backends.scoring import PositionsAndTies, plan_queries, score_in_processes, score_plans, stack_shards
from rqsweep.config import JobConfig, WorkersConfig
from rqsweep.corpus import Corpus
from rqsweep.engine.batch import BothOrders, SettingsBatch, stack_both_orders, stacked_positions
from rqsweep.engine.channels import Candidates
from rqsweep.engine.embed import (CachedEmbedder, Embedder, EmbeddingError, FeatureHashEmbedder, LocalEmbedder,
                                  OllamaEmbedder, OpenAIEmbedder, RemoteEmbedder, described, numerics_of,
                                  precision_of, with_numerics)
from rqsweep.engine.embed.local import installed_models, resolve_model
from rqsweep.engine.embed.onnx import OnnxEmbedder, installed_onnx_models
from rqsweep.engine.embed.processes import ProcessEmbedder
from rqsweep.engine.index import Index
from rqsweep.engine.index_cache import IndexCache
from rqsweep.errors import InputError
from rqsweep.golden import GoldenSet
from rqsweep.knobs import Knobs
from rqsweep.pacing import RequestLimits
from rqsweep.progress import Phase, silent_phase
from rqsweep.scope import Scope

_MIN_PARALLEL_WORK = 200_000  # (setting x query) evaluations below which dispatching to workers costs more

class EmbeddedBackend:
    """Evaluates a golden set on an `Index`: candidates once per query, then the fast path per setting.

    A query is tie-sensitive under a setting when any expected item's position differs between
    PostgreSQL's tie order and plain insertion order (an accident of storage order, not a signal), or
    in a search `SEARCH_DELAY_SECONDS` after the writes (a decayed memory within
    `delay x ln 2 / half-life` of a neighbour: an accident of timing). It is numerically sensitive when an
    expected item's position moves once its cosines move by the embedder's precision (`precision_of`: how far
    another C library's math moves the local model's cosines): an accident of the machine.
    """

    name = "embedded"
    warnings: tuple[str, ...] = ()
    ROWS_PER_CHECKPOINT = 1_000_000  # (setting, query) rows a batch holds in memory, and the run's end reads at once

    def __init__(self, index: Index, golden: GoldenSet, limit: int, scope: Scope,
                 workers: WorkersConfig | int = 1, log: Callable[[str], None] = lambda _: None, *,
                 cluster: DaskCluster | None = None, advance: Callable[[float], None] = lambda _: None,
                 extracting: Callable[[int], None] = lambda _: None, blocks: CandidateBlocks = CandidateBlocks(None),
                 owned: bool = False):
        """`cluster`: the Dask cluster to use (and close) with `workers.backend: dask` (None: connect to it here);
        `advance(settings)`: told the settings' worth of work done as parts of a batch finish (progress);
        `extracting(queries)`: told of the queries whose candidates are ready; `blocks`: where they are kept;
        `owned`: nothing else holds `index`, so its postings go in place before the vector channel runs (else the
        backend keeps a copy without them once every candidate is extracted)."""
        self.index, self.golden, self.limit, self.scope = index, golden, limit, scope
        self.profile = {**EMBEDDED_PROFILE, "embedder": described(index.embedder),
                        "numerics": numerics_of(index.embedder)}
        self.workers = workers if isinstance(workers, WorkersConfig) else WorkersConfig(n=workers)
        self.advance = advance
        self.n_expected = np.array([len(q.expected) for q in golden.queries], np.int64)
        # Settings per recorded batch: a few seconds of work, and memory that does not grow with the golden set.
        self.checkpoint_every = max(1, min(2000, self.ROWS_PER_CHECKPOINT // max(len(golden.queries), 1)))
        self.cluster, self.shards, self._candidates = cluster, None, None
        try:
            self._prepare(log, extracting, blocks, owned)
        except BaseException:
            self.close()  # a LocalCluster's processes must not outlive a failed start
            raise

    def _prepare(self, log: Callable[[str], None], extracting: Callable[[int], None], blocks: CandidateBlocks,
                 owned: bool) -> None:
        """Embed the golden queries and extract their candidates, here or on the cluster."""
        self.vectors = self.index.embed_queries([q.query for q in self.golden.queries])
        queries = [(q.query, tuple(e.key for e in q.expected)) for q in self.golden.queries]
        if self.workers.backend == "dask" and not self.workers.corpus_shards:
            from rqsweep.backends.dask_shards import DaskShards

            self.index.embed_vectors()
            self.cluster = self.cluster or DaskCluster(self.workers, log)
            # Candidates are extracted on the cluster, shard by shard, and stay there between batches.
            self.shards = DaskShards(self.cluster, self.index, queries, self.vectors, self.limit, self.scope, log,
                                     precision_of(self.index.embedder))
        else:
            # Every search is made from these candidates (ranked lists re-fuse them), so the postings can go: with
            # `owned`, as soon as the lexical channel is done, before the vectors a build left for later are made,
            # so that neither meets the other nor the vector channel's work.
            local = isinstance(self.index, Index)  # a corpus-sharded index holds no vectors or postings here

            def lexical_done() -> None:
                if owned:
                    self.index.drop_postings()
                self.index.embed_vectors()

            self.plans, self.alternates, self._candidates, self.nudges = plan_queries(
                self.index, queries, self.vectors, self.limit, self.scope, extracting, blocks,
                lexical_done if local else None, precision_of(self.index.embedder))
            if local and not owned:
                self.index = self.index.without_postings()
            self._stacks: dict[int, list[BothOrders]] = {}

    @property
    def candidates(self) -> list[Candidates]:
        """Per query, in the index's tie order: `ranked` re-fuses them (fetched from the cluster on first use)."""
        if self.shards is not None and self._candidates is None:
            self._candidates = self.shards.candidates()
        return self._candidates

    def vector_similarities(self) -> np.ndarray:
        """The similarity of every vector-channel candidate of every golden query, before the floor: the list a
        `min_similarity` cuts, whatever the setting (what a sweep's `quantiles` take)."""
        return np.array([c.score for found in self.candidates for c in found.vector], np.float64)

    def memory_ages(self) -> np.ndarray:
        """Every memory's age in days at the run's clock (what a sweep's `age_quantiles` take)."""
        return self.index.memory_age_days()

    def evaluate(self, settings: Sequence[Knobs]) -> pl.DataFrame:
        batch = SettingsBatch.from_knobs(settings)
        if self.shards is not None:
            positions, flags = self.shards.score(batch, self.advance)
        else:
            positions, flags = self._score_here(batch)
        return outcome_frame(settings, [q.id for q in self.golden.queries], positions, self.n_expected,
                             sensitivity=flags)

    def _score_here(self, batch: SettingsBatch) -> PositionsAndTies:
        """In this process, or over local loky processes through joblib, a shard of queries per process."""
        # With corpus shards the cluster has extracted; evaluation, cheap, stays in this process.
        workers = 1 if self.workers.backend == "dask" else self.workers.n if self.workers.n > 0 else os.cpu_count() or 1
        if workers == 1 or len(batch) * len(self.plans) < _MIN_PARALLEL_WORK:
            return score_plans(self._stacked(1)[0], batch, self.limit)
        return score_in_processes(self._stacked(workers), batch, self.limit, workers)

    def _stacked(self, shards: int) -> list[BothOrders]:
        """The plans stacked once per run for `shards` shards of queries: stacking costs more than a batch's pass."""
        if shards not in self._stacks:
            self._stacks[shards] = (stack_shards(self.plans, self.alternates, self.nudges, shards) if shards > 1
                                    else [stack_both_orders(self.plans, self.alternates, self.nudges)])
        return self._stacks[shards]

    def numeric_extremes(self, knobs: Knobs) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """`Backend.numeric_extremes` from the plans stacked here; None on a cluster (its plans stay there)."""
        if self.shards is not None:
            return None
        both = self._stacked(1)[0]
        if not len(both.nudged):
            return None
        batch = SettingsBatch.from_knobs([knobs])
        found = stacked_positions(both.stack, batch, self.limit)
        frames = []
        for stack in (both.favoured, both.disfavoured):
            moved, at = found.copy(), stacked_positions(stack, batch, self.limit)
            moved[:, both.nudged, : at.shape[2]] = at
            frames.append(outcome_frame([knobs], [q.id for q in self.golden.queries], moved, self.n_expected))
        return frames[0], frames[1]

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
        if self.cluster is not None:
            self.cluster.close()
            self.cluster, self.shards = None, None


def _limits(e: EmbedderConfig) -> RequestLimits:
    return RequestLimits(e.max_in_flight, e.requests_per_second)


def _local(e: EmbedderConfig, log: Callable[[str], None]) -> LocalEmbedder:
    model = resolve_model(e.model)
    if model is None:  # inputs.py checks first, naming the config; a config built in code meets this
        raise EmbeddingError(f"local model {e.model!r}: no such model installed ({', '.join(installed_models())}) "
                             "and no such file")
    return LocalEmbedder(model, e.prefixes, e.threads, e.batch_size, log)


def _onnx(e: EmbedderConfig, log: Callable[[str], None]) -> OnnxEmbedder:
    models = installed_onnx_models()
    if e.model not in models:  # inputs.py checks first, naming the config; a config built in code meets this
        raise EmbeddingError(f"onnx model {e.model!r}: no such model installed ({', '.join(models) or 'none'})")
    return OnnxEmbedder(models[e.model], e.threads, log)


MODEL_KINDS = ("local", "onnx")  # a model run in this process: its texts can go to local processes

EMBEDDERS: dict[str, Callable[[EmbedderConfig, Callable[[str], None]], Embedder]] = {
    "feature-hash": lambda e, log: FeatureHashEmbedder(e.dimensions),
    "local": _local,
    "onnx": _onnx,
    "openai": lambda e, log: OpenAIEmbedder(e.base_url or "https://api.openai.com/v1", e.model, api_key_env=e.api_key_env,
                                       dimensions=e.dimensions, batch_size=e.batch_size, timeout=e.timeout,
                                       limits=_limits(e)),
    "ollama": lambda e, log: OllamaEmbedder(e.base_url or "http://127.0.0.1:11434", e.model, batch_size=e.batch_size,
                                       timeout=e.timeout, limits=_limits(e)),
}


def build_embedder(config: EmbeddedConfig, cluster: DaskCluster | None = None,
                   log: Callable[[str], None] = lambda _: None, processes: int = 1) -> Embedder:
    """The configured embedder, a remote one's batches spread over `cluster` when given, a model's texts over
    `processes` local processes, behind the on-disk vector cache when the config names one (the cache stays here:
    vectors come back to be stored; its warnings go through `log`)."""
    embedder = EMBEDDERS[config.embedder.kind](config.embedder, log)
    if cluster is not None and isinstance(embedder, RemoteEmbedder):
        from rqsweep.backends.dask_embedder import DaskEmbedder

        embedder = DaskEmbedder(embedder, cluster, log)
    elif processes > 1 and config.embedder.kind in MODEL_KINDS:
        embedder = ProcessEmbedder(embedder, processes)
    return CachedEmbedder(embedder, config.cache_dir, _warning(log)) if config.cache_dir else embedder


def _sampler(config: EmbeddedConfig, log: Callable[[str], None]) -> Embedder:
    """The model in this process, where the estimate's sample is timed, behind the vector cache when there is one
    (the sample is then not embedded again)."""
    model = EMBEDDERS[config.embedder.kind](config.embedder, log)
    return CachedEmbedder(model, config.cache_dir, _warning(log)) if config.cache_dir else model


def index_cache(config: EmbeddedConfig, embedder: Embedder, log: Callable[[str], None]) -> IndexCache | None:
    """The index cache the config names (`cache_dir`/index/), its warnings through `log`; None without a
    cache_dir."""
    return (IndexCache(config.cache_dir, with_numerics(embedder.identity, embedder), config.chunking, _warning(log),
                       config.index_cache_mb) if config.cache_dir else None)


def _warning(log: Callable[[str], None]) -> Callable[[str], None]:
    return lambda warning: log(f"warning: {warning}")


def build_embedded_backend(config: JobConfig, golden: GoldenSet, corpus: Corpus, *, workers: WorkersConfig | int,
                           log: Callable[[str], None], run_dir: Path | None = None,
                           advance: Callable[[float], None] = lambda _: None,
                           phase: Phase = silent_phase) -> EmbeddedBackend:
    """Chunk, embed and index the corpus, then extract every golden query's candidates (kept in the run folder,
    `candidate_blocks`, so that an interrupted start resumes there)."""
    started = time.monotonic()
    engine = config.backend
    workers = workers if isinstance(workers, WorkersConfig) else WorkersConfig(n=workers)
    if workers.corpus_shards and engine.embedder.kind not in ("feature-hash", *MODEL_KINDS):
        raise InputError(config.path, "workers.corpus_shards", f"{workers.corpus_shards}: needs an embedder the "
                         f"workers run themselves (feature-hash, local or onnx), not {engine.embedder.kind}: a remote "
                         "provider's limits hold for the whole run only when the coordinator embeds")
    cluster = DaskCluster(workers, log) if workers.backend == "dask" else None
    try:
        processes = embedding_processes(workers)
        if engine.embedder.kind in MODEL_KINDS:  # a model: the phase is worth planning
            log(estimate(engine, corpus, [q.query for q in golden.queries], _sampler(engine, log), processes).line())
        embedder = build_embedder(engine, cluster, log, 1 if workers.corpus_shards else processes)
        if workers.corpus_shards:  # built on the workers, each reading the index cache on its own disk
            from rqsweep.backends.dask_corpus import ShardedIndex

            index = ShardedIndex(cluster, corpus, embedder, partial(build_embedder, engine), engine.chunking,
                                 datetime.now(timezone.utc), engine.tie_order, workers.corpus_shards, log,
                                 engine.cache_dir, engine.index_cache_mb)
        else:
            index = Index.build(corpus, embedder, engine.chunking, tie_order=engine.tie_order,
                                cache=index_cache(engine, embedder, log), vectors_later=True,
                                progress=lambda rows: phase(rows, f"{config.name} vectors", "rows"))
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    extracting = phase(len(golden.queries), f"{config.name} candidates", "queries")
    blocks = CandidateBlocks(run_dir, with_numerics(described(index.embedder), index.embedder))
    backend = EmbeddedBackend(index, golden, config.limit, config.scope, workers, log, cluster=cluster,
                              advance=advance, extracting=extracting, blocks=blocks, owned=True)
    reused = (f" ({index.rows_reused} reused from the index cache, {index.rows_built} built)" if engine.cache_dir
              else "")
    log(f"embedded index: {len(index.stores['document'].ids)} chunks, {len(index.stores['memory'].ids)} memories"
        f"{reused}, {len(golden.queries)} queries' candidates in {time.monotonic() - started:.1f}s")
    return backend
