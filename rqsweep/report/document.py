"""What the report says, in reading order: the decision, its cost per slice and the plots first, then how sure,
then why, then the costs, and the per-query detail last."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import polars as pl

from rqsweep.backends.base import describe_profile
from rqsweep.golden import OVERALL
from rqsweep.decide.holdout import lines as holdout_lines
from rqsweep.knobs import HALF_LIFE, KNOBS, RRF_K, blends
from rqsweep.decide.noise import SliceNoise
from rqsweep.report.bounds import bounds_blocks
from rqsweep.report.discrimination import discrimination_blocks
from rqsweep.report.knob_ranges import KnobRanges, knob_range_blocks, knob_ranges
from rqsweep.report.label_health import label_health_blocks
from rqsweep.report.ladder import ladder_blocks
from rqsweep.report.noise import noise_blocks
from rqsweep.report.routing import routing_blocks
from rqsweep.report.held_out import gain_table, run_cross_validation, why_not_validated
from rqsweep.report.recency import ASSUMPTION, recency_cost
from rqsweep.report.summary import SENSITIVE
from rqsweep.report.render import Block, Figure, Heading, Paragraph, Table, format_cell
from rqsweep.decide.significance import ALPHA, ROUNDS, SEED, significance_table
from rqsweep.report.tables import best_vs_baseline, changed_queries, chosen_row, metric_label, infeasible_groups, knob_label, knob_table
from rqsweep.runfolder import RunFolder
from rqsweep.decide.cross_validation import CrossValidation, summary_lines


def _headline(run: RunFolder, cv: CrossValidation | None) -> list[Block]:
    """The decision first (`verdict`), the locked holdout's and the cross-validation's figures, the warnings."""
    decision = run.record.decision
    lines = decision["lines"] if isinstance(decision, dict) else []
    if isinstance(run.record.holdout, dict):
        lines = [*lines, *holdout_lines(run.record.holdout, metric_label(run.objective[0]))]
    if cv:
        lines = [*lines, summary_lines(cv, metric_label(run.objective[0]))[0]]
    return [Heading(f"rqsweep report: {run.name}", 1), *(Paragraph(line) for line in lines),
            *(Paragraph(f"Warning: {w}.") for w in run.warnings)]


def _facts(run: RunFolder) -> list[Block]:
    """Below the decision's cost: the table a caller applies (a setting per slice), then where the rankings came
    from, what ran, and the best in sample against the baseline."""
    overall = run.overall()
    metric, slice_ = run.objective
    facts = (f"Run {run.run_id} · {run.strategy} over {overall.height} settings, "
             f"{overall.filter(~pl.col('feasible')).height} infeasible · objective {metric_label(metric)} "
             f"on {slice_} · golden set {run.golden or 'unknown'}")
    base = format_cell(metric, run.slice_rows(run.baseline)[slice_][metric])
    if run.best is None:
        best_line = (f"No feasible setting: every evaluated setting violates a constraint. The tables below are "
                     f"anchored at the baseline, {run.label(run.baseline)}.")
    else:
        best = format_cell(metric, run.slice_rows(run.best)[slice_][metric])
        best_line = (f"Best feasible setting in sample: {run.label(run.best)}, {metric_label(metric)} on {slice_} "
                     f"{best} against the baseline's {base} ({run.label(run.baseline)}).")
    source = (f"Rankings from {describe_profile(run.server_profile)}." if run.server_profile else
              "Rankings from a backend this run did not record (written before rqsweep kept a server profile).")
    return [*_applied(run), Paragraph(source), Paragraph(facts), Paragraph(best_line)]


def _applied(run: RunFolder) -> list[Block]:
    """When the decision routes: the setting each slice's queries are sent with."""
    decision = run.record.decision
    routes = (decision.get("routes") or {}) if isinstance(decision, dict) else {}
    if not routes:
        return []
    applied = [{"slice": s, "setting": run.label(routes[s]["setting_id"] if s in routes else decision["setting_id"]),
                "routed": "yes" if s in routes else "no"} for s in run.slices if s != OVERALL]
    return [Table(pl.DataFrame(applied), note="The setting each slice's queries are sent with.")]


def _held_out(run: RunFolder, cv: CrossValidation | None) -> list[Block]:
    blocks: list[Block] = [Heading("How much of the gain holds on unseen queries")]
    if cv is None:
        return blocks + [Paragraph(f"No cross-validation: {why_not_validated(run)}.")]
    others = cv.folds - 1
    return blocks + [
        Paragraph(" ".join(summary_lines(cv, metric_label(run.objective[0]))[1:]).strip() + "."),
        Table(gain_table(cv), note=(
            f"The queries are split into {cv.folds} folds (seed {cv.seed}), each holding every slice's queries in "
            f"proportion" + (", the queries that share an expected key always in one fold (`group: expected`), "
                             "and the intervals resample such groups whole" if cv.grouped_by == "expected" else "")
            + f". Each fold's setting is picked on the other {others} folds' queries by the run's own "
            f"rule (the constraints checked against the baseline on those queries), then scored on the fold's "
            f"queries; a fold with no feasible setting keeps the baseline. Δ held-out: every query scored by "
            f"the setting chosen without it, minus the baseline. Δ in-sample: the best setting on all queries, "
            f"scored on the same queries (the table above). No search was repeated."))]


def _comparison(run: RunFolder) -> list[Block]:
    frame = best_vs_baseline(run)
    if run.best is None:
        frame = frame.select("slice", "queries", *(f"{metric_label(m)} baseline" for m in run.metrics))
    notes = ["Δ = best − baseline. Failed searches are left out of every metric."]
    for flag, what in SENSITIVE.items():
        counts = [f"{s} {r[flag]}" for s, r in run.slice_rows(run.chosen).items() if s != OVERALL and r.get(flag)]
        if counts:
            notes.append(f"{what} at this setting: " + ", ".join(counts) + ".")
    overall = run.overall()
    if "numeric_sensitive" in overall.columns and overall["numeric_sensitive"].null_count() < overall.height:
        notes.append(f"Over the whole sweep, {int(overall['numeric_sensitive'].sum()):,} of "
                     f"{int(overall['queries'].sum()):,} (setting, query) cells are numerically sensitive: another "
                     "machine's math may rank them otherwise, and the verdict's tests leave them out.")
    title = "Best feasible setting beside the baseline" if run.best else "The baseline (no feasible setting)"
    return [Heading(title), Table(frame, note=" ".join(notes))]


def _significance(run: RunFolder, cv: CrossValidation | None) -> list[Block]:
    if run.best is None:
        return []
    blocks: list[Block] = [Heading("How sure we are")]
    if run.best == run.baseline:
        return blocks + [Paragraph("The baseline is itself the best feasible setting: there is no difference to test.")]
    table = significance_table(run.queries([run.best, run.baseline]), run.best, run.baseline, run.slices)
    overall = table.row(by_predicate=pl.col("slice") == OVERALL, named=True)
    settings = run.overall().height
    tested = table["p-value (Holm)"].count()
    blocks.append(Paragraph(
        f"Overall, best − baseline MRR = {overall['Δ MRR']:+.4f} over {overall['queries paired']} paired queries "
        f"(p = {overall['p-value']:.4f}): {overall['verdict']}."))
    blocks.append(Table(table, note=(
        f"Paired by query; queries whose search failed for either setting are left out. CI: percentile bootstrap "
        f"over queries, {ROUNDS:,} resamples. p: two-sided paired sign-flip permutation test, {ROUNDS:,} flips "
        f"(seed {SEED}); significant when p < {ALPHA:g}. {tested} slices were tested, so their p-values are "
        f"adjusted for it with Holm's step-down method (p-value (Holm), on which each slice's verdict rests): "
        f"the chance of any slice called significant by luck stays under {ALPHA:g}. Overall is one test of its "
        f"own, not adjusted. The best was picked among {settings} settings on these "
        f"same queries, so its gain is optimistic even when significant: "
        + ("the held-out gain above is measured on queries each choice was not tuned on." if cv else
           "confirm it on queries it was not tuned on (this run's config turns `validation:` off)."))))
    return blocks


def _knobs(run: RunFolder, tables: dict[str, pl.DataFrame]) -> list[Block]:
    chosen = run.knobs(run.chosen)
    blocks: list[Block] = [Heading("One knob at a time")]
    for knob, table in tables.items():
        others = ", ".join(f"{k} {knob_label(k, getattr(chosen, k))}" for k in KNOBS if k != knob)
        blocks.append(Heading(knob, 3))
        if table.height == 1:
            blocks.append(Paragraph(f"Only {table[knob][0]} was evaluated with {others}."))
        else:
            blocks.append(Table(table, frozenset({chosen_row(table, run, knob)}),
                                note=f"Bold: the chosen setting. The other knobs are held at its values ({others}); "
                                     "only values the run evaluated appear."))
    if run.refused_knobs:
        blocks.append(Paragraph(f"{' and '.join(run.refused_knobs)} {'are' if len(run.refused_knobs) > 1 else 'is'} "
                                f"not shown: the server refuses {'them' if len(run.refused_knobs) > 1 else 'it'}, so "
                                "every search ran at SOAT's default."))
    return blocks


def _plots(run: RunFolder, tables: dict[str, pl.DataFrame]) -> list[Block]:
    # matplotlib costs 33 MB of RSS: imported when a report is drawn, not while a job holds its index.
    from rqsweep.report import plots

    blocks: list[Block] = [Heading("Plots")]
    label = plots.objective_label(run)
    if run.strategy == "optimize":
        return blocks + [
            Paragraph("This run's optimiser sampled settings rather than filling a grid, so its plots are scatters "
                      "of the sampled settings (a heatmap or one-knob curves would be mostly empty): the objective "
                      "against each knob, where the feasible settings are, and the order they were tried."),
            Figure(f"{label} of every sampled setting against each knob; grey crosses: infeasible",
                   plots.png(plots.objective_by_knob(run))),
            Figure("Share of feasible settings per pair of knobs", plots.png(plots.feasibility_map(run))),
            Figure(f"{label} per trial, and the best feasible so far", plots.png(plots.optimisation_history(run)))]
    heatmap = plots.best_feasible_heatmap(run)
    if heatmap is None and not {RRF_K, HALF_LIFE} & set(run.refused_knobs):
        blocks.append(Paragraph("No rrf_k x half-life heatmap: no setting is feasible, or the run does not fill a "
                                "grid of them (fewer than two values of one, or under half the cells evaluated); "
                                "the feasibility map below shows where it looked."))
    elif heatmap is not None:
        blocks.append(Figure(f"Best feasible {label} per rrf_k x recency half-life, over min_similarity; "
                             f"hatched: {plots.INFEASIBLE_CELL}", plots.png(heatmap)))
    if tables:
        blocks.append(Figure("MRR per slice against one knob, the other two held; grey band: infeasible",
                             plots.png(plots.slice_mrr_by_knob(run, tables))))
    blocks.append(Figure("Share of feasible settings per pair of knobs", plots.png(plots.feasibility_map(run))))
    return blocks


def _changed(run: RunFolder) -> list[Block]:
    if run.best is None or run.best == run.baseline:
        return []
    blocks: list[Block] = [Heading("Queries that got worse or better"), Paragraph(
        f"Per slice, every query whose first relevant rank moved between the baseline and {run.label(run.best)} "
        "(rank 0: no expected item returned). `rqsweep explain RUN_DIR QUERY_ID` shows both ranked lists and "
        "which knob moved the item.")]
    changed = changed_queries(run)
    for s in run.slices[:-1]:
        if s in changed:
            frame = changed[s]
            counts = frame["change"].value_counts()
            words = ", ".join(f"{n} {c}" for c, n in sorted(counts.iter_rows()))
            blocks += [Heading(f"{s}: {words}", 3), Table(frame)]
    if not changed:
        blocks.append(Paragraph("No query's first relevant rank moved."))
    return blocks


def _infeasible(run: RunFolder) -> list[Block]:
    overall = run.overall()
    count = overall.filter(~pl.col("feasible")).height
    blocks: list[Block] = [Heading("Infeasible settings"),
                           Paragraph(f"{count} of {overall.height} settings violate at least one constraint.")]
    if count and run.grid.schema["violations"] != pl.List(pl.String):
        blocks.append(Paragraph("This run was written before rqsweep kept each setting's violated constraints as "
                                "keys: run the sweep again to have them grouped here."))
    elif count:
        blocks.append(Table(infeasible_groups(run), note="A setting violating several constraints counts in each."))
    return blocks


def _recency(run: RunFolder) -> list[Block]:
    if HALF_LIFE in run.refused_knobs:
        return []
    chosen = run.knobs(run.chosen)
    k, h = chosen.rrf_k, chosen.recency_half_life_days
    blocks: list[Block] = [Heading("What the recency blend costs")]
    if not blends(h):
        return blocks + [Paragraph("The recency blend is off at the chosen setting (half-life 0): no score is "
                                   "decayed, so no result loses ranks for its age.")]
    return blocks + [
        Paragraph(f"Fused scores are compressed, so a multiplier after fusion is strong. At rrf_k {k} and a "
                  f"half-life of {h:g} days, a memory that is the top result loses, by age:"),
        Table(recency_cost(k, h, run.limit), note=ASSUMPTION)]


@dataclass(frozen=True)
class Made:
    """What the run's job made already, which the report would otherwise read again from the folder: the noise
    figures (made as it evaluated) and the knob ranges (printed on stdout too)."""

    noise: Sequence[SliceNoise] | None = None
    ranges: KnobRanges | None = None


# The report's sections in order: the decision, its cost per slice and the plots first; the per-query detail,
# widest, last. Each is (run folder, knob tables, cross-validation, what the job made) -> blocks.
_SECTIONS: tuple[Callable[..., list[Block]], ...] = (
    lambda run, tables, cv, made: _headline(run, cv), lambda run, tables, cv, made: _comparison(run),
    lambda run, tables, cv, made: _facts(run),
    lambda run, tables, cv, made: _plots(run, tables), lambda run, tables, cv, made: _held_out(run, cv),
    lambda run, tables, cv, made: routing_blocks(run, metric_label(run.objective[0])),
    lambda run, tables, cv, made: _significance(run, cv), lambda run, tables, cv, made: _knobs(run, tables),
    lambda run, tables, cv, made: knob_range_blocks(made.ranges or knob_ranges(run.path, run.grid, run.best)),
    lambda run, tables, cv, made: _infeasible(run), lambda run, tables, cv, made: ladder_blocks(run),
    lambda run, tables, cv, made: noise_blocks(run, made.noise), lambda run, tables, cv, made: _recency(run),
    lambda run, tables, cv, made: bounds_blocks(run),
    lambda run, tables, cv, made: label_health_blocks(run),
    lambda run, tables, cv, made: discrimination_blocks(run, made.noise), lambda run, tables, cv, made: _changed(run))
STEPS = 2 + len(_SECTIONS)  # what `build` counts: the knob tables, the cross-validation, then each section


def build(run: RunFolder, step: Callable[[int], None] = lambda _: None, made: Made = Made()) -> list[Block]:
    """The report's blocks for one run folder; `step(1)` after each of its `STEPS` parts (a `Progress`).
    `made`: what the run's job made already (else read from the folder)."""
    tables = {knob: knob_table(run, knob) for knob in KNOBS if knob not in run.refused_knobs}
    step(1)
    cv = run_cross_validation(run)
    step(1)
    blocks: list[Block] = []
    for section in _SECTIONS:
        blocks += section(run, tables, cv, made)
        step(1)
    return blocks
