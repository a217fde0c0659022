"""The ranx side of `benchmarks/versus_ranx.py`: ranx 0.3.21 fusing and scoring the exported candidate lists.

versus_ranx.py runs this file with the Python of ranx's own environment (never the project's .venv), one
fresh process per measurement, with one thread (NUMBA_NUM_THREADS=1) and the numba cache it chooses
(NUMBA_CACHE_DIR: an empty one for a cold start):

    ENV/bin/python -I benchmarks/ranx_side.py CANDIDATES.json --method fuse --grid 500 [--analysis OUT.npz]

It prints one JSON line of seconds: `setup` (import ranx, build the Runs and the Qrels), `first` (the first
pass over the rrf_k grid: numba compiles what it first meets), `warm` (median of the later passes).
`--method fuse` is, per rrf_k, `fuse(method="rrf")` then `evaluate` of recall@5, recall@10 and mrr@10;
`--method optimize` is one `optimize_fusion(method="rrf", metric="mrr@10")` over the same grid.
`--analysis` also writes, per (rrf_k, query), ranx's own metric values and where each expected key first
appears in ranx's fused order and in SOAT's (fused score descending, ties in first-insertion order).

Timing is benchmarks/timing.py's, as on the fast path's side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # appended: benchmarks/dask.py must not hide a package
from timing import timed_passes  # noqa: E402

METRICS = ("recall@5", "recall@10", "mrr@10")  # SOAT cuts to limit 10 before scoring: MRR@10 is its MRR


def first_slots(order: list[str], groups: list[set[str]], limit: int) -> list[int]:
    """Per expected key, the 1-based position of its first item within the first `limit`, 0 when none."""
    top = order[:limit]
    return [next((p for p, item in enumerate(top, 1) if item in group), 0) for group in groups]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates")
    ap.add_argument("--method", choices=("fuse", "optimize"), required=True)
    ap.add_argument("--grid", type=int, required=True, help="rrf_k = 1, 2, ..., GRID")
    ap.add_argument("--min-seconds", type=float, default=0.5)
    ap.add_argument("--timings", type=int, default=3)
    ap.add_argument("--analysis", help="write ranx's per-(rrf_k, query) values here (.npz)")
    args = ap.parse_args()

    started = time.perf_counter()
    from ranx import Qrels, Run, evaluate, fuse, optimize_fusion

    with open(args.candidates) as f:
        exported = json.load(f)
    queries, limit = exported["queries"], exported["limit"]
    # Each channel's list as a Run whose scores give its order (positions are what RRF reads).
    vector = Run.from_dict({q["id"]: {item: float(-p) for p, (item, _) in enumerate(q["vector"])} for q in queries})
    lexical = Run.from_dict({q["id"]: {item: float(-p) for p, (item, _) in enumerate(q["lexical"])} for q in queries})
    qrels = Qrels.from_dict({q["id"]: {item: 1 for key in q["expected"] for item in key} for q in queries})
    setup = time.perf_counter() - started
    grid = list(range(1, args.grid + 1))

    def fuse_and_evaluate():
        # norm=None: RRF reads positions only, so ranx's default min-max normalisation would be work for nothing.
        return [evaluate(qrels, fuse([vector, lexical], norm=None, method="rrf", params={"k": k}), list(METRICS))
                for k in grid]

    def optimize():
        return optimize_fusion(qrels, [vector, lexical], norm=None, method="rrf", metric="mrr@10",
                               min_k=grid[0], max_k=grid[-1], step=1, show_progress=False)

    one_pass = fuse_and_evaluate if args.method == "fuse" else optimize
    out = {"setup": setup, **timed_passes(one_pass, args.min_seconds, args.timings)}
    if args.method == "optimize":
        out["best_k"] = one_pass()["k"]
    print(json.dumps(out))
    if args.analysis:
        write_analysis(args.analysis, queries, limit, grid, vector, lexical, qrels, fuse, evaluate)


def write_analysis(path, queries, limit, grid, vector, lexical, qrels, fuse, evaluate) -> None:
    """ranx's metrics and both orders' first slots per (rrf_k, query), and which cells hold a fused-score tie
    within the first `limit + 1` items (where an unstable sort may put them either way)."""
    import numpy as np

    width = max(len(q["expected"]) for q in queries)
    shape = (len(grid), len(queries))
    ranx_metrics = np.zeros(shape + (len(METRICS),))
    ranx_order, soat_order = np.zeros(shape + (width,), np.int64), np.zeros(shape + (width,), np.int64)
    tied = np.zeros(shape, bool)
    groups = [[set(key) for key in q["expected"]] for q in queries]
    # SOAT's first-insertion order: all of V in V order, then lexical-only items in L order.
    insertion = [{item: i for i, item in enumerate(dict.fromkeys([x for x, _ in q["vector"] + q["lexical"]]))}
                 for q in queries]
    for a, k in enumerate(grid):
        run = fuse([vector, lexical], norm=None, method="rrf", params={"k": k})
        evaluate(qrels, run, list(METRICS))
        for b, q in enumerate(queries):
            scored = list(run.run[q["id"]].items())  # ranx's order: its sort by score
            ranx_metrics[a, b] = [run.scores[m][q["id"]] for m in METRICS]
            ranx_order[a, b, : len(groups[b])] = first_slots([x for x, _ in scored], groups[b], limit)
            soat = sorted(scored, key=lambda xs: (-xs[1], insertion[b][xs[0]]))
            soat_order[a, b, : len(groups[b])] = first_slots([x for x, _ in soat], groups[b], limit)
            head = [s for _, s in soat[: limit + 1]]
            tied[a, b] = len(set(head)) < len(head)
    np.savez(path, ranx_metrics=ranx_metrics, ranx_order=ranx_order, soat_order=soat_order, tied=tied)


if __name__ == "__main__":
    main()
