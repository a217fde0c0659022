"""The decision under the two bounds of the unjudged items in the ranked lists a run kept.

An item a setting returns is labelled (`expected`), judged (`golden: {judgments}`, any grade: 0 is judged not
relevant) or unjudged. Today's rule scores an unjudged item as not relevant: the lower bound. The upper bound
scores every unjudged item that any kept list returns for a query as relevant, graded at the relevance level,
at every setting alike (one set of labels per bound, so settings stay comparable). Each bound chooses among the
kept settings by the run's own rule (`constraints.choose_best`: objective, constraints, the baseline on a tie),
and picks per slice the kept setting best on the slice's objective metric: where the two bounds disagree, the
labels cannot carry the decision, and grading the pool (`rqsweep pool`) settles it.

The kept lists are hits.parquet's (the baseline and the best setting in sample) unless the run kept every setting's
(`ranked: all`). judged@k is the share of a setting's top-k slots, over its successful searches, whose item is
labelled or judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl

from rqsweep import metrics
from rqsweep.config import Constraint
from rqsweep.decide.constraints import SliceMeans, best_feasible, choose_best

LOWER, UPPER = "unjudged as not relevant", "unjudged as relevant"


@dataclass(frozen=True)
class Bound:
    name: str
    means: SliceMeans
    choice: str | None  # the run's rule over the kept settings; None when none is feasible
    routes: dict[str, str | None]  # slice -> the kept setting best on its objective metric

    def value(self, setting: str, slice_: str, metric: str) -> float | None:
        return self.means.value(setting, slice_, metric)


@dataclass(frozen=True)
class Bounds:
    settings: list[str]  # the kept settings, in evaluation order
    judged_at_k: dict[str, float | None]  # setting -> share of its top-k slots labelled or judged
    k: int
    lower: Bound
    upper: Bound

    @property
    def choice_changes(self) -> bool:
        return self.lower.choice != self.upper.choice

    @property
    def routes_changing(self) -> list[str]:
        """The slices whose best kept setting differs between the bounds."""
        return [s for s in self.lower.routes if self.lower.routes[s] != self.upper.routes[s]]


def judged_at_k(lists: pl.DataFrame, judged: pl.DataFrame, k: int) -> dict[str, float | None]:
    """Setting -> the share of its successful searches' top-k slots whose item is labelled or judged."""
    top = (lists.filter(pl.col("error").is_null() & (pl.col("position") <= k))
           .join(judged.select("query_id", "key", pl.lit(True).alias("judged")), on=["query_id", "key"], how="left"))
    shares = top.group_by("setting_id").agg((pl.col("expected") | pl.col("judged").fill_null(False)).mean())
    return dict(shares.iter_rows())


def _relevant(lists: pl.DataFrame, queries: pl.DataFrame, judged: pl.DataFrame, level: int,
              upper: bool) -> pl.DataFrame:
    """Per query, its relevant items under one bound: query_id, key, grade, in a fixed order."""
    expected = queries.select("query_id", pl.col("expected").alias("key"), pl.col("grades").alias("grade")).explode(
        "key", "grade")
    if not upper:
        return expected
    unjudged = (lists.filter(pl.col("key").is_not_null() & ~pl.col("expected")).select("query_id", "key").unique()
                .join(judged.select("query_id", "key"), on=["query_id", "key"], how="anti")
                .sort("query_id", "key").with_columns(pl.lit(level, pl.Int64).alias("grade")))
    return pl.concat([expected, unjudged.select(expected.columns)])


def _bound(name: str, lists: pl.DataFrame, queries: pl.DataFrame, relevant: pl.DataFrame, settings: list[str],
           baseline: str, objective: tuple[str, str], constraints: Sequence[Constraint], names: Sequence[str],
           level: int) -> Bound:
    relevant = relevant.with_columns(pl.int_range(pl.len()).over("query_id").alias("at"))
    searches = lists.group_by("setting_id", "query_id").agg(pl.col("error").drop_nulls().first())
    first = lists.group_by("setting_id", "query_id", "key").agg(pl.col("position").min())
    outcomes = (searches.join(relevant, on="query_id").join(first, on=["setting_id", "query_id", "key"], how="left")
                .sort("at").group_by("setting_id", "query_id", maintain_order=True)
                .agg(pl.col("position").alias("positions"), pl.col("error").first())
                .sort("setting_id", "query_id"))
    grades = {q: list(g) for q, g in relevant.group_by("query_id", maintain_order=True)
              .agg(pl.col("grade").sort_by("at")).iter_rows()}
    scored = metrics.score_queries(outcomes, names, grades, level).join(queries.select("query_id", "slice"),
                                                                        on="query_id")
    slices = sorted(set(queries["slice"].to_list()))
    per_slice = metrics.slice_metrics(scored.with_columns(pl.lit(None, pl.Int64).alias("tie_sensitive"),
                                                          pl.lit(None, pl.Int64).alias("numeric_sensitive")), names)
    means = SliceMeans.from_frame(per_slice, settings, slices, names)
    metric = objective[0]
    at = means.metrics.index(metric)
    routes = {s: best_feasible(settings, baseline, means.values[:, means.slices.index(s), at],
                               np.ones(len(settings), bool)) for s in slices}
    return Bound(name, means, choose_best(means, baseline, objective, constraints, slices).best, routes)


def decision_bounds(lists: pl.DataFrame, queries: pl.DataFrame, judged: pl.DataFrame, settings: Sequence[str],
                    baseline: str, objective: tuple[str, str], constraints: Sequence[Constraint],
                    names: Sequence[str], level: int, k: int) -> Bounds:
    """Both bounds over the kept ranked lists (`lists`: hits.parquet's columns, the first k slots of each list),
    the queries (one row each: query_id, slice, expected, grades) and the judged pairs (query_id, key)."""
    kept = [s for s in settings if s in set(lists["setting_id"].to_list())]
    lists = lists.filter(pl.col("setting_id").is_in(kept) & (pl.col("position").is_null() | (pl.col("position") <= k)))
    bounds = [_bound(name, lists, queries, _relevant(lists, queries, judged, level, upper), kept, baseline, objective,
                     constraints, names, level) for name, upper in ((LOWER, False), (UPPER, True))]
    return Bounds(kept, judged_at_k(lists, judged, k), k, *bounds)
