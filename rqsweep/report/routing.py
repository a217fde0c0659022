"""What the console and the report say of routing.json (`Routing.record`): the routing table beside the global
choice."""

from __future__ import annotations
from pathlib import Path

import polars as pl

from rqsweep.errors import InputError
from rqsweep.golden import OVERALL
from rqsweep.knobs import Knobs
from rqsweep.report.held_out import why_not_validated
from rqsweep.report.render import Block, Heading, Paragraph, Table
from rqsweep.runfolder import RunFolder
from rqsweep.runfolder.folder import ROUTING
from rqsweep.decide.significance import ROUNDS
from rqsweep.runfolder.tables import read_routing


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.4f}"


def _ci(figure: dict) -> str:
    low, high = figure["ci"]
    return f"[{low:+.4f}, {high:+.4f}]"


def _with_ci(figure: dict) -> str:
    return f"{_signed(figure['mean'])} {_ci(figure)}"


def _headline(data: dict, metric_label: str) -> str:
    """Slice routing's held-out gain beside the global setting's."""
    overall = data["held_out"]["slices"][OVERALL]
    routed = [s for s, r in data["slices"].items() if r["routed"]]
    return (f"Routing held-out gain (one setting per slice, nested {data['held_out']['folds']}-fold CV): overall "
            f"{metric_label} {_with_ci(overall['routing_gain'])} vs the global setting's "
            f"{_with_ci(overall['global_gain'])}; routing - global {_with_ci(overall['routing_over_global'])} "
            f"({len(routed)} of {len(data['slices'])} slices routed; {int(data['held_out']['confidence'] * 100)}% "
            f"bootstrap intervals)")


def summary_lines(data: dict, metric_label: str, run_dir: Path) -> list[str]:
    """The console's routing lines: the held-out gain beside the global one, the table, then routing by rule."""
    lines = [_headline(data, metric_label)]
    lines.append(f"  {'slice':<16}{'queries':>8}  {'setting':<52}{'guard':>8}  {'Δ global':>9}  {'Δ routing':>9}")
    for s, r in data["slices"].items():
        h = data["held_out"]["slices"][s]
        guard = f"{r['guard']['folds_won']}/{r['guard']['folds_compared']}" if r["guard"]["folds_compared"] else "-"
        setting = Knobs.from_id(r["setting_id"]).label() + ("" if r["routed"] else " (global)")
        lines.append(f"  {s:<16}{h['queries']:>8}  {setting:<52}{guard:>8}  "
                     f"{_signed(h['global_gain']['mean']):>9}  {_signed(h['routing_gain']['mean']):>9}")
    return lines + rules_lines(data, metric_label, run_dir)


def _rules_headline(data: dict, metric_label: str) -> str:
    """Routing by rule's held-out gain beside slice routing's and the global setting's, and each slice's."""
    held_out, overall = data["rules"]["held_out"], data["held_out"]["slices"][OVERALL]
    by_slice = ", ".join(f"{s} {_signed(h['rules_gain']['mean'])}" for s, h in held_out.items() if s != OVERALL)
    return (f"Rule routing held-out gain (for a caller that knows no slice; nested {data['held_out']['folds']}-fold "
            f"CV): overall {metric_label} {_with_ci(held_out[OVERALL]['rules_gain'])} vs slice routing's "
            f"{_with_ci(overall['routing_gain'])} and the global setting's {_with_ci(overall['global_gain'])}; "
            f"by slice: {by_slice}")


def rules_lines(data: dict, metric_label: str, run_dir: Path) -> list[str]:
    """The console's two lines of routing by rule (routing.json's `rules`): the headline, and the rule in words
    with the command that applies it to a query; none without rules."""
    rules = data.get("rules")
    if rules is None:
        return []
    cost = rules["cost_searches"]
    return [_rules_headline(data, metric_label),
            f"  {rules['sentence']} ({cost} extra search{'' if cost == 1 else 'es'} per query; routing.json's rules, "
            f"`rqsweep route {run_dir} QUERY`)"]


def _guard_words(route: dict) -> str:
    guard = route["guard"]
    if not guard["folds_compared"]:
        return "no: nothing beats the global setting on the slice"
    return f"{'yes' if route['routed'] else 'no'}: {guard['folds_won']} of {guard['folds_compared']} folds won"


def routing_table(data: dict) -> pl.DataFrame:
    rows = []
    for s in [*data["slices"], OVERALL]:
        h = data["held_out"]["slices"][s]
        r = data["slices"].get(s)
        rows.append({
            "slice": s, "queries": h["queries"],
            "setting": "–" if r is None else Knobs.from_id(r["setting_id"]).label(),
            "routed (guard)": "–" if r is None else _guard_words(r),
            **{column: value for name, key in (("global", "global_gain"), ("routing", "routing_gain"),
                                               ("routing − global", "routing_over_global"))
               for column, value in ((f"Δ held-out {name}", h[key]["mean"]), (f"CI {name}", _ci(h[key])))}})
    return pl.DataFrame(rows)


def routing_blocks(run: RunFolder, metric_label: str) -> list[Block]:
    run_dir = run.path
    data = read_routing(run_dir)
    heading = Heading("One setting per slice (routing)")
    if data is None:
        return [heading, Paragraph(f"No routing table: {why_not_validated(run)} (the guard and the held-out gain "
                                   "need cross-validation's folds).")]
    try:
        return [heading, *_routing_section(data, metric_label)]
    except (KeyError, TypeError, ValueError) as exc:  # a hand-edited file: its keys are the writer's
        raise InputError(run_dir / ROUTING, "", f"damaged ({type(exc).__name__}: {exc}); run the sweep again to "
                         "rewrite it") from None


def rules_table(data: dict) -> pl.DataFrame:
    """Per slice and overall: the held-out gains over the baseline of the global setting, slice routing and rule
    routing side by side, the rule's with its interval, and the rule's over the global setting's."""
    rows = []
    for s, r in data["rules"]["held_out"].items():
        h = data["held_out"]["slices"][s]
        rows.append({"slice": s, "queries": r["queries"], "Δ held-out global": h["global_gain"]["mean"],
                     "Δ held-out slice routing": h["routing_gain"]["mean"],
                     "Δ held-out rules": r["rules_gain"]["mean"],
                     "CI rules": _ci(r["rules_gain"]), "Δ rules − global": r["rules_over_global"]["mean"],
                     "CI rules − global": _ci(r["rules_over_global"])})
    return pl.DataFrame(rows)


def _rules_section(data: dict, metric_label: str) -> list[Block]:
    rules = data.get("rules")
    if rules is None:
        return []
    cost = rules["cost_searches"]
    return [Heading("One setting per query by rule (routing without the slice)"), Paragraph(
        f"{_rules_headline(data, metric_label)}. A caller rarely knows a query's slice; a rule on what it can compute "
        f"of the query (its text, and optionally one default search's results, which costs a second search) needs "
        f"none. The rule: {rules['sentence']} It costs {cost} extra search{'' if cost == 1 else 'es'} per query. "
        f"It is one threshold on one feature, each side sent the global setting or a slice's own best, chosen as "
        f"the feasible one of highest {metric_label} under every constraint on every slice (a rule that costs a "
        f"slice past its constraint is out); the guard: {rules['guard']}. Held out as slice routing is: each fold's "
        f"rule, guard included, is chosen without its queries, which it then scores. {ROUTING}'s `rules` holds the "
        f"features, the threshold and each side's request fields; docs/routing-rules.md applies them in Python and "
        f"TypeScript."),
        Table(rules_table(data), note=(
            f"Δ: held-out {metric_label} minus the baseline's on the same queries. Each slice's Δ held-out rules is "
            f"its cost (or gain) under the rule, for a caller that knows no slice. CI: "
            f"{data['held_out']['confidence']:.0%} percentile bootstrap interval, {ROUNDS:,} resamples."))]


def _routing_section(data: dict, metric_label: str) -> list[Block]:
    folds = data["held_out"]["folds"]
    return [Paragraph(_headline(data, metric_label) + "."), Paragraph(
        f"SOAT's search takes the knobs in each request, so a caller that knows a query's slice can send it the "
        f"slice's own setting ({ROUTING} holds each slice's request fields). A slice's own setting is its best "
        f"feasible one on its own queries, under the constraints covering it (those of other slices and of overall "
        f"do not bind it, since it serves only that slice's queries). The guard: {data['guard']}. Held out: nested "
        f"{folds}-fold cross-validation on the global estimate's folds; each fold's routing, guard included, is "
        f"chosen without its queries, which it then scores. No search was repeated."),
        Table(routing_table(data), note=(
            f"Δ: held-out {metric_label} minus the baseline's on the same queries; global: every query scored by "
            f"the global setting its fold chose; routing: by the setting its fold's routing gave its slice. CI: "
            f"{data['held_out']['confidence']:.0%} percentile bootstrap interval over the held-out queries, "
            f"{ROUNDS:,} resamples.")), *_rules_section(data, metric_label)]
