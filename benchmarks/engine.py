"""Embedded engine benchmark: index build, candidate extraction, fast path vs reference path.

    .venv/bin/python benchmarks/engine.py            # SOAT's golden set + a 100,000-chunk synthetic corpus
    .venv/bin/python benchmarks/engine.py --small    # a 10,000-chunk synthetic corpus instead (quick look)

Prints medians of repeated timings, each of at least 0.5 s of work. The fast path (`stacked_positions`,
stacking the plans included in every pass, though the job stacks them once per run) is timed on one core
(workers=1); its (setting x query) evaluations per second are compared with the reference path measured
in the same run, over all queries and over only the queries whose expected item is a candidate (the fast
path returns at once for the others), and the two paths' ranks are checked to be identical on every pair
the reference evaluated. Ends with the markdown tables benchmarks/HISTORY.md records.
"""

from __future__ import annotations

import os

# One core for the whole benchmark: BLAS threads would blur the single-core figures.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rqsweep.backends import scoring  # noqa: E402
from rqsweep.corpus import Chunking, Corpus, Document, Memory  # noqa: E402
from rqsweep.engine.batch import SettingsBatch, stack_both_orders, stack_plans, stacked_positions  # noqa: E402
from rqsweep.engine.embed import FeatureHashEmbedder  # noqa: E402
from rqsweep.engine.fusion import fuse  # noqa: E402
from rqsweep.engine.index import Index  # noqa: E402
from rqsweep.golden import load_golden  # noqa: E402
from rqsweep.knobs import Knobs  # noqa: E402
from rqsweep.scope import Scope  # noqa: E402
from timing import timed_passes  # noqa: E402

GOLDEN = ROOT.parent / "shared" / "soat-golden" / "golden.v1.json"
MIN_SECONDS, TIMINGS = 0.5, 5  # each timing repeats the pass for at least this long; the median of these many


def settings_grid(n: int, seed: int = 0) -> list[Knobs]:
    rng = random.Random(seed)
    ks = [1, 2, 3, 5, 8, 10, 15, 20, 30, 40, 60, 80, 100, 150, 200]
    floors = [None] + [round(0.05 * i, 2) for i in range(1, 11)]
    halves = [0, 0.5, 1, 2, 3, 7, 14, 30, 60, 90, 180, 365]
    pool = [Knobs(k, f, h) for k in ks for f in floors for h in halves]
    rng.shuffle(pool)
    return pool[:n]


def synthetic_corpus(n_chunks: int, n_memories: int, seed: int = 1,
                     n_queries: int = 1000) -> tuple[Corpus, list[tuple[str, str]]]:
    """Zipf-distributed words plus identifiers; queries ask for words of one document (so they match)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    cum = np.cumsum(weights) / sum(weights)
    np_rng = np.random.default_rng(seed)

    def text(n_words: int) -> str:
        idx = np.searchsorted(cum, np_rng.random(n_words))
        words = [vocab[i] for i in idx]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), f"SKU-{rng.randrange(10_000)}")
        return " ".join(words)

    docs = [Document(f"doc-{i}", text(150)[:1000]) for i in range(n_chunks)]
    mems = [Memory(f"mem-{i}", text(12), age_days=rng.choice([0.0, 1.0, 7.0, 30.0, 400.0]))
            for i in range(n_memories)]
    queries, pool = [], docs + mems
    for _ in range(n_queries):
        target = rng.choice(pool)
        words = target.content.split()
        picked = rng.sample(words, min(2, len(words)))
        queries.append((" ".join(picked), target.key))
    return Corpus(tuple(docs), tuple(mems)), queries


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench(name: str, corpus: Corpus, queries: list[tuple[str, list[str]]], n_settings: int,
          reference_pairs: int) -> dict:
    print(f"\n== {name}: {len(corpus.documents)} documents, {len(corpus.memories)} memories, "
          f"{len(queries)} queries, {n_settings} settings")
    t = time.perf_counter()
    index = Index.build(corpus, FeatureHashEmbedder(1024), Chunking("size", 1000, 200))
    build = time.perf_counter() - t
    print(f"index build (chunk, embed, lexical index): {build:.2f} s "
          f"({len(index.stores['document'].ids)} chunks)")
    vectors = index.embed_queries([q for q, _ in queries])
    ages = index.memory_age_days()
    expected_rows = [index.expected_rows(keys) for _, keys in queries]
    started = time.process_time()
    # As the job extracts: blocks of queries, both tie orders from one extraction.
    plans, alternates, candidates = scoring.plan_queries(index, queries, vectors, 10, Scope())
    extraction = (time.process_time() - started) / max(len(queries), 1)
    print(f"candidate extraction: {extraction * 1e3:.2f} ms CPU per query (both tie orders, batched)")
    # A query none of whose expected items is a candidate returns at once on the fast path: count both ways.
    working = [q for q, p in enumerate(plans) if p.expected_in_candidates]
    print(f"queries whose expected item is a candidate (the fast path works on them): {len(working)} of {len(plans)}")

    knobs = settings_grid(n_settings)
    batch = SettingsBatch.from_knobs(knobs)
    fast = {}
    for part, qs in (("all", range(len(plans))), ("working", working)):
        part_plans = [plans[q] for q in qs]  # stacked per pass, as the job stacks per batch
        timing = timed_passes(lambda: stacked_positions(stack_plans(part_plans), batch, 10), MIN_SECONDS, TIMINGS)
        fast[part] = len(knobs) * len(qs) / timing["warm"]
        print(f"fast path, {part} queries: {timing['warm']:.4f} s a pass (median of {TIMINGS} timings of "
              f"{timing['repeats']} passes) for {len(knobs)} x {len(qs)} = {fast[part] / 1e6:.2f} M evaluations/s")
    result = stacked_positions(stack_plans(plans), batch, 10)

    rng = random.Random(3)
    reference, mismatches = {}, {}
    for part, qs in (("all", range(len(plans))), ("working", working)):
        pairs = [(rng.randrange(len(knobs)), rng.choice(qs)) for _ in range(reference_pairs)]
        out: list = []

        def run_reference():
            out.clear()
            for s, q in pairs:
                ranked = fuse(candidates[q], knobs[s], 10, ages)
                out.append([min([p for p, f in enumerate(ranked, 1) if (f.source_type, f.row) in g] or [0])
                            for g in expected_rows[q]])

        timing = timed_passes(run_reference, MIN_SECONDS, 3)
        reference[part] = len(pairs) / timing["warm"]
        mismatches[part] = sum(result[s, q, : len(r)].tolist() != r for (s, q), r in zip(pairs, out))
        print(f"reference path, {part} queries: {reference[part] / 1e3:.1f} k evaluations/s ({len(pairs)} sampled "
              f"pairs); fast / reference: {fast[part] / reference[part]:.0f}x; rank mismatches: {mismatches[part]}")

    # The job's workers: the same scoring (with the tie-order check) serially and split over 2 processes.
    # Stacking is timed with each pass, though the job stacks once per run.
    scoring.score_in_processes(scoring.stack_shards(plans[:4], alternates[:4], 2), batch[:2], 10, 2)  # start them
    serial = median_time(lambda: scoring.score_plans(stack_both_orders(plans, alternates), batch, 10), 3)
    split = median_time(lambda: scoring.score_in_processes(scoring.stack_shards(plans, alternates, 2), batch, 10, 2),
                        3)
    print(f"job scoring with the tie check: 1 worker {serial:.3f} s, 2 workers {split:.3f} s "
          f"({serial / split:.2f}x)")
    return {"name": name, "chunks": len(index.stores["document"].ids), "memories": len(corpus.memories),
            "queries": len(plans), "working": len(working), "settings": len(knobs), "build": build,
            "candidates": extraction,
            "fast": fast, "reference": reference, "mismatches": mismatches, "workers": (serial, split)}


def print_table(rows: list[dict]) -> None:
    print("\n| corpus | queries (expected item a candidate) | index build | candidates / query (CPU, both tie orders) "
          "| fast path: all queries / working | reference path: all / working | ratio: all / working "
          "| rank mismatches |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        fast, ref = r["fast"], r["reference"]
        print(f"| {r['name']}: {r['chunks']:,} chunks, {r['memories']:,} memories | {r['queries']:,} "
              f"({r['working']:,}) | {r['build']:.2f} s | {r['candidates'] * 1e3:.2f} ms "
              f"| {fast['all'] / 1e6:.2f} M / {fast['working'] / 1e6:.2f} M eval/s "
              f"| {ref['all'] / 1e3:.1f} k / {ref['working'] / 1e3:.1f} k eval/s "
              f"| {fast['all'] / ref['all']:.0f}x / **{fast['working'] / ref['working']:.0f}x** "
              f"| {r['mismatches']['all'] + r['mismatches']['working']} |")
    print("\n| corpus | job scoring, 1 worker | 2 workers |")
    print("| --- | --- | --- |")
    for r in rows:
        serial, split = r["workers"]
        print(f"| {r['name']}, {r['queries']:,} queries | {serial:.3f} s | {split:.3f} s ({serial / split:.2f}x) |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    rows = []
    if GOLDEN.exists():
        golden = load_golden(GOLDEN)
        qs = [(q.query, [e.key for e in q.expected]) for q in golden.queries]
        rows.append(bench("SOAT golden.v1.json", golden.corpus, qs, 2000, 20_000))
    else:
        print(f"(skipping SOAT's golden set: {GOLDEN} not found)")
    n = 10_000 if args.small else 100_000
    corpus, queries = synthetic_corpus(n, n // 10)
    rows.append(bench("synthetic", corpus, [(q, [k]) for q, k in queries], 2000, 20_000))
    print_table(rows)


if __name__ == "__main__":
    main()
