"""Would a truncated product with a proven bound prune dense candidates? Measured on a real model's vectors.

    nice -n 10 .venv/bin/python benchmarks/dense_bound.py          # 1,600 docstrings, 200 queries

The idea (issue 20, dense queries at 200,000 chunks): rotate the stored vectors by their principal directions
(an SVD of the rows, as an index build would fit it), estimate each row's product from the first `d'` of them,
and bound the rest by Cauchy-Schwarz, `|q_tail . x_tail| <= |q_tail| |x_tail|`. A row whose estimate plus its
bound cannot reach the best `limit + 1` rows' estimates minus theirs is ruled out; the others need the full
product. The cost is then at least `d' + survivors x d` multiply-adds per row against `d`, before any gather.

Rows: CPython's own docstrings (English technical prose, each at most 500 characters, those of 200 characters
or more that are mostly letters; 1,600 of them, shuffled, by default), embedded by the shipped multilingual-e5-small through the vector cache in
`.cache/embeddings` (a rerun embeds nothing). Queries: the first sentence (at most 80 characters) of 200 of
them, so each has a relevant row. The same counts for isotropic random unit vectors, and for 200,000 rows drawn
from a Gaussian with the real rows' mean and covariance (normalised; the real queries): what a corpus of that
size with the model's spectrum, but without its topics, gives.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import ast  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rqsweep.engine.embed.cache import CachedEmbedder  # noqa: E402
from rqsweep.engine.embed.local import DEFAULT_MODEL, LocalEmbedder, resolve_model  # noqa: E402

LIMIT = 10
HEAD_DIMS = (64, 128, 192)


def docstrings() -> list[str]:
    """The standard library's long, mostly-prose docstrings, whitespace folded, cut at 500 characters, shuffled."""
    found = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "test" in path.parts or "tests" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(errors="ignore"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node)
                if text and len(text) >= 200 and sum(c.isalpha() for c in text) > 0.7 * len(text):
                    found.append(" ".join(text.split())[:500])
    random.Random(3).shuffle(found)
    return found


def survivors(fit: np.ndarray, rows: np.ndarray, queries: np.ndarray, head: int) -> np.ndarray:
    """Per query, the share of `rows` that the head estimate plus the tail bound cannot rule out of the best
    `LIMIT + 1`, the basis fit on the rows of `fit` (exact arithmetic in float64: the float error terms, about
    1e-6, are left out, which only flatters the bound)."""
    _, _, basis = np.linalg.svd(fit, full_matrices=False)
    basis = basis[:head]
    row_head, query_head = rows @ basis.T, queries @ basis.T
    row_tail = np.linalg.norm(rows - row_head @ basis, axis=1)
    query_tail = np.linalg.norm(queries - query_head @ basis, axis=1)
    shares = []
    for q in range(len(queries)):
        estimate, bound = row_head @ query_head[q], query_tail[q] * row_tail
        cut = np.partition(estimate - bound, len(rows) - LIMIT - 1)[len(rows) - LIMIT - 1]
        shares.append(np.mean(estimate + bound >= cut))
    return np.array(shares)


def report(name: str, rows: np.ndarray, queries: np.ndarray) -> None:
    """The shares with the basis fit on the rows themselves (as an index build would), and fit on one half of
    the rows for the other half (what a basis does for rows it was not fit on: in-sample, few rows flatter it)."""
    similarity = queries @ rows.T
    print(f"\n{name}: {len(rows):,} rows, {len(queries)} queries, {rows.shape[1]} dims; per query (medians): "
          f"similarity median {np.median(np.median(similarity, axis=1)):.3f}, best {LIMIT + 1} cut at "
          f"{np.median(np.sort(similarity, axis=1)[:, -LIMIT - 1]):.3f}")
    half = np.random.default_rng(1).permutation(len(rows))
    fit, held = rows[half[:len(rows) // 2]], rows[half[len(rows) // 2:]]
    print("| d' | rows not ruled out, basis fit on them (median / mean) | the same, basis fit on the other half "
          "| multiply-adds vs the full product, at least |")
    print("| --- | --- | --- | --- |")
    for head in HEAD_DIMS:
        own, other = survivors(rows, rows, queries, head), survivors(fit, held, queries, head)
        print(f"| {head} | {np.median(own):.1%} / {np.mean(own):.1%} | {np.median(other):.1%} / {np.mean(other):.1%} "
              f"| {(head + np.mean(own) * rows.shape[1]) / rows.shape[1]:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=1600, help="docstrings embedded (about 0.15 CPU s each)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--gaussian-rows", type=int, default=200_000)
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "embeddings")
    args = ap.parse_args()
    texts = docstrings()[:args.chunks]
    fewest = 4 * LocalEmbedder.dimensions
    if len(texts) < fewest:
        sys.exit(f"{len(texts)} docstrings: a basis fit on fewer than 4 rows per dimension (half of them for the "
                 f"held-out figures) spans too much of them to say anything; give --chunks {fewest} or more")
    queries = [t.split(". ")[0][:80] for t in random.Random(4).sample(texts, min(args.queries, len(texts)))]
    model = resolve_model(DEFAULT_MODEL)
    if model is None:
        sys.exit(f"{DEFAULT_MODEL} is not installed (make setup installs it)")
    embedder = CachedEmbedder(LocalEmbedder(model, threads=1), args.cache_dir)
    started = time.process_time()
    rows = embedder.embed(texts).astype(np.float64)
    query_vectors = embedder.queries.embed(queries).astype(np.float64)
    print(f"{len(texts):,} docstrings and {len(queries)} queries embedded by {DEFAULT_MODEL} in "
          f"{time.process_time() - started:.1f} s CPU ({embedder.hits} from the cache)")
    report(f"{DEFAULT_MODEL} on CPython's docstrings", rows, query_vectors)
    rng = np.random.default_rng(7)

    def unit(v: np.ndarray) -> np.ndarray:
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    report("isotropic random unit vectors", unit(rng.standard_normal(rows.shape)),
           unit(rng.standard_normal(query_vectors.shape)))
    drawn = rng.multivariate_normal(rows.mean(axis=0), np.cov(rows.T), size=args.gaussian_rows)
    report("a Gaussian with the real rows' mean and covariance", unit(drawn), query_vectors)


if __name__ == "__main__":
    main()
