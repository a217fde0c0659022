"""The report's held-out gain: cross-validation (rqsweep.validation) over a finished run's per-query table."""

from __future__ import annotations

import polars as pl

from rqsweep.config import read_validation
from rqsweep.report.tables import metric_label
from rqsweep.run_folder import RunFolder
from rqsweep.validation import CrossValidation, cross_validate


def run_cross_validation(run: RunFolder) -> CrossValidation | None:
    """Cross-validation as the run's config asks (`validation:`); None when it is off or too few queries."""
    settings = read_validation(run.config.get("validation"), run.path / "grid.parquet")
    if settings is None:
        return None
    order = run.overall()["setting_id"].to_list()
    return cross_validate(run.queries(order), order, run.baseline, run.objective, run.constraints,
                          run.slices[:-1], run.metrics, settings)


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
