"""What makes a setting infeasible: a slice that collapses, absolutely or against the baseline; and which
feasible setting is best.

Every check runs on arrays of slice means, all settings at once: a 100,000-setting grid is checked in
milliseconds, and the run, the cross-validation folds and the optimiser share the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from rqsweep.config import Constraint
from rqsweep.golden import OVERALL

# Metrics are means of a few dozen terms: compare with a little slack so that float noise in a
# mean equal to the bound does not count as a violation.
_SLACK = 1e-9
INCOMPLETE = "incomplete"  # the key of a setting with failed searches: not known to be safe


def constraint_slices(constraint: Constraint, slices: Sequence[str]) -> list[str]:
    """The slices a constraint applies to: all of `slices` for `slice: "*"`, else its own."""
    return list(slices) if constraint.slice == "*" else [constraint.slice]


def constraint_key(constraint: Constraint, slice_: str) -> str:
    """How a constraint on one slice is named in the grid's `violations` and in Optuna: `mrr[factual]:max_drop`."""
    return f"{constraint.metric}[{slice_}]:{'min' if constraint.min is not None else 'max_drop'}"


@dataclass(frozen=True)
class SliceMeans:
    """Each setting's metric means per slice, as one array: what the constraints and the objective read."""

    settings: list[str]  # in evaluation order: the order ties are broken in
    slices: list[str]  # the golden set's slices, then `overall`
    metrics: list[str]
    values: np.ndarray  # (settings, slices, metrics); NaN where the slice has no successful search
    errors: np.ndarray  # (settings,) failed searches

    @classmethod
    def from_frame(cls, per_slice: pl.DataFrame, settings: Sequence[str], slices: Sequence[str],
                   metrics: Sequence[str]) -> SliceMeans:
        """From `metrics.slice_metrics` rows (one per setting and slice, `overall` included)."""
        settings, slices = list(settings), [*slices, OVERALL]
        # Every slice at once: each row lands in its (setting, slice) cell; a cell without one stays NaN.
        rows = (per_slice.lazy().filter(pl.col("slice").is_in(slices)).select(
            pl.col("setting_id").replace_strict(settings, range(len(settings)), default=None, return_dtype=pl.Int64),
            pl.col("slice").replace_strict(slices, range(len(slices)), return_dtype=pl.Int64),
            *(pl.col(m).cast(pl.Float64) for m in metrics), pl.col("errors").fill_null(0))
            .drop_nulls("setting_id").collect())
        at, slice_at = rows["setting_id"].to_numpy(), rows["slice"].to_numpy()
        values = np.full((len(settings), len(slices), len(metrics)), np.nan)
        values[at, slice_at, :] = rows.select(metrics).to_numpy()
        errors = np.zeros(len(settings), np.int64)
        overall = slice_at == len(slices) - 1
        errors[at[overall]] = rows["errors"].to_numpy()[overall]
        return cls(settings, slices, list(metrics), values, errors)

    def value(self, setting: str, slice_: str, metric: str) -> float | None:
        v = self.values[self.settings.index(setting), self.slices.index(slice_), self.metrics.index(metric)]
        return None if np.isnan(v) else float(v)


def constraint_values(means: SliceMeans, baseline: str, constraints: Sequence[Constraint],
                      slices: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Each constraint on each of `slices` it covers: its key, and its (settings,) values as columns of a
    (settings, keys) array: > 0 violated, <= 0 met (Optuna's convention), NaN where nothing can be checked
    (a drop from a baseline without a successful search on the slice).

    A slice without a successful search violates every constraint on it: nothing shows it is safe.
    """
    checks = constraint_checks(means, baseline, constraints, slices)
    keys = [constraint_key(c, s) for c, s, _ in checks]
    return keys, np.column_stack([v for _, _, v in checks]) if checks else np.zeros((len(means.settings), 0))


def constraint_checks(means: SliceMeans, baseline: str, constraints: Sequence[Constraint],
                      slices: Sequence[str]) -> list[tuple[Constraint, str, np.ndarray]]:
    """`constraint_values`' columns, each with its constraint and slice."""
    checks = []
    base = means.settings.index(baseline)
    for c in constraints:
        m = means.metrics.index(c.metric)
        for s in constraint_slices(c, slices):
            value = means.values[:, means.slices.index(s), m]
            if c.min is not None:
                column = c.min - value - _SLACK
            else:
                column = means.values[base, means.slices.index(s), m] - value - c.max_drop - _SLACK
            checks.append((c, s, np.where(np.isnan(value), 1.0, column)))
    return checks


@dataclass(frozen=True)
class Verdicts:
    """What the constraints say of every setting, and the best feasible one."""

    keys: list[str]  # constraint keys, `INCOMPLETE` first
    violated: np.ndarray  # (settings, keys) bool
    best: str | None  # None when no setting is feasible

    def feasible(self) -> np.ndarray:
        return ~self.violated.any(axis=1)

    def violations(self) -> pl.Series:
        """Per setting, the keys it violates: a `violations` list column, built without a Python list per setting."""
        _, columns = np.nonzero(self.violated)  # row by row, each row's keys in key order
        offsets = np.concatenate([[0], np.cumsum(self.violated.sum(axis=1))]).astype(np.int32)
        keys = pa.DictionaryArray.from_arrays(pa.array(columns.astype(np.int32)), pa.array(self.keys, pa.string()))
        return pl.Series("violations", pa.ListArray.from_arrays(pa.array(offsets), keys.cast(pa.string())),
                         dtype=pl.List(pl.String))

    def rejected(self) -> dict[str, int]:
        """Key -> how many settings violate it (a setting violating several counts in each)."""
        counts = self.violated.sum(axis=0)
        return {k: int(n) for k, n in zip(self.keys, counts) if n}


def choose_best(means: SliceMeans, baseline: str, objective: tuple[str, str], constraints: Sequence[Constraint],
                slices: Sequence[str]) -> Verdicts:
    """Each setting's violations and the best feasible setting, over `means.settings` in their order.

    Highest objective wins; equal objectives keep the earlier setting, except that the baseline wins a
    tie: no knob should move without a measured gain. A setting whose objective has no successful search
    cannot be best. `slices` are the slices the constraints check (those with queries).
    """
    keys, values = constraint_values(means, baseline, constraints, slices)
    violated = np.column_stack([means.errors > 0, values > 0])  # NaN > 0 is False: unchecked is met
    metric, objective_slice = objective
    score = means.values[:, means.slices.index(objective_slice), means.metrics.index(metric)]
    best = best_feasible(means.settings, baseline, score, ~violated.any(axis=1))
    return Verdicts([INCOMPLETE, *keys], violated, best)


def best_feasible(settings: list[str], baseline: str, score: np.ndarray, feasible: np.ndarray) -> str | None:
    """`choose_best`'s pick among the `feasible` settings by their (settings,) `score`: the highest wins, the
    baseline wins a tie, else the earlier setting; a NaN score cannot win."""
    candidates = feasible & ~np.isnan(score)
    if not candidates.any():
        return None
    top = np.flatnonzero(candidates & (score == score[candidates].max()))
    base = settings.index(baseline)
    return settings[base if base in top else top[0]]


@dataclass(frozen=True)
class Robust:
    """The setting that holds under every embedder: feasible under each, with the best worst-case objective."""

    setting: str | None  # None when no setting is feasible under every embedder
    worst: float | None  # its objective under the embedder where it scores lowest
    feasible_everywhere: int  # how many common settings are feasible under every embedder


def choose_robust(runs: dict[str, tuple[SliceMeans, Verdicts]], baseline: str, objective: tuple[str, str]) -> Robust:
    """Among the settings every embedder evaluated (in the first embedder's order), those feasible under
    each; of them, the one whose lowest objective over the embedders is highest. Ties keep the baseline,
    then the earlier setting, as `choose_best` does."""
    positions = [{s: i for i, s in enumerate(means.settings)} for means, _ in runs.values()]
    common = [s for s in next(iter(runs.values()))[0].settings if all(s in p for p in positions)]
    metric, objective_slice = objective
    feasible = np.ones(len(common), bool)
    worst = np.full(len(common), np.inf)
    for (means, verdicts), position in zip(runs.values(), positions):
        at = np.array([position[s] for s in common], np.int64)
        score = means.values[at, means.slices.index(objective_slice), means.metrics.index(metric)]
        feasible &= verdicts.feasible()[at] & ~np.isnan(score)
        worst = np.minimum(worst, np.where(np.isnan(score), -np.inf, score))
    if not feasible.any():
        return Robust(None, None, 0)
    top = np.flatnonzero(feasible & (worst == worst[feasible].max()))
    chosen = common.index(baseline) if baseline in common and common.index(baseline) in top else top[0]
    return Robust(common[chosen], float(worst[chosen]), int(feasible.sum()))
