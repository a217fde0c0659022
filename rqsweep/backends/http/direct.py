"""Direct mode: one search per (setting, query), each scored from the ranked list SOAT returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rqsweep.backends.http.client import RequestFailed, SoatClient
from rqsweep.backends.http.mapping import (
    SEARCH_PATH, Dialect, Hit, PreparedQuery, SearchScope, expected_positions, parse_hits, search_body,
)
from rqsweep.knobs import Knobs
from rqsweep.metrics import first_relevant_rank, recall_at


@dataclass(frozen=True)
class Outcome:
    """One (setting, query): rank and recalls, or the error of a search that failed (never a rank 0)."""

    rank: int | None
    recall_at_5: float | None
    recall_at_10: float | None
    error: str | None = None


@dataclass(frozen=True)
class Searcher:
    """Runs searches of one run: its limit, scope and the server's dialect."""

    client: SoatClient
    limit: int
    scope: SearchScope
    dialect: Dialect

    def hits(self, query: str, knobs: Knobs, limit: int | None = None, scope: SearchScope | None = None):
        """The ranked results of one search (in the run's scope unless told), and the reply (for the server's
        clock)."""
        body = search_body(query, knobs, limit or self.limit, scope or self.scope, self.dialect)
        reply = self.client.request("POST", SEARCH_PATH, body)
        return parse_hits(reply.body, self.dialect), reply

    def outcome(self, query: PreparedQuery, knobs: Knobs) -> Outcome:
        try:
            hits, _ = self.hits(query.text, knobs)
        except RequestFailed as exc:
            return Outcome(None, None, None, str(exc))
        return score(hits, query)

    def direct(self, settings: Sequence[Knobs], queries: Sequence[PreparedQuery]) -> dict[tuple[int, int], Outcome]:
        """Every (setting index, query index) searched on the server, `max_in_flight` at a time."""
        pairs = [(s, q) for s in range(len(settings)) for q in range(len(queries))]
        outcomes = self.client.map(lambda p: self.outcome(queries[p[1]], settings[p[0]]), pairs)
        return dict(zip(pairs, outcomes))


def score(hits: Sequence[Hit], query: PreparedQuery) -> Outcome:
    positions = expected_positions(hits, query.expected)
    return Outcome(int(first_relevant_rank(positions)[0]), float(recall_at(positions, 5)[0]),
                   float(recall_at(positions, 10)[0]))
