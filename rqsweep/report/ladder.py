"""The report's constraint ladder: the best setting and its per-slice cost under each `max_drop`, from the grid."""

from __future__ import annotations

import polars as pl

from rqsweep.decide.constraints import SliceMeans
from rqsweep.decide.ladder import LADDER, constraint_ladder
from rqsweep.report.render import Block, Heading, Paragraph, Table
from rqsweep.report.tables import metric_label
from rqsweep.runfolder import RunFolder


def ladder_means(run: RunFolder) -> SliceMeans:
    return SliceMeans.from_frame(run.grid, run.overall()["setting_id"].to_list(), run.slices[:-1], run.metrics)


def ladder_table(run: RunFolder) -> pl.DataFrame:
    """Per rung: the bound, the best setting, the objective's change and each slice's change of its metric."""
    metric = run.objective[0]
    label = metric_label(metric)
    rungs = constraint_ladder(ladder_means(run), run.baseline, run.objective, run.constraints, run.slices[:-1])
    base = run.slice_rows(run.baseline)
    rows = []
    for rung in rungs:
        chosen = run.slice_rows(rung.best or run.baseline)
        row: dict[str, object] = {"max_drop": f"{rung.max_drop:g}",
                                  "best setting": run.label(rung.best) if rung.best else "none feasible",
                                  "feasible settings": rung.feasible}
        for s in run.slices:
            a, b = base[s][metric], chosen[s][metric]
            row[f"Δ {label} {s}"] = None if rung.best is None or a is None or b is None else b - a
        rows.append(row)
    return pl.DataFrame(rows, schema_overrides={c: pl.Float64 for c in rows[0] if c.startswith("Δ")})


def ladder_blocks(run: RunFolder) -> list[Block]:
    own = sorted({c.max_drop for c in run.constraints if c.max_drop is not None})
    said = (f"this run's own max_drop: {', '.join(f'{d:g}' for d in own)}" if own else
            f"this run has no max_drop constraint, so each rung adds one on {metric_label(run.objective[0])} for "
            f"every slice")
    return [Heading("How the choice moves with max_drop"), Paragraph(
        f"The best feasible setting if every max_drop constraint had the bound on the left ({said}; the min floors "
        f"stay). Computed from the grid by the run's own rule, which is what a rerun with that bound would choose: "
        f"no search was repeated. Δ: the setting minus the baseline, in-sample."),
        Table(ladder_table(run), note=f"Rungs: {', '.join(f'{d:g}' for d in LADDER)}.")]
