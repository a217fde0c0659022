"""A locked holdout: queries a run never chooses on, read once at its end to check the verdict.

`holdout: {fraction: F}` draws its queries by their ids (`golden.split`). The backend searches them with the rest (the rows are dropped before anything
is recorded: no grid figure, fold, routing guard, ladder or label-health tally sees them); at the run's end the
verdict's setting, the routing table it applies and the baseline are searched for them again, and their gains over
the baseline are tested as the verdict's are (`significance.paired_test`).

A holdout consulted to make choices stops being one: each run records the holdout's key (its queries' ids) and
how many finished runs of the same config have read it, this one included.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import polars as pl

from rqsweep import metrics
from rqsweep.golden import GoldenSet
from rqsweep.knobs import Knobs
from rqsweep.decide.significance import paired_test


def key_of(holdout: GoldenSet) -> str:
    """What names a holdout across runs: its queries' ids."""
    return hashlib.sha256("\n".join(sorted(q.id for q in holdout.queries)).encode()).hexdigest()


def reads(run_dir: Path, key: str) -> int:
    """How many finished runs beside `run_dir` (its config's results folder) read the holdout `key`, plus this one."""
    earlier = 0
    for record in run_dir.parent.glob("*/run.json"):
        if record.parent == run_dir:
            continue
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue  # a folder being written, or damaged: not a read anyone could act on
        earlier += isinstance(data, dict) and (data.get("holdout") or {}).get("key") == key
    return earlier + 1


def figures(rows: pl.DataFrame, holdout: GoldenSet, baseline: str, setting: str, routes: dict[str, str],
            metric: str, relevance_level: int, key: str, fraction: float, run_reads: int) -> dict:
    """run.json's `holdout`: the verdict's setting and its routing table (`routes`: slice -> setting) against the
    baseline on the holdout's queries, from `rows` (the backend's rows of those settings for them)."""
    slice_of = {q.id: q.slice for q in holdout.queries}
    grades = {q.id: q.grades for q in holdout.queries} if holdout.graded else None
    scored = metrics.score_queries(rows, [metric], grades, relevance_level).filter(pl.col("error").is_null())
    value = {(r["setting_id"], r["query_id"]): r[metric] for r in scored.iter_rows(named=True)}
    ids = [q.id for q in holdout.queries]

    def gain(chosen: Sequence[str]) -> dict | None:
        pairs = [(value[(c, q)], value[(baseline, q)]) for c, q in zip(chosen, ids)
                 if (c, q) in value and (baseline, q) in value]
        if not pairs:
            return None
        t = paired_test(np.array([a - b for a, b in pairs]))
        return {"queries": t.queries, "baseline": float(np.mean([b for _, b in pairs])),
                "chosen": float(np.mean([a for a, _ in pairs])), "mean": t.mean_difference,
                "ci": [t.ci_low, t.ci_high], "p_value": t.p_value}

    return {"key": key, "fraction": fraction, "queries": len(ids), "reads": run_reads, "setting_id": setting,
            "gain": gain([setting] * len(ids)),
            "routing_gain": gain([routes.get(slice_of[q], setting) for q in ids]) if routes else None}


def lines(data: dict, metric_label: str) -> list[str]:
    """What stdout and the report say of the holdout, once."""
    def said(figure: dict | None) -> str:
        if figure is None:
            return "no query answered"
        low, high = figure["ci"]
        return (f"{metric_label} {figure['baseline']:.4f} -> {figure['chosen']:.4f}, {figure['mean']:+.4f} "
                f"[{low:+.4f}, {high:+.4f}] over {figure['queries']} queries")

    routing = "" if data["routing_gain"] is None else f"; the routing table {said(data['routing_gain'])}"
    return [f"Locked holdout ({data['queries']} queries, fraction {data['fraction']:g}, never chosen on; read by "
            f"{data['reads']} run{'s' if data['reads'] != 1 else ''} of this config, this one included): "
            f"{Knobs.from_id(data['setting_id']).label()} against the baseline {said(data['gain'])}{routing}"]
