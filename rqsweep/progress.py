"""Progress on stderr: a bar on a terminal, plain log lines otherwise, nothing with --quiet."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts finished settings (`progress(n)`); `part(settings)` shows work inside a batch as it finishes."""

    def __init__(self, total: int, label: str, *, quiet: bool = False, stream: TextIO | None = None):
        self.total, self.label, self.quiet = total, label, quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self.within = 0.0  # settings' worth of the current batch finished, until the batch is counted
        self.start = time.monotonic()
        self._last_log = 0.0

    def __call__(self, finished: int) -> None:
        self.done += finished
        self.within = 0.0
        self._show(counted=True)

    def part(self, settings: float) -> None:
        """A part of the batch being evaluated finished (a shard of queries on a cluster worker, say), worth
        `settings` settings: the bar moves now; the batch's own count replaces these parts when it ends."""
        self.within += settings
        self._show(counted=False)

    def _show(self, counted: bool) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        elapsed = now - self.start
        shown = self.done + min(int(self.within), max(self.total - self.done, 0))
        if self.tty:
            width = 30
            filled = int(width * shown / max(self.total, 1))
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{shown}/{self.total} {elapsed:5.1f}s")
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif (counted and self.done >= self.total) or now - self._last_log >= 5:
            self._last_log = now
            print(f"{self.label}: {shown}/{self.total} settings, {elapsed:.1f}s", file=self.stream, flush=True)

    def log(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stream, flush=True)
