"""The choices routing makes on a part of the folds, shared by slice routing (`rqsweep.decide.routing`) and rule
routing (`rqsweep.decide.rules`): the global setting and each slice's own best, from the per-(setting, fold, slice)
sums of the evaluated grid, each part of the folds chosen on once."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Iterable, Sequence

import numpy as np

from rqsweep.config import Constraint
from rqsweep.decide.constraints import best_feasible, constraint_checks
from rqsweep.decide.cross_validation import FoldSums, Rule


def fold_sum(a: np.ndarray, folds: tuple[int, ...]) -> np.ndarray:
    """The sum over `folds` of a fold-first array, added one fold after another in their order: the bits numpy
    gives `FoldSums`' arrays summed over those folds, for two settings or more (`tests/test_routing.py` ties the
    two; a lone setting's choices do not depend on its sums)."""
    total = np.zeros(a.shape[1:], a.dtype)  # counts fit their int32: they are at most the queries
    for f in folds:
        total += a[f]
    return total


def guard(held_out: Iterable[tuple[float | None, float | None, int]]) -> tuple[int, int, float | None, bool]:
    """The guard of slice routing and of rule routing, on (routed mean, global mean, queries) of each inner fold
    compared: the folds won, the folds compared, the pooled held-out gain, and whether the route replaces the global
    setting (a strict majority of the folds won, with a pooled gain above zero)."""
    won = compared = queries = 0
    gained = 0.0
    for mine, theirs, n in held_out:
        compared += 1
        if mine is not None and theirs is not None:
            won += mine > theirs
            gained += (mine - theirs) * n
            queries += n
    # Plain Python values: numpy's bool_ would reach routing.json as the string "True" or "False".
    gain = float(gained / queries) if queries else None
    return won, compared, gain, bool(2 * won > compared and gain is not None and gain > 0)


class Chooser:
    """Choices on a part of the folds, from the fold sums: the global setting and each slice's own."""

    def __init__(self, sums: FoldSums, baseline: str, objective: tuple[str, str], constraints: Sequence[Constraint],
                 fixed_global: str | None = None):
        total, successes, failures = sums.arrays()
        # Only the metrics a choice reads (the objective's first, then the constraints'), each array fold first:
        # a part of the folds is then added up from contiguous blocks.
        metrics = list(dict.fromkeys([objective[0], *(c.metric for c in constraints)]))
        self.total = np.ascontiguousarray(np.moveaxis(total[[sums.metrics.index(m) for m in metrics]], 2, 0))
        self.successes, self.failures = (np.ascontiguousarray(np.moveaxis(a, 1, 0)) for a in (successes, failures))
        self.members, self.slices = sums.members, sums.slices
        self.baseline, self.objective, self.constraints = baseline, objective, list(constraints)
        self.rule = Rule(sums.settings, baseline, objective, constraints, sums.slices, metrics)
        self.settings, self.fixed_global = sums.settings, fixed_global
        self.index = {sid: i for i, sid in enumerate(sums.settings)}
        self.choose = lru_cache(maxsize=None)(self._choose)

    def _choose(self, folds: tuple[int, ...]) -> tuple[str, dict[str, str]]:
        means = self.rule.means(*(fold_sum(a, folds) for a in (self.total, self.successes, self.failures)))
        checked = [s for s, n in zip(self.slices, self.members[list(folds)].sum(axis=0)) if n]
        # `choose_best` on `checked` for the global setting, and on one slice under the constraints covering it
        # for that slice's own best: each constraint on each slice is checked once for all of them.
        checks = [(s, v > 0) for _, s, v in constraint_checks(means, self.baseline, self.constraints, checked)]
        incomplete = means.errors > 0

        def best(slice_: str, on: Callable[[str], bool]) -> str | None:
            score = means.values[:, means.slices.index(slice_), 0]
            violated = np.logical_or.reduce([incomplete, *(v for s, v in checks if on(s))])
            return best_feasible(self.settings, self.baseline, score, ~violated)

        chosen = self.fixed_global or best(self.objective[1], lambda _: True) or self.baseline
        own = {}
        for s in checked:
            mine = best(s, lambda t: t == s)
            values = means.values[:, means.slices.index(s), 0]
            at_global = values[self.index[chosen]]
            beats = mine is not None and values[self.index[mine]] > (-np.inf if np.isnan(at_global) else at_global)
            own[s] = mine if beats else chosen
        return chosen, own

    def mean(self, setting: str, fold: int, slice_: int) -> float | None:
        i = self.index[setting]
        n = self.successes[fold, i, slice_]
        return float(self.total[fold, 0, i, slice_] / n) if n else None
