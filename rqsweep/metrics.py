"""Retrieval metrics: first relevant rank, recall@5, recall@10, MRR; per slice and overall.

Conventions: section 7 of the SOAT contract (shared/docs/soat-knowledge-search.md).

Positions are raw result positions. A failed search is not a miss: its row carries an error and no
metric, it is left out of every average, and the setting's `errors` count says so.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rqsweep.golden import OVERALL

RECALL_CUTOFFS = (5, 10)
METRIC_DEFINITIONS = {
    "rank": "1-based position of the first slot held by any expected item (any chunk of an expected document); "
            "0 when none is in the returned list",
    "recall_at_5": "|expected items in the top 5| / |expected items|, averaged over queries",
    "recall_at_10": "|expected items in the top 10| / |expected items|, averaged over queries",
    "mrr": "mean over queries of 1/rank (0 when absent)",
    "errors": "searches that failed (HTTP error, timeout): excluded from the averages, never scored as rank 0",
    "slices": f"each slice averages its own queries; {OVERALL!r} averages all queries and never replaces the slices",
}


def first_relevant_rank(positions: np.ndarray) -> np.ndarray:
    """(settings, expected) positions (0 = absent) -> (settings,) rank of the first hit, 0 when none."""
    hit = np.where(positions > 0, positions, np.iinfo(np.int64).max).min(axis=1)
    return np.where(hit == np.iinfo(np.int64).max, 0, hit)


def recall_at(positions: np.ndarray, k: int) -> np.ndarray:
    """(settings, expected) positions -> (settings,) fraction of expected items within the top k."""
    return ((positions > 0) & (positions <= k)).mean(axis=1)


def reciprocal_rank(rank: pl.Expr) -> pl.Expr:
    return pl.when(rank > 0).then(1.0 / rank).otherwise(0.0)


def slice_metrics(queries: pl.DataFrame) -> pl.DataFrame:
    """Per-query rows -> one row per (setting_id, slice), with the `overall` slice added.

    `queries` needs setting_id, slice, rank, recall_at_5, recall_at_10 and error (null on success).
    """
    ok = pl.col("error").is_null()
    aggregations = [
        pl.len().cast(pl.Int64).alias("queries"),
        pl.col("recall_at_5").filter(ok).mean().alias("recall_at_5"),
        pl.col("recall_at_10").filter(ok).mean().alias("recall_at_10"),
        reciprocal_rank(pl.col("rank")).filter(ok).mean().alias("mrr"),
        (~ok).sum().cast(pl.Int64).alias("errors"),
    ]
    if "tie_sensitive" in queries.columns:
        aggregations.append(pl.col("tie_sensitive").sum().cast(pl.Int64).alias("tie_sensitive"))
    per_slice = queries.group_by("setting_id", "slice").agg(aggregations)
    overall = queries.group_by("setting_id").agg(aggregations).with_columns(pl.lit(OVERALL).alias("slice"))
    return pl.concat([per_slice, overall.select(per_slice.columns)]).sort("setting_id", "slice")
