"""Retrieval metrics as one registry: name -> per-query function of the expected items' positions.

Conventions: section 7 of the SOAT contract (shared/docs/soat-knowledge-search.md). A backend
reports, per (setting, query), the 1-based position of each expected key's first slot in the ranked
list (0 when absent): positions are raw result positions, so a document holding several slots costs
all of them. Every metric below is a function of those positions and nothing else, so a metric
added here is computed for every backend, validated in configs, written to the Parquet grid and
shown in the report without touching them.

A failed search is not a miss: its row carries an error and no metric, it is left out of every
average, and the setting's `errors` count says so. `overall` averages every query and never
replaces the slices.

Adding a metric: one function decorated with `@metric` (or `@family` for one with a cut-off k,
named `<family>_at_<k>`), plus its test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl

from rqsweep.golden import OVERALL

# (rows, keys) positions, 0 = absent and for padding; (rows,) number of expected keys -> (rows,) values.
PerQuery = Callable[[np.ndarray, np.ndarray], np.ndarray]
DEFAULT_METRICS = ("recall_at_5", "recall_at_10", "mrr")  # SOAT's eval reports these
GATED = ("recall_at_10", "mrr")  # SOAT's own gate fails when one of these drops: every run computes them


@dataclass(frozen=True)
class Metric:
    name: str  # column name in the grid and per-query tables, e.g. recall_at_10
    label: str  # how reports write it, e.g. recall@10
    definition: str
    per_query: PerQuery


_METRICS: dict[str, Metric] = {}
_FAMILIES: dict[str, Callable[[int], Metric]] = {}
_FAMILY_NAME = re.compile(r"([a-z]+)_at_([1-9][0-9]*)")
MAX_CUTOFF = 100  # SOAT returns at most 100 results


def metric(label: str, definition: str):
    """Register a metric without a cut-off under the function's name."""

    def register(fn: PerQuery) -> PerQuery:
        _METRICS[fn.__name__] = Metric(fn.__name__, label, definition, fn)
        return fn

    return register


def family(label: str, definition: str):
    """Register a metric family with a cut-off: `<name>_at_<k>` for any k in 1..100."""

    def register(fn: Callable[[np.ndarray, np.ndarray, int], np.ndarray]):
        def make(k: int) -> Metric:
            return Metric(f"{fn.__name__}_at_{k}", label.format(k=k), definition.format(k=k),
                          lambda positions, n_expected: fn(positions, n_expected, k))

        _FAMILIES[fn.__name__] = make
        return fn

    return register


def get(name: str) -> Metric:
    """The metric called `name`; KeyError with the known names when there is none."""
    if name in _METRICS:
        return _METRICS[name]
    match = _FAMILY_NAME.fullmatch(name)
    if match and match.group(1) in _FAMILIES and int(match.group(2)) <= MAX_CUTOFF:
        return _FAMILIES[match.group(1)](int(match.group(2)))
    raise KeyError(name)


def known() -> str:
    """The registry's names, for error messages."""
    return ", ".join([*_METRICS, *(f"{f}_at_K" for f in _FAMILIES)]) + f" (K in 1..{MAX_CUTOFF})"


def _within(positions: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    return (positions > 0) & (positions <= k)


def first_relevant_rank(positions: np.ndarray) -> np.ndarray:
    """(rows, keys) positions -> (rows,) position of the first slot held by any expected item, 0 when none."""
    hit = np.where(positions > 0, positions, np.iinfo(np.int64).max).min(axis=1, initial=np.iinfo(np.int64).max)
    return np.where(hit == np.iinfo(np.int64).max, 0, hit)


@family("recall@{k}", "|expected items in the top {k}| / |expected items|")
def recall(positions: np.ndarray, n_expected: np.ndarray, k: int) -> np.ndarray:
    return _within(positions, k).sum(axis=1) / n_expected


@family("precision@{k}", "|expected items in the top {k}| / {k} (each expected item counted once, at its "
                         "first slot; other slots of the same document are not relevant)")
def precision(positions: np.ndarray, n_expected: np.ndarray, k: int) -> np.ndarray:
    return _within(positions, k).sum(axis=1) / k


@family("hit@{k}", "1 when any expected item is in the top {k}, else 0 (success@{k})")
def hit(positions: np.ndarray, n_expected: np.ndarray, k: int) -> np.ndarray:
    return _within(positions, k).any(axis=1).astype(np.float64)


@family("nDCG@{k}", "binary-gain nDCG: sum of 1/log2(1 + position) over expected items in the top {k}, "
                    "divided by the same sum for min(|expected|, {k}) items at positions 1, 2, ...")
def ndcg(positions: np.ndarray, n_expected: np.ndarray, k: int) -> np.ndarray:
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    gains = np.where(_within(positions, k), 1.0 / np.log2(positions + 1.0, where=positions > 0,
                                                          out=np.ones(positions.shape)), 0.0).sum(axis=1)
    ideal = np.concatenate([[0.0], np.cumsum(discounts)])[np.minimum(n_expected, k)]
    return gains / ideal


@metric("MRR", "mean over queries of 1/rank, rank being the position of the first slot held by any expected "
               "item (0 when none is returned)")
def mrr(positions: np.ndarray, n_expected: np.ndarray) -> np.ndarray:
    rank = first_relevant_rank(positions)
    return np.where(rank > 0, 1.0 / np.maximum(rank, 1), 0.0)


@metric("R-precision", "|expected items in the top R| / R, with R = |expected items|")
def r_precision(positions: np.ndarray, n_expected: np.ndarray) -> np.ndarray:
    return _within(positions, n_expected[:, None]).sum(axis=1) / n_expected


def definitions(names: Sequence[str]) -> dict[str, str]:
    """What each metric of a run means, for the Parquet metadata and the report."""
    out = {"positions": "per expected key, the 1-based position of its first slot in the returned list "
                        "(any chunk of an expected document); null when absent",
           "rank": "position of the first slot held by any expected item; 0 when none is returned"}
    out.update({n: get(n).definition + ", averaged over queries" for n in names})
    out["errors"] = "searches that failed (HTTP error, timeout): excluded from the averages, never scored as rank 0"
    out["slices"] = f"each slice averages its own queries; {OVERALL!r} averages all queries and never replaces them"
    return out


def padded_positions(positions: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """A list column of positions (null list = failed search, null item = absent) -> a (rows, keys) int64 array,
    0 for absent and padding, and each row's number of keys."""
    arrow = positions.to_arrow()
    if hasattr(arrow, "combine_chunks"):
        arrow = arrow.combine_chunks()
    offsets = np.asarray(arrow.offsets)
    lengths = np.diff(offsets)
    flat = np.nan_to_num(arrow.values.to_numpy(zero_copy_only=False).astype(np.float64), nan=0.0).astype(np.int64)
    out = np.zeros((len(lengths), max(int(lengths.max(initial=0)), 1)), np.int64)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    out[rows, np.arange(len(rows)) - np.repeat(offsets[:-1] - offsets[0], lengths)] = flat[offsets[0]:offsets[-1]]
    return out, lengths


def score_queries(outcomes: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """Per-query outcomes (with `positions` and `error`) -> the same rows with `rank` and each metric's value
    (null where the search failed)."""
    positions, n_expected = padded_positions(outcomes["positions"])
    failed = outcomes["error"].is_not_null().to_numpy()
    n = np.maximum(n_expected, 1)
    columns = {"rank": pl.Series("rank", first_relevant_rank(positions), pl.Int64)}
    columns.update({m: pl.Series(m, get(m).per_query(positions, n), pl.Float64) for m in names})
    mask = pl.Series(failed)
    return outcomes.with_columns(pl.when(mask).then(None).otherwise(s).alias(s.name) for s in columns.values())


def slice_metrics(queries: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """Scored per-query rows -> one row per (setting_id, slice), with the `overall` slice added.

    Each metric averages the slice's successful searches; `errors` counts the failed ones;
    `tie_sensitive` sums the flags and stays null where no backend could tell (HTTP).
    """
    ok = pl.col("error").is_null()
    aggregations = [
        pl.len().cast(pl.Int64).alias("queries"),
        *(pl.col(m).filter(ok).mean().alias(m) for m in names),
        (~ok).sum().cast(pl.Int64).alias("errors"),
        pl.when(pl.col("tie_sensitive").is_null().all()).then(None)
        .otherwise(pl.col("tie_sensitive").sum()).cast(pl.Int64).alias("tie_sensitive"),
    ]
    per_slice = queries.group_by("setting_id", "slice").agg(aggregations)
    overall = queries.group_by("setting_id").agg(aggregations).with_columns(pl.lit(OVERALL).alias("slice"))
    return pl.concat([per_slice, overall.select(per_slice.columns)]).sort("setting_id", "slice")
