"""Direct mode: one search per (setting, query); the expected items' positions read from the list SOAT returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rqsweep.backends.http.client import RequestFailed, SoatClient
from rqsweep.backends.http.mapping import (
    SEARCH_PATH, Dialect, PreparedQuery, SearchScope, parse_hits, positions_in_hits,
    search_body,
)
from rqsweep.knobs import Knobs


@dataclass(frozen=True)
class SearchOutcome:
    """One (setting, query): each expected item's position (0 = absent), or the error of a search that failed
    (never a miss)."""

    positions: np.ndarray | None
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
        reply = self.client.request("POST", SEARCH_PATH, body, read=lambda payload: parse_hits(payload, self.dialect))
        return reply.body, reply

    def outcome(self, query: PreparedQuery, knobs: Knobs) -> SearchOutcome:
        try:
            hits, _ = self.hits(query.text, knobs)
        except RequestFailed as exc:
            return SearchOutcome(None, str(exc))
        return SearchOutcome(positions_in_hits(hits, query.expected)[0])

    def direct(self, settings: Sequence[Knobs], queries: Sequence[PreparedQuery]) -> dict[tuple[int, int], SearchOutcome]:
        """Every (setting index, query index) searched on the server, `max_in_flight` at a time."""
        pairs = [(s, q) for s in range(len(settings)) for q in range(len(queries))]
        outcomes = self.client.map(lambda p: self.outcome(queries[p[1]], settings[p[0]]), pairs)
        return dict(zip(pairs, outcomes))

