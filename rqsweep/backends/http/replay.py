"""Replay mode: each query fetched once, every setting re-fused client-side by the embedded fast path.

N settings cost Q searches instead of N x Q. A query whose candidates cannot be proven complete at the
sweep's limit (see `completeness`) falls back to direct searches; `verify: K` re-runs K random settings
directly and stops the run if any ranked list differs from the replay's.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence


from rqsweep.backends.http.client import RequestFailed
from rqsweep.backends.http.completeness import NEUTRAL, Rebuilt, Unprovable, expected_rows, rebuild
from rqsweep.backends.http.direct import Outcome, Searcher
from rqsweep.backends.http.mapping import PreparedQuery
from rqsweep.engine.batch import QueryPlan, SettingsBatch, expected_positions, plan_query
from rqsweep.engine.fusion import fuse
from rqsweep.errors import BackendError
from rqsweep.knobs import Knobs
from rqsweep.metrics import first_relevant_rank, recall_at
from rqsweep.space import setting_id

_SHOWN_MISMATCHES = 3


@dataclass(frozen=True)
class Replayed:
    query: PreparedQuery
    rebuilt: Rebuilt
    plan: QueryPlan


class Replay:
    """The replayable queries' plans, built from one neutral search each; the rest listed for direct mode."""

    def __init__(self, searcher: Searcher, queries: Sequence[PreparedQuery], fetched_limit: int, stores: Sequence[str],
                 verify: int, log: Callable[[str], None]):
        self.searcher, self.verify_left, self.log = searcher, verify, log
        self._rng = random.Random(0)
        attempts = searcher.client.map(lambda q: self._prepare(q, fetched_limit, stores), queries)
        self.replayed = [a for a in attempts if isinstance(a, Replayed)]
        self.fallback = [q for q, a in zip(queries, attempts) if not isinstance(a, Replayed)]
        reasons = Counter(a for a in attempts if isinstance(a, str))
        log(f"replay: {len(self.replayed)} of {len(queries)} queries replayed from one search each "
            f"(limit {fetched_limit}); {len(self.fallback)} searched directly per setting"
            + "".join(f"\n  {n} x {reason}" for reason, n in reasons.most_common()))

    def _prepare(self, query: PreparedQuery, fetched_limit: int, stores: Sequence[str]) -> Replayed | str:
        try:
            hits, reply = self.searcher.hits(query.text, NEUTRAL, fetched_limit)
            now_ms = reply.server_time_ms or round(time.time() * 1000)
            rebuilt = rebuild(hits, self.searcher.limit, fetched_limit, now_ms, stores)
        except (Unprovable, RequestFailed) as exc:
            return str(exc)
        plan = plan_query(rebuilt.candidates, expected_rows(rebuilt, query.expected), rebuilt.memory_age_days)
        return Replayed(query, rebuilt, plan)

    def outcomes(self, settings: Sequence[Knobs]) -> dict[tuple[int, str], Outcome]:
        """(setting index, query id) -> outcome for every replayed query, by the fast path."""
        batch = SettingsBatch.from_knobs(settings)
        out: dict[tuple[int, str], Outcome] = {}
        for r in self.replayed:
            positions = expected_positions(r.plan, batch, self.searcher.limit)
            ranks = first_relevant_rank(positions)
            r5, r10 = recall_at(positions, 5), recall_at(positions, 10)
            for s in range(len(settings)):
                out[(s, r.query.id)] = Outcome(int(ranks[s]), float(r5[s]), float(r10[s]))
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
                raise BackendError(f"verify: the direct search for {setting_id(knobs)} / {r.query.id} "
                                   f"failed: {exc}") from None
            direct, replayed = [h.identity for h in hits], self.ranked(r, knobs)
            if direct == replayed:
                return None
            at = next(i for i, (a, b) in enumerate(zip(direct + [None], replayed + [None])) if a != b)
            return (f"{setting_id(knobs)} / query {r.query.id}: first difference at position {at + 1}: "
                    f"server {direct[at] if at < len(direct) else 'end'} vs replay "
                    f"{replayed[at] if at < len(replayed) else 'end'}")

        mismatches = [m for m in self.searcher.client.map(check, pairs) if m]
        if mismatches:
            raise BackendError(f"verify: replay differs from direct searches in {len(mismatches)} of {len(pairs)} "
                               "ranked lists: " + "; ".join(mismatches[:_SHOWN_MISMATCHES])
                               + " (set backend.mode: direct for this server)")
        self.log(f"verify: {len(picked)} settings x {len(self.replayed)} queries: replay equals direct searches")
