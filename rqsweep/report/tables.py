"""The report's tables, as frames of raw values: best beside baseline, one knob at a time, infeasible settings."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from rqsweep import metrics
from rqsweep.decide.constraints import INCOMPLETE, constraint_key, constraint_slices
from rqsweep.golden import OVERALL
from rqsweep.knobs import HALF_LIFE, KNOBS, MIN_SIMILARITY, blends
from rqsweep.report.render import format_cell
from rqsweep.runfolder import HITS, RunFolder



def metric_label(name: str) -> str:
    return metrics.get(name).label


def knob_label(knob: str, value: object) -> str:
    """A knob value as engineers say it: the floor or the blend switched off reads `off`."""
    if knob == MIN_SIMILARITY:
        return "off" if value is None else f"{value:g}"
    if knob == HALF_LIFE:
        return f"{value:g}" if blends(value) else f"{value:g} (off)"
    return str(value)


def best_vs_baseline(run: RunFolder) -> pl.DataFrame:
    """Per slice (overall last): queries, then baseline, best and Δ = best - baseline for each metric."""
    base, best = run.slice_rows(run.baseline), run.slice_rows(run.best or run.baseline)
    rows = []
    for s in run.slices:
        row: dict[str, object] = {"slice": s, "queries": base[s]["queries"]}
        for metric in run.metrics:
            label = metric_label(metric)
            a, b = base[s][metric], best[s][metric]
            row |= {f"{label} baseline": a, f"{label} best": b,
                    f"{label} Δ": None if a is None or b is None else b - a}
        rows.append(row)
    return pl.DataFrame(rows)


def knob_table(run: RunFolder, knob: str) -> pl.DataFrame:
    """One row per value of `knob` in the grid, the other knobs held at the chosen setting.

    Columns: the knob's value (as a label), feasible, each slice's MRR and recall@10, overall MRR;
    rows sorted by value (switched off first). Only values the run evaluated appear.
    """
    anchor = run.knobs(run.chosen)
    held = [pl.col(k).eq_missing(getattr(anchor, k)) for k in KNOBS if k != knob]
    subset = run.grid.filter(*held).sort(pl.col(knob), nulls_last=False)
    rows = []
    for (value,), group in subset.group_by(knob, maintain_order=True):
        by_slice = {r["slice"]: r for r in group.iter_rows(named=True)}
        row: dict[str, object] = {knob: knob_label(knob, value), "feasible": by_slice[OVERALL]["feasible"]}
        for s in run.slices[:-1]:
            row |= {f"{s} MRR": by_slice[s]["mrr"], f"{s} recall@10": by_slice[s]["recall_at_10"]}
        row["overall MRR"] = by_slice[OVERALL]["mrr"]
        rows.append(row)
    return pl.DataFrame(rows)


def chosen_row(table: pl.DataFrame, run: RunFolder, knob: str) -> int:
    """Index of the chosen setting's row in a knob table."""
    label = knob_label(knob, getattr(run.knobs(run.chosen), knob))
    return table[knob].to_list().index(label)


def infeasible_groups(run: RunFolder) -> pl.DataFrame:
    """Infeasible settings grouped by the slice and the constraint they violate, largest group first.

    Read from the grid's `violations` (the constraint keys the run found broken), so each is a (slice,
    constraint) pair rather than words to parse. A setting violating several constraints counts in each
    group. Each group names its most tempting member: the one with the highest objective, which the
    constraint kept from being chosen.
    """
    metric, objective_slice = run.objective
    named = {INCOMPLETE: ("all", "complete: no failed searches")}
    for c in run.constraints:
        named |= {constraint_key(c, s): (s, replace(c, slice=s).describe())
                  for s in constraint_slices(c, run.slices[:-1])}
    tempting = f"highest {metric_label(metric)} on {objective_slice} among them"
    broken = (run.grid.filter(~pl.col("feasible") & (pl.col("slice") == objective_slice))
              .select("setting_id", "evaluation_order", metric, pl.col("violations").alias("key"))
              .sort(metric, "evaluation_order", descending=[True, False], nulls_last=True).explode("key")
              .group_by("key", maintain_order=True).agg(pl.len().alias("settings"), pl.first("setting_id"),
                                                         pl.first(metric)))
    rows = [{"slice": named[key][0], "violated constraint": named[key][1], "settings": n,
             tempting: f"{run.label(sid)} ({format_cell(metric, value)})"}
            for key, n, sid, value in broken.iter_rows()]
    rows.sort(key=lambda r: (-r["settings"], r["slice"], r["violated constraint"]))
    return pl.DataFrame(rows, schema={"slice": pl.String, "violated constraint": pl.String,
                                      "settings": pl.Int64, tempting: pl.String})


def changed_queries(run: RunFolder, top: int = 3) -> dict[str, pl.DataFrame]:
    """Per slice, the queries whose first relevant rank changed between the baseline and the chosen setting,
    worse first (rank 0 = not returned counts as worst), with the chosen setting's top results beside them.

    Reads queries.parquet and hits.parquet only. Queries whose search failed under either setting are left out.
    """
    def side(sid: str, suffix: str) -> pl.DataFrame:
        return run.queries([sid]).filter(pl.col("error").is_null()).select(
            "query_id", "slice", "query", "expected", pl.col("rank").alias(f"rank {suffix}"))

    pairs = side(run.baseline, "baseline").join(side(run.chosen, "chosen").select("query_id", "rank chosen"),
                                                on="query_id")

    def badness(rank: pl.Expr) -> pl.Expr:  # absent is worse than any position
        return pl.when(rank == 0).then(10**6).otherwise(rank)

    change = badness(pl.col("rank chosen")) - badness(pl.col("rank baseline"))
    changed = pl.concat([pairs.filter(change > 0).with_columns(pl.lit("worse").alias("change")),
                         pairs.filter(change < 0).with_columns(pl.lit("better").alias("change"))])
    hits = run.scan(HITS)
    if hits is not None:
        tops = (hits.filter(pl.col("setting_id") == run.chosen, pl.col("position") <= top)
                .sort("position").group_by("query_id", maintain_order=True)
                .agg(pl.col("key").str.join(", ").alias(f"chosen top {top}")).collect())
        changed = changed.join(tops, on="query_id", how="left")
    changed = changed.with_columns(pl.col("expected").list.join(", "))
    return {s: group.sort("change", "query_id", descending=[True, False]).drop("slice")
            for (s,), group in changed.group_by("slice", maintain_order=True)}
