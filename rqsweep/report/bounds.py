"""The report's unjudged items: judged@k of the baseline and the best setting in sample, the decision under both bounds
(`rqsweep.decide.bounds`), and the judge: what it spent on this run's pool, and its agreement with people."""

from __future__ import annotations

import polars as pl

from rqsweep.decide.bounds import LOWER, UPPER, Bounds, decision_bounds
from rqsweep.files import read_data
from rqsweep.judge.grading import cohen_kappa
from rqsweep.report.pool import JUDGE_RECORD
from rqsweep.report.render import Block, Heading, Paragraph, Table
from rqsweep.report.tables import metric_label
from rqsweep.runfolder import JUDGMENTS, RANKED, RunFolder
from rqsweep.runfolder.tables import ranked_source, read_ranked_lists


def run_bounds(run: RunFolder) -> Bounds:
    """Both bounds over the ranked lists the run kept, to its `limit`."""
    judged = run.read(JUDGMENTS, pl.col("used"))
    queries = run.queries([run.baseline])
    if "grades" not in queries.columns:  # a run folder written before grades were kept: every item graded 1
        queries = queries.with_columns(pl.col("expected").list.eval(pl.lit(1, pl.Int64)).alias("grades"))
    queries = queries.select("query_id", "slice", "expected", "grades")
    return decision_bounds(read_ranked_lists(run.path), queries,
                           pl.DataFrame(schema={"query_id": pl.String, "key": pl.String}) if judged is None else judged,
                           run.overall().sort("evaluation_order")["setting_id"].to_list(), run.baseline, run.objective,
                           run.constraints, run.metrics, int(run.config.get("relevance_level") or 1), run.limit)


def _named(run: RunFolder, setting: str | None) -> str:
    return "none feasible" if setting is None else run.label(setting)


def judge_lines(run: RunFolder) -> list[str]:
    """What the judge spent on this run's pool (judge.json), and, per judge, its agreement with people on the pairs
    both graded (judgments.parquet)."""
    lines = []
    if (run.path / JUDGE_RECORD).exists():
        _, spent = read_data(run.path / JUDGE_RECORD, "judge record")
        budget = "no budget" if spent["budget"] is None else f"a budget of {spent['budget']} calls"
        lines.append(f"The judge ({spent['judge']}) graded {spent['graded']} pairs of this run's pool: "
                     f"{spent['calls']} calls, {spent['tokens']} tokens, {spent['cached']} answers from its cache; "
                     f"{spent['over_budget']} pairs left past {budget}, {spent['unreadable']} answers named no grade.")
    graded = run.read(JUDGMENTS)
    if graded is not None:
        people = graded.filter(pl.col("judge") == "").select("query_id", "key", pl.col("grade").alias("person"))
        for (judge,), rows in graded.filter(pl.col("judge") != "").group_by("judge", maintain_order=True):
            both = rows.join(people, on=["query_id", "key"]).select("person", "grade").rows()
            kappa = cohen_kappa(both)
            lines.append(f"{judge} and people graded {len(both)} of the same pairs" + (
                "." if kappa is None else f": Cohen's kappa {kappa:.2f} (grades as categories)."))
    return lines


def _roles(run: RunFolder) -> dict[str, str]:
    if run.chosen == run.baseline:
        return {run.baseline: "baseline, best in sample"}
    return {run.baseline: "baseline", run.chosen: "best in sample"}


def bounds_blocks(run: RunFolder) -> list[Block]:
    heading = Heading("Unjudged items: the decision under both bounds")
    if ranked_source(run.path) is None:
        return [heading, Paragraph("This run folder keeps no ranked lists (hits.parquet): the unjudged items in "
                                   "them cannot be counted."), *map(Paragraph, judge_lines(run))]
    b = run_bounds(run)
    metric, slice_ = run.objective
    label = metric_label(metric)
    kept = ("every setting's lists (ranked.parquet)" if (run.path / RANKED).exists() else
            "the baseline's and the best in sample's lists (hits.parquet; `ranked: all` bounds every setting)")
    rows = [{"setting": f"{run.label(s)} ({role})", f"judged@{b.k}": b.judged_at_k.get(s),
             f"{label} {slice_}, {LOWER}": b.lower.value(s, slice_, metric),
             f"{label} {slice_}, {UPPER}": b.upper.value(s, slice_, metric)}
            for s, role in _roles(run).items() if s in b.settings]
    choice = (f"The choice holds under both bounds: {_named(run, b.lower.choice)}." if not b.choice_changes else
              f"The choice changes between the bounds: {_named(run, b.lower.choice)} with {LOWER}, "
              f"{_named(run, b.upper.choice)} with {UPPER}. The labels cannot carry this decision: grade the pool "
              f"(`rqsweep pool RUN_DIR` on this run folder) and name the graded file in `golden: {{judgments}}`.")
    changing = b.routes_changing
    routes = ("Per slice, the kept setting best on it is the same under both bounds: the routing table holds." if
              not changing else
              "Per slice, the kept setting best on it changes between the bounds in " + "; ".join(
                  f"{s} ({_named(run, b.lower.routes[s])} -> {_named(run, b.upper.routes[s])})" for s in changing)
              + ": the routing table changes.")
    return [heading, Paragraph(
        f"An item in a top {b.k} is labelled (expected), judged (`golden: {{judgments}}`, grade 0 too) or "
        f"unjudged. Today's rule scores unjudged items as not relevant; the other bound scores every unjudged item "
        f"a kept list returns as relevant. Both choose among {kept} by the run's rule. judged@{b.k}: the share of "
        f"the top {b.k} slots whose item is labelled or judged."),
        Table(pl.DataFrame(rows)), Paragraph(choice), Paragraph(routes), *map(Paragraph, judge_lines(run))]
