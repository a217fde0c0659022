"""An honest estimate of the gain: k-fold cross-validation over queries, on the grid already evaluated.

The best of many settings, scored on the queries it was picked on, is optimistic. As PyTerrier's
KFoldGridSearch does, each fold's setting is picked on the other folds' queries, by the same rule as
the whole run (`choose_best`: constraints checked against the baseline on those same queries), and
scored on the held-out fold. Pooled over the folds, every query is scored by a setting chosen
without it. No search is repeated: the per-query table holds every setting's value on every query.

Folds are stratified by slice: each slice's queries, shuffled with the seed, are dealt round the
folds in turn, the deal carrying on from one slice to the next, so every fold holds each slice in
proportion and the folds' sizes differ by at most one query.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl

from rqsweep.config import Constraint, Validation
from rqsweep.constraints import choose_best
from rqsweep.golden import OVERALL


@dataclass(frozen=True)
class Gain:
    """One metric on one slice: the baseline's value, the held-out value (each query scored by the
    setting its fold chose without it) and the in-sample value (the best on all queries), all means
    over the slice's successful searches."""

    queries: int
    baseline: float | None
    held_out: float | None
    in_sample: float | None

    @property
    def held_out_gain(self) -> float | None:
        return None if self.held_out is None or self.baseline is None else self.held_out - self.baseline

    @property
    def in_sample_gain(self) -> float | None:
        return None if self.in_sample is None or self.baseline is None else self.in_sample - self.baseline


@dataclass(frozen=True)
class CrossValidation:
    """What k-fold cross-validation says of a run's gain over its baseline."""

    folds: int
    seed: int
    objective: tuple[str, str]  # (metric, slice)
    baseline: str
    in_sample_best: str | None  # the best feasible setting on all queries (None: none is feasible)
    choices: tuple[str | None, ...]  # per fold, the best feasible setting on its training part (None: none)
    held_out_queries: tuple[int, ...]  # per fold
    gains: dict[str, dict[str, Gain]]  # slice (overall last) -> metric -> figures

    def applied(self) -> list[str]:
        """Per fold, the setting its held-out queries were scored with: its choice, else the baseline."""
        return [c or self.baseline for c in self.choices]

    def agreement(self) -> tuple[str, int]:
        """The setting most folds applied (the earliest fold's on a tie) and how many folds applied it."""
        return Counter(self.applied()).most_common(1)[0]

    def as_json(self) -> dict:
        """The figures as plain values, for run.json."""
        setting, agreeing = self.agreement()
        return {
            "folds": self.folds, "seed": self.seed, "stratified_by": "slice",
            "objective": {"metric": self.objective[0], "slice": self.objective[1]},
            "in_sample_best": self.in_sample_best, "fold_choices": list(self.choices),
            "held_out_queries": list(self.held_out_queries),
            "agreement": {"setting_id": setting, "folds": agreeing},
            "gains": {s: {m: {"queries": g.queries, "baseline": g.baseline, "held_out": g.held_out,
                              "in_sample": g.in_sample, "held_out_gain": g.held_out_gain,
                              "in_sample_gain": g.in_sample_gain}
                          for m, g in metrics.items()} for s, metrics in self.gains.items()},
        }


def assign_folds(queries: pl.DataFrame, folds: int, seed: int) -> dict[str, int]:
    """query_id -> fold (0-based), stratified by slice; `queries` has one row per query (query_id, slice)."""
    rng = np.random.default_rng(seed)
    out: dict[str, int] = {}
    dealt = 0
    for (_,), group in queries.sort("slice", "query_id").group_by("slice", maintain_order=True):
        for query_id in rng.permutation(group["query_id"].to_numpy()):
            out[str(query_id)] = dealt % folds
            dealt += 1
    return out


def _matrices(rows: pl.DataFrame, order: Sequence[str], query_ids: list[str],
              metrics: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(metrics, settings, queries) values, 0 where the search failed or is missing, and (settings, queries)
    success flags: a (settings x queries) matrix per metric."""
    setting_index = {sid: i for i, sid in enumerate(order)}
    query_index = {qid: j for j, qid in enumerate(query_ids)}
    rows = rows.filter(pl.col("setting_id").is_in(list(order)))
    i = rows["setting_id"].replace_strict(setting_index, return_dtype=pl.Int64).to_numpy()
    j = rows["query_id"].replace_strict(query_index, return_dtype=pl.Int64).to_numpy()
    ok = np.zeros((len(order), len(query_ids)), dtype=bool)
    ok[i, j] = rows["error"].is_null().to_numpy()
    values = np.zeros((len(metrics), len(order), len(query_ids)))
    for m, metric in enumerate(metrics):
        values[m, i, j] = rows[metric].fill_null(0.0).to_numpy()
    return np.where(ok, values, 0.0), ok


def _means(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Means over successful searches; NaN where there is none."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _tables(means: np.ndarray, overall: np.ndarray, rows: Sequence[int], order: Sequence[str],
            slices: Sequence[str], metrics: Sequence[str]) -> dict[str, dict[str, dict[str, float | None]]]:
    """setting -> slice -> metric -> value, as `choose_best` reads it, for the settings at `rows`, from
    (metrics, settings, slices) and (metrics, settings) means."""
    per_slice = np.where(np.isnan(means[:, rows]), None, means[:, rows]).transpose(1, 2, 0).tolist()
    whole = np.where(np.isnan(overall[:, rows]), None, overall[:, rows]).T.tolist()  # settings, metrics
    return {order[i]: {**{s: dict(zip(metrics, per_slice[n][l])) for l, s in enumerate(slices)},
                       OVERALL: dict(zip(metrics, whole[n]))}
            for n, i in enumerate(rows)}


@dataclass(frozen=True)
class _Rule:
    """The whole run's rule for the best setting, applied to the means of some of the queries."""

    order: Sequence[str]
    baseline: str
    objective: tuple[str, str]
    constraints: Sequence[Constraint]
    slices: list[str]
    metrics: Sequence[str]

    def best(self, sums: np.ndarray, successes: np.ndarray, failures: np.ndarray,
             present: np.ndarray) -> str | None:
        """The best feasible setting given (metrics, settings, slices) sums over successful searches,
        (settings, slices) successes and failures, and which slices have queries in this part."""
        metric, objective_slice = self.objective
        means = _means(sums, successes)
        overall = _means(sums.sum(axis=2), successes.sum(axis=1))
        objective = (overall if objective_slice == OVERALL
                     else means[:, :, self.slices.index(objective_slice)])[list(self.metrics).index(metric)]
        # A slice with no query in this part cannot be checked: "*" constraints skip it.
        checked = [s for s, here in zip(self.slices, present) if here]
        # choose_best over every setting costs ~0.1 s a fold on a 2,000-setting grid (it words every
        # violation); the same answer comes from the settings at or above a threshold, lowered until one of
        # them is feasible: no setting below the threshold can beat or tie the one found.
        ranked = np.sort(objective[~np.isnan(objective)])[::-1]
        top = 16
        while True:
            threshold = ranked[min(top, ranked.size) - 1] if ranked.size else np.inf
            at = np.flatnonzero(objective >= threshold)
            candidates = [self.order[i] for i in at]
            tables = _tables(means, overall, [*at, self.order.index(self.baseline)], self.order, self.slices,
                             self.metrics)
            best, _ = choose_best(candidates, tables, self.baseline, metric, objective_slice, self.constraints,
                                  checked, dict(zip(candidates, failures[at].sum(axis=1).tolist())))
            if best is not None or top >= ranked.size:
                return best
            top *= 4


def cross_validate(rows: pl.DataFrame, order: Sequence[str], baseline: str, objective: tuple[str, str],
                   constraints: Sequence[Constraint], slices: Sequence[str], metrics: Sequence[str],
                   settings: Validation) -> CrossValidation | None:
    """k-fold cross-validation of the choice of setting, over queries, stratified by slice.

    `rows`: one row per (setting, query) with setting_id, query_id, slice, error (null on success) and a
    Float64 column per name in `metrics` holding that query's value (MRR: the reciprocal rank, 0 when
    absent); a missing row counts as a failed search. `order`: the settings in evaluation order (the
    tie rule of `choose_best`); `slices`: the golden set's slices. `metrics` must hold the objective's
    and the constraints' metrics. A fold whose training part has no feasible setting keeps the baseline.

    None when there are fewer than two queries to split. With fewer queries than `settings.folds`, each
    query is its own fold.
    """
    queries = rows.select("query_id", "slice").unique("query_id").sort("slice", "query_id")
    folds = min(settings.folds, queries.height)
    if folds < 2:
        return None
    order, slices = list(order), list(slices)
    fold_of = assign_folds(queries, folds, settings.seed)
    query_ids = queries["query_id"].to_list()
    slice_of = np.array([slices.index(s) for s in queries["slice"].to_list()])
    fold = np.array([fold_of[q] for q in query_ids])
    values, ok = _matrices(rows, order, query_ids, metrics)

    # Sums over each (fold, slice) cell; the training part of fold f is every cell minus fold f's.
    sums = np.zeros((len(metrics), len(order), folds, len(slices)))
    successes = np.zeros((len(order), folds, len(slices)))
    failures = np.zeros((len(order), folds, len(slices)), dtype=np.int64)
    members = np.zeros((folds, len(slices)), dtype=np.int64)
    for f in range(folds):
        for l in range(len(slices)):
            columns = np.flatnonzero((fold == f) & (slice_of == l))
            sums[:, :, f, l] = values[:, :, columns].sum(axis=2)
            successes[:, f, l] = ok[:, columns].sum(axis=1)
            failures[:, f, l] = (~ok[:, columns]).sum(axis=1)
            members[f, l] = columns.size
    rule = _Rule(order, baseline, objective, constraints, slices, metrics)
    all_sums, all_successes, all_failures, all_members = (sums.sum(axis=2), successes.sum(axis=1),
                                                          failures.sum(axis=1), members.sum(axis=0))
    in_sample_best = rule.best(all_sums, all_successes, all_failures, all_members > 0)
    choices = tuple(rule.best(all_sums - sums[:, :, f], all_successes - successes[:, f],
                              all_failures - failures[:, f], all_members - members[f] > 0) for f in range(folds))

    position = {sid: i for i, sid in enumerate(order)}
    scored_by = np.array([position[c or baseline] for c in choices])[fold]  # per query, its fold's setting
    columns = np.arange(len(query_ids))
    # Each: (metrics, queries) values and (queries,) success flags.
    held_out = values[:, scored_by, columns], ok[scored_by, columns]
    baseline_row = values[:, position[baseline]], ok[position[baseline]]
    best = values[:, position[in_sample_best or baseline]], ok[position[in_sample_best or baseline]]
    gains: dict[str, dict[str, Gain]] = {}
    for s in [*slices, OVERALL]:
        member = np.ones(len(query_ids), dtype=bool) if s == OVERALL else slice_of == slices.index(s)
        means = [np.where(np.isnan(mean), None, mean).tolist() for mean in
                 (_means((v * member).sum(axis=1), (o & member).sum()) for v, o in (baseline_row, held_out, best))]
        gains[s] = {m: Gain(int(member.sum()), means[0][k], means[1][k], means[2][k]) for k, m in enumerate(metrics)}
    return CrossValidation(folds, settings.seed, objective, baseline, in_sample_best, choices,
                           tuple(int(n) for n in members.sum(axis=1)), gains)


def summary_lines(cv: CrossValidation, metric_label: str | None = None) -> list[str]:
    """What the console summary and the report say, the held-out figure first, e.g.

    Held-out gain (5-fold CV, stratified by slice): overall MRR +0.0210 (in-sample +0.0441); folds agree on
    the setting 3 of 5
    """
    metric, objective_slice = cv.objective
    gain = cv.gains[objective_slice][metric]
    setting, agreeing = cv.agreement()
    lines = [f"Held-out gain ({cv.folds}-fold CV, stratified by slice): {objective_slice} {metric_label or metric} "
             f"{_signed(gain.held_out_gain)} (in-sample {_signed(gain.in_sample_gain)}); "
             f"folds agree on the setting {agreeing} of {cv.folds}"]
    in_sample = cv.in_sample_best or cv.baseline
    lines.append(f"  {agreeing} of {cv.folds} folds chose {setting} "
                 f"({'as on all queries' if setting == in_sample else f'on all queries: {in_sample}'}); by fold: "
                 + "; ".join(f"{f + 1}: {c or f'nothing feasible, the baseline {cv.baseline} stands'}"
                             for f, c in enumerate(cv.choices)))
    return lines


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.4f}"
