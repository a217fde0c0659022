"""Index build: the lexical index and the feature hash against PostgreSQL's to_tsvector, on the same texts.

    nice -n 10 .venv/bin/python benchmarks/index_build.py                 # 200,000 chunks, 3 rounds
    nice -n 10 .venv/bin/python benchmarks/index_build.py --chunks 20000  # a quick look
    git archive REV | tar -x -C /tmp/rev-src && nice -n 10 .venv/bin/python benchmarks/index_build.py --source /tmp/rev-src

The chunks are benchmarks/engine.py's synthetic 150-word documents (what issue 20 measured). Per round, in
this order: `LexicalIndex(texts)` (the port of `to_tsvector('simple')`, indexed), a fresh
`FeatureHashEmbedder(1024).embed(texts)`, both parts as `Index.build` makes them (a fresh feature hash's quarter
counts, each portion of texts cut into runs once for both; the sources given may make them part by part), and
PostgreSQL 18's `SELECT sum(length(to_tsvector('simple', t)))` over a table of the same texts (loaded beforehand,
not timed; no parallel workers). CPU seconds: ours by
`time.process_time`, PostgreSQL's from its backend's /proc stat (utime + stime). Medians of the rounds; for
both parts as `Index.build` makes them, also the share of system time (`os.times`: mostly page faults on
fresh arrays). The
run checks that every row has as many lexemes in the port's index as in PostgreSQL's tsvector. Then the
whole `Index.build` (norms included) without the index cache, filling it, and twice from it: on the same
corpus, and with every 100th document changed (medians of the rounds, each round in a fresh cache folder;
`--cache-only` measures just these builds, of this checkout or of `--source`).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import synthetic_corpus  # noqa: E402
from tests.pgserver import start_cluster  # noqa: E402


def cpu_of(fn) -> tuple[float, object]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--source", type=Path, help="measure the rqsweep sources in this folder")
    parser.add_argument("--cache-only", action="store_true",
                        help="only the whole builds with and without the index cache (no parts, no PostgreSQL)")
    args = parser.parse_args()
    import psycopg

    corpus, _ = synthetic_corpus(args.chunks, 0, n_queries=1)
    if args.source:  # the texts came from this checkout's generator; what is measured, from the sources given
        sys.path.insert(0, str(args.source.resolve()))
        for name in [m for m in sys.modules if m == "rqsweep" or m.startswith("rqsweep.")]:
            del sys.modules[name]
    import rqsweep.engine.index as index_module
    from rqsweep.engine.embed import FeatureHashEmbedder
    from rqsweep.engine.tsearch import LexicalIndex

    def as_built():
        """The feature hash's stored vectors and the lexical index, as `Index.build` makes them."""
        if hasattr(index_module, "_read_and_embed"):
            built = index_module._read_and_embed(FeatureHashEmbedder(1024), texts)
            if len(built) == 2:  # the lexical index built as the texts are read
                return built
            vectors, parsed, read = built
            return vectors, LexicalIndex.of_parts(parsed.parts, *read)
        return index_module._embed_stored(FeatureHashEmbedder(1024), texts), LexicalIndex(texts)
    texts = [d.content for d in corpus.documents]
    if args.cache_only:
        print(f"{len(texts):,} chunks; rqsweep from {Path(sys.modules[LexicalIndex.__module__].__file__).parents[3]}")
        cache_table(corpus, args.rounds)
        return
    print(f"{len(texts):,} chunks, {sum(map(len, texts)) / len(texts):.0f} characters each on average; "
          f"rqsweep from {Path(sys.modules[LexicalIndex.__module__].__file__).parents[3]}")
    cluster = start_cluster()
    try:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("SET max_parallel_workers_per_gather = 0")
            conn.execute("CREATE TEMP TABLE chunks (id int PRIMARY KEY, t text NOT NULL)")
            with conn.cursor().copy("COPY chunks (id, t) FROM STDIN") as copy:
                for i, text in enumerate(texts):
                    copy.write_row((i, text))
            conn.execute("VACUUM ANALYZE chunks")
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            lexical, hashed, built, built_kernel, postgres = [], [], [], [], []
            for _ in range(args.rounds):
                seconds, index = cpu_of(lambda: LexicalIndex(texts))
                lexical.append(seconds)
                hashed.append(cpu_of(lambda: FeatureHashEmbedder(1024).embed(texts))[0])
                kernel = os.times().system
                built.append(cpu_of(as_built)[0])
                built_kernel.append(os.times().system - kernel)
                before = backend_cpu(pid)
                conn.execute("SELECT sum(length(to_tsvector('simple', t))) FROM chunks").fetchone()
                postgres.append(backend_cpu(pid) - before)
            pg_lengths = np.array([n for (n,) in conn.execute(
                "SELECT length(to_tsvector('simple', t)) FROM chunks ORDER BY id").fetchall()])
    finally:
        cluster.stop()
    segments = getattr(index, "_segments", [index])  # sources from before the index was kept in segments
    ours = np.concatenate([np.bincount(s._group_row, minlength=s.n_rows) for s in segments])
    mismatched = int(np.count_nonzero(ours != pg_lengths))
    n = len(texts)
    postgres_rate = n / statistics.median(postgres)
    print("| work | CPU seconds (median) | chunks per CPU-second | vs PostgreSQL's to_tsvector |")
    print("| --- | --- | --- | --- |")
    for name, times in (("lexical index (port)", lexical), ("feature hash 1,024-d", hashed),
                        ("lexical + feature hash, apart", [a + b for a, b in zip(lexical, hashed)]),
                        ("lexical + feature hash, as Index.build", built),
                        ("PostgreSQL to_tsvector('simple')", postgres)):
        seconds = statistics.median(times)
        print(f"| {name} | {seconds:.2f} s | {n / seconds:,.0f} | {n / seconds / postgres_rate:.2f}x |")
    print(f"rows whose lexeme count differs from PostgreSQL's: {mismatched} of {n:,}")
    print(f"lexical + feature hash as Index.build: {n / statistics.median(built):,.0f} chunks per CPU-second "
          f"(target 15,000); of its CPU, {statistics.median(built_kernel):.2f} s in the kernel (median)")
    cache_table(corpus, args.rounds)


def cache_table(corpus, rounds: int) -> None:
    """The whole `Index.build` without the index cache, filling it, and from it (unchanged, 1% changed): the
    median CPU seconds of `rounds` rounds, each round in a fresh cache folder."""
    from rqsweep.config import Chunking
    from rqsweep.corpus import Corpus
    from rqsweep.engine.embed import FeatureHashEmbedder
    from rqsweep.engine.index import Index
    from rqsweep.engine.index_cache import IndexCache
    cases = (("no cache", False, corpus.documents), ("cold, filling the index cache", True, corpus.documents),
             ("rerun, unchanged corpus", True, corpus.documents),
             ("rerun, 1% of documents changed", True, changed(corpus.documents)))
    seconds, counts = {name: [] for name, _, _ in cases}, {}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as folder:
            for name, cached, docs in cases:
                index_cache = IndexCache(Path(folder), "feature-hash/1024", Chunking("whole")) if cached else None
                cpu, index = cpu_of(lambda: Index.build(Corpus(docs, ()), FeatureHashEmbedder(1024),
                                                        Chunking("whole"), cache=index_cache))
                seconds[name].append(cpu)
                counts[name] = index.rows_built, index.rows_reused
                del index
    print()
    print("| Index.build (whole chunks, feature hash 1,024-d) | CPU seconds (median) | x no cache | rows built | "
          "rows reused |")
    print("| --- | --- | --- | --- | --- |")
    plain = statistics.median(seconds["no cache"])
    for name, _, _ in cases:
        cpu = statistics.median(seconds[name])
        print(f"| {name} | {cpu:.2f} s | {cpu / plain:.2f}x | {counts[name][0]:,} | {counts[name][1]:,} |")


def changed(documents):
    """Every 100th document with a word appended."""
    return tuple(replace(d, content=d.content + " changed") if i % 100 == 0 else d for i, d in enumerate(documents))


if __name__ == "__main__":
    main()
