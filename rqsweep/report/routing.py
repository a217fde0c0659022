"""What the console and the report say of routing.json (`Routing.record`): the routing table beside the global
choice."""

from __future__ import annotations

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


def summary_lines(data: dict, metric_label: str) -> list[str]:
    """The console's routing lines: the held-out gain beside the global one, then the table."""
    overall = data["held_out"]["slices"][OVERALL]
    folds = data["held_out"]["folds"]
    routed = [s for s, r in data["slices"].items() if r["routed"]]
    lines = [f"Routing held-out gain (one setting per slice, nested {folds}-fold CV): overall {metric_label} "
             f"{_with_ci(overall['routing_gain'])} vs the global setting's {_with_ci(overall['global_gain'])}; "
             f"routing - global {_with_ci(overall['routing_over_global'])} "
             f"({len(routed)} of {len(data['slices'])} slices routed; {int(data['held_out']['confidence'] * 100)}% "
             f"bootstrap intervals)"]
    lines.append(f"  {'slice':<16}{'queries':>8}  {'setting':<52}{'guard':>8}  {'Δ global':>9}  {'Δ routing':>9}")
    for s, r in data["slices"].items():
        h = data["held_out"]["slices"][s]
        guard = f"{r['guard']['folds_won']}/{r['guard']['folds_compared']}" if r["guard"]["folds_compared"] else "-"
        setting = Knobs.from_id(r["setting_id"]).label() + ("" if r["routed"] else " (global)")
        lines.append(f"  {s:<16}{h['queries']:>8}  {setting:<52}{guard:>8}  "
                     f"{_signed(h['global_gain']['mean']):>9}  {_signed(h['routing_gain']['mean']):>9}")
    return lines


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


def _routing_section(data: dict, metric_label: str) -> list[Block]:
    folds = data["held_out"]["folds"]
    return [Paragraph(summary_lines(data, metric_label)[0] + "."), Paragraph(
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
            f"{ROUNDS:,} resamples."))]
