"""Where rankings come from, one backend per `backend.kind` in a config, each one entry of `BACKENDS`: the reader
of its `backend:` section (a light module of its own), its builder and what its searches cost.

    config = load_config(path, BACKENDS)
    backend = build_backend(config, golden, corpus, workers=1, log=print)
    rows = backend.evaluate(settings)   # positions of the expected items, per (setting, query)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rqsweep.backends.base import OUTCOME_SCHEMA, Backend, RankedHit
from rqsweep.backends.embedded_config import read_embedded
from rqsweep.backends.http.config import read_http
from rqsweep.config import JobConfig, Section
from rqsweep.corpus import Corpus
from rqsweep.golden import GoldenSet
from rqsweep.progress import Phase, silent_phase

Log = Callable[[str], None]


@dataclass(frozen=True)
class BackendKind:
    read: Callable[[Section], object]  # the `backend:` section -> this backend's config (`JobConfig.backend`)
    builder: str  # "module:function", imported when built: a run on one backend loads none of another's modules
    searches: str  # what a (setting x query) evaluation costs, for --dry-run
    knob_data: bool = False  # its backend reports what a sweep's `quantiles` take (`rqsweep.search.space.KnobData`)

    def build(self, *args, **kwargs) -> Backend:
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)(*args, **kwargs)


# The first kind is the default.
BACKENDS = {
    "embedded": BackendKind(read_embedded, "rqsweep.backends.embedded:build_embedded_backend",
                            "on the embedded backend, one candidate extraction per query", knob_data=True),
    "http": BackendKind(read_http, "rqsweep.backends.http.backend:build_http_backend",
                        "over HTTP, one search each in direct mode, about one per query in replay mode"),
}


def build_backend(config: JobConfig, golden: GoldenSet, corpus: Corpus | None, *, workers: int, log: Log,
                  run_dir: Path | None = None, advance: Callable[[float], None] = lambda _: None,
                  phase: Phase = silent_phase) -> Backend:
    """The backend `config.backend.kind` names, ready to evaluate settings; `advance(settings)` hears of parts of a
    batch as they finish (Progress.part); `phase(total, label, unit)` gives a long part of the start its progress."""
    return BACKENDS[config.backend.kind].build(config, golden, corpus, workers=workers, log=log, run_dir=run_dir,
                                               advance=advance, phase=phase)


__all__ = ["BACKENDS", "OUTCOME_SCHEMA", "Backend", "BackendKind", "RankedHit", "build_backend"]
