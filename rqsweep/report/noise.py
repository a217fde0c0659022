"""The report's noise figures: each slice's minimum detectable difference, and the bounds that sit inside it."""

from __future__ import annotations

from typing import Sequence

import polars as pl

from rqsweep.decide.constraints import constraint_slices
from rqsweep.metrics import GATED
from rqsweep.decide.noise import ALPHA, PASS_COLUMNS, POWER, SliceNoise, bound_warnings, slice_noise
from rqsweep.report.render import Block, Heading, Paragraph, Table
from rqsweep.report.tables import metric_label
from rqsweep.runfolder import QUERIES, RunFolder
from rqsweep.runfolder.tables import row_groups


def noise_metrics(run: RunFolder) -> list[str]:
    """The metrics a bound applies to: the objective's, the constraints' and the gate's, in the run's order."""
    wanted = {run.objective[0], *(c.metric for c in run.constraints), *GATED}
    return [m for m in run.metrics if m in wanted]


def run_noise(run: RunFolder, metrics: list[str] | None = None,
              figures: Sequence[SliceNoise] | None = None) -> dict[tuple[str, str], SliceNoise]:
    """(slice, metric) -> its noise figures, of `metrics` (default `noise_metrics`): `figures` when the run's job
    made them already (of these metrics or more), else from the run's per-query table, a row group at a time."""
    metrics = metrics or noise_metrics(run)
    if figures is None:
        figures = slice_noise(run.scan(QUERIES), run.baseline, metrics,
                              row_groups(run.path, QUERIES, [*PASS_COLUMNS, *metrics]))
    return {(n.slice, n.metric): n for n in figures if n.metric in metrics}


def constraint_warnings(run: RunFolder, noise: dict[tuple[str, str], SliceNoise]) -> list[str]:
    words = []
    for c in run.constraints:
        if c.max_drop is None:
            continue
        for s in constraint_slices(c, run.slices[:-1]):
            if (s, c.metric) in noise:
                words += bound_warnings(c.max_drop, noise[(s, c.metric)], f"max_drop of {c.metric}")
    return words


def judged_bounds(run: RunFolder) -> list[tuple[str, str, str, float]]:
    """(what, slice, metric, bound) of every difference the run judges: each constraint's max_drop on each slice
    it covers, and the observed change (in sample, from the baseline) by the chosen setting on each slice and by
    each routed slice's setting on its slice."""
    out = [(f"max_drop of {metric_label(c.metric)}", s, c.metric, c.max_drop) for c in run.constraints
           if c.max_drop is not None for s in constraint_slices(c, run.slices[:-1])]
    metric = run.objective[0]
    base = run.slice_rows(run.baseline)
    decision = run.record.decision if isinstance(run.record.decision, dict) else {}
    chosen = run.best not in (None, run.baseline)
    gains = [("change by the chosen setting", run.best, s) for s in run.slices] if chosen else []
    gains += [(f"change by {s}'s route", r["setting_id"], s) for s, r in (decision.get("routes") or {}).items()]
    for what, setting, s in gains:
        value, before = run.slice_rows(setting).get(s, {}).get(metric), base.get(s, {}).get(metric)
        if value is not None and before is not None and abs(value - before) > 0:
            out.append((what, s, metric, abs(value - before)))
    return out


def needed_table(noise: dict[tuple[str, str], SliceNoise], bounds: list[tuple[str, str, str, float]]) -> pl.DataFrame:
    """Per judged bound: the slice's queries and MDD now, and the queries at which the bound is the MDD."""
    rows = [{"slice": s, "bound": what, "value": value, "queries": n.queries, "MDD": n.mdd,
             "queries needed": n.needed(value)}
            for what, s, metric, value in bounds if (n := noise.get((s, metric))) is not None]
    return pl.DataFrame(rows, schema={"slice": pl.String, "bound": pl.String, "value": pl.Float64,
                                      "queries": pl.Int64, "MDD": pl.Float64, "queries needed": pl.Int64})


def noise_blocks(run: RunFolder, figures: Sequence[SliceNoise] | None = None) -> list[Block]:
    metrics = noise_metrics(run)
    noise = run_noise(run, metrics, figures)
    slices = sorted({s for s, _ in noise})
    rows = []
    for s in slices:
        first = noise[(s, metrics[0])]
        row: dict[str, object] = {"slice": s, "queries": first.queries, "one query's worth": first.one_query}
        for m in metrics:
            row[f"settings moving {metric_label(m)}"] = noise[(s, m)].moving_settings
            row[f"MDD {metric_label(m)}"] = noise[(s, m)].mdd
        rows.append(row)
    warnings = constraint_warnings(run, noise)
    blocks: list[Block] = [Heading("How much noise the bounds sit in"), Paragraph(
        f"The minimum detectable difference (MDD) of a slice is the smallest true change of its mean that a "
        f"two-sided paired t-test at {ALPHA:g} detects {POWER:.0%} of the time: (t[1 − α/2, n − 1] + "
        f"t[power, n − 1]) × sd(d) / √n, where d are the per-query differences from the baseline and sd(d) the "
        f"root mean square of their standard deviation over the settings that move the slice at all (this run's "
        f"grid). One query's worth is 1/n: one query losing its hit moves the mean that much. A bound below "
        f"either cannot tell a real fall from a query's luck.")]
    if rows:
        blocks.append(Table(pl.DataFrame(rows, schema_overrides={c: pl.Float64 for c in rows[0] if "MDD" in c}),
                            note="MDD –: no setting moves the slice, so there is no change to size."))
    needed = needed_table(noise, judged_bounds(run))
    if needed.height:
        blocks += [Paragraph(
            f"Queries needed: for each difference this run judges, the fewest queries of its slice at which it is "
            f"the MDD or more (the same paired t-test, α {ALPHA:g}, power {POWER:.0%}, and this run's spread of the "
            f"slice: Sakai's topic-set-size design with the grid as its pilot)."),
            Table(needed, note="queries needed –: no setting moves the slice, or more than ten million.")]
    if warnings:
        blocks += [Paragraph("Warnings on this run's constraints:")] + [Paragraph(f"- {w}.") for w in warnings]
    else:
        blocks.append(Paragraph("No max_drop constraint of this run sits below one query's worth or its slice's MDD."))
    return blocks


def tolerance_warnings(tolerance: float, noise: dict[tuple[str, str], SliceNoise]) -> list[str]:
    """At most two lines on the gate's tolerance: the slices where it is below one query's worth, and those
    where it is below the minimum detectable difference."""
    slices = sorted({s for s, _ in noise})
    below_one = [s for s in slices if tolerance < noise[(s, GATED[0])].one_query]
    inside = {s: [f"{metric_label(m)} {n.mdd:.3f}" for m in GATED if (n := noise.get((s, m))) and n.mdd is not None
                  and tolerance < n.mdd] for s in slices}
    lines = []
    if below_one:
        lines.append(f"warning: tolerance {tolerance:g} is below one query's worth on " + ", ".join(
            f"{s} (1/{noise[(s, GATED[0])].queries} = {noise[(s, GATED[0])].one_query:.3f})" for s in below_one)
            + ": one query losing its hit fails the gate")
    if any(inside.values()):
        lines.append(f"warning: tolerance {tolerance:g} is below the minimum detectable difference (at "
                     f"{POWER:.0%} power) on " + ", ".join(f"{s} ({', '.join(v)})" for s, v in inside.items() if v)
                     + ": those gates sit inside their noise; --gate-mode significant fails only on a "
                       "significant regression")
    return lines
