"""settings.parquet: the grid turned wide, one row per setting, with every slice's change from the baseline.

grid.parquet has a row per (setting, slice) and no baseline column, so "which settings keep every slice
within 0.05 of the baseline?" needs a self-join. This table holds the join's answer: each slice's value
and change per metric (`mrr[entity]`, `mrr_change[entity]`), the objective and its change, and the
slice that lost most on the objective's metric (`worst_slice`, `worst_change`), so that question is one
filter on `worst_change`.
"""

from __future__ import annotations

from typing import Sequence

import polars as pl

from rqsweep.golden import OVERALL
from rqsweep.knobs import KNOBS


def value_column(metric: str, slice_: str) -> str:
    return f"{metric}[{slice_}]"


def change_column(metric: str, slice_: str) -> str:
    return f"{metric}_change[{slice_}]"


def settings_table(grid: pl.DataFrame, objective: tuple[str, str], metric_names: Sequence[str]) -> pl.DataFrame:
    """One row per setting of a grid table (`tables.grid_table`), in evaluation order.

    Changes are the setting's value minus the baseline's on the same slice (null where either has no
    successful search). `worst_slice` is the golden slice (never `overall`) with the lowest change of the
    objective's metric, the first by name on a tie; null when no slice has a change.
    """
    metric, objective_slice = objective
    slices = sorted(set(grid["slice"].to_list()) - {OVERALL}) + [OVERALL]
    baseline = grid.filter(pl.col("is_baseline")).select(
        "slice", *(pl.col(m).alias(f"_base_{m}") for m in metric_names))
    long = grid.join(baseline, on="slice", how="left").with_columns(
        (pl.col(m) - pl.col(f"_base_{m}")).alias(f"_change_{m}") for m in metric_names)
    wide = grid.filter(pl.col("slice") == OVERALL).select(
        "run_id", "setting_id", *KNOBS, "errors", "feasible", "violations", "is_baseline", "is_best",
        "evaluation_order")
    for s in slices:
        wide = wide.join(long.filter(pl.col("slice") == s).select(
            "setting_id", *(c for m in metric_names for c in (pl.col(m).alias(value_column(m, s)),
                                                               pl.col(f"_change_{m}").alias(change_column(m, s))))),
            on="setting_id", how="left", maintain_order="left")
    golden_slices = slices[:-1]
    changes = [pl.col(change_column(metric, s)) for s in golden_slices]
    lowest = pl.min_horizontal(changes) if changes else pl.lit(None, dtype=pl.Float64)
    worst = pl.lit(None, dtype=pl.String)
    for s in reversed(golden_slices):  # the first slice by name whose change is the lowest
        worst = pl.when(pl.col(change_column(metric, s)) == lowest).then(pl.lit(s)).otherwise(worst)
    wide = wide.with_columns(
        pl.col(value_column(metric, objective_slice)).alias("objective"),
        pl.col(change_column(metric, objective_slice)).alias("objective_change"),
        worst.alias("worst_slice"), lowest.alias("worst_change"))
    return wide.select(
        "run_id", "setting_id", *KNOBS, "objective", "objective_change", "worst_slice", "worst_change", "feasible",
        "violations", "is_baseline", "is_best", "errors", "evaluation_order",
        *(c for s in slices for m in metric_names for c in (value_column(m, s), change_column(m, s)))
    ).sort("evaluation_order")
