"""Aged memories: the same corpus with every memory dated in the past, against every memory of age 0.

    nice -n 10 .venv/bin/python benchmarks/aged.py                    # 10,000 chunks, 10,000 memories, 1,000 queries
    nice -n 10 .venv/bin/python benchmarks/aged.py --chunks 2000      # a quick look

benchmarks/engine.py's synthetic corpus, built twice: once with every memory 0 days old (the blend leaves
every score as it is and only reorders ties), once with every memory 1 to 400 days old (the blend changes
scores under every half-life > 0). Same queries, same 1,980 settings (engine.py's grid, most with the blend
on). One core, CPU seconds (`time.process_time`), median of 3 passes each: the fast path alone
(`stacked_positions`, with `stack_plans`) and the job's whole scoring of a batch (`score_plans`: the fast
path, the tie-order check and the later-search check, with `stack_both_orders`), stacking included in every
pass though the job stacks once per run. Reported per (setting, query).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import settings_grid, synthetic_corpus  # noqa: E402
from rqsweep.backends import scoring  # noqa: E402
from rqsweep.corpus import Chunking, Corpus  # noqa: E402
from rqsweep.engine.batch import SettingsBatch, stack_both_orders, stack_plans, stacked_positions  # noqa: E402
from rqsweep.engine.embed import FeatureHashEmbedder  # noqa: E402
from rqsweep.engine.index import Index  # noqa: E402
from rqsweep.scope import Scope  # noqa: E402

LIMIT = 10


def cpu_median(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return statistics.median(times)


def measure(name: str, corpus: Corpus, queries: list[tuple[str, list[str]]], batch: SettingsBatch) -> dict:
    index = Index.build(corpus, FeatureHashEmbedder(1024), Chunking("size", 1000, 200))
    vectors = index.embed_queries([q for q, _ in queries])
    plans, alternates, _ = scoring.plan_queries(index, queries, vectors, LIMIT, Scope())
    aged = stack_both_orders(plans, alternates).stack.aged.sum()
    pairs = len(batch) * len(plans)
    fast = cpu_median(lambda: stacked_positions(stack_plans(plans), batch, LIMIT)) / pairs
    job = cpu_median(lambda: scoring.score_plans(stack_both_orders(plans, alternates), batch, LIMIT)) / pairs
    print(f"{name}: {aged} of {len(plans)} queries have an aged candidate; fast path {fast * 1e9:.0f} ns, "
          f"job scoring {job * 1e9:.0f} ns CPU per (setting, query)")
    return {"name": name, "aged": int(aged), "fast": fast, "job": job}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=1000)
    args = ap.parse_args()
    corpus, queries = synthetic_corpus(args.chunks, args.memories, n_queries=args.queries)
    rng = random.Random(5)
    fresh = Corpus(corpus.documents, tuple(dataclasses.replace(m, age_days=0.0) for m in corpus.memories))
    old = Corpus(corpus.documents, tuple(dataclasses.replace(m, age_days=rng.uniform(1.0, 400.0))
                                         for m in corpus.memories))
    batch = SettingsBatch.from_knobs(settings_grid(2000))
    print(f"{args.chunks:,} chunks, {args.memories:,} memories, {args.queries:,} queries, {len(batch):,} settings")
    rows = [measure("memories 0 days old", fresh, [(q, [k]) for q, k in queries], batch),
            measure("memories 1-400 days old", old, [(q, [k]) for q, k in queries], batch)]
    print("\n| corpus | queries with an aged candidate | fast path / (setting, query) | job scoring / (setting, query) |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['name']} | {r['aged']:,} | {r['fast'] * 1e9:.0f} ns | {r['job'] * 1e9:.0f} ns |")
    base, aged = rows
    print(f"| ratio | | {aged['fast'] / base['fast']:.2f}x | {aged['job'] / base['job']:.2f}x |")


if __name__ == "__main__":
    main()
