"""The gate's significant mode: fail only on a per-slice regression a paired test calls significant.

The exact mode fails on any fall beyond the tolerance, and on a small slice one query's luck is such a fall.
This mode pairs the chosen setting's per-query values with the previous run's chosen setting's, on the
queries both ran (the same query id and text, neither search failed), and tests each slice's mean difference
of each gated metric with the two-sided sign-flip permutation test of the report (`significance.paired_test`,
seeded). The p-values of every (slice, metric) test, overall included, are adjusted together with Holm's
step-down method; a slice fails when an adjusted p-value is below ALPHA and its mean difference is negative.
A gate file holds no per-query values, so this mode needs a previous run folder; two runs that share fewer than
MIN_PAIRS queries cannot be compared this way (the gate refuses them, exit 2, rather than pass a test that could
not have failed).
"""

from __future__ import annotations

import polars as pl

from rqsweep.golden import OVERALL
from rqsweep.metrics import GATED
from rqsweep.decide.significance import ALPHA, ROUNDS, holm, paired_test
from rqsweep.report.tables import metric_label
from rqsweep.runfolder import RunFolder

MIN_PAIRS = 2  # fewer queries paired: no test can find a regression, so the gate could not fail
METHOD = (f"two-sided paired sign-flip permutation test per slice and metric ({ROUNDS:,} flips, seeded), "
          f"Holm-adjusted over every test, fails on an adjusted p < {ALPHA:g} with a negative mean difference")


def _chosen_rows(run: RunFolder) -> pl.DataFrame:
    return run.queries([run.chosen]).filter(pl.col("error").is_null()).select(
        "query_id", "query", "slice", *GATED)


def paired_rows(current: RunFolder, previous: RunFolder) -> tuple[list[dict[str, object]], list[tuple[str, str]], int]:
    """The table's rows (slice, metric, pairs, Δ, interval, p-values, check), the failing (slice, sentence)
    pairs, and how many queries were paired."""
    now, before = _chosen_rows(current), _chosen_rows(previous)
    pairs = now.join(before.drop("slice"), on=["query_id", "query"], suffix="_before")
    tests = []
    for s in sorted(set(pairs["slice"].to_list())) + [OVERALL]:
        part = pairs if s == OVERALL else pairs.filter(pl.col("slice") == s)
        for m in GATED:
            tests.append((s, m, paired_test((part[m] - part[f"{m}_before"]).to_numpy())))
    adjusted = holm([t.p_value for _, _, t in tests])
    rows, problems = [], []
    for (s, m, t), p in zip(tests, adjusted):
        regressed = p < ALPHA and t.mean_difference < 0
        label = metric_label(m)
        # Counts as text: the gate's table shows every number at its 4 decimals.
        rows.append({"slice": s, "metric": label, "pairs": str(t.queries), "differ": str(t.differing),
                     "Δ": t.mean_difference, "CI": f"[{t.ci_low:+.4f}, {t.ci_high:+.4f}]", "p": t.p_value,
                     "p (Holm)": p, "check": "REGRESSED" if regressed else "ok"})
        if regressed:
            problems.append((s, f"{s}: {label} {t.mean_difference:+.4f} over {t.queries} paired queries, "
                                f"p (Holm) {p:.4f} < {ALPHA:g}: a significant regression"))
    return rows, problems, pairs.height
