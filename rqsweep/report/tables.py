"""The report's tables, as frames of raw values: best beside baseline, one knob at a time, infeasible settings."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import polars as pl

from rqsweep.constraints import constraint_slices, constraint_values
from rqsweep.golden import OVERALL
from rqsweep.knobs import KNOBS
from rqsweep.report.render import format_cell
from rqsweep.run_folder import RunFolder
from rqsweep.space import parse_setting_id

METRIC_LABELS = {"recall_at_5": "recall@5", "recall_at_10": "recall@10", "mrr": "MRR"}


def knob_label(knob: str, value: object) -> str:
    """A knob value as engineers say it: the floor or the blend switched off reads `off`."""
    if knob == "min_similarity":
        return "off" if value is None else f"{value:g}"
    if knob == "recency_half_life_days":
        return "0 (off)" if value == 0 else f"{value:g}"
    return str(value)


def best_vs_baseline(run: RunFolder) -> pl.DataFrame:
    """Per slice (overall last): queries, then baseline, best and Δ = best - baseline for each metric."""
    base, best = run.slice_rows(run.baseline), run.slice_rows(run.best or run.baseline)
    rows = []
    for s in run.slices:
        row: dict[str, object] = {"slice": s, "queries": base[s]["queries"]}
        for metric, label in METRIC_LABELS.items():
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
    anchor = parse_setting_id(run.chosen)
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
    label = knob_label(knob, getattr(parse_setting_id(run.chosen), knob))
    return table[knob].to_list().index(label)


def infeasible_groups(run: RunFolder) -> pl.DataFrame:
    """Infeasible settings grouped by the slice and the constraint they violate, largest group first.

    The violations are recomputed from the grid and the config's constraints with the same code the
    run used, so each is a (slice, constraint) pair rather than words to parse. A setting violating
    several constraints counts in each group. Each group names its most tempting member: the one
    with the highest objective, which the constraint kept from being chosen.
    """
    slices = run.slices[:-1]
    baseline = run.slice_rows(run.baseline)
    metric, objective_slice = run.objective
    infeasible = run.grid.filter(~pl.col("feasible") & (pl.col("slice") == objective_slice))
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    objective: dict[str, float | None] = {}
    for sid, value in infeasible.sort(metric, descending=True, nulls_last=True).select("setting_id", metric).rows():
        objective[sid] = value
        table = run.slice_rows(sid)
        if table[OVERALL]["errors"]:
            groups[("all", "complete: no failed searches")].append(sid)
        for c in run.constraints:
            for one in (replace(c, slice=s) for s in constraint_slices(c, slices)):
                if any(v > 0 for _, _, v in constraint_values(table, baseline, [one], slices)):
                    groups[(one.slice, one.describe())].append(sid)
    tempting = f"highest {METRIC_LABELS[metric]} on {objective_slice} among them"
    rows = [{"slice": s, "violated constraint": c, "settings": len(ids),
             tempting: f"{parse_setting_id(ids[0]).label()} ({format_cell(metric, objective[ids[0]])})"}
            for (s, c), ids in groups.items()]
    rows.sort(key=lambda r: (-r["settings"], r["slice"], r["violated constraint"]))
    return pl.DataFrame(rows, schema={"slice": pl.String, "violated constraint": pl.String,
                                      "settings": pl.Int64, tempting: pl.String})
