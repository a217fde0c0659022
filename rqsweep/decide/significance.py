"""How sure we are that one setting beats another: paired over the same queries, MRR's per-query terms.

The best of many settings on a small golden set is partly luck. Two paired statistics on the
per-query reciprocal-rank differences d = 1/rank(best) - 1/rank(baseline) (0 when absent):
- a percentile bootstrap confidence interval of mean(d), resampling queries;
- a two-sided sign-flip permutation test of mean(d) = 0 (under the null, each query's pair is
  exchangeable, so the sign of each d is a coin flip).
Both are seeded, so a report rebuilt from the same files says the same thing. A failed search is
not a miss: a query whose search failed for either setting is left out of the pairs.

Testing five unchanged slices at ALPHA each would call at least one "significant" in about one run in
five (1 - 0.95^5 = 0.23); the slices' p-values are therefore adjusted with Holm's step-down method, which keeps the chance
of any false "significant" among them at ALPHA. `overall`, the one test over all queries, stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl

from rqsweep.golden import OVERALL

ALPHA = 0.05
ROUNDS = 10_000
SEED = 0
_CHUNK = 1_000  # rounds drawn at once: bounds memory at _CHUNK x queries


@dataclass(frozen=True)
class PairedTest:
    """mean(d) over `queries` pairs (`differing` of them with d != 0), its bootstrap interval (1 - ALPHA),
    and the permutation test's p-value."""

    queries: int
    differing: int
    mean_difference: float
    ci_low: float
    ci_high: float
    p_value: float

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA

    def verdict(self, p_value: float | None = None) -> str:
        """In words, judged on `p_value` when given (an adjusted one), else on the test's own."""
        if self.queries == 0:
            return "no paired queries"
        if self.differing == 0:
            return "no difference: the same rank on every query"
        if (self.p_value if p_value is None else p_value) < ALPHA:
            return f"significant at {ALPHA:g}, {'better' if self.mean_difference > 0 else 'worse'}"
        return "not significant: this difference could be luck"


def _rounds(rng: np.random.Generator, draw: Callable[[np.random.Generator, int], np.ndarray]) -> np.ndarray:
    return np.concatenate([draw(rng, min(_CHUNK, ROUNDS - start)) for start in range(0, ROUNDS, _CHUNK)])


def paired_test(differences: np.ndarray, seed: int = SEED, groups: np.ndarray | None = None) -> PairedTest:
    """Bootstrap interval and sign-flip permutation p-value of the mean of paired differences. With `groups` (per
    difference, its group), whole groups are resampled and flipped: queries of a group are not independent;
    without, each difference is a group of its own."""
    d = np.asarray(differences, dtype=np.float64)
    n = d.size
    if n == 0:
        return PairedTest(0, 0, 0.0, 0.0, 0.0, 1.0)
    group = np.arange(n) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
    sums, sizes = np.bincount(group, weights=d), np.bincount(group).astype(np.float64)
    g = sums.size
    rng = np.random.default_rng(seed)

    def resampled(r: np.random.Generator, m: int) -> np.ndarray:
        picks = r.integers(0, g, size=(m, g))
        return sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)

    boot = _rounds(rng, resampled)
    low, high = np.quantile(boot, [ALPHA / 2, 1 - ALPHA / 2])
    flips = _rounds(rng, lambda r, m: (sums * r.choice((-1.0, 1.0), size=(m, g))).sum(axis=1) / n)
    observed = abs(d.mean())
    # Relative slack: a flip that reproduces the observed mean up to float rounding counts as extreme.
    extreme = np.count_nonzero(np.abs(flips) >= observed - 1e-12 * max(1.0, observed))
    p_value = (extreme + 1) / (ROUNDS + 1)  # the observed labelling is one of the permutations
    return PairedTest(n, int(np.count_nonzero(d)), float(d.mean()), float(low), float(high), float(p_value))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: the i-th smallest of m p-values times (m - i + 1), capped at 1, and
    never below an adjusted p-value of a smaller one (so the order of the p-values is kept)."""
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for i, j in enumerate(sorted(range(len(p_values)), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (len(p_values) - i) * p_values[j]))
        adjusted[j] = running
    return adjusted


def paired_differences(queries: pl.DataFrame, better: str, worse: str) -> pl.DataFrame:
    """query_id, slice, d = RR(better) - RR(worse), over queries where neither search failed."""

    def side(sid: str, name: str) -> pl.DataFrame:
        return queries.filter((pl.col("setting_id") == sid) & pl.col("error").is_null()).select(
            "query_id", "slice", pl.col("mrr").alias(name))

    joined = side(better, "a").join(side(worse, "b").drop("slice"), on="query_id", how="inner")
    return joined.select("query_id", "slice", (pl.col("a") - pl.col("b")).alias("d"))


def significance_table(queries: pl.DataFrame, best: str, baseline: str, slices: list[str]) -> pl.DataFrame:
    """Per slice and overall: pairs, MRR difference best - baseline, its interval, raw and Holm-adjusted p-values
    (over the slices with paired queries; none for overall) and a plain verdict on the adjusted one."""
    diffs = paired_differences(queries, best, baseline)
    tests = {s: paired_test((diffs if s == OVERALL else diffs.filter(pl.col("slice") == s))["d"].to_numpy())
             for s in slices}
    tested = [s for s, t in tests.items() if s != OVERALL and t.queries]
    adjusted: dict[str, float | None] = dict(zip(tested, holm([tests[s].p_value for s in tested])))
    rows = []
    for s, t in tests.items():
        p_holm = adjusted.get(s)
        rows.append({"slice": s, "queries paired": t.queries, "ranks differ": t.differing, "Δ MRR": t.mean_difference,
                     f"{1 - ALPHA:.0%} CI": f"[{t.ci_low:+.4f}, {t.ci_high:+.4f}]",
                     "p-value": t.p_value, "p-value (Holm)": p_holm, "verdict": t.verdict(p_holm)})
    return pl.DataFrame(rows, schema_overrides={"p-value (Holm)": pl.Float64})
