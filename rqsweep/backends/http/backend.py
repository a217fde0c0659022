"""The HTTP backend: a running SOAT as the source of rankings, in direct or replay mode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import polars as pl

from rqsweep.backends.base import RankedHit, outcome_frame
from rqsweep.backends.dask_cluster import DaskCluster
from rqsweep.backends.http.auth import resolve_target
from rqsweep.backends.http.client import RequestFailed, SoatClient, backend_error
from rqsweep.backends.http.config import HttpConfig
from rqsweep.backends.http.direct import SearchOutcome, Searcher
from rqsweep.backends.http.mapping import Dialect, PreparedQuery, SearchScope
from rqsweep.backends.http.probe import ServerProfile, probe, recheck_results
from rqsweep.backends.http.replay import Replay
from rqsweep.backends.http.seed import (
    SEED_FILE, SEED_JOURNAL, IdMap, Journal, age_warning, listing, seed_corpus,
)
from rqsweep.backends.http.spread import SpreadSearches, WorkerSearches
from rqsweep.config import JobConfig, KnobSpec, WorkersConfig
from rqsweep.corpus import Corpus
from rqsweep.scope import Scope
from rqsweep.errors import BackendError, InputError
from rqsweep.golden import GoldenSet
from rqsweep.knobs import Knobs
from rqsweep.pacing import RequestLimits
from rqsweep.progress import Phase, silent_phase

Log = Callable[[str], None]
SEARCHES_PER_CHECKPOINT = 500  # direct searches a crash may cost at most
_DEFAULTS = Knobs()  # SOAT's defaults: what a server that refuses a knob does instead


class HttpBackend:
    """Evaluates settings on a SOAT server; `tie_sensitive` is null (storage order is the server's own)."""

    def __init__(self, searcher: Searcher, queries: Sequence[PreparedQuery], replay: Replay | None,
                 server: ServerProfile, keys: dict[tuple[str, str], str], log: Log,
                 spread: SpreadSearches | None = None, warnings: Sequence[str] = ()):
        """`spread`: direct searches run on a Dask cluster instead of here."""
        self.searcher, self.queries, self.replay, self.server, self.log = searcher, queries, replay, server, log
        self.warnings = tuple(warnings)
        self.spread = spread
        self.keys = keys  # (source type, server id) -> corpus key, for ranked lists people read
        self.name = "http-replay" if replay else "http-direct"
        self.profile = server.record(searcher.client.base_url, "replay" if replay else "direct")
        direct = len(replay.fallback) if replay else len(queries)
        self.checkpoint_every = max(1, SEARCHES_PER_CHECKPOINT // direct) if direct else 2000
        self.n_expected = np.array([len(q.expected) for q in queries], np.int64)

    def evaluate(self, settings: Sequence[Knobs]) -> pl.DataFrame:
        for s in settings:
            check_knobs(self.server, s, self.searcher.client.base_url)
        by_id: dict[tuple[int, str], SearchOutcome] = self.replay.outcomes(settings) if self.replay else {}
        direct_queries = self.replay.fallback if self.replay else self.queries
        direct = self.spread.direct if self.spread else self.searcher.direct
        for (s, q), outcome in direct(settings, direct_queries).items():
            by_id[(s, direct_queries[q].id)] = outcome
        positions = np.zeros((len(settings), len(self.queries), max(self.n_expected, default=1)), np.int64)
        errors = []
        for s in range(len(settings)):
            for q, query in enumerate(self.queries):
                outcome = by_id[(s, query.id)]
                errors.append(outcome.error)
                if outcome.positions is not None:
                    positions[s, q, : len(outcome.positions)] = outcome.positions
        return outcome_frame(settings, [q.id for q in self.queries], positions, self.n_expected, errors)

    def numeric_extremes(self, knobs: Knobs) -> None:
        """None: the server's embedder and its math are not seen from here."""
        return None

    def ranked(self, knobs: Knobs, query_ids: Sequence[str] | None = None) -> dict[str, list[RankedHit] | str]:
        """Golden queries' ranked lists under one setting (all by default), as the server returns them (one search
        each)."""
        check_knobs(self.server, knobs, self.searcher.client.base_url)

        def one(query: PreparedQuery) -> list[RankedHit] | str:
            try:
                hits, _ = self.searcher.hits(query.text, knobs)
            except RequestFailed as exc:
                return str(exc)
            return [RankedHit(p, self.keys.get((h.source_type, h.target_id), h.target_id), h.source_type,
                              h.item_id if h.source_type == "document" else None, h.score, h.vector, h.lexical,
                              h.similarity, 1.0 if h.source_type == "document" or not knobs.blend_on else None)
                    for p, h in enumerate(hits, 1)]

        queries = [q for q in self.queries if query_ids is None or q.id in query_ids]
        return dict(zip((q.id for q in queries), self.searcher.client.map(one, queries)))

    def close(self) -> None:
        stats = self.searcher.client.stats
        self.log(f"http: {stats.requests} requests, {stats.retries} retries, {stats.failures} failed for good")
        self.searcher.client.close()
        if self.spread is not None:
            self.spread.close()
            self.spread = None


def _moves(knob: str, spec: KnobSpec) -> bool:
    """Whether a sweep takes `knob` away from SOAT's default (a knob's "off" value is its default)."""
    values = spec.values if spec.values is not None else (spec.low, spec.high)
    return any(v != getattr(_DEFAULTS, knob) for v in values)


def _check_sweep(server: ServerProfile, config: JobConfig, scope: SearchScope, url: str) -> None:
    """Stop before any write or sweep search when the sweep needs what the server does not have."""
    for knob, spec in config.sweep.knobs.items():
        if knob in server.rejected and _moves(knob, spec):
            raise _refused(server, knob, f"varies {knob}", url)
    check_knobs(server, config.baseline, url)
    if server.dialect.include_flags:
        return
    if not scope.include_documents:
        raise BackendError(f"SOAT at {url} has no include_documents flag and always searches documents: "
                           "search.include_documents: false cannot be honoured on this server")
    if not scope.include_memories and not server.memory_filter_required:
        raise BackendError(f"SOAT at {url} has no include_memories flag and searches memories unasked: "
                           "search.include_memories: false cannot be honoured on this server")


def _refused(profile: ServerProfile, knob: str, use: str, url: str) -> BackendError:
    return BackendError(f"SOAT at {url} does not accept `{knob}` (it answered: {profile.rejected[knob]}), but "
                        f"this sweep {use}: sweep only the knobs it accepts "
                        f"({', '.join(sorted(profile.dialect.knobs)) or 'none'}) with {knob} at SOAT's default "
                        f"{getattr(_DEFAULTS, knob)!r}, or upgrade the server")


def check_knobs(profile: ServerProfile, knobs: Knobs, url: str) -> None:
    """A knob the server refuses can only sit at SOAT's default (the request then leaves it out)."""
    for knob in profile.rejected:
        if getattr(knobs, knob) != getattr(_DEFAULTS, knob):
            raise _refused(profile, knob, f"sets {knob} = {getattr(knobs, knob)!r}", url)


def _known_ids(http: HttpConfig, run_dir: Path | None, log: Log) -> IdMap | None:
    """The key -> id map when no seeding is left to do: given, kept by this run's finished seed, or none needed."""
    if http.ids is not None:
        return IdMap.load(http.ids)
    if http.seed is None:
        return IdMap()
    saved = run_dir / SEED_FILE if run_dir else None
    if saved is not None and saved.exists():
        log(f"seed: reusing {saved} (this run seeded its project already)")
        return IdMap.load(saved)
    return None


def _seed(http: HttpConfig, config: JobConfig, corpus: Corpus, client: SoatClient, run_dir: Path | None,
          dialect: Dialect, log: Log) -> IdMap:
    assert http.seed is not None
    journal = Journal(run_dir / SEED_JOURNAL if run_dir else None)
    try:
        ids = seed_corpus(client, corpus, http.seed, http.project_id, config.name, log, dialect, journal)
    except BackendError as exc:
        if run_dir is None or not journal.entries:
            raise
        raise type(exc)(f"{exc}; the writes made are recorded in {journal.path}") from None
    if run_dir is not None:
        ids.save(run_dir / SEED_FILE)
    return ids


def _queries(golden: GoldenSet, ids: IdMap, source: Path | None) -> list[PreparedQuery]:
    out = []
    for q in golden.queries:
        expected = []
        for e in q.expected:
            table = ids.documents if e.source_type == "document" else ids.memories
            if source is not None and e.key not in table:
                raise InputError(source, f"{e.source_type}s", f"no id for key {e.key!r} (query {q.id!r})")
            expected.append((e.source_type, table.get(e.key, e.key)))
        out.append(PreparedQuery(q.id, q.slice, q.query, tuple(expected)))
    return out


def _scope(scope: Scope, ids: IdMap, project_id: str | None) -> SearchScope:
    return SearchScope(
        project_id, dict(scope.tags),
        None if scope.memory_stores is None else tuple(ids.memory_store(n) for n in scope.memory_stores),
        scope.document_paths,
        None if scope.document_keys is None else tuple(ids.document(k) for k in scope.document_keys),
        scope.include_documents, scope.include_memories,
    )


def _memory_store_ids(client: SoatClient, ids: IdMap, project_id: str | None, dialect: Dialect) -> tuple[str, ...]:
    """All memory stores of the project: older servers search memories only when they are named."""
    if ids.memory_stores:
        return tuple(ids.memory_stores.values())
    try:
        listed = listing(client.request("GET", dialect.memory_containers, params={"project_id": project_id}).body)
    except RequestFailed as exc:
        raise backend_error(f"this SOAT searches memories only when memory stores are named, and listing them "
                            f"failed ({exc}): set search.memory_stores", exc) from None
    return tuple(s["id"] for s in listed if isinstance(s, dict) and isinstance(s.get("id"), str))


def _spread(http: HttpConfig, client: SoatClient, searcher: Searcher, cluster: DaskCluster,
            advance: Callable[[float], None]) -> SpreadSearches:
    options = {"timeout": http.timeout, "retries": http.retries, "backoff": http.backoff,
               "max_consecutive_failures": http.max_consecutive_failures, "verify_tls": http.verify_tls}
    setup = WorkerSearches(client.session.current(), options, searcher.limit, searcher.scope, searcher.dialect)
    return SpreadSearches(cluster, setup, RequestLimits(http.max_in_flight, http.requests_per_second), client.stats,
                          advance)


def build_http_backend(config: JobConfig, golden: GoldenSet, corpus: Corpus | None, *,
                       workers: WorkersConfig | int, log: Log, run_dir: Path | None = None,
                       advance: Callable[[float], None] = lambda _: None,
                       phase: Phase = silent_phase) -> HttpBackend:
    """Connect, seed or map ids, probe the server, and (in replay mode) fetch every query once.

    The client's `max_in_flight` is this backend's parallelism; with `workers.backend: dask` direct mode's
    searches run on the cluster within the same limits (spread.py), `advance` told of each finished chunk.
    The run folder keeps what seeding created (seed.json), so that --resume does not seed again."""
    http = config.backend
    assert isinstance(http, HttpConfig)
    if http.mode != "direct" and http.replay_limit < config.limit:
        raise InputError(config.path, "backend.replay_limit",
                         f"{http.replay_limit!r}: must be >= search.limit ({config.limit})")
    if isinstance(workers, WorkersConfig) and workers.corpus_shards:
        raise InputError(config.path, "workers.corpus_shards", f"{workers.corpus_shards}: corpus shards are for the "
                         "embedded backend; over HTTP the server holds the corpus")
    if http.seed is not None and http.ids is None and corpus is None:
        raise InputError(config.path, "backend.seed", "seeding needs a corpus (`corpus:` or SOAT's golden.json)")
    target = resolve_target(http, config.path)
    client = SoatClient(target, max_in_flight=http.max_in_flight, requests_per_second=http.requests_per_second,
                        timeout=http.timeout, retries=http.retries, backoff=http.backoff,
                        max_consecutive_failures=http.max_consecutive_failures, verify_tls=http.verify_tls)
    try:
        client.connect()
        ids = _known_ids(http, run_dir, log)
        project_id = http.project_id or (ids.project_id if ids else None)
        # Before seeding, the stores and documents the scope names have no ids yet: the probe leaves them out.
        probe_scope = (_scope(config.scope, ids, project_id) if ids is not None else
                       replace(_scope(config.scope, IdMap(), project_id), memory_store_ids=None, document_ids=None))
        server = probe(client, golden.queries[0].query, probe_scope)
        log(f"SOAT at {target.base_url}: {server.describe()}")
        _check_sweep(server, config, probe_scope, target.base_url)
        if ids is None:
            assert corpus is not None
            ids = _seed(http, config, corpus, client, run_dir, server.dialect, log)
        queries = _queries(golden, ids, http.ids)
        scope = _scope(config.scope, ids, http.project_id or ids.project_id)
        if server.memory_filter_required:
            if not scope.include_memories:  # leaving out the memory filter is a documents-only search there
                scope = replace(scope, memory_store_ids=None)
            elif scope.memory_store_ids is None:
                scope = replace(scope, memory_store_ids=_memory_store_ids(client, ids, scope.project_id,
                                                                          server.dialect))
        server = recheck_results(client, server, queries[0].text, scope)
        if http.mode == "replay" and server.replay_missing:
            raise BackendError(f"backend.mode is replay, but SOAT at {target.base_url} cannot be replayed: "
                               f"{server.replay_missing}; use mode direct (or auto)")
        searcher = Searcher(client, config.limit, scope, server.dialect)
        replay = None
        if http.mode == "replay" or (http.mode == "auto" and server.replay_missing is None):
            stores = [s for s, on in (("document", scope.include_documents), ("memory", scope.include_memories))
                      if on]
            fetching = phase(len(queries), f"{config.name} replay searches", "queries")
            replay = Replay(searcher, queries, http.replay_limit, stores, http.verify, log, fetching)
        keys = {**{("document", v): k for k, v in ids.documents.items()},
                **{("memory", v): k for k, v in ids.memories.items()}}
        spread = None
        if isinstance(workers, WorkersConfig) and workers.backend == "dask":
            if replay is None:
                spread = _spread(http, client, searcher, DaskCluster(workers, log), advance)
            else:
                log("dask: replay mode searches about once per query, here: the cluster is not used")
        aged = age_warning(corpus) if corpus is not None else None
        return HttpBackend(searcher, queries, replay, server, keys, log, spread, [aged] if aged else [])
    except BaseException:
        client.close()
        raise
