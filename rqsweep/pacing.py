"""A run's request limits (how many requests in flight, how many per second), and their split over lanes.

A lane is a sequence of tasks of which at most one runs at a time (one Dask task after another, or one local
client): each lane gets a share of the limits, and the shares sum to the run's limits, so the run never
exceeds them whichever worker runs which lane's task.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestLimits:
    """At most `max_in_flight` requests at once and `requests_per_second` started per second (None: no cap)."""

    max_in_flight: int = 1
    requests_per_second: float | None = None

    def split(self, lanes: int) -> list[RequestLimits]:
        """Shares for at most `lanes` lanes (fewer when fewer requests may be in flight): the in-flight counts
        sum to `max_in_flight`, and each lane's rate is in proportion to its in-flight count."""
        n = max(1, min(lanes, self.max_in_flight))
        counts = [self.max_in_flight // n + (i < self.max_in_flight % n) for i in range(n)]
        rate = self.requests_per_second
        return [RequestLimits(c, None if rate is None else rate * c / self.max_in_flight) for c in counts]


class Pacer:
    """Spaces request starts `1 / requests_per_second` apart, from any number of threads."""

    def __init__(self, requests_per_second: float | None):
        self.requests_per_second = requests_per_second
        self._interval = 1.0 / requests_per_second if requests_per_second else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def __reduce__(self):
        # A pacer travels (inside an embedder sent to a Dask worker) as its rate: the other process paces afresh.
        return Pacer, (self.requests_per_second,)

    def wait(self) -> None:
        """Block until the next request may start, and book that start."""
        if not self._interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self._interval
        if start > now:
            time.sleep(start - now)

    def settle(self) -> None:
        """Block until a next request could start: a lane's task calls it last, so the lane's next task (a new
        pacer, perhaps on another machine) cannot start a request sooner than this one would have."""
        delay = self._next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
