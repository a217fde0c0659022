"""An honest estimate of the gain: k-fold cross-validation over queries, on the grid already evaluated.

The best of many settings, scored on the queries it was picked on, is optimistic. As PyTerrier's
KFoldGridSearch does, each fold's setting is picked on the other folds' queries, by the same rule as
the whole run (`choose_best`: constraints checked against the baseline on those same queries), and
scored on the held-out fold. Pooled over the folds, every query is scored by a setting chosen
without it. No search is repeated: the per-query table holds every setting's value on every query.

Folds are stratified by slice: each slice's queries, shuffled with the seed, are dealt round the
folds in turn, the deal carrying on from one slice to the next, so every fold holds each slice in
proportion and the folds' sizes differ by at most one query.

Grouped (`validation: {group: expected}`): queries that share an expected key (directly or through another
query) form a group, and a group is dealt whole, so that no fold's choice is tuned on a paraphrase of a query it
is scored on. Each slice's groups (a group's slice is its first query's), shuffled with the seed, go one by one to
the fold that holds the fewest queries so far (the lowest on a tie). The bootstrap intervals and permutation tests
on the held-out queries then resample and flip whole groups (`significance.paired_test`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl

from rqsweep.config import Constraint, Validation
from rqsweep.decide.constraints import SliceMeans, choose_best
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
    grouped_by: str = "query"  # what a fold keeps together: each query alone, or the queries of an expected key

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
            "folds": self.folds, "seed": self.seed, "stratified_by": "slice", "grouped_by": self.grouped_by,
            "objective": {"metric": self.objective[0], "slice": self.objective[1]},
            "baseline": self.baseline, "in_sample_best": self.in_sample_best, "fold_choices": list(self.choices),
            "held_out_queries": list(self.held_out_queries),
            "agreement": {"setting_id": setting, "folds": agreeing},
            "gains": {s: {m: {"queries": g.queries, "baseline": g.baseline, "held_out": g.held_out,
                              "in_sample": g.in_sample, "held_out_gain": g.held_out_gain,
                              "in_sample_gain": g.in_sample_gain}
                          for m, g in metrics.items()} for s, metrics in self.gains.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> CrossValidation:
        """Read back what `as_json` wrote (the report reads it from grid.parquet's metadata)."""
        return cls(data["folds"], data["seed"], (data["objective"]["metric"], data["objective"]["slice"]),
                   data["baseline"], data["in_sample_best"], tuple(data["fold_choices"]),
                   tuple(data["held_out_queries"]),
                   {s: {m: Gain(g["queries"], g["baseline"], g["held_out"], g["in_sample"]) for m, g in by.items()}
                    for s, by in data["gains"].items()}, data.get("grouped_by", "query"))


def assign_folds(queries: pl.DataFrame, folds: int, seed: int, groups: dict[str, int] | None = None) -> dict[str, int]:
    """query_id -> fold (0-based), stratified by slice; `queries` has one row per query (query_id, slice).
    `groups` (query_id -> group, `expected_groups`): each group's queries dealt to one fold."""
    rng = np.random.default_rng(seed)
    out: dict[str, int] = {}
    ordered = queries.sort("slice", "query_id")
    if groups is None:
        dealt = 0
        for (_,), group in ordered.group_by("slice", maintain_order=True):
            for query_id in rng.permutation(group["query_id"].to_numpy()):
                out[str(query_id)] = dealt % folds
                dealt += 1
        return out
    members: dict[int, list[str]] = {}
    home: dict[int, str] = {}
    for query_id, slice_ in ordered.sort("query_id").select("query_id", "slice").iter_rows():
        members.setdefault(groups[query_id], []).append(query_id)
        home.setdefault(groups[query_id], slice_)
    sizes = [0] * folds
    for slice_ in sorted(set(home.values())):
        for g in rng.permutation(np.array(sorted(g for g, s in home.items() if s == slice_), dtype=np.int64)):
            fold = sizes.index(min(sizes))
            out.update((query_id, fold) for query_id in members[int(g)])
            sizes[fold] += len(members[int(g)])
    return out


def expected_groups(queries: pl.DataFrame) -> dict[str, int]:
    """query_id -> group: the queries linked by sharing an expected key, directly or through others (`queries`:
    query_id and its `expected` keys). Groups are numbered in the order of their first query id."""
    parent: dict[str, str] = {}

    def root(q: str) -> str:
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    owner: dict[str, str] = {}
    for query_id, keys in queries.sort("query_id").select("query_id", "expected").iter_rows():
        parent.setdefault(query_id, query_id)
        for key in keys or ():
            if key in owner:
                a, b = sorted((root(owner[key]), root(query_id)))
                parent[b] = a
            else:
                owner[key] = query_id
    numbers: dict[str, int] = {}
    return {q: numbers.setdefault(root(q), len(numbers)) for q in sorted(parent)}


def matrices(rows: pl.DataFrame, order: Sequence[str], query_ids: list[str],
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


@dataclass(frozen=True)
class PartSums:
    """`FoldSums.part`: some settings' (metrics, settings, folds, slices) sums and (settings, folds, slices)
    successes and failures."""

    settings: list[str]
    sums: np.ndarray
    successes: np.ndarray
    failures: np.ndarray


class FoldSums:
    """Per (setting, fold, slice): each metric's sum over successful searches, the successes and the failures.

    Fed scored per-query rows a chunk of whole settings at a time (`add`), so that cross-validation of a large
    grid never holds a (settings x queries) matrix: a chunk's matrix is summed and dropped.
    `queries`: one row per golden query (query_id, slice).
    """

    def __init__(self, queries: pl.DataFrame, slices: Sequence[str], metrics: Sequence[str], settings: Validation,
                 capacity: int):
        """`capacity`: how many settings will be added (the arrays are made once, at that size)."""
        groups = expected_groups(queries) if settings.group == "expected" else None
        queries = queries.select("query_id", "slice").sort("slice", "query_id")
        self.folds = min(settings.folds, queries.height)
        self.seed, self.slices, self.metrics = settings.seed, list(slices), list(metrics)
        self.grouped_by = settings.group or "query"
        self.query_ids = queries["query_id"].to_list()
        # Per query, the group a bootstrap resamples and a permutation flips whole; None: each query alone.
        self.group_of = None if groups is None else np.array([groups[q] for q in self.query_ids], dtype=np.int64)
        fold_of = assign_folds(queries, max(self.folds, 1), settings.seed, groups)
        self.fold = np.array([fold_of[q] for q in self.query_ids], dtype=np.int64)
        self.slice_of = np.array([self.slices.index(s) for s in queries["slice"].to_list()], dtype=np.int64)
        # The queries of each (fold, slice) cell.
        self._cells = [[np.flatnonzero((self.fold == f) & (self.slice_of == s)) for s in range(len(self.slices))]
                       for f in range(self.folds)]
        self.members = np.array([[c.size for c in row] for row in self._cells], dtype=np.int64).reshape(
            self.folds, len(self.slices))
        self.settings: list[str] = []
        shape = (capacity, self.folds, len(self.slices))
        self._sums = np.zeros((len(self.metrics), *shape))
        self._successes = np.zeros(shape, np.int32)
        self._failures = np.zeros(shape, np.int32)

    def add(self, rows: pl.DataFrame) -> None:
        """Sum a chunk of scored rows (setting_id, query_id, error and a column per metric) of settings not added
        before."""
        self.extend(self.part(rows))

    def part(self, rows: pl.DataFrame) -> PartSums:
        """A chunk's sums as `add` makes them, without adding them (`extend` does): a run's evaluation sums each
        batch it evaluates, and its end adds them up."""
        order = rows["setting_id"].unique(maintain_order=True).to_list()
        values, ok = matrices(rows, order, self.query_ids, self.metrics)
        shape = (len(order), self.folds, len(self.slices))
        sums = np.zeros((len(self.metrics), *shape))
        successes, failures = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
        for f, row in enumerate(self._cells):
            for s, columns in enumerate(row):
                sums[:, :, f, s] = values[:, :, columns].sum(axis=2)
                successes[:, f, s] = ok[:, columns].sum(axis=1)
                failures[:, f, s] = (~ok[:, columns]).sum(axis=1)
        return PartSums(order, sums, successes, failures)

    def extend(self, part: PartSums) -> None:
        """Add a `part`'s sums, of settings not added before."""
        at = slice(len(self.settings), len(self.settings) + len(part.settings))
        self._sums[:, at], self._successes[at], self._failures[at] = part.sums, part.successes, part.failures
        self.settings += part.settings

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(metrics, settings, folds, slices) sums, (settings, folds, slices) successes and failures."""
        n = len(self.settings)
        return self._sums[:, :n], self._successes[:n], self._failures[:n]


@dataclass(frozen=True)
class Rule:
    """The whole run's rule for the best setting, applied to the means of some of the queries."""

    order: Sequence[str]
    baseline: str
    objective: tuple[str, str]
    constraints: Sequence[Constraint]
    slices: list[str]
    metrics: Sequence[str]

    def means(self, sums: np.ndarray, successes: np.ndarray, failures: np.ndarray) -> SliceMeans:
        """The slice means of a part of the queries, from (metrics, settings, slices) sums over successful
        searches and (settings, slices) successes and failures."""
        per_slice = _means(sums, successes)
        overall = _means(sums.sum(axis=2), successes.sum(axis=1))
        values = np.concatenate([per_slice, overall[:, :, None]], axis=2).transpose(1, 2, 0)
        return SliceMeans(list(self.order), [*self.slices, OVERALL], list(self.metrics), values, failures.sum(axis=1))

    def best(self, sums: np.ndarray, successes: np.ndarray, failures: np.ndarray,
             present: np.ndarray) -> str | None:
        """The best feasible setting given the sums of `means` and which slices have queries in this part."""
        # A slice with no query in this part cannot be checked: "*" constraints skip it.
        checked = [s for s, here in zip(self.slices, present) if here]
        return choose_best(self.means(sums, successes, failures), self.baseline, self.objective, self.constraints,
                           checked).best


def cross_validate(sums: FoldSums, rows_of: Callable[[list[str]], pl.DataFrame], baseline: str,
                   objective: tuple[str, str], constraints: Sequence[Constraint]) -> CrossValidation | None:
    """k-fold cross-validation of the choice of setting, over queries, stratified by slice.

    `sums`: every setting's fold sums, settings in evaluation order (the tie rule of `choose_best`); its
    metrics must hold the objective's and the constraints'. `rows_of` gives the scored per-query rows of a
    few settings (the folds' choices), each query's value counting for the fold that held it out; a missing
    row counts as a failed search. A fold whose training part has no feasible setting keeps the baseline.

    None when there are fewer than two queries to split. With fewer queries than `settings.folds`, each
    query is its own fold.
    """
    folds, slices, metrics, query_ids = sums.folds, sums.slices, sums.metrics, sums.query_ids
    if folds < 2:
        return None
    order = sums.settings
    total, successes, failures = sums.arrays()
    members = sums.members
    rule = Rule(order, baseline, objective, constraints, slices, metrics)
    all_sums, all_successes, all_failures, all_members = (total.sum(axis=2), successes.sum(axis=1),
                                                          failures.sum(axis=1), members.sum(axis=0))
    in_sample_best = rule.best(all_sums, all_successes, all_failures, all_members > 0)
    choices = tuple(rule.best(all_sums - total[:, :, f], all_successes - successes[:, f],
                              all_failures - failures[:, f], all_members - members[f] > 0) for f in range(folds))

    applied = list(dict.fromkeys([baseline, in_sample_best or baseline, *(c or baseline for c in choices)]))
    values, ok = matrices(rows_of(applied), applied, query_ids, metrics)
    position = {sid: i for i, sid in enumerate(applied)}
    scored_by = np.array([position[c or baseline] for c in choices])[sums.fold]  # per query, its fold's setting
    columns = np.arange(len(query_ids))
    # Each: (metrics, queries) values and (queries,) success flags.
    held_out = values[:, scored_by, columns], ok[scored_by, columns]
    baseline_row = values[:, position[baseline]], ok[position[baseline]]
    best = values[:, position[in_sample_best or baseline]], ok[position[in_sample_best or baseline]]
    gains: dict[str, dict[str, Gain]] = {}
    for s in [*slices, OVERALL]:
        member = np.ones(len(query_ids), dtype=bool) if s == OVERALL else sums.slice_of == slices.index(s)
        means = [np.where(np.isnan(mean), None, mean).tolist() for mean in
                 (_means((v * member).sum(axis=1), (o & member).sum()) for v, o in (baseline_row, held_out, best))]
        gains[s] = {m: Gain(int(member.sum()), means[0][k], means[1][k], means[2][k]) for k, m in enumerate(metrics)}
    return CrossValidation(folds, sums.seed, objective, baseline, in_sample_best, choices,
                           tuple(int(n) for n in members.sum(axis=1)), gains, sums.grouped_by)


def summary_lines(cv: CrossValidation, metric_label: str | None = None) -> list[str]:
    """What the console summary and the report say, the held-out figure first, e.g.

    Held-out gain (5-fold CV, stratified by slice): overall MRR +0.0210 (in-sample +0.0441); folds agree on
    the setting 3 of 5
    """
    metric, objective_slice = cv.objective
    gain = cv.gains[objective_slice][metric]
    setting, agreeing = cv.agreement()
    grouped = ", grouped by expected key" if cv.grouped_by == "expected" else ""
    lines = [f"Held-out gain ({cv.folds}-fold CV, stratified by slice{grouped}): {objective_slice} "
             f"{metric_label or metric} "
             f"{_signed(gain.held_out_gain)} (in-sample {_signed(gain.in_sample_gain)}); "
             f"folds agree on the setting {agreeing} of {cv.folds}"]
    in_sample = cv.in_sample_best or cv.baseline
    lines.append(f"  {agreeing} of {cv.folds} folds chose {setting} "
                 f"({'as on all queries' if setting == in_sample else f'on all queries: {in_sample}'}); by fold: "
                 + "; ".join(f"{f + 1}: {c or f'nothing feasible, the baseline {cv.baseline} stands'}"
                             for f, c in enumerate(cv.choices)))
    if gain.held_out_gain is not None and gain.in_sample_gain is not None and gain.held_out_gain > gain.in_sample_gain:
        lines.append("  The held-out gain is above the in-sample one because the folds did not all make the in-sample "
                     "choice: a mix of settings, each scored on queries its fold did not see, can beat any one "
                     "setting on all queries (and a fold may pick a setting the constraints reject on all queries). "
                     "One setting deployed should be expected to gain no more than the in-sample figure.")
    return lines


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.4f}"
