"""The report's held-out gain: the cross-validation (rqsweep.validation) the run did, read from grid.parquet."""

from __future__ import annotations

import polars as pl

from rqsweep.report.tables import metric_label
from rqsweep.runfolder import RunFolder
from rqsweep.validation import CrossValidation


def run_cross_validation(run: RunFolder) -> CrossValidation | None:
    """The run's cross-validation (its `rqsweep.validation` metadata); None when it was off or had too few queries."""
    return None if run.validation is None else CrossValidation.from_json(run.validation)


def gain_table(cv: CrossValidation) -> pl.DataFrame:
    """Per slice (overall last): queries, then per metric the held-out and the in-sample gain over the baseline."""
    rows = []
    for s, gains in cv.gains.items():
        row: dict[str, object] = {"slice": s, "queries": next(iter(gains.values())).queries}
        for metric, gain in gains.items():
            label = metric_label(metric)
            row |= {f"{label} Δ held-out": gain.held_out_gain, f"{label} Δ in-sample": gain.in_sample_gain}
        rows.append(row)
    return pl.DataFrame(rows, schema_overrides={c: pl.Float64 for r in rows for c in r if "Δ" in c})
