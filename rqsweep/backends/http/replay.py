"""Replay mode: each query fetched once (or a few times), every setting re-fused client-side by the fast path.

N settings cost about Q searches instead of N x Q. A query whose candidates one search cannot prove exact at
the sweep's limit (see `completeness`) is searched again for each store left unproven, alone: at the replay
limit, then at the sweep's. What still cannot be proven falls back to direct searches; `verify: K` re-runs
K random settings directly and stops the run if any ranked list differs from the replay's.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from rqsweep.backends.http.client import RequestFailed
from rqsweep.backends.http.completeness import NEUTRAL, Answer, Rebuilt, Unprovable, expected_rows, rebuild
from rqsweep.backends.http.direct import SearchOutcome, Searcher
from rqsweep.backends.http.mapping import PreparedQuery
from rqsweep.engine.batch import QueryPlan, SettingsBatch, expected_positions, plan_query
from rqsweep.engine.fusion import fuse
from rqsweep.errors import BackendError
from rqsweep.knobs import Knobs

_SHOWN_MISMATCHES = 3


@dataclass(frozen=True)
class Replayed:
    query: PreparedQuery
    rebuilt: Rebuilt
    plan: QueryPlan


class Replay:
    """The replayable queries' plans, built from a few neutral searches each; the rest listed for direct mode."""

    def __init__(self, searcher: Searcher, queries: Sequence[PreparedQuery], fetched_limit: int, stores: Sequence[str],
                 verify: int, log: Callable[[str], None], fetched: Callable[[int], None] = lambda _: None):
        """`fetched(n)` hears of each query whose searches are done (a `Progress`)."""
        self.searcher, self.verify_left, self.log = searcher, verify, log
        self._rng = random.Random(0)
        self._single_store = self._single_store_searches(fetched_limit, stores)

        def prepare(query: PreparedQuery) -> tuple[Replayed | str, int]:
            attempt = self._prepare(query, fetched_limit, stores)
            fetched(1)
            return attempt

        attempts = searcher.client.map(prepare, queries)
        self.replayed = [a for a, _ in attempts if isinstance(a, Replayed)]
        self.fallback = [q for q, (a, _) in zip(queries, attempts) if not isinstance(a, Replayed)]
        single_store = sum(n for _, n in attempts)
        rescued = sum(1 for a, n in attempts if isinstance(a, Replayed) and n)
        reasons = Counter(a for a, _ in attempts if isinstance(a, str))
        log(f"replay: {len(self.replayed)} of {len(queries)} queries replayed from {len(queries)} searches "
            f"(limit {fetched_limit}) and {single_store} single-store searches, which proved {rescued}; "
            f"{len(self.fallback)} searched directly per setting"
            + "".join(f"\n  {n} x {reason}" for reason, n in reasons.most_common()))

    def _single_store_searches(self, fetched_limit: int, stores: Sequence[str]) -> list[tuple[str, int]]:
        """(store, limit) of the searches that may prove one store's lists, in the order they are tried."""
        if not self.searcher.dialect.include_flags:
            return []  # the server cannot be asked for one store
        limits = [fetched_limit] if len(stores) > 1 else []  # with one store, the first search was its own
        if self.searcher.limit != fetched_limit:
            limits.append(self.searcher.limit)  # the sweep's own LIMIT: its ties are the sweep's (rule 1)
        return [(store, limit) for store in stores for limit in limits]

    def _prepare(self, query: PreparedQuery, fetched_limit: int,
                 stores: Sequence[str]) -> tuple[Replayed | str, int]:
        """The query's plan (or why there is none), and how many single-store searches it took."""
        answers: list[Answer] = []
        try:
            rebuilt = self._rebuild(query, fetched_limit, stores, answers)
        except (Unprovable, RequestFailed) as exc:
            return str(exc), max(len(answers) - 1, 0)
        plan = plan_query(rebuilt.candidates, expected_rows(rebuilt, query.expected), rebuilt.memory_age_days)
        return Replayed(query, rebuilt, plan), len(answers) - 1

    def _rebuild(self, query: PreparedQuery, fetched_limit: int, stores: Sequence[str],
                 answers: list[Answer]) -> Rebuilt:
        """Neutral searches (collected in `answers`) until the candidates are proven, or `Unprovable`."""
        hits, reply = self.searcher.hits(query.text, NEUTRAL, fetched_limit)
        now_ms = reply.server_time_ms or round(time.time() * 1000)
        answers.append(Answer(hits, fetched_limit, tuple(stores)))
        pending = list(self._single_store)
        while True:
            try:
                return rebuild(answers, self.searcher.limit, now_ms, stores)
            except Unprovable as exc:
                retry = next((r for r in pending if r[0] in exc.stores), None)
                if retry is None:
                    raise
                pending.remove(retry)
                store, limit = retry
                alone = replace(self.searcher.scope, include_documents=store == "document",
                                include_memories=store == "memory")
                answers.append(Answer(self.searcher.hits(query.text, NEUTRAL, limit, alone)[0], limit, (store,)))

    def outcomes(self, settings: Sequence[Knobs]) -> dict[tuple[int, str], SearchOutcome]:
        """(setting index, query id) -> outcome for every replayed query, by the fast path."""
        batch = SettingsBatch.from_knobs(settings)
        out: dict[tuple[int, str], SearchOutcome] = {}
        for r in self.replayed:
            positions = expected_positions(r.plan, batch, self.searcher.limit)
            for s in range(len(settings)):
                out[(s, r.query.id)] = SearchOutcome(positions[s])
        self._verify(settings)
        return out

    def ranked(self, r: Replayed, knobs: Knobs) -> list[tuple[str, str]]:
        """The replay's full result list for one setting, by the reference fusion path."""
        fused = fuse(r.rebuilt.candidates, knobs, self.searcher.limit, r.rebuilt.memory_age_days)
        return [r.rebuilt.hits[f.source_type][f.row].identity for f in fused]

    def _verify(self, settings: Sequence[Knobs]) -> None:
        """Re-run some of these settings directly until `verify` settings in all have been checked."""
        if self.verify_left <= 0 or not self.replayed:
            return
        picked = self._rng.sample(list(settings), min(self.verify_left, len(settings)))
        self.verify_left -= len(picked)
        pairs = [(s, r) for s in picked for r in self.replayed]

        def check(pair: tuple[Knobs, Replayed]) -> str | None:
            knobs, r = pair
            try:
                hits, _ = self.searcher.hits(r.query.text, knobs)
            except RequestFailed as exc:
                raise BackendError(f"verify: the direct search for {knobs.id} / {r.query.id} "
                                   f"failed: {exc}") from None
            direct, replayed = [h.identity for h in hits], self.ranked(r, knobs)
            if direct == replayed:
                return None
            at = next(i for i, (a, b) in enumerate(zip(direct + [None], replayed + [None])) if a != b)
            return (f"{knobs.id} / query {r.query.id}: first difference at position {at + 1}: "
                    f"server {direct[at] if at < len(direct) else 'end'} vs replay "
                    f"{replayed[at] if at < len(replayed) else 'end'}")

        mismatches = [m for m in self.searcher.client.map(check, pairs) if m]
        if mismatches:
            raise BackendError(f"verify: replay differs from direct searches in {len(mismatches)} of {len(pairs)} "
                               "ranked lists: " + "; ".join(mismatches[:_SHOWN_MISMATCHES])
                               + " (set backend.mode: direct for this server)")
        self.log(f"verify: {len(picked)} settings x {len(self.replayed)} queries: replay equals direct searches")
