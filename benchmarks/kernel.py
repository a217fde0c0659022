"""The fast path against a compiled kernel of the same algorithm, side by side in one run.

    nice -n 10 .venv/bin/python benchmarks/kernel.py                  # handbook + synthetic 10,000 chunks
    nice -n 10 .venv/bin/python benchmarks/kernel.py --rounds 1       # a quick look

The kernel (benchmarks/kernel_side.py, numba) lives in the benchmark only and runs in ranx's venv
(benchmarks/.ranx-env/, created by benchmarks/versus_ranx.py's `ranx_python` when missing: ranx brings numba),
never in the project's .venv or lock. Both sides read one file of the same query plans and settings and run
in fresh one-thread processes, alternating round by round. The fast path's pass is the whole of it:
`stack_plans`, `stacked_positions`, then recall@5, recall@10 and MRR per (setting, query) by
`metrics.binary_scores` (what `score_queries` computes them with for an ungraded golden set, tied bit for bit
to the registry by tests/test_metrics.py). Both sides write uint8 positions. The kernel's pass is the same from the plans' flat arrays (flattening them is Python
work outside its pass, so the ratio does not flatter the fast path). Times are CPU seconds (`process_time`)
of each process: the median of `--timings` timings of at least `--min-seconds`, then the median over rounds.
Cold start: the kernel's first call in a fresh process with numba's cache off compiles it; that first call is
reported apart ("compile + first pass") and never in the warm figures, as is the fast path's first pass.
The first round's positions and metrics of both sides are compared cell by cell.

Settings: benchmarks/engine.py's grid (15 rrf_k x 11 floors x 12 half-lives = 1,980, most with the blend on).
Corpora: the handbook (configs/handbook-stand-in.yaml, all 165 golden queries) and engine.py's synthetic
generator (10,000 chunks, 1,000 memories with ages of 0 to 400 days, 1,000 queries).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))

from engine import settings_grid, synthetic_corpus  # noqa: E402
from rqsweep import metrics  # noqa: E402
from rqsweep.backends import scoring  # noqa: E402
from rqsweep.engine.batch import QueryPlan, SettingsBatch, stack_plans, stacked_positions  # noqa: E402
from rqsweep.engine.recency import recency_factor  # noqa: E402
from rqsweep.knobs import blends  # noqa: E402
from rqsweep.scope import Scope  # noqa: E402
from timing import timed_passes  # noqa: E402
from versus_ranx import measure, ranx_python  # noqa: E402

LIMIT = 10
METRICS = ("recall_at_5", "recall_at_10", "mrr")  # the kernel's order


# ---- the plans as flat arrays, both ways -------------------------------------------------------------------

def flatten(plans: list[QueryPlan], batch: SettingsBatch) -> dict[str, np.ndarray]:
    """The plans and settings as the kernel reads them; `unflatten` gives the fast path the same plans back."""
    cat = lambda arrays, dtype: np.concatenate([np.asarray(a, dtype) for a in arrays] or [np.zeros(0, dtype)])  # noqa: E731
    lengths = lambda arrays: np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)  # noqa: E731
    groups = [g for p in plans for g in p.groups]
    age_days = cat([p.age_days for p in plans], np.float64)
    decayed = cat([p.decayed for p in plans], bool)
    old = decayed & (age_days > 0)  # the blend's factor is 1 for every other item
    ages, slot = np.unique(age_days[old], return_inverse=True)
    age_slot = np.full(len(age_days), -1, np.int64)
    age_slot[old] = slot.ravel()
    hs = batch.distinct_half_life
    factors = np.array([[recency_factor(a, h) for a in ages.tolist()] + [1.0] for h in hs.tolist()])
    floors, floor_index = np.unique(batch.floor, return_inverse=True)
    return {
        "item_start": lengths([p.v_pos for p in plans]), "v_pos": cat([p.v_pos for p in plans], np.int64),
        "l_pos": cat([p.l_pos for p in plans], np.int64), "decayed": decayed.astype(np.int8), "age_days": age_days,
        "age_slot": age_slot, "sim_start": lengths([p.v_similarity for p in plans]),
        "sims": cat([p.v_similarity for p in plans], np.float64),
        "key_start": lengths([p.groups for p in plans]), "member_start": lengths(groups),
        "members": cat(groups, np.int64), "aged": np.array([(p.age_days[p.decayed] > 0).any() for p in plans]),
        "rrf_k": batch.rrf_k, "k_index": batch.k_index.ravel(), "rrf_k_values": batch.distinct_rrf_k,
        "floor": floors, "floor_index": floor_index.ravel(),
        "h_index": batch.h_index.ravel(), "n_hs": np.int64(len(hs)), "blend": blends(batch.half_life),
        "factors": factors, "min_similarity": batch.min_similarity, "half_life": batch.half_life,
        "limit": np.int64(LIMIT), "width": np.int64(max((len(p.groups) for p in plans), default=1)),
    }


def unflatten(data: dict[str, np.ndarray]) -> tuple[list[QueryPlan], SettingsBatch]:
    plans = []
    for q in range(len(data["item_start"]) - 1):
        items = slice(*data["item_start"][q : q + 2])
        keys = range(*data["key_start"][q : q + 2])
        groups = tuple(data["members"][slice(*data["member_start"][g : g + 2])] for g in keys)
        plans.append(QueryPlan(data["v_pos"][items], data["l_pos"][items], data["sims"][slice(*data["sim_start"][q : q + 2])],
                               data["age_days"][items], groups, data["decayed"][items].astype(bool)))
    return plans, SettingsBatch(data["rrf_k"], data["min_similarity"], data["half_life"])


# ---- the fast path side ----------------------------------------------------------------------------------------

def fast_path_side(args: argparse.Namespace) -> None:
    """Time the fast path's whole pass over the file's plans (a fresh process started by `main`); one JSON line."""
    plans, batch = unflatten(dict(np.load(args.fast_path_side)))
    n_expected = np.array([len(p.groups) for p in plans])

    def scored(found: np.ndarray) -> list[np.ndarray]:
        return list(metrics.binary_scores(found, n_expected, METRICS)[1].values())

    def one_pass() -> tuple[np.ndarray, list[np.ndarray]]:
        found = stacked_positions(stack_plans(plans), batch, LIMIT)
        return found, scored(found)

    out = timed_passes(one_pass, args.min_seconds, args.timings, clock=time.process_time)
    if args.out:
        found, scores = one_pass()  # interleaved as the kernel writes them outside the pass: a copy of its own
        np.savez(args.out, positions=found, metrics=np.stack(scores, -1).reshape(len(batch), len(plans), len(METRICS)))
        # Where the pass goes, each step timed alone on the same inputs.
        stack = stack_plans(plans)
        steps = {"stack": lambda: stack_plans(plans), "positions": lambda: stacked_positions(stack, batch, LIMIT),
                 "metrics": lambda: scored(found)}
        out["steps"] = {name: timed_passes(step, args.min_seconds, args.timings, clock=time.process_time)["warm"]
                        for name, step in steps.items()}
    print(json.dumps(out))


# ---- the corpora -------------------------------------------------------------------------------------------

def handbook() -> tuple[str, list[QueryPlan]]:
    from rqsweep.backends.embedded import build_embedder
    from rqsweep.engine.index import Index
    from rqsweep.inputs import load_inputs

    inputs = load_inputs(ROOT / "configs" / "handbook-stand-in.yaml")
    engine = inputs.config.backend
    index = Index.build(inputs.corpus, build_embedder(engine), engine.chunking, tie_order=engine.tie_order)
    queries = [(q.query, [e.key for e in q.expected]) for q in inputs.golden.queries]
    plans, _, _ = scoring.plan_queries(index, queries, index.embed_queries([q for q, _ in queries]), LIMIT, Scope())
    return "handbook", plans


def synthetic(n_chunks: int, n_queries: int) -> tuple[str, list[QueryPlan]]:
    from rqsweep.config import Chunking
    from rqsweep.engine.embed import FeatureHashEmbedder
    from rqsweep.engine.index import Index

    corpus, generated = synthetic_corpus(n_chunks, n_chunks // 10, n_queries=n_queries)
    index = Index.build(corpus, FeatureHashEmbedder(1024), Chunking("size", 1000, 200))
    queries = [(text, [key]) for text, key in generated]
    plans, _, _ = scoring.plan_queries(index, queries, index.embed_queries([q for q, _ in queries]), LIMIT, Scope())
    return f"synthetic {n_chunks:,} chunks", plans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", type=Path, default=ROOT / "benchmarks" / ".ranx-env", help="a venv with numba (ranx's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timings", type=int, default=3, help="timings per measurement (median)")
    ap.add_argument("--min-seconds", type=float, default=0.5, help="least CPU time of one timing")
    ap.add_argument("--synthetic-chunks", type=int, default=10_000)
    ap.add_argument("--synthetic-queries", type=int, default=1000)
    ap.add_argument("--fast-path-side", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fast_path_side:
        return fast_path_side(args)

    python = ranx_python(args.env)
    batch = SettingsBatch.from_knobs(settings_grid(2000))
    timing = ["--min-seconds", args.min_seconds, "--timings", args.timings]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        for name, plans in (handbook(), synthetic(args.synthetic_chunks, args.synthetic_queries)):
            file = work / "plans.npz"
            started = time.process_time()
            np.savez(file, **flatten(plans, batch))
            flattening = time.process_time() - started
            sides = {"fast": [sys.executable, __file__, "--fast-path-side", file],
                     "kernel": [python, "-I", ROOT / "benchmarks" / "kernel_side.py", file]}
            runs: dict[str, list[dict]] = {"fast": [], "kernel": []}
            for r in range(args.rounds):
                for which in (("fast", "kernel") if r % 2 == 0 else ("kernel", "fast")):
                    extra = ["--out", work / f"{which}.npz"] if r == 0 else []
                    runs[which].append(measure([*sides[which], *timing, *extra]))
            fast, kernel = (dict(np.load(work / f"{w}.npz")) for w in ("fast", "kernel"))
            cells = {part: (int((fast[part] != kernel[part]).reshape(len(batch), len(plans), -1).any(-1).sum()))
                     for part in ("positions", "metrics")}
            med = {w: {f: statistics.median(m[f] for m in runs[w]) for f in ("warm", "first")} for w in runs}
            ratios = [f["warm"] / k["warm"] for f, k in zip(runs["fast"], runs["kernel"])]
            working = sum(p.expected_in_candidates for p in plans)
            aged = sum(bool((p.age_days[p.decayed] > 0).any()) for p in plans)
            rows.append((name, len(plans), working, aged, med, ratios, cells, flattening, runs["kernel"][0],
                         runs["fast"][0]["steps"]))
            print(f"  {name}: fast {med['fast']['warm'] * 1e3:.1f} ms, kernel {med['kernel']['warm'] * 1e3:.1f} ms",
                  file=sys.stderr)
    print_table(rows, len(batch), args)


def print_table(rows: list, n_settings: int, args: argparse.Namespace) -> None:
    print(f"\n{n_settings:,} settings (engine.py's grid), limit {LIMIT}, one thread per side; CPU seconds, median of "
          f"{args.rounds} rounds, each a median of {args.timings} timings of >= {args.min_seconds} s\n")
    print("| corpus | queries (expected item a candidate; aged) | fast path: stack + positions + metrics | "
          "kernel (numba) | ratio fast / kernel (per round) | cells differing: positions / metrics | "
          "kernel compile + first pass | fast path first pass | flattening for the kernel (not in its pass) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, n, working, aged, med, ratios, cells, flattening, kernel, steps in rows:
        per_cell = lambda s: f"{s / (n_settings * n) * 1e9:.0f} ns/cell"  # noqa: E731
        print(f"| {name} | {n:,} ({working:,}; {aged:,}) | {med['fast']['warm'] * 1e3:.1f} ms "
              f"({per_cell(med['fast']['warm'])}) | {med['kernel']['warm'] * 1e3:.1f} ms "
              f"({per_cell(med['kernel']['warm'])}) | **{statistics.median(ratios):.2f}x** "
              f"({', '.join(f'{x:.2f}' for x in ratios)}) | {cells['positions']} / {cells['metrics']} | "
              f"{med['kernel']['first']:.2f} s | {med['fast']['first'] * 1e3:.1f} ms | {flattening * 1e3:.0f} ms |")
    print(f"\nnumba {rows[0][-2]['numba']}; cells = settings x queries.\n")
    print("| corpus | the fast path's steps, each timed alone (first round): stack_plans / stacked_positions / metrics |")
    print("| --- | --- |")
    for row in rows:
        print(f"| {row[0]} | {' / '.join(f'{seconds * 1e3:.1f} ms' for seconds in row[-1].values())} |")


if __name__ == "__main__":
    main()
