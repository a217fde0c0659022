"""Progress on stderr: a bar on a terminal, plain log lines otherwise, nothing with --quiet."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO


class Progress:
    """Counts finished settings (`progress(n)`), or another `unit` of a phase's work; `part(settings)` shows work
    inside a batch as it finishes."""

    def __init__(self, total: int, label: str, *, quiet: bool = False, stream: TextIO | None = None,
                 unit: str = "settings"):
        self.total, self.label, self.quiet, self.unit = total, label, quiet, unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self.within = 0.0  # settings' worth of the current batch finished, until the batch is counted
        self.start = time.monotonic()
        self._last_log = 0.0
        self._lock = threading.Lock()  # a backend's threads count their work as it finishes

    def __call__(self, finished: int) -> None:
        with self._lock:
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
        pace = _pace(shown, self.total, elapsed, self.unit)
        if self.tty:
            width = 30
            filled = int(width * shown / max(self.total, 1))
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{shown}/{self.total} {elapsed:5.1f}s{pace}\033[K")
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif (counted and self.done >= self.total) or now - self._last_log >= 5:
            self._last_log = now
            print(f"{self.label}: {shown}/{self.total} {self.unit}, {elapsed:.1f}s{pace}", file=self.stream, flush=True)

    def phase(self, total: int, label: str, unit: str) -> Progress:
        """A progress of its own for a long phase of the command (its start, its scoring), shown as this one is."""
        return Progress(total, label, quiet=self.quiet, stream=self.stream, unit=unit)

    def log(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stream, flush=True)


def _pace(shown: int, total: int, elapsed: float, unit: str) -> str:
    """The rate so far, and the time left at that rate while work is left."""
    if shown <= 0 or elapsed <= 0:
        return ""
    rate = shown / elapsed
    left = f", {(total - shown) / rate:.0f}s left" if shown < total else ""
    return f", {rate:,.1f} {unit}/s{left}"


def silent_phase(total: int, label: str, unit: str) -> Progress:
    """A phase's progress that shows nothing (a backend built outside a command: a worker's, a test's)."""
    return Progress(total, label, quiet=True, unit=unit)


Phase = Callable[[int, str, str], Progress]  # (total, label, unit) -> the progress of a phase: `Progress.phase`
