"""The discrimination check, per slice: whether the slice's queries can tell the settings apart at all, and the
baseline from the best setting in sample at the slice's size.

- moved: the slice's queries whose first relevant rank differs between some two evaluated settings (failed
  searches left out). A golden set that scores alike with and without a change measures nothing about it.
- rank vectors: the distinct vectors of the slice's first relevant ranks, query by query (a failed search counts
  as its own rank), across the evaluated settings. 1: every setting ranks the slice alike.
- tells apart: whether the best setting in sample's change of the objective's metric on the slice, from the
  baseline, is
  at least the slice's minimum detectable difference at its size: the queries needed to resolve it
  (`rqsweep.decide.noise.queries_needed`, the run's own spread) are at most the queries it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import polars as pl

from rqsweep.decide.noise import POWER, SliceNoise

COLUMNS = ["setting_id", "query_id", "slice", "rank", "error"]  # what `discrimination` reads of per-query rows
# What follows for a slice no setting moves.
UNMOVED = ("its queries rank alike at every setting, so it tells no two settings apart and only dilutes the "
           "differences measured over all queries; the labels or the queries decide it (see never found and leaks "
           "in label health): reword them in users' words, add queries that hinge on what a knob changes (an older "
           "twin for the half-life, a paraphrase for the vector channel), or keep it only as a constraint's guard")


@dataclass(frozen=True)
class SliceCheck:
    slice: str
    queries: int
    moved: int  # queries some two settings rank differently
    vectors: int  # distinct rank vectors across the settings
    change: float | None  # best in sample minus baseline, the objective's metric; None when the baseline is it
    mdd: float | None
    needed: int | None  # queries that resolve |change| (None: no spread, no change, or too many)

    @property
    def tells(self) -> bool:
        return self.needed is not None and self.needed <= self.queries

    @property
    def advice(self) -> str:
        if self.vectors <= 1:
            return f"no setting moves {self.slice}: {UNMOVED}"
        if self.change is None:
            return f"{self.moved} of {self.queries} queries move; the baseline is the best in sample: no change to tell"
        if self.change == 0:
            return (f"{self.moved} of {self.queries} queries move, but the best in sample's mean equals the "
                    "baseline's: no change to tell")
        if self.tells:
            return f"tells the best in sample from the baseline ({self.queries} queries, {self.needed} needed)"
        if self.mdd is None:
            return f"{self.moved} of {self.queries} queries move; no spread of the metric to size the change with"
        return (f"{self.queries} queries resolve {self.mdd:.3f} at {POWER:.0%} power; "
                + (f"{self.needed:,} would resolve the best in sample's change of {self.change:+.4f}"
                   if self.needed else f"no golden set resolves a change of {self.change:+.4f}"))


def discrimination(passes: Iterable[pl.DataFrame], noise: Mapping[str, SliceNoise],
                   change: Mapping[str, float | None]) -> list[SliceCheck]:
    """Per slice (sorted): `passes` are per-query rows (COLUMNS) in frames of whole settings, `noise` the
    objective metric's figures per slice, `change` the best in sample's change per slice."""
    vectors, ranks = [], []
    for rows in passes:
        rows = rows.with_columns(pl.when(pl.col("error").is_null()).then(pl.col("rank")).otherwise(-1).alias("rank"))
        vectors.append(rows.group_by("setting_id", "slice").agg(pl.col("rank").sort_by("query_id"))
                       .select("slice", pl.col("rank").hash().alias("vector")).unique())
        ranks.append(rows.filter(pl.col("error").is_null()).select("slice", "query_id", "rank").unique())
    distinct = pl.concat(vectors).unique().group_by("slice").agg(pl.len().alias("vectors"))
    per_query = pl.concat(ranks).unique().group_by("slice", "query_id").agg(pl.len().alias("ranks"))
    moved = per_query.group_by("slice").agg((pl.col("ranks") > 1).sum().alias("moved"), pl.len().alias("queries"))
    out = []
    for row in moved.join(distinct, on="slice").sort("slice").iter_rows(named=True):
        s, n = row["slice"], noise.get(row["slice"])
        delta = change.get(s)
        out.append(SliceCheck(s, row["queries"], row["moved"], row["vectors"], delta, n and n.mdd,
                              None if n is None or delta is None else n.needed(abs(delta))))
    return out
