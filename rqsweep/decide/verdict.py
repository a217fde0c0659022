"""The verdict a team reads first: keep the baseline or change it, and route by slice or not, each only where its
held-out gain is significant.

The best of many settings on a small golden set is partly luck, and partly the machine: the local model's last
bits move a few ranks, and the in-sample best flips with them. So the run's maximum is not its decision:

- the global setting changes only when the held-out gain of choosing it (every query scored by the setting its
  cross-validation fold chose without it) is significantly above zero: the paired sign-flip permutation test of
  `significance` at ALPHA. Otherwise the baseline stays. Without cross-validation, the same test on the
  in-sample best, which says so: its gain is optimistic.
- the routing table is stated when its held-out gain over the baseline has a bootstrap interval above zero.
  It is chosen and measured under the verdict's global setting: when the baseline stays, every fold's global
  setting is the baseline (`route(fixed_global=...)`), so each slice's guard weighs its own setting against the
  baseline it would otherwise get.
- both tests leave out the queries that some setting compared ranks numerically sensitively (a rank another C
  library's math may move): the verdict rests on what every machine ranks alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import polars as pl

from rqsweep import metrics
from rqsweep.golden import OVERALL
from rqsweep.knobs import Knobs
from rqsweep.decide.routing import Routing
from rqsweep.decide.significance import ALPHA, PairedTest, paired_test

TEST = f"two-sided paired sign-flip permutation test of the mean per-query difference, significant at p < {ALPHA:g}"


@dataclass(frozen=True)
class Verdict:
    """What to deploy: `setting` for every query a route does not take, `routes` (slice -> setting) when routing
    holds; each with the held-out test it rests on."""

    baseline: str
    setting: str
    changed: bool
    held_out: bool  # whether `gain` is held out (cross-validation) or in sample
    gain: PairedTest | None  # of the global choice over the baseline; None when there was nothing to test
    reason: str  # why the global setting is what it is, in words
    routes: dict[str, str] | None  # slice -> setting, routed slices only; None when routing does not hold
    routing_gain: PairedTest | None  # of the table applied, over the baseline, held out; None without routing
    applied: Routing | None = None  # the routing analysis under the verdict's global setting (routing.json's)

    def lines(self, metric_label: str) -> list[str]:
        """stdout's first lines and the report's first paragraphs."""
        out = [f"Verdict: {'change to' if self.changed else 'keep the baseline'} {Knobs.from_id(self.setting).label()}"
               f": {self.reason}"]
        if self.routing_gain is not None:
            gain = f"{metric_label} {_figure(self.routing_gain)} over the baseline, held out (nested CV)"
            if self.routes:
                routes = "; ".join(f"{s} -> {Knobs.from_id(sid).label()}" for s, sid in self.routes.items())
                out.append(f"Route by slice (for a caller that knows the query's slice): {routes}; every other slice "
                           f"-> {'the baseline' if not self.changed else 'the setting above'}. Gain {gain}; "
                           "routing.json holds the request fields.")
            else:
                out.append(f"No routing: one setting per slice gains {gain}, an interval that does not stay above "
                           "zero (or no slice's own setting held out against the global one).")
        return out

    def as_json(self, metric_label: str, numeric_range: dict | None = None) -> dict:
        """run.json's `decision`: the lines as printed, and the verdict setting's `numeric_range` when known."""
        def test(t: PairedTest | None) -> dict | None:
            return None if t is None else {"queries": t.queries, "mean": t.mean_difference,
                                           "ci": [t.ci_low, t.ci_high], "p_value": t.p_value}

        return {"setting_id": self.setting, "request": Knobs.from_id(self.setting).request(), "changed": self.changed,
                "baseline": self.baseline, "held_out": self.held_out, "test": TEST, "alpha": ALPHA,
                "gain": test(self.gain), "reason": self.reason,
                "routes": None if self.routes is None else {
                    s: {"setting_id": sid, "request": Knobs.from_id(sid).request()} for s, sid in self.routes.items()},
                "routing_gain": test(self.routing_gain), "lines": self.lines(metric_label),
                "numeric_range": numeric_range}


def _figure(t: PairedTest) -> str:
    return f"{t.mean_difference:+.4f} [{t.ci_low:+.4f}, {t.ci_high:+.4f}]"


def decide(best: str | None, baseline: str, routing: Routing | None, kept: Routing | None,
           in_sample: pl.DataFrame | None, metric: str, metric_label: str) -> Verdict:
    """The verdict from the in-sample best (None: nothing feasible), the routing's nested cross-validation with the
    global setting chosen in each fold (`routing`) and with the baseline kept as the global one (`kept`), both None
    without `validation:`; and, without it, `in_sample`: the best's and the baseline's per-query rows."""
    if best is None or (best == baseline and routing is None):
        why = ("no setting is feasible: every evaluated setting violates a constraint" if best is None else
               "it is itself the best feasible setting, in sample")
        return _with_routing(Verdict(baseline, baseline, False, routing is not None, None, why, None, None), kept)
    if routing is not None:
        m = _settled(routing)
        gain, where = paired_test(routing.global_values[m] - routing.baseline_values[m],
                                  groups=routing.groups_of(m)), "held out"
        left_out = int((routing.members(OVERALL) & routing.unsettled).sum())
        how = (f"{routing.folds}-fold cross-validation"
               + (f"; {left_out} numerically sensitive queries left out" if left_out else ""))
    else:
        rows = in_sample.filter(pl.col("error").is_null()).pivot(on="setting_id", index="query_id", values=metric)
        rows = rows.drop_nulls()
        gain, where = paired_test((rows[best] - rows[baseline]).to_numpy()), "in sample"
        how = "no cross-validation configured: an in-sample gain is optimistic"
    changed = gain.significant and gain.mean_difference > 0
    figures = f"{metric_label} gain {_figure(gain)} {where}, p = {gain.p_value:.4f} ({how}; {TEST})"
    chooser = "global choice" if routing is not None else "best feasible setting"
    why = (f"the {chooser}'s {figures}" if changed else
           f"no setting's gain over it is significant {where}: the {chooser}'s {figures}"
           + ("" if best == baseline else f"; the best in sample, {Knobs.from_id(best).label()}, is not the verdict"))
    return _with_routing(Verdict(baseline, best if changed else baseline, changed, routing is not None, gain, why,
                                 None, None), routing if changed else kept)


def _settled(routing: Routing) -> np.ndarray:
    """The queries every figure of the verdict averages: paired, and ranked alike by any machine's math (no
    numerically sensitive cell among the settings compared), so that the verdict does not flip with the C
    library."""
    return routing.members(OVERALL) & ~routing.unsettled


def _with_routing(verdict: Verdict, routing: Routing | None) -> Verdict:
    """`verdict` with the routing applied under it: `routing`'s global setting is the verdict's (the baseline
    when it stays, `kept`), so a query is scored by its fold's route, or by that setting."""
    if routing is None or not any(r.routed for r in routing.routes.values()):
        return replace(verdict, applied=routing)
    m = _settled(routing)
    gain = paired_test(routing.routed_values[m] - routing.baseline_values[m], groups=routing.groups_of(m))
    routes = {s: r.setting for s, r in routing.routes.items() if r.routed} if gain.ci_low > 0 else None
    return replace(verdict, routes=routes, routing_gain=gain, applied=routing)


def in_sample_rows(queries: Path, best: str | None, baseline: str, metric: str) -> pl.DataFrame:
    """The best's and the baseline's per-query rows of queries.parquet: what `decide` tests without
    cross-validation."""
    pair = [sid for sid in (best, baseline) if sid is not None]
    return (pl.scan_parquet(queries).filter(pl.col("setting_id").is_in(pair))
            .select("setting_id", "query_id", "error", metric).collect())


def numeric_range(extremes: tuple[pl.DataFrame, pl.DataFrame] | None, score: Callable[[pl.DataFrame], pl.DataFrame],
                  nominal: pl.DataFrame, names: Sequence[str]) -> dict[str, dict[str, list[float]]] | None:
    """Slice -> metric -> [low, high] of one setting: its grid rows (`nominal`) and its rows with every
    numerically sensitive query at its best and at its worst (`Backend.numeric_extremes`, scored by `score`):
    what another machine's math may give. None when the backend has no such extremes."""
    if extremes is None:
        return None
    frames = [nominal, *(metrics.slice_metrics(score(rows), names) for rows in extremes)]
    values = {s: {m: [r[m] for f in frames for r in f.filter(pl.col("slice") == s).iter_rows(named=True)
                      if r[m] is not None] for m in names} for s in nominal["slice"].to_list()}
    return {s: {m: [min(v), max(v)] for m, v in by.items() if v} for s, by in values.items()}
