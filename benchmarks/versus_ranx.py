"""The fast path vs ranx 0.3.21 on the same rrf_k-only sweep, side by side in one run.

    .venv/bin/python benchmarks/versus_ranx.py                            # handbook + synthetic, 50 and 500 rrf_k
    .venv/bin/python benchmarks/versus_ranx.py --grids 50 --rounds 1      # a quick look

ranx is installed into its own environment (`--env`, default benchmarks/.ranx-env/, git-ignored; created
with `python -m venv` and `pip install ranx==0.3.21` when missing), never into the project's .venv or lock.

Same work on both sides: each golden query's merged vector and lexical candidate lists, taken from the
embedded index through its public API (`Index.candidates`, as the fast path fuses them), are written to one
JSON file that both sides read: the fast path (`SettingsBatch` of rrf_k = 1..N with no floor and no blend,
`stack_plans` and `stacked_positions` over every query, the registry's recall@5, recall@10 and MRR averaged
per rrf_k) in the project's .venv, and `benchmarks/ranx_side.py` (per rrf_k `fuse(method="rrf")` +
`evaluate`, and `optimize_fusion(method="rrf")` over the same grid) in ranx's environment. Each measurement
is a fresh process with one thread (numba, OpenMP, OpenBLAS, MKL); the two sides alternate round by round,
and the medians and ratios come from the same run. Building each side's inputs (plans; Runs and Qrels) is
timed apart from the passes; stacking the plans is in every pass of the fast path, as each of the job's
batches pays it. ranx's cold start is its first pass in a fresh process with an empty numba cache.

Corpora: the handbook (configs/handbook-stand-in.yaml, all 165 golden queries) and a synthetic corpus
(benchmarks/engine.py's generator) keeping only queries whose expected item is in a candidate list, so
every query reaches the fast path's work. The metrics of the first round are compared cell by cell.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))

from ranx_side import METRICS as RANX_METRICS  # noqa: E402
from rqsweep import metrics  # noqa: E402
from rqsweep.engine.batch import SettingsBatch, plan_query, stack_plans, stacked_positions  # noqa: E402
from rqsweep.engine.channels import Candidate, Candidates  # noqa: E402
from rqsweep.knobs import Knobs  # noqa: E402
from timing import timed_passes  # noqa: E402

RANX_VERSION = "0.3.21"
METRICS = ("recall_at_5", "recall_at_10", "mrr")  # the same order as ranx_side.METRICS
ONE_THREAD = {v: "1" for v in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
LIMIT = 10


# ---- the environments -----------------------------------------------------------------------------------------

def ranx_python(env: Path) -> Path:
    """The Python of `env` with ranx installed at RANX_VERSION; the venv is created and ranx installed when missing."""
    python = env / "bin" / "python"
    check = f"import importlib.metadata as m; assert m.version('ranx') == {RANX_VERSION!r}"
    if python.exists() and subprocess.run([python, "-c", check], capture_output=True).returncode == 0:
        return python
    print(f"installing ranx {RANX_VERSION} into {env} (its own venv, not the project's)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", env], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", f"ranx=={RANX_VERSION}"], check=True)
    return python


def measure(command: list, extra_env: dict | None = None) -> dict:
    """Run one side's measurement in a fresh one-thread process; its last stdout line is JSON."""
    env = {**os.environ, **ONE_THREAD, **(extra_env or {})}
    done = subprocess.run([str(c) for c in command], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the corpora and the exported candidate lists ------------------------------------------------------------

def item_name(source_type: str, row: int) -> str:
    return f"{source_type}:{row}"


def export(path: Path, name: str, index, queries: list[tuple[str, str, list[str]]], vectors: np.ndarray) -> int:
    """Write each (id, text, expected keys)'s candidate lists and expected items; returns how many reach work."""
    rows, reaching = [], 0
    for (qid, text, keys), vector in zip(queries, vectors):
        candidates = index.candidates(text, LIMIT, query_vector=vector)
        expected = index.expected_rows(keys)
        reaching += plan_query(candidates, expected, index.memory_age_days()).expected_in_candidates
        rows.append({"id": qid,
                     "vector": [[item_name(c.source_type, c.row), c.score] for c in candidates.vector],
                     "lexical": [[item_name(c.source_type, c.row), c.score] for c in candidates.lexical],
                     "expected": [sorted(item_name(*r) for r in key) for key in expected]})
    path.write_text(json.dumps({"corpus": name, "limit": LIMIT, "queries": rows}))
    return reaching


def handbook(path: Path) -> tuple[str, int, int]:
    from rqsweep.backends.embedded import build_embedder
    from rqsweep.engine.index import Index
    from rqsweep.inputs import load_inputs

    inputs = load_inputs(ROOT / "configs" / "handbook-stand-in.yaml")
    engine = inputs.config.backend
    index = Index.build(inputs.corpus, build_embedder(engine), engine.chunking, tie_order=engine.tie_order)
    golden = inputs.golden.queries
    vectors = index.embed_queries([q.query for q in golden])
    queries = [(q.id, q.query, [e.key for e in q.expected]) for q in golden]
    return "handbook", len(queries), export(path, "handbook", index, queries, vectors)


def synthetic(path: Path, n_chunks: int, n_queries: int) -> tuple[str, int, int]:
    """engine.py's synthetic corpus; of its queries, the first `n_queries` whose expected item is a candidate."""
    from engine import synthetic_corpus
    from rqsweep.config import Chunking
    from rqsweep.engine.embed import FeatureHashEmbedder
    from rqsweep.engine.index import Index

    corpus, generated = synthetic_corpus(n_chunks, n_chunks // 10, n_queries=4 * n_queries)
    index = Index.build(corpus, FeatureHashEmbedder(1024), Chunking("size", 1000, 200))
    ages = index.memory_age_days()
    vectors = index.embed_queries([text for text, _ in generated])
    kept, kept_vectors = [], []
    for i, ((text, key), vector) in enumerate(zip(generated, vectors)):
        candidates = index.candidates(text, LIMIT, query_vector=vector)
        if plan_query(candidates, index.expected_rows([key]), ages).expected_in_candidates:
            kept.append((f"q{i}", text, [key]))
            kept_vectors.append(vector)
            if len(kept) == n_queries:
                break
    name = f"synthetic {n_chunks:,} chunks"
    return name, len(kept), export(path, name, index, kept, np.array(kept_vectors))


# ---- the fast path side ----------------------------------------------------------------------------------------

def fast_path_side(args: argparse.Namespace) -> None:
    """Time the fast path over the exported candidates (run in a fresh process by `main`); print one JSON line."""
    started = time.perf_counter()
    exported = json.loads(Path(args.fast_path_side).read_text())
    limit = exported["limit"]
    queries = exported["queries"]
    candidates = [Candidates(*(tuple(Candidate(*parse(item), score) for item, score in q[channel])
                               for channel in ("vector", "lexical"))) for q in queries]
    memories = [c.row for cs in candidates for c in cs.vector + cs.lexical if c.source_type == "memory"]
    ages = np.zeros(max(memories, default=0) + 1)  # read by the blend only: rrf_k-only settings have none
    plans = [plan_query(cs, [{parse(item) for item in key} for key in q["expected"]], ages)
             for cs, q in zip(candidates, queries)]
    batch = SettingsBatch.from_knobs([Knobs(k) for k in range(1, args.grid + 1)])
    n_expected = np.tile(np.array([len(q["expected"]) for q in queries]), len(batch))
    names = METRICS if args.method == "fuse" else ("mrr",)
    setup = time.perf_counter() - started

    def evaluate() -> dict[str, np.ndarray]:
        """Per metric, its mean over queries for each rrf_k."""
        found = stacked_positions(stack_plans(plans), batch, limit)  # stacking in the pass, as the job's batch
        flat = found.reshape(len(batch) * len(plans), found.shape[-1])
        judged = metrics.Judged.binary(flat, n_expected)
        return {m: metrics.get(m).per_query(judged).reshape(len(batch), len(plans)).mean(axis=1)
                for m in names}

    def optimize() -> int:
        """The best rrf_k by MRR; among equal means the largest, as ranx's `optimize_fusion` picks."""
        mrr = evaluate()["mrr"]
        return int(batch.rrf_k[len(mrr) - 1 - np.argmax(mrr[::-1])])

    one_pass = evaluate if args.method == "fuse" else optimize
    out = {"setup": setup, **timed_passes(one_pass, args.min_seconds, args.timings)}
    if args.method == "optimize":
        out["best_k"] = one_pass()
    print(json.dumps(out))
    if args.analysis:
        np.savez(args.analysis, positions=stacked_positions(stack_plans(plans), batch, limit), n_expected=n_expected.reshape(len(batch), len(plans)))


def parse(item: str) -> tuple[str, int]:
    source_type, row = item.split(":")
    return source_type, int(row)


# ---- comparison and the tables --------------------------------------------------------------------------------

def agreement(fast: dict, ranx: dict) -> dict:
    """Cell by cell over (rrf_k, query): the fast path's metrics against ranx's own and against ranx's fused
    scores re-ordered by SOAT's tie rule and scored per key."""
    positions, n_expected = fast["positions"], fast["n_expected"]

    def scored(p: np.ndarray) -> np.ndarray:
        flat = p.reshape(-1, p.shape[-1])
        judged = metrics.Judged.binary(flat, n_expected.ravel())
        return np.stack([metrics.get(m).per_query(judged) for m in METRICS], -1).reshape(
            p.shape[:2] + (len(METRICS),))

    ours, soat, ranx_keys = scored(positions), scored(ranx["soat_order"]), scored(ranx["ranx_order"])
    theirs = ranx["ranx_metrics"]
    order_differs = (ranx["ranx_order"] != positions).any(-1)
    return {
        "cells": positions.shape[0] * positions.shape[1],
        "positions_equal_soat_order": int((ranx["soat_order"] == positions).all(-1).sum()),
        "metrics_equal_soat_order": int((soat == ours).all(-1).sum()),
        "tied_cells": int(ranx["tied"].sum()),
        "order_differs": int(order_differs.sum()),
        "ranx_differs": {r: int((theirs[..., i] != ours[..., i]).sum()) for i, r in enumerate(RANX_METRICS)},
        "ranx_differs_by_order": {r: int(((ranx_keys[..., i] != ours[..., i])).sum())
                                  for i, r in enumerate(RANX_METRICS)},
        "ranx_differs_by_rows": {r: int((theirs[..., i] != ranx_keys[..., i]).sum())
                                 for i, r in enumerate(RANX_METRICS)},
        "max_mean_gap_soat_order": float(np.abs(soat.mean(1) - ours.mean(1)).max()),
        "max_mean_gap_ranx": float(np.abs(theirs.mean(1) - ours.mean(1)).max()),
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", type=Path, default=ROOT / "benchmarks" / ".ranx-env", help="ranx's own venv")
    ap.add_argument("--grids", default="50,500", help="rrf_k grid sizes (rrf_k = 1..N)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timings", type=int, default=3, help="timings per measurement (median)")
    ap.add_argument("--min-seconds", type=float, default=0.5, help="least duration of one timing")
    ap.add_argument("--synthetic-chunks", type=int, default=10_000)
    ap.add_argument("--synthetic-queries", type=int, default=200)
    ap.add_argument("--fast-path-side", help=argparse.SUPPRESS)
    ap.add_argument("--method", choices=("fuse", "optimize"), help=argparse.SUPPRESS)
    ap.add_argument("--grid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--analysis", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fast_path_side:
        return fast_path_side(args)

    python = ranx_python(args.env)
    grids = [int(g) for g in args.grids.split(",")]
    timing = ["--min-seconds", args.min_seconds, "--timings", args.timings]
    rows, checks, cold = [], [], {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        files = {"handbook": work / "handbook.json", "synthetic": work / "synthetic.json"}
        corpora = [(files["handbook"], *handbook(files["handbook"])),
                   (files["synthetic"], *synthetic(files["synthetic"], args.synthetic_chunks, args.synthetic_queries))]

        def side(which: str, file: Path, method: str, grid: int, *extra) -> list:
            if which == "fast":
                return [sys.executable, __file__, "--fast-path-side", file, "--method", method, "--grid", grid, *extra]
            return [python, "-I", ROOT / "benchmarks" / "ranx_side.py", file, "--method", method, "--grid", grid, *extra]

        # Cold start: a fresh process with an empty numba cache compiles everything it meets (once per method).
        for method in ("fuse", "optimize"):
            cold[method] = measure(side("ranx", files["handbook"], method, grids[0], "--timings", 1),
                                   {"NUMBA_CACHE_DIR": work / f"numba-cold-{method}"})
        # The rounds share one numba cache, filled first, so they time ranx's passes and not its compiler.
        shared = {"NUMBA_CACHE_DIR": work / "numba"}
        for method in ("fuse", "optimize"):
            measure(side("ranx", files["handbook"], method, 1, "--timings", 1, "--min-seconds", 0), shared)
        for file, name, n_queries, reaching in corpora:
            for grid in grids:
                runs: dict[tuple[str, str], list[dict]] = {}
                for r in range(args.rounds):
                    for method in ("fuse", "optimize"):
                        analysis = r == 0 and method == "fuse"
                        for which in (("fast", "ranx") if r % 2 == 0 else ("ranx", "fast")):
                            extra = [*timing, *(["--analysis", work / f"{which}.npz"] * analysis)]
                            runs.setdefault((method, which), []).append(
                                measure(side(which, file, method, grid, *extra), shared))
                        if analysis:
                            checks.append((name, grid, agreement(dict(np.load(work / "fast.npz")),
                                                                 dict(np.load(work / "ranx.npz")))))
                for method in ("fuse", "optimize"):
                    med = {w: {f: statistics.median(m[f] for m in runs[(method, w)]) for f in ("warm", "first", "setup")}
                           for w in ("fast", "ranx")}
                    best = {w: sorted({m["best_k"] for m in runs[(method, w)]}) for w in ("fast", "ranx")} \
                        if method == "optimize" else None
                    ratios = [m["warm"] / f["warm"] for m, f in zip(runs[(method, "ranx")], runs[(method, "fast")])]
                    rows.append((name, n_queries, reaching, grid, method, med, best, ratios))
                    print(f"  {name}, {grid} rrf_k, {method}: fast {ms(med['fast']['warm'])}, "
                          f"ranx {ms(med['ranx']['warm'])}", file=sys.stderr)
    print_tables(rows, checks, cold, args)


WORK = {"fuse": "fuse + evaluate (3 metrics)", "optimize": "optimize_fusion (mrr@10)"}


def print_tables(rows: list, checks: list, cold: dict, args: argparse.Namespace) -> None:
    print(f"\nrrf_k-only sweeps (rrf_k = 1..N, no floor, no blend), limit {LIMIT}, one thread per side; median of "
          f"{args.rounds} rounds, each a median of {args.timings} timings of >= {args.min_seconds} s; "
          f"cells = rrf_k values x queries\n")
    print("| corpus | queries (expected item a candidate) | rrf_k values | work | fast path | ranx warm | "
          "ratio (per round) | first pass in a fresh process: fast path / ranx (numba cache on disk) | best rrf_k |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, n_queries, reaching, grid, method, med, best, ratios in rows:
        fast, ranx = med["fast"], med["ranx"]
        cells = grid * n_queries
        shown_best = "" if best is None else (
            f"{best['fast']} (ranx {best['ranx']})" if best["fast"] != best["ranx"] else f"{best['fast']} both")
        print(f"| {name} | {n_queries} ({reaching}) | {grid} | {WORK[method]} | {ms(fast['warm'])} "
              f"({cells / fast['warm'] / 1e6:.2f} M cells/s) | {ms(ranx['warm'])} ({cells / ranx['warm'] / 1e3:.1f} k "
              f"cells/s) | **{ranx['warm'] / fast['warm']:.0f}x** ({', '.join(f'{x:.0f}' for x in ratios)}) "
              f"| {ms(fast['first'])} / {ms(ranx['first'])} | {shown_best} |")
    grid = args.grids.split(",")[0]
    print(f"\nranx cold start (a fresh process, empty numba cache), handbook, {grid} rrf_k values:\n")
    print("| work | import ranx, build Runs and Qrels | first pass | warm pass, same process |")
    print("| --- | --- | --- | --- |")
    for method, c in cold.items():
        print(f"| {WORK[method]} | {ms(c['setup'])} | {ms(c['first'])} | {ms(c['warm'])} |")
    print("\nAgreement, cell by cell over (rrf_k, query), the first round's fuse + evaluate. \"SOAT order\": ranx's "
          "fused scores re-sorted with ties in first-insertion order, scored per expected key as the fast path "
          "scores.\n")
    print("| corpus | rrf_k values | cells | SOAT order: key positions equal | SOAT order: metrics equal | "
          "cells with a fused-score tie in the first 11 | ranx's order moves a key | "
          "ranx's own values differ (recall@5 / recall@10 / mrr@10) | per key in ranx's order: differ | "
          "ranx's own vs per key, both in ranx's order: differ | largest gap of a per-rrf_k mean: SOAT order / ranx's own |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, grid, c in checks:
        trio = lambda d: " / ".join(str(d[m]) for m in RANX_METRICS)  # noqa: E731
        print(f"| {name} | {grid} | {c['cells']} | {c['positions_equal_soat_order']} | {c['metrics_equal_soat_order']}"
              f" | {c['tied_cells']} | {c['order_differs']} | {trio(c['ranx_differs'])} | "
              f"{trio(c['ranx_differs_by_order'])} | {trio(c['ranx_differs_by_rows'])} | "
              f"{c['max_mean_gap_soat_order']:.2g} / {c['max_mean_gap_ranx']:.3g} |")


if __name__ == "__main__":
    main()
