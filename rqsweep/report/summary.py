"""The end-of-run text on stdout: best beside baseline per slice, and how many settings failed which constraint."""

from __future__ import annotations

from typing import Mapping, Sequence

import polars as pl

from rqsweep import metrics
from rqsweep.golden import OVERALL
from rqsweep.knobs import Knobs


def _fmt(v: float | None) -> str:
    return "  -   " if v is None else f"{v:.4f}"


def summarise(grid: pl.DataFrame, best: str | None, baseline: str, objective: tuple[str, str],
              metric_names: Sequence[str], rejected: Mapping[str, int], knobs: Mapping[str, Knobs],
              extra: Sequence[str] = (), warnings: Sequence[str] = ()) -> str:
    """The summary printed at the end of a run. `extra` lines (the held-out estimate of the gain) come first: the
    decision's own figures are in-sample, measured on the queries the setting was picked on. `warnings` (knob
    ranges that do not act) come last."""

    def rows(sid: str) -> dict[str, dict]:
        return {r["slice"]: r for r in grid.filter(pl.col("setting_id") == sid).iter_rows(named=True)}

    metric, slice_ = objective
    n = grid["setting_id"].n_unique()
    base_rows = rows(baseline)
    best_rows = rows(best or baseline)
    label = metrics.get(metric).label
    lines = list(extra)
    if best is None:
        lines.append(f"No feasible setting among {n} evaluated.")
    else:
        lines.append(f"Best feasible setting: {knobs[best].label()}  ({label}[{slice_}] "
                     f"{_fmt(base_rows[slice_][metric])} -> {_fmt(best_rows[slice_][metric])}, in-sample)")
    width = 17
    lines += [
        f"Baseline: {knobs[baseline].label()}",
        f"{'slice':<16}{'queries':>8}   " + "   ".join(f"{metrics.get(m).label:^{width}}" for m in metric_names),
        f"{'':<16}{'':>8}   " + "   ".join(f"{'base -> best':^{width}}" for _ in metric_names),
    ]
    for s in sorted(set(base_rows) - {OVERALL}) + [OVERALL]:
        cells = "   ".join(f"{_fmt(base_rows[s][m])} -> {_fmt(best_rows[s][m])}" for m in metric_names)
        lines.append(f"{s:<16}{base_rows[s]['queries']:>8}   {cells}")
    ties = [f"{s} {r['tie_sensitive']}" for s, r in sorted(best_rows.items())
            if s != OVERALL and r.get("tie_sensitive")]
    if ties:
        lines.append("Tie-sensitive queries at this setting (rank depends on storage order): " + ", ".join(ties))
    infeasible = grid.filter((pl.col("slice") == OVERALL) & ~pl.col("feasible")).height
    lines.append(f"{infeasible} of {n} settings infeasible.")
    for key, count in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
        name, _, kind = key.partition(":")
        reason = {"min": "below its floor", "max_drop": "dropped too far vs the baseline"}.get(kind, "")
        lines.append(f"  {count:>6}  {name} {reason}".rstrip())
    lines += [f"Warning: {w}." for w in warnings]
    return "\n".join(lines)
