"""The report's held-out gain: the cross-validation (rqsweep.decide.cross_validation) the run did, read from grid.parquet."""

from __future__ import annotations

import polars as pl

from rqsweep.config import read_validation
from rqsweep.golden import OVERALL
from rqsweep.report.tables import metric_label
from rqsweep.runfolder import RunFolder
from rqsweep.decide.cross_validation import CrossValidation


def run_cross_validation(run: RunFolder) -> CrossValidation | None:
    """The run's cross-validation (its `rqsweep.validation` metadata); None when it was off or had too few queries."""
    return None if run.validation is None else CrossValidation.from_json(run.validation)


def why_not_validated(run: RunFolder) -> str:
    """Why a run has no held-out figures (its cross-validation and routing table), as its config and grid say."""
    if read_validation(run.config.get("validation"), run.path) is None:
        return "the config turns cross-validation off (`validation: false` or `folds: 0`)"
    queries = run.slice_rows(run.baseline)[OVERALL]["queries"]
    if queries < 2:
        return (f"the golden set has {queries} {'query' if queries == 1 else 'queries'}, and cross-validation needs "
                "at least two to split")
    return "this run was written before rqsweep kept its held-out figures; run the sweep again to have them"


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
