"""Where rankings come from. A backend turns knob settings into per-(setting, query) outcomes."""

from __future__ import annotations

from typing import Protocol, Sequence

import polars as pl

from rqsweep.knobs import Knobs


class Backend(Protocol):
    """Evaluates the golden set under each setting.

    `evaluate` returns one row per (setting, query) with the columns of `results.QUERY_SCHEMA`:
    the first relevant rank and recalls, or an error message for a search that failed.
    """

    name: str
    checkpoint_every: int  # settings per recorded batch: what a crash can cost at most

    def evaluate(self, settings: Sequence[Knobs]) -> pl.DataFrame: ...

    def close(self) -> None: ...
