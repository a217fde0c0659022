"""Where rankings come from. A backend turns knob settings into per-(setting, query) outcomes."""

from __future__ import annotations

from typing import Protocol, Sequence

import polars as pl

from rqsweep.knobs import Knobs

# One row per (setting, query): what every backend returns and the run state keeps.
QUERY_SCHEMA = {
    "setting_id": pl.String, "query_id": pl.String, "slice": pl.String, "rank": pl.Int64,
    "recall_at_5": pl.Float64, "recall_at_10": pl.Float64, "error": pl.String, "tie_sensitive": pl.Boolean,
}


class Backend(Protocol):
    """Evaluates the golden set under each setting.

    `evaluate` returns one row per (setting, query) with the columns of `QUERY_SCHEMA`:
    the first relevant rank and recalls, or an error message for a search that failed.
    """

    name: str
    checkpoint_every: int  # settings per recorded batch: what a crash can cost at most

    def evaluate(self, settings: Sequence[Knobs]) -> pl.DataFrame: ...

    def close(self) -> None: ...
