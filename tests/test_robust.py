"""The robust choice across embedders, on constructed grids: feasible under each, best worst case, ties kept."""

from __future__ import annotations

import numpy as np

from rqsweep.config import Constraint
from rqsweep.decide.constraints import SliceMeans, choose_best, choose_robust

SLICES = ["entity", "semantic"]
FLOOR = (Constraint("mrr", "*", 0.5, None),)


def means(rows: dict[str, tuple[float, float]]) -> SliceMeans:
    """Settings -> (entity, semantic) MRR; overall is their mean."""
    values = np.array([[[e], [s], [(e + s) / 2]] for e, s in rows.values()])
    return SliceMeans(list(rows), [*SLICES, "overall"], ["mrr"], values, np.zeros(len(rows), np.int64))


def run(rows: dict[str, tuple[float, float]]):
    m = means(rows)
    return m, choose_best(m, "base", ("mrr", "overall"), FLOOR, SLICES)


def test_each_embedders_own_best_is_infeasible_under_the_other():
    hash_run = run({"base": (0.6, 0.6), "a": (0.9, 0.95), "b": (0.9, 0.4), "c": (0.7, 0.7)})
    model_run = run({"base": (0.6, 0.6), "a": (0.45, 0.9), "b": (0.95, 0.95), "c": (0.75, 0.65)})
    assert hash_run[1].best == "a" and model_run[1].best == "b"
    robust = choose_robust({"hash": hash_run, "model": model_run}, "base", ("mrr", "overall"))
    assert robust.setting == "c" and robust.worst == 0.7 and robust.feasible_everywhere == 2


def test_the_worst_embedder_decides_not_the_mean():
    # d has the higher mean over the embedders (0.8 vs 0.72), e the higher worst case (0.7 vs 0.65).
    one = run({"base": (0.55, 0.55), "d": (0.95, 0.95), "e": (0.75, 0.75)})
    two = run({"base": (0.55, 0.55), "d": (0.65, 0.65), "e": (0.7, 0.7)})
    assert choose_robust({"1": one, "2": two}, "base", ("mrr", "overall")).setting == "e"


def test_an_exact_tie_keeps_the_baseline_then_the_earlier_setting():
    tied = {"x": (0.7, 0.7), "base": (0.7, 0.7), "y": (0.7, 0.7)}
    assert choose_robust({"1": run(tied), "2": run(tied)}, "base", ("mrr", "overall")).setting == "base"
    no_base = {"base": (0.4, 0.4), "x": (0.7, 0.7), "y": (0.7, 0.7)}  # the baseline breaks the floor
    assert choose_robust({"1": run(no_base), "2": run(no_base)}, "base", ("mrr", "overall")).setting == "x"


def test_a_mean_exactly_on_the_floor_is_feasible_under_every_embedder():
    on_bound = run({"base": (0.5, 0.5), "x": (0.5, 0.9)})
    robust = choose_robust({"1": on_bound, "2": on_bound}, "base", ("mrr", "overall"))
    assert robust.setting == "x" and robust.feasible_everywhere == 2


def test_nothing_feasible_everywhere_and_settings_one_embedder_lacks():
    one = run({"base": (0.4, 0.4), "x": (0.9, 0.9), "only-here": (0.99, 0.99)})
    two = run({"base": (0.9, 0.9), "x": (0.3, 0.9)})
    robust = choose_robust({"1": one, "2": two}, "base", ("mrr", "overall"))
    assert robust.setting is None and robust.worst is None and robust.feasible_everywhere == 0
