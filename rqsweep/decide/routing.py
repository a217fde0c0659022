"""Routing: one setting per slice, for a caller that knows the query's slice, validated held out.

SOAT's search takes `rrf_k`, `min_similarity` and `recency_half_life_days` in each request, so a caller that
knows what kind of question it sends can send each kind its own setting. Besides the one global choice
(`choose_best`), each slice gets:

- its own best: the best feasible setting on the slice's own queries (the objective's metric on that slice),
  under the constraints that cover that slice (`slice: "*"` or the slice by name). Other slices' constraints
  and those on `overall` do not bind it: it serves only that slice's queries. When it does not beat the global
  setting on the slice, the slice keeps the global setting.
- the guard (GUARD): the slice leaves the global setting only when its own choice holds out. Cross-validation
  over the queries the routing is chosen on: for each fold holding queries of the slice, both choices (the
  slice's own and the global) are made again without that fold and compared on its queries of the slice. The
  slice is routed when its own choice wins in a strict majority of those folds and its pooled held-out gain is
  above zero; a slice too small to win most folds stays on the global setting.

The held-out gain of routing is measured by nested cross-validation on the same folds as the global
estimate (`rqsweep.decide.cross_validation`): each outer fold's routing (global choice, candidates and guard, whose inner
folds are the other outer folds) is chosen without the fold's queries and scores them. No search is repeated:
every choice reads the per-(setting, fold, slice) sums of the evaluated grid, and only the few settings the
folds apply are read back query by query. Given each query's features, the same choices (`decide.choices`) and
folds also choose and validate routing by rule, for a caller that knows no slice (`decide.rules`): routing.json's
`rules`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import polars as pl

from rqsweep.config import Constraint
from rqsweep.decide.choices import Chooser, guard
from rqsweep.decide.rules import Rules, learn
from rqsweep.golden import OVERALL
from rqsweep.knobs import Knobs
from rqsweep.decide.significance import ALPHA, ROUNDS, paired_test
from rqsweep.decide.cross_validation import FoldSums, matrices

GUARD = ("a slice leaves the global setting only when its own choice, made again without each fold that holds its "
         "queries, beats the global choice made without that fold on the fold's queries of the slice in a strict "
         "majority of those folds, with a pooled held-out gain above zero")
ROUTING_FORMAT = 1


@dataclass(frozen=True)
class Route:
    """One slice's routing, chosen on all queries."""

    setting: str  # what the slice's queries are sent with: `own` when routed, else the global setting
    own: str  # the slice's own best (the global setting when nothing beats it on the slice)
    routed: bool
    folds_won: int  # guard: folds where `own`'s choice beat the global choice on the slice's held-out queries
    folds_compared: int  # guard: folds holding queries of the slice (0 when `own` is the global setting)
    guard_gain: float | None  # guard: the pooled held-out gain of the slice's own choices over the global ones


@dataclass(frozen=True)
class Routing:
    """The routing table and what nested cross-validation says of it.

    Per query (in `query_ids`' order): its slice, and the objective metric's value at the baseline, at the
    global setting its outer fold chose and at the setting its fold's routing sent it with; `paired` marks the
    queries whose searches succeeded for all three, the ones every held-out figure averages; `rerouted` the queries
    whose fold routed their slice.
    """

    objective: tuple[str, str]
    baseline: str
    folds: int
    seed: int
    global_setting: str  # the best feasible setting on all queries, else the baseline
    routes: dict[str, Route]  # slice -> its route, in the golden set's order of slices
    fold_globals: tuple[str, ...]  # per outer fold, the global setting its held-out queries were scored with
    fold_routes: tuple[dict[str, str], ...]  # per outer fold, slice -> the setting its held-out queries got
    query_ids: list[str]
    slice_of: list[str]
    baseline_values: np.ndarray
    global_values: np.ndarray
    routed_values: np.ndarray
    paired: np.ndarray
    rerouted: np.ndarray  # per query: its fold's routing sent its slice elsewhere than the fold's global setting
    unsettled: np.ndarray  # per query: numerically sensitive at the baseline, its fold's global or its route
    groups: np.ndarray | None  # per query, the group the intervals resample whole (`FoldSums.group_of`); None: alone
    rules: Rules | None = None  # routing by a rule on the query's features (given the features), on the same folds

    def groups_of(self, members: np.ndarray) -> np.ndarray | None:
        return None if self.groups is None else self.groups[members]

    def members(self, slice_: str) -> np.ndarray:
        slices = np.array(self.slice_of)
        return self.paired & (np.ones(len(slices), bool) if slice_ == OVERALL else slices == slice_)

    def held_out(self, slice_: str) -> tuple[int, float | None, float | None, float | None]:
        """(paired queries, baseline, global, routing) held-out means on a slice or overall."""
        m = self.members(slice_)
        if not m.any():
            return 0, None, None, None
        return (int(m.sum()), float(self.baseline_values[m].mean()), float(self.global_values[m].mean()),
                float(self.routed_values[m].mean()))

    def record(self, run_id: str) -> dict:
        """What routing.json holds: each slice's request fields, ready for a caller that knows the query's slice,
        and the held-out figures with percentile bootstrap intervals over the held-out queries (seeded)."""
        held_out = {}
        for s in [*self.routes, OVERALL]:
            m = self.members(s)
            g = self.groups_of(m)
            n, base, global_, routed = self.held_out(s)
            held_out[s] = {"queries": n, "baseline": base, "global": global_, "routing": routed,
                           "global_gain": _interval(self.global_values[m] - self.baseline_values[m], g),
                           "routing_gain": _interval(self.routed_values[m] - self.baseline_values[m], g),
                           "routing_over_global": _interval(self.routed_values[m] - self.global_values[m], g)}
        metric, objective_slice = self.objective
        out = {
            "rqsweep_routing": ROUTING_FORMAT, "run_id": run_id,
            "objective": {"metric": metric, "slice": objective_slice}, "baseline": self.baseline,
            "global": {"setting_id": self.global_setting, "request": Knobs.from_id(self.global_setting).request()},
            "guard": GUARD,
            "slices": {s: {"setting_id": r.setting, "request": Knobs.from_id(r.setting).request(), "routed": r.routed,
                           "own_best": r.own, "guard": {"folds_won": r.folds_won,
                                                        "folds_compared": r.folds_compared,
                                                        "held_out_gain": r.guard_gain}}
                       for s, r in self.routes.items()},
            "held_out": {"folds": self.folds, "seed": self.seed, "grouped_by": "query" if self.groups is None else
                         "expected", "confidence": 1 - ALPHA,
                         "bootstrap_resamples": ROUNDS, "fold_globals": list(self.fold_globals),
                         "fold_routes": [dict(r) for r in self.fold_routes], "slices": held_out},
        }
        if self.rules is not None:
            out["rules"] = {**self.rules.record(), "held_out": self._rules_held_out()}
        return out

    def _rules_held_out(self) -> dict:
        """Per slice and overall, the rule routing's held-out mean and its gains over the baseline and the global
        setting, on the queries whose three searches succeeded."""
        out = {}
        for s in [*self.routes, OVERALL]:
            m = self.members(s) & self.rules.ok
            g = self.groups_of(m)
            out[s] = {"queries": int(m.sum()), "rules": float(self.rules.values[m].mean()) if m.any() else None,
                      "rules_gain": _interval(self.rules.values[m] - self.baseline_values[m], g),
                      "rules_over_global": _interval(self.rules.values[m] - self.global_values[m], g)}
        return out


def _interval(d: np.ndarray, groups: np.ndarray | None) -> dict:
    test = paired_test(d, groups=groups)
    return {"mean": test.mean_difference, "ci": [test.ci_low, test.ci_high], "p_value": test.p_value}


def _guarded(chooser: Chooser, folds: tuple[int, ...]) -> tuple[str, dict[str, Route]]:
    """The routing chosen on `folds`: the global setting, and each slice's route after the guard, whose
    folds are `folds` themselves (each left out in turn)."""
    chosen, own = chooser.choose(folds)
    routes = {}
    for s, candidate in own.items():
        if candidate == chosen:
            routes[s] = Route(chosen, chosen, False, 0, 0, None)
            continue
        k = chooser.slices.index(s)

        def fold_means(h: int) -> tuple[float | None, float | None, int]:
            inner_global, inner_own = chooser.choose(tuple(x for x in folds if x != h))
            return (chooser.mean(inner_own.get(s, inner_global), h, k), chooser.mean(inner_global, h, k),
                    chooser.members[h, k])

        won, n_compared, gain, routed = guard(fold_means(h) for h in folds if chooser.members[h, k])
        routes[s] = Route(candidate if routed else chosen, candidate, routed, won, n_compared, gain)
    return chosen, routes


def route(sums: FoldSums, rows_of: Callable[[list[str]], pl.DataFrame], baseline: str, objective: tuple[str, str],
          constraints: Sequence[Constraint], fixed_global: str | None = None,
          features: pl.DataFrame | None = None) -> Routing | None:
    """The routing table chosen on all queries, and its held-out figures by nested cross-validation; with
    `features` (`query_features.features_table`), the rule on them too (`rules.learn`), on the same folds.

    `sums` and `rows_of` are those of `validation.cross_validate` (the same folds). With `fixed_global` (the
    baseline, when the verdict keeps it), every choice of the global setting is that one, so each slice's guard
    weighs its own setting against it. None when there are fewer than two folds.
    """
    if sums.folds < 2:
        return None
    chooser = Chooser(sums, baseline, objective, constraints, fixed_global)
    everything = tuple(range(sums.folds))
    global_setting, routes = _guarded(chooser, everything)
    outer = [_guarded(chooser, tuple(x for x in everything if x != f)) for f in everything]
    fold_globals = tuple(g for g, _ in outer)
    fold_routes = tuple({s: r.setting for s, r in routes_f.items()} for _, routes_f in outer)

    applied = list(dict.fromkeys([baseline, *fold_globals, *(sid for r in fold_routes for sid in r.values())]))
    rows = rows_of(applied)
    values, ok = matrices(rows, applied, sums.query_ids, [objective[0]])
    sensitive = np.zeros_like(ok)
    if "numeric_sensitive" in rows.columns:
        flags = rows.with_columns(pl.col("numeric_sensitive").fill_null(False).cast(pl.Float64))
        sensitive = matrices(flags, applied, sums.query_ids, ["numeric_sensitive"])[0][0] > 0
    position = {sid: i for i, sid in enumerate(applied)}
    slice_names = [sums.slices[k] for k in sums.slice_of]
    global_at = np.array([position[fold_globals[f]] for f in sums.fold])
    routed_at = np.array([position[fold_routes[f].get(s, fold_globals[f])] for f, s in zip(sums.fold, slice_names)])
    columns = np.arange(len(sums.query_ids))
    base_at = np.full(len(columns), position[baseline])
    paired = ok[base_at, columns] & ok[global_at, columns] & ok[routed_at, columns]
    rules = None
    if features is not None:
        rules = learn(chooser, features, list(sums.query_ids), sums.fold, sums.slice_of, rows_of)
        m = paired & rules.ok
        over_global = paired_test(rules.values[m] - values[0, global_at, columns][m],
                                  groups=None if sums.group_of is None else sums.group_of[m])
        rules = replace(rules, over_global=over_global)
    return Routing(objective, baseline, sums.folds, sums.seed, global_setting, routes, fold_globals, fold_routes,
                   list(sums.query_ids), slice_names, values[0, base_at, columns], values[0, global_at, columns],
                   values[0, routed_at, columns], paired, routed_at != global_at,
                   sensitive[base_at, columns] | sensitive[global_at, columns] | sensitive[routed_at, columns],
                   sums.group_of, rules)
