"""Progress on stderr: a bar on a terminal, plain log lines otherwise, nothing with --quiet."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, *, quiet: bool = False, stream: TextIO | None = None):
        self.total, self.label, self.quiet = total, label, quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self.start = time.monotonic()
        self._last_log = 0.0

    def __call__(self, finished: int) -> None:
        self.done += finished
        if self.quiet:
            return
        now = time.monotonic()
        elapsed = now - self.start
        if self.tty:
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total} {elapsed:5.1f}s")
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif self.done >= self.total or now - self._last_log >= 5:
            self._last_log = now
            print(f"{self.label}: {self.done}/{self.total} settings, {elapsed:.1f}s", file=self.stream, flush=True)

    def log(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stream, flush=True)
