"""Constraint sensitivity without reruns: the best setting under a ladder of `max_drop` bounds, from the grid.

Every rung applies the run's own rule (`choose_best`) to the slice means already evaluated, with the bound of
each `max_drop` constraint replaced by the rung's (the `min` floors stay as they are); a config without a
`max_drop` constraint gets one on the objective's metric for every slice. So a rung says what a rerun with
that `max_drop` would choose, without a search.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from rqsweep.config import Constraint
from rqsweep.decide.constraints import SliceMeans, choose_best

LADDER = (0.0, 0.02, 0.05, 0.10, 0.20)


def with_max_drop(constraints: Sequence[Constraint], max_drop: float, metric: str) -> list[Constraint]:
    """The constraints with every `max_drop` bound set to `max_drop`; without one, `metric` on every slice."""
    drops = [c for c in constraints if c.max_drop is not None]
    if not drops:
        return [*constraints, Constraint(metric, "*", max_drop=max_drop)]
    return [dataclasses.replace(c, max_drop=max_drop) if c.max_drop is not None else c for c in constraints]


@dataclass(frozen=True)
class Rung:
    max_drop: float
    best: str | None  # None: nothing feasible at this bound
    feasible: int  # settings feasible at this bound


def constraint_ladder(means: SliceMeans, baseline: str, objective: tuple[str, str],
                      constraints: Sequence[Constraint], slices: Sequence[str],
                      steps: Sequence[float] = LADDER) -> list[Rung]:
    """One rung per `max_drop` of `steps`: its best feasible setting and how many settings it leaves feasible."""
    rungs = []
    for step in steps:
        verdicts = choose_best(means, baseline, objective, with_max_drop(constraints, step, objective[0]), slices)
        rungs.append(Rung(step, verdicts.best, int(verdicts.feasible().sum())))
    return rungs
