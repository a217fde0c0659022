"""Vector candidates: the batched extraction (`cosine_top_many`) against its one-query reference (`cosine_top`).

    nice -n 10 .venv/bin/python benchmarks/candidates.py                  # 200,000 chunks, 1,000 queries
    nice -n 10 .venv/bin/python benchmarks/candidates.py --chunks 20000   # a quick look

One core (BLAS threads pinned to 1), CPU seconds (`time.process_time`), both measured in this run on the same
vectors. The chunks are benchmarks/engine.py's synthetic 150-word documents, embedded by the feature hash at
1,024 dimensions and stored column-major as float32, and again as the index stores them (`QuarterVectors`: quarter
counts, a byte per element), answered against the float32 reference; the queries are its two-word queries
(sparse: about 9 non-zero dimensions). A third case has dense queries (random 1,024-dim vectors, as a
model embedder gives) over the same chunks; a fourth has a 384-dimension model's shape on both sides (the chunks'
vectors projected by a fixed Gaussian 1,024 x 384 matrix and normalised, as benchmarks/dense_standin.py makes
them; random dense queries). Each path answers both tie orders, as the job needs them: the
batched path in one extraction, the reference once per order. The batched path is timed over every query,
median of 3 repeats; the reference per query, median over a sample of `--reference` queries. Every sampled
query is checked to be bit for bit the same (rows, order, distance bits) in both tie orders.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import synthetic_corpus  # noqa: E402
from rqsweep.engine import cosine  # noqa: E402
from rqsweep.engine.cosine import cosine_top, cosine_top_many, squared_norms  # noqa: E402
from rqsweep.engine.embed import FeatureHashEmbedder  # noqa: E402
from rqsweep.engine.pgsort import TIE_ORDERS  # noqa: E402
from rqsweep.engine.quarter_vectors import QuarterVectors  # noqa: E402

LIMIT = 10


def cpu(fn) -> tuple[float, object]:
    started = time.process_time()
    out = fn()
    return time.process_time() - started, out


def compare(name: str, matrix: np.ndarray, norms: np.ndarray, queries: np.ndarray, sample: int,
            stored: QuarterVectors | None = None) -> dict:
    """The batched path over `stored` (default `matrix`) against the reference over `matrix`, the same rows."""
    runs = [cpu(lambda: cosine_top_many(matrix if stored is None else stored, queries, LIMIT, norms=norms))
            for _ in range(3)]
    batched = statistics.median(t for t, _ in runs) / len(queries)
    found = runs[0][1]
    per_query, mismatches, tie_decided = [], 0, 0
    for q in range(min(sample, len(queries))):
        seconds, reference = cpu(lambda: {order: cosine_top(matrix, queries[q], LIMIT, tie_order=order, norms=norms)
                                          for order in TIE_ORDERS})
        per_query.append(seconds)
        for order in TIE_ORDERS:
            mine, theirs = found[q][order], reference[order]
            mismatches += (mine[0].tolist() != theirs[0].tolist()
                           or mine[1].view(np.int64).tolist() != theirs[1].view(np.int64).tolist())
        tie_decided += reference["postgres"][0].tolist() != reference["insertion"][0].tolist()
    ref = statistics.median(per_query)
    print(f"{name}: batched {batched * 1e3:.2f} ms CPU per query (both tie orders, median of 3 passes over "
          f"{len(queries)} queries); reference {ref * 1e3:.1f} ms (median of {len(per_query)} queries); "
          f"{ref / batched:.0f}x; mismatches {mismatches} of {2 * len(per_query)} (query, tie order) answers; "
          f"{tie_decided} sampled queries whose tie orders differ")
    return {"name": name, "dims": matrix.shape[1], "batched": batched, "reference": ref, "sampled": len(per_query),
            "mismatches": mismatches}


def product_alone(matrix: np.ndarray, queries: np.ndarray) -> dict[int, float]:
    """CPU seconds per query of the float32 product alone (`queries @ matrix.T`, what the batched path does for
    a block of dense queries), in the batched path's blocks and in blocks 4 times as large."""
    block = max(1, cosine._ESTIMATE_CELLS // len(matrix))
    out = {}
    for size in (block, 4 * block):
        started = time.process_time()
        for a in range(0, len(queries), size):
            queries[a:a + size] @ matrix.T
        out[size] = (time.process_time() - started) / len(queries)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--reference", type=int, default=100, help="queries the reference path is timed on")
    args = ap.parse_args()
    corpus, queries = synthetic_corpus(args.chunks, 0, n_queries=args.queries)
    embedder = FeatureHashEmbedder(1024)
    seconds, matrix = cpu(lambda: np.asfortranarray(embedder.embed([d.content for d in corpus.documents])))
    print(f"{args.chunks:,} chunks embedded in {seconds:.1f} s CPU; "
          f"{(matrix != 0).mean():.0%} of their elements non-zero")
    seconds, norms = cpu(lambda: squared_norms(matrix))
    print(f"pgvector norms: {seconds:.1f} s CPU, once per index")
    texts = [d.content for d in corpus.documents]
    seconds, quarters = cpu(lambda: QuarterVectors.embed(embedder, texts, 16_384))
    print(f"the same as quarter counts in {seconds:.1f} s CPU: {quarters.nbytes / 1e6:.0f} MB, float32 "
          f"{matrix.nbytes / 1e6:.0f} MB")
    sparse = embedder.embed([q for q, _ in queries])
    dense = np.random.default_rng(7).standard_normal((args.queries, 1024)).astype(np.float32)
    model = np.asfortranarray(matrix @ np.random.default_rng(384).standard_normal((1024, 384)).astype(np.float32))
    model /= np.linalg.norm(model, axis=1, keepdims=True)
    model_queries = np.random.default_rng(8).standard_normal((args.queries, 384)).astype(np.float32)
    rows = [compare(f"feature-hash queries ({np.count_nonzero(sparse, axis=1).mean():.1f} non-zero dims)",
                    matrix, norms, sparse, args.reference),
            compare("feature-hash queries, quarter counts", matrix, norms, sparse, args.reference, quarters),
            compare("dense queries", matrix, norms, dense, args.reference),
            compare("a 384-d model's rows and queries", model, squared_norms(model), model_queries, args.reference)]
    for name, rows_of, queries_of in (("dense queries", matrix, dense), ("384-d model", model, model_queries)):
        flops = 2 * rows_of.shape[0] * rows_of.shape[1]
        print(f"{name}, the float32 product alone: " + "; ".join(
            f"blocks of {size}: {s * 1e3:.2f} ms CPU per query ({flops / s / 1e9:.0f} GFLOP/s)"
            for size, s in product_alone(rows_of, queries_of).items()))
    print(f"\n| {args.chunks:,} chunks | dims | batched, both tie orders | reference, both tie orders | ratio "
          "| mismatches |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['name']} | {r['dims']:,} | {r['batched'] * 1e3:.2f} ms | {r['reference'] * 1e3:.1f} ms "
              f"| {r['reference'] / r['batched']:.0f}x | {r['mismatches']} of {2 * r['sampled']} |")


if __name__ == "__main__":
    main()
