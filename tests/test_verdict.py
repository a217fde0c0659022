"""The verdict's rules at their edges: the global setting changes only on a significant held-out gain, routing is
stated only when its held-out interval stays above zero, and the table applied keeps the baseline elsewhere."""

from __future__ import annotations

import numpy as np
import polars as pl

from rqsweep.decide.routing import Route, Routing
from rqsweep.decide.significance import ALPHA, PairedTest
from rqsweep.decide.verdict import decide

BASE, BEST, OWN = "k60_moff_h0.0", "k3_moff_h0.0", "k2_moff_h60.0"


def routing(global_gain: list[float], routed_gain: list[float], rerouted: list[bool], unsettled=None,
            global_setting: str = BEST) -> Routing:
    """Queries of two slices `a` (first half) and `b`, the baseline at 0.5 on each; `b` routed to OWN."""
    n = len(global_gain)
    base = np.full(n, 0.5)
    g = global_setting
    return Routing(("mrr", "overall"), BASE, 5, 0, g,
                   {"a": Route(g, g, False, 0, 0, None), "b": Route(OWN, OWN, True, 5, 5, 0.1)},
                   (g,) * 5, ({"a": g, "b": OWN},) * 5, [f"q{i}" for i in range(n)],
                   ["a"] * (n // 2) + ["b"] * (n - n // 2), base, base + np.array(global_gain),
                   base + np.array(routed_gain), np.ones(n, bool), np.array(rerouted),
                   np.zeros(n, bool) if unsettled is None else np.array(unsettled), None)


def test_a_gain_significant_held_out_changes_the_setting_and_one_that_is_not_keeps_the_baseline():
    gains = [0.1] * 20
    changed = decide(BEST, BASE, routing(gains, gains, [False] * 20), None, None, "mrr", "MRR")
    assert changed.changed and changed.setting == BEST and changed.gain.p_value < ALPHA
    assert changed.lines("MRR")[0].startswith("Verdict: change to rrf_k=3 ")
    # Half the queries gain and half lose as much: mean 0, p = 1.
    even = [0.1, -0.1] * 10
    kept = decide(BEST, BASE, routing(even, even, [False] * 20), None, None, "mrr", "MRR")
    assert not kept.changed and kept.setting == BASE
    assert kept.lines("MRR")[0].startswith("Verdict: keep the baseline rrf_k=60 ")
    assert "the best in sample, rrf_k=3 min_similarity=off half_life=0d, is not the verdict" in kept.reason
    # A significant loss is no reason to change either.
    lost = decide(BEST, BASE, routing([-0.1] * 20, [-0.1] * 20, [False] * 20), None, None, "mrr", "MRR")
    assert not lost.changed and lost.gain.p_value < ALPHA


def test_a_p_value_exactly_at_alpha_is_not_significant():
    assert not PairedTest(20, 20, 0.1, 0.05, 0.15, ALPHA).significant
    assert PairedTest(20, 20, 0.1, 0.05, 0.15, np.nextafter(ALPHA, 0)).significant


def test_routing_is_stated_only_when_its_interval_stays_above_zero_and_is_chosen_against_the_baseline_kept():
    zero = [0.0] * 20
    free = routing([-0.1] * 20, [-0.1] * 10 + [0.2] * 10, [False] * 10 + [True] * 10)
    # The baseline stays: the routing applied is the one whose every fold kept the baseline as its global setting.
    # Slice b's rerouted queries gain 0.2, slice a's stay at the baseline: 0.1 overall, its interval above zero.
    kept = routing(zero, zero[:10] + [0.2] * 10, [False] * 10 + [True] * 10, global_setting=BASE)
    held = decide(BEST, BASE, free, kept, None, "mrr", "MRR")
    assert not held.changed and held.routes == {"b": OWN} and held.applied is kept
    assert abs(held.routing_gain.mean_difference - 0.1) < 1e-12 and held.routing_gain.ci_low > 0
    assert "every other slice -> the baseline" in held.lines("MRR")[1]
    # One rerouted query of twenty gains: the bootstrap's lower bound lands exactly on zero, and no routing is said.
    edge_kept = routing(zero, zero[:19] + [0.2], [False] * 19 + [True], global_setting=BASE)
    edge = decide(BEST, BASE, routing(zero, zero, [False] * 20), edge_kept, None, "mrr", "MRR")
    assert edge.routing_gain.ci_low == 0.0 and edge.routes is None
    assert edge.lines("MRR")[1].startswith("No routing: ")


def test_numerically_sensitive_queries_are_left_out_of_the_verdicts_tests():
    """Ten queries gain 0.1 and ten are unchanged; the gain is significant. With the ten gaining queries
    numerically sensitive (another machine's math may move them), what is left shows no gain: the baseline stays."""
    gains = [0.1] * 10 + [0.0] * 10
    assert decide(BEST, BASE, routing(gains, gains, [False] * 20), None, None, "mrr", "MRR").changed
    shaky = decide(BEST, BASE, routing(gains, gains, [False] * 20, [True] * 10 + [False] * 10), None, None, "mrr",
                   "MRR")
    assert not shaky.changed and shaky.gain.queries == 10 and "10 numerically sensitive queries left out" in shaky.reason


def test_without_cross_validation_the_best_is_tested_in_sample_and_says_so():
    rows = pl.DataFrame({"setting_id": [BEST] * 20 + [BASE] * 20, "query_id": [f"q{i}" for i in range(20)] * 2,
                         "error": [None] * 40, "mrr": [1.0] * 20 + [0.5] * 20})
    verdict = decide(BEST, BASE, None, None, rows, "mrr", "MRR")
    assert verdict.changed and not verdict.held_out and "in sample" in verdict.reason
    assert decide(None, BASE, None, None, None, "mrr", "MRR").reason.startswith("no setting is feasible")
