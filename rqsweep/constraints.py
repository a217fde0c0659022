"""What makes a setting infeasible: a slice that collapses, absolutely or against the baseline."""

from __future__ import annotations

from typing import Mapping, Sequence

from rqsweep.config import Constraint

# Metrics are means of a few dozen terms: compare with a little slack so that float noise in a
# mean equal to the bound does not count as a violation.
_SLACK = 1e-9

SliceTable = Mapping[str, Mapping[str, float | None]]  # slice -> metric -> value


def constraint_slices(constraint: Constraint, slices: Sequence[str]) -> list[str]:
    """The slices a constraint applies to: all of `slices` for `slice: "*"`, else its own."""
    return list(slices) if constraint.slice == "*" else [constraint.slice]


def constraint_values(table: SliceTable, baseline: SliceTable, constraints: Sequence[Constraint],
                      slices: Sequence[str]) -> list[tuple[str, str, float]]:
    """(key, description, value) per constraint and slice; feasible iff value <= 0 (Optuna's convention)."""
    out = []
    for c in constraints:
        for s in constraint_slices(c, slices):
            key = f"{c.metric}[{s}]:{'min' if c.min is not None else 'max_drop'}"
            value = table[s][c.metric]
            if value is None:  # every search of the slice failed: nothing shows it is safe
                out.append((key, f"{c.metric}[{s}] has no successful search", 1.0))
            elif c.min is not None:
                out.append((key, f"{c.metric}[{s}] = {value:.4f} < {c.min:g}", c.min - value - _SLACK))
            else:
                base = baseline[s][c.metric]
                if base is None:
                    continue
                out.append((key, f"{c.metric}[{s}] = {value:.4f} fell {base - value:.4f} below the baseline's "
                                 f"{base:.4f} (max drop {c.max_drop:g})", base - value - c.max_drop - _SLACK))
    return out


def violations(table: SliceTable, baseline: SliceTable, constraints: Sequence[Constraint],
               slices: Sequence[str], errors: int) -> list[tuple[str, str]]:
    """(key, words) for each reason a setting is infeasible; empty when it is feasible and complete."""
    found = [(key, text) for key, text, value in constraint_values(table, baseline, constraints, slices) if value > 0]
    if errors:
        found.insert(0, ("incomplete", f"incomplete: {errors} failed searches"))
    return found


def choose_best(order: Sequence[str], tables: Mapping[str, SliceTable], baseline_id: str, objective_metric: str,
                objective_slice: str, constraints: Sequence[Constraint], slices: Sequence[str],
                errors: Mapping[str, int]) -> tuple[str | None, dict[str, list[tuple[str, str]]]]:
    """The best feasible setting among `order` (None when none is), and each setting's violations.

    Highest objective wins; equal objectives keep the earlier setting in `order`, except that the
    baseline wins a tie: no knob should move without a measured gain. A setting whose objective has
    no successful search cannot be best.
    """
    baseline = tables[baseline_id]
    verdicts: dict[str, list[tuple[str, str]]] = {}
    best, best_value = None, None
    for sid in order:
        table = tables[sid]
        found = violations(table, baseline, constraints, slices, errors.get(sid, 0))
        verdicts[sid] = found
        value = table[objective_slice][objective_metric]
        if found or value is None:
            continue
        if best_value is None or value > best_value or (value == best_value and sid == baseline_id):
            best, best_value = sid, value
    return best, verdicts
