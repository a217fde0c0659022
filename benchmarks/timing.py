"""Timing shared by the benchmarks (standard library only: ranx_side.py imports it from ranx's own venv)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable


def timed_passes(one_pass: Callable[[], object], min_seconds: float, timings: int,
                 clock: Callable[[], float] = time.perf_counter) -> dict:
    """Seconds per pass: the first call alone, then the median of `timings` timings, each of enough passes
    to last `min_seconds` (a short pass is timed over many repeats; the second call, which sizes them, is the
    first timing when it lasts that long alone). `clock` is wall time unless told (`time.process_time`: CPU)."""
    started = clock()
    one_pass()
    first = clock() - started
    started = clock()
    one_pass()
    second = clock() - started
    repeats = max(1, math.ceil(min_seconds / max(second, 1e-9)))
    per_pass = [second] if repeats == 1 else []
    while len(per_pass) < timings:
        started = clock()
        for _ in range(repeats):
            one_pass()
        per_pass.append((clock() - started) / repeats)
    return {"first": first, "warm": statistics.median(per_pass), "warm_all": per_pass, "repeats": repeats}
