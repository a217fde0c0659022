"""How much a slice's mean can move by chance: the minimum detectable difference, and one query's worth.

Method. Two settings compared on a slice's n queries differ query by query by d (setting minus baseline, on
the per-query values of a metric). The smallest true mean difference that a two-sided paired t-test at
ALPHA detects with probability POWER is

    MDD = (t[1 - ALPHA/2, n - 1] + t[POWER, n - 1]) * sd(d) / sqrt(n)

(the paired t-test's power equation, with the t quantiles of n - 1 degrees of freedom). sd(d) is the
spread of a change on the slice, measured on the run's own grid: the root mean square, over every setting
whose values on the slice differ from the baseline's on some query, of the sample standard deviation of its
differences. Settings identical to the baseline on the slice are left out: they change nothing to detect.

Queries needed. The fewest queries n at which a bound b is the MDD or more, MDD(sd, n) <= b, with the same test,
ALPHA, POWER and sd: Sakai's topic-set-size design for a paired t-test, with the run's own spread standing in
for the population's (as a pilot study's does). `queries_needed` finds it by bisection: the MDD falls as n
grows.

One query's worth is 1 / n: a per-query value is in [0, 1], so one query losing its hit (1 -> 0) moves the
slice mean by 1 / n. A `max_drop` below it forbids any loss at all; one below the MDD sits inside the noise:
a drop that large would mostly go unseen by a paired test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterable, Sequence

import polars as pl

from rqsweep.decide.significance import ALPHA

POWER = 0.80


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom (closed forms), else by the Cornish-Fisher
    expansion around the normal one (Abramowitz & Stegun 26.7.5), within 0.004 of the exact value at 3 and
    0.002 from 4 on, closer as they grow. (The expansion is 1.4 short of 12.71 at 1, the slice of 2 queries.)"""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def minimum_detectable_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The MDD of a mean of n paired differences of standard deviation `sd`; None below 2 queries."""
    if n < 2:
        return None
    return (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


MOST_QUERIES = 10_000_000  # beyond this many, `queries_needed` says None: no golden set will grow so far


def queries_needed(sd: float | None, bound: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """The fewest queries whose MDD (`minimum_detectable_difference`, spread `sd`) is at most `bound`; None when
    there is no spread to size (no setting moves the slice), the bound is not above 0, or it takes more than
    MOST_QUERIES."""
    if sd is None or bound <= 0:
        return None
    if minimum_detectable_difference(sd, 2, alpha, power) <= bound:
        return 2
    low, high = 2, 4  # the MDD is above the bound at `low`, and (once found) at most it at `high`
    while minimum_detectable_difference(sd, high, alpha, power) > bound:
        if high > MOST_QUERIES:
            return None
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if minimum_detectable_difference(sd, middle, alpha, power) > bound else (low, middle)
    return high


@dataclass(frozen=True)
class SliceNoise:
    """One metric on one slice: its queries, the settings that move it and the figures of the method above."""

    slice: str
    metric: str
    queries: int
    moving_settings: int  # settings whose values on the slice differ from the baseline's on some query
    sd: float | None  # None when no setting moves the slice
    mdd: float | None

    @property
    def one_query(self) -> float:
        return 1 / self.queries

    def needed(self, bound: float) -> int | None:
        """`queries_needed` for `bound` on this slice and metric."""
        return queries_needed(self.sd, bound)


def slice_noise(queries: pl.LazyFrame, baseline: str, metrics: Sequence[str],
                passes: Iterable[pl.DataFrame] | None = None) -> list[SliceNoise]:
    """Per slice (sorted) and metric: the MDD from the per-query table (a lazy scan of queries.parquet, or any
    frame with setting_id, query_id, slice, error and the metrics' columns). Failed searches are left out of
    the pairs, so n counts the baseline's successful searches. `passes`: the same rows in frames of whole
    settings (queries.parquet's row groups), each setting's spread taken a frame at a time: aggregated whole,
    the table of 100,000 settings x 165 queries held about 0.5 GB."""
    base = baseline_values(queries, baseline, metrics)
    frames = [queries] if passes is None else (rows.select(PASS_COLUMNS + list(metrics)).lazy() for rows in passes)
    return noise_of(base, pl.concat([setting_spreads(rows, base, baseline, metrics) for rows in frames]), metrics)


PASS_COLUMNS = ["setting_id", "query_id", "slice", "error"]  # what `setting_spreads` reads, besides the metrics


def baseline_values(queries: pl.LazyFrame, baseline: str, metrics: Sequence[str]) -> pl.DataFrame:
    """The baseline's successful searches: query_id, slice and each metric's value (`_b_<metric>`)."""
    return queries.filter(pl.col("error").is_null() & (pl.col("setting_id") == baseline)).select(
        "query_id", "slice", *(pl.col(m).alias(f"_b_{m}") for m in metrics)).collect()


def setting_spreads(rows: pl.LazyFrame, base: pl.DataFrame, baseline: str, metrics: Sequence[str]) -> pl.DataFrame:
    """Per (setting, slice) of whole settings' rows: each metric's variance of the differences from the baseline
    (`baseline_values`) and whether any differs. A run's job takes them of each batch it evaluates."""
    pairs = rows.filter(pl.col("error").is_null() & (pl.col("setting_id") != baseline)).join(
        base.lazy().drop("slice"), on="query_id").with_columns(
        (pl.col(m) - pl.col(f"_b_{m}")).alias(f"_d_{m}") for m in metrics)
    return pairs.group_by("setting_id", "slice").agg(
        *(pl.col(f"_d_{m}").var(ddof=1).alias(f"_v_{m}") for m in metrics),
        *((pl.col(f"_d_{m}") != 0).any().alias(f"_moves_{m}") for m in metrics)).collect()


def noise_of(base: pl.DataFrame, spreads: pl.DataFrame, metrics: Sequence[str]) -> list[SliceNoise]:
    """`slice_noise`'s figures from the baseline's values and every setting's `setting_spreads`."""
    spread = spreads.group_by("slice").agg(
        *(pl.col(f"_v_{m}").filter(pl.col(f"_moves_{m}")).mean().alias(f"_v_{m}") for m in metrics),
        *(pl.col(f"_moves_{m}").sum().alias(f"_moves_{m}") for m in metrics))
    sizes = base.group_by("slice").agg(pl.len().alias("queries"))
    table = sizes.join(spread, on="slice", how="left").sort("slice")
    out = []
    for row in table.iter_rows(named=True):
        for m in metrics:
            variance = row[f"_v_{m}"]
            sd = None if variance is None else math.sqrt(variance)
            out.append(SliceNoise(row["slice"], m, row["queries"], int(row[f"_moves_{m}"] or 0), sd,
                                  None if sd is None else minimum_detectable_difference(sd, row["queries"])))
    return out


def bound_warnings(bound: float, noise: SliceNoise, what: str) -> list[str]:
    """What a bound on a slice's fall (a max_drop, the gate's tolerance) means at the slice's size."""
    words = []
    if bound < noise.one_query:
        words.append(f"{what} {bound:g} on {noise.slice} ({noise.queries} queries) is below one query's worth "
                     f"(1/{noise.queries} = {noise.one_query:.3f}): a single query losing its hit breaks it")
    if noise.mdd is not None and bound < noise.mdd:
        losses = math.floor(bound * noise.queries + 1e-9)
        needed = noise.needed(bound)
        words.append(f"{what} {bound:g} on {noise.slice} is below its minimum detectable difference "
                     f"({noise.mdd:.3f} {noise.metric} at {POWER:.0%} power): inside the noise; it allows "
                     f"{losses} {'query' if losses == 1 else 'queries'} to lose a hit; {noise.slice}: "
                     f"{noise.queries} queries resolve {noise.mdd:.2f}, "
                     + (f"{needed:,} would resolve {bound:g}" if needed else f"no golden set of at most "
                        f"{MOST_QUERIES:,} would resolve {bound:g}"))
    return words
