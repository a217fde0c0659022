"""The end-of-run text on stdout: best beside baseline per slice, and how many settings failed which constraint."""

from __future__ import annotations

from typing import Mapping, Sequence

import polars as pl

from rqsweep import metrics
from rqsweep.golden import OVERALL
from rqsweep.knobs import Knobs


# What each per-query flag means, as the summary and the report count them.
SENSITIVE = {"tie_sensitive": "Tie-sensitive queries (rank depends on storage order)",
             "numeric_sensitive": "Numerically sensitive queries (rank moves within the embedder's precision: "
                                  "another machine's math may give another)"}


def _fmt(v: float | None) -> str:
    return "  -   " if v is None else f"{v:.4f}"


def summarise(grid: pl.DataFrame, best: str | None, baseline: str, objective: tuple[str, str],
              metric_names: Sequence[str], rejected: Mapping[str, int], knobs: Mapping[str, Knobs],
              extra: Sequence[str] = (), warnings: Sequence[str] = ()) -> str:
    """The summary printed at the end of a run. `extra` lines (the verdict, then the held-out estimates) come
    first: the best setting's own figures are in sample, measured on the queries it was picked on. `warnings`
    (knob ranges that do not act) come last."""

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
        lines.append(f"Best feasible setting, in sample: {knobs[best].label()}  ({label}[{slice_}] "
                     f"{_fmt(base_rows[slice_][metric])} -> {_fmt(best_rows[slice_][metric])})")
    width = 17
    lines += [
        f"Baseline: {knobs[baseline].label()}",
        f"{'slice':<16}{'queries':>8}   " + "   ".join(f"{metrics.get(m).label:^{width}}" for m in metric_names),
        f"{'':<16}{'':>8}   " + "   ".join(f"{'base -> best':^{width}}" for _ in metric_names),
    ]
    for s in sorted(set(base_rows) - {OVERALL}) + [OVERALL]:
        cells = "   ".join(f"{_fmt(base_rows[s][m])} -> {_fmt(best_rows[s][m])}" for m in metric_names)
        lines.append(f"{s:<16}{base_rows[s]['queries']:>8}   {cells}")
    for flag, what in SENSITIVE.items():
        counts = [f"{s} {r[flag]}" for s, r in sorted(best_rows.items()) if s != OVERALL and r.get(flag)]
        if counts:
            lines.append(f"{what} at this setting: " + ", ".join(counts))
    infeasible = grid.filter((pl.col("slice") == OVERALL) & ~pl.col("feasible")).height
    lines.append(f"{infeasible} of {n} settings infeasible.")
    for key, count in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
        name, _, kind = key.partition(":")
        reason = {"min": "below its floor", "max_drop": "dropped too far vs the baseline"}.get(kind, "")
        lines.append(f"  {count:>6}  {name} {reason}".rstrip())
    lines += [f"Warning: {w}." for w in warnings]
    return "\n".join(lines)
