"""Retrieval metrics as one registry: name -> per-query function of the expected items' positions.

Conventions: section 7 of the SOAT contract (shared/docs/soat-knowledge-search.md). A backend
reports, per (setting, query), the 1-based position of each expected key's first slot in the ranked
list (0 when absent): positions are raw result positions, so a document holding several slots costs
all of them. Every metric below is a function of those positions and of the expected items' grades
(which stay with the golden set and are joined here, at scoring time) and nothing else, so a metric
added here is computed for every backend, validated in configs, written to the Parquet grid and
shown in the report without touching them.

A failed search is not a miss: its row carries an error and no metric, it is left out of every
average, and the setting's `errors` count says so. `overall` averages every query and never
replaces the slices.

Graded relevance follows trec_eval (as pytrec_eval and ir_measures report it): nDCG's gain is the
grade; the binary metrics count an item graded at least the relevance level (default 1).
tests/test_reference_metrics.py checks every metric against pytrec_eval.

Adding a metric: one function of a `Judged` decorated with `@metric` (or `@family` for one with a
cut-off k, named `<family>_at_<k>`), plus its test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping, Sequence

import numpy as np
import polars as pl

from rqsweep.golden import OVERALL

# (rows, keys) positions and grades of each query's expected items -> (rows,) values.
PerQuery = Callable[["Judged"], np.ndarray]
DEFAULT_METRICS = ("recall_at_5", "recall_at_10", "mrr")  # SOAT's eval reports these
GATED = ("recall_at_10", "mrr")  # SOAT's own gate fails when one of these drops: every run computes them
GAINS = "trec_eval's: an item's gain is its grade (as ir_measures' nDCG@k and pytrec_eval's ndcg_cut_k)"


@dataclass(frozen=True)
class Judged:
    """What a metric reads, one row per query: where each expected item's first slot is and the item's grade.

    positions: (rows, keys) 1-based, 0 = absent and for padding. grades: (rows, keys), 0 for padding. Binary
    metrics count an item as relevant when its grade is at least `level` (pytrec_eval's relevance_level, 1 by
    default), so without grades (every grade 1) every expected item is relevant.
    """

    positions: np.ndarray
    grades: np.ndarray
    level: int = 1

    @classmethod
    def binary(cls, positions: np.ndarray, n_expected: np.ndarray) -> "Judged":
        """Every expected item graded 1: the first `n_expected` keys of each row."""
        expected = np.arange(positions.shape[1])[None, :] < np.asarray(n_expected)[:, None]
        judged = cls(positions, expected.astype(np.int64))
        # What the grades give at level 1, from the mask at hand (a pass each fewer over every cell).
        judged.__dict__["relevant"] = np.where(expected, positions, 0)
        judged.__dict__["n_relevant"] = np.clip(np.asarray(n_expected, np.int64), 0, positions.shape[1])
        return judged

    @cached_property
    def relevant(self) -> np.ndarray:
        """The positions of the relevant items only (others 0, as if absent)."""
        return np.where(self.grades >= self.level, self.positions, 0)

    @cached_property
    def n_relevant(self) -> np.ndarray:
        return _count(self.grades >= self.level)


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

    def register(fn: Callable[[Judged, int], np.ndarray]):
        def make(k: int) -> Metric:
            return Metric(f"{fn.__name__}_at_{k}", label.format(k=k), definition.format(k=k),
                          lambda judged: fn(judged, k))

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


# Rows have few keys: numpy's reductions along a short last axis cost several times a loop over its columns.

def _count(mask: np.ndarray) -> np.ndarray:
    """(rows, keys) bool -> (rows,) int64 number of True per row."""
    if not mask.shape[1]:
        return np.zeros(len(mask), np.int64)
    out = mask[:, 0].astype(np.int64)
    for column in mask.T[1:]:
        np.add(out, column, out=out)
    return out


def first_relevant_rank(positions: np.ndarray) -> np.ndarray:
    """(rows, keys) positions -> (rows,) position of the first slot held by any of the items, 0 when none."""
    # Less one, as unsigned: an absent item (0) comes after every position.
    shifted = (np.asarray(positions, dtype=np.int64) - 1).view(np.uint64)
    hit = np.full(len(shifted), np.iinfo(np.uint64).max)
    for column in shifted.T:
        np.minimum(hit, column, out=hit)
    hit += np.uint64(1)  # and none found (the largest) wraps round to 0
    return hit.view(np.int64)


# A query with no relevant item (every grade below the level) scores 0 on the binary metrics, as in trec_eval.

@family("recall@{k}", "|relevant items in the top {k}| / |relevant items|")
def recall(judged: Judged, k: int) -> np.ndarray:
    return _count(_within(judged.relevant, k)) / np.maximum(judged.n_relevant, 1)


@family("precision@{k}", "|relevant items in the top {k}| / {k} (each item counted once, at its first slot; "
                         "other slots of the same document are not relevant)")
def precision(judged: Judged, k: int) -> np.ndarray:
    return _count(_within(judged.relevant, k)) / k


@family("hit@{k}", "1 when any relevant item is in the top {k}, else 0 (success@{k})")
def hit(judged: Judged, k: int) -> np.ndarray:
    return _within(judged.relevant, k).any(axis=1).astype(np.float64)


@family("nDCG@{k}", "nDCG with the grades as gains (" + GAINS + "; binary without grades): sum of "
                    "grade / log2(1 + position) over expected items in the top {k}, divided by the same sum for the "
                    "{k} best grades at positions 1, 2, ...")
def ndcg(judged: Judged, k: int) -> np.ndarray:
    positions, gains = judged.positions, np.maximum(judged.grades, 0).astype(np.float64)
    dcg = np.where(_within(positions, k), gains / np.log2(positions + 1.0, where=positions > 0,
                                                          out=np.ones(positions.shape)), 0.0).sum(axis=1)
    best = -np.sort(-gains, axis=1)[:, :k]
    ideal = (best / np.log2(np.arange(2, best.shape[1] + 2))[None, :]).sum(axis=1)
    return np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)


@metric("MRR", "mean over queries of 1/rank, rank being the position of the first slot held by any relevant "
               "item (0 when none is returned)")
def mrr(judged: Judged) -> np.ndarray:
    rank = first_relevant_rank(judged.relevant)
    return np.divide(1.0, rank, out=np.zeros(len(rank)), where=rank > 0)


@metric("R-precision", "|relevant items in the top R| / R, with R = |relevant items|")
def r_precision(judged: Judged) -> np.ndarray:
    n = judged.n_relevant
    return _count(_within(judged.relevant, n[:, None])) / np.maximum(n, 1)


def binary_scores(positions: np.ndarray, n_expected: np.ndarray,
                  names: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`first_relevant_rank` and each metric of `names` as the registry gives them from `Judged.binary`, every
    expected item graded 1, in a pass or two per metric over the positions in their own integer dtype.

    positions: (..., keys), 0 for absent and for padding: a key at or past its row's `n_expected` must be 0, as
    `padded_positions` and the fast path leave them. n_expected broadcasts to positions.shape[:-1], and so do the
    results. recall@k, precision@k, hit@k and MRR come from each row's count within k and its first slot; any
    other metric goes through the registry. tests/test_metrics.py ties every value to the registry bit for bit.
    """
    shape = positions.shape[:-1]
    # Less one, as unsigned: an absent item (0) comes after every position.
    shifted = (positions - positions.dtype.type(1)).view(f"u{positions.dtype.itemsize}")
    columns = [shifted[..., key] for key in range(positions.shape[-1])]
    first = columns[0].copy() if columns else np.full(shape, np.iinfo(shifted.dtype).max, shifted.dtype)
    for column in columns[1:]:
        np.minimum(first, column, out=first)
    rank = (first + first.dtype.type(1)).view(positions.dtype)  # none found (the largest) wraps round to 0
    counts: dict[int, np.ndarray] = {}

    def within(k: int) -> np.ndarray:
        if k not in counts:
            counts[k] = np.zeros(shape, np.min_scalar_type(len(columns)))
            for column in columns:
                np.add(counts[k], column < k, out=counts[k])
        return counts[k]

    n_relevant = np.maximum(np.clip(np.asarray(n_expected, np.int64), 0, len(columns)), 1)
    fused = {"recall": lambda k: within(k) / n_relevant, "precision": lambda k: within(k) / k,
             "hit": lambda k: (first < k).astype(np.float64)}
    out: dict[str, np.ndarray] = {}
    judged = None
    for name in names:
        get(name)  # the registry's KeyError for an unknown name or cut-off
        match = _FAMILY_NAME.fullmatch(name)
        if name == "mrr":
            out[name] = np.divide(1.0, rank, out=np.zeros(shape), where=rank > 0)
        elif match and match.group(1) in fused:
            out[name] = fused[match.group(1)](int(match.group(2)))
        else:
            if judged is None:
                judged = Judged.binary(positions.reshape(-1, positions.shape[-1]),
                                       np.broadcast_to(n_expected, shape).ravel())
            out[name] = get(name).per_query(judged).reshape(shape)
    return rank, out


def definitions(names: Sequence[str], level: int = 1) -> dict[str, str]:
    """What each metric of a run means, for the Parquet metadata and the report."""
    out = {"relevant": f"an expected item graded {level} or more (the relevance level; items without a grade have "
                       f"grade 1); nDCG's gains are the grades themselves, {GAINS}",
           "positions": "per expected key, the 1-based position of its first slot in the returned list "
                        "(any chunk of an expected document); null when absent",
           "rank": "position of the first slot held by any relevant item; 0 when none is returned"}
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


def score_queries(outcomes: pl.DataFrame, names: Sequence[str], grades: Mapping[str, Sequence[int]] | None = None,
                  level: int = 1) -> pl.DataFrame:
    """Per-query outcomes (with `positions` and `error`) -> the same rows with `rank` and each metric's value
    (null where the search failed). `grades`: query id -> its expected items' grades, in the order of its
    positions (the golden set's); None grades every item 1."""
    positions, n_expected = padded_positions(outcomes["positions"])
    if grades is None:
        rank, values = binary_scores(positions, n_expected, names)
    else:
        ids = list(grades)
        table = pl.Series([list(grades[i]) for i in ids], dtype=pl.List(pl.Int64))
        at = outcomes["query_id"].replace_strict({q: n for n, q in enumerate(ids)}, return_dtype=pl.Int64)
        matrix, _ = padded_positions(table.gather(at))
        padded = np.zeros(positions.shape, np.int64)
        padded[:, :min(matrix.shape[1], padded.shape[1])] = matrix[:, :padded.shape[1]]
        judged = Judged(positions, padded, level)
        rank, values = first_relevant_rank(judged.relevant), {m: get(m).per_query(judged) for m in names}
    failed = outcomes["error"].is_not_null().to_numpy()
    columns = {"rank": pl.Series("rank", rank, pl.Int64)}
    columns.update({m: pl.Series(m, values[m], pl.Float64) for m in names})
    mask = pl.Series(failed)
    return outcomes.with_columns(pl.when(mask).then(None).otherwise(s).alias(s.name) for s in columns.values())


def slice_metrics(queries: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """Scored per-query rows -> one row per (setting_id, slice), with the `overall` slice added.

    Each metric averages the slice's successful searches; `errors` counts the failed ones;
    `tie_sensitive` and `numeric_sensitive` sum their flags and stay null where no backend could tell (HTTP).
    """
    ok = pl.col("error").is_null()
    aggregations = [
        pl.len().cast(pl.Int64).alias("queries"),
        *(pl.col(m).filter(ok).mean().alias(m) for m in names),
        (~ok).sum().cast(pl.Int64).alias("errors"),
        *(pl.when(pl.col(flag).is_null().all()).then(None).otherwise(pl.col(flag).sum()).cast(pl.Int64).alias(flag)
          for flag in ("tie_sensitive", "numeric_sensitive")),
    ]
    per_slice = queries.group_by("setting_id", "slice").agg(aggregations)
    overall = queries.group_by("setting_id").agg(aggregations).with_columns(pl.lit(OVERALL).alias("slice"))
    return pl.concat([per_slice, overall.select(per_slice.columns)]).sort("setting_id", "slice")
