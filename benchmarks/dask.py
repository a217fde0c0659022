"""Dask benchmark: index build, candidate extraction and whole-job wall time on 1 process vs N Dask workers.

    .venv/bin/python benchmarks/dask.py                          # 100,000 chunks, 1,000 queries, 1 and 2 workers
    .venv/bin/python benchmarks/dask.py --chunks 20000 --workers 1 2 4
    .venv/bin/python benchmarks/dask.py --http                   # HTTP direct mode: handbook, `rqsweep serve`
    .venv/bin/python benchmarks/dask.py --corpus-shards --chunks 50000   # corpus shards: 1 worker vs 2

Uses benchmarks/engine.py's synthetic corpus and settings. "Whole job" here is what the backend does for a
run: build the index, extract every query's candidates, evaluate every setting in the job's checkpoint
batches (reading and writing files is the same for every engine and left out). Then fits the cost model of
docs/scaling.md to the one-process run and prints its prediction next to each Dask run's measurement.

`--http` instead runs HTTP direct mode against `rqsweep serve` in its own process (benchmarks/http_backend.py's
server and configs): the handbook's 165 queries x `--settings` settings, here and on N Dask workers, without a
rate cap and with `--rate`, printing the searches per second each reaches and the peak in any one second.

`--corpus-shards` instead runs `workers.corpus_shards` (one shard per worker) on N workers: the index built on
the workers, every query's candidates merged from the shards, every setting evaluated; it prints each phase's
wall time, the CPU seconds the workers (all, and the busiest one: the run's critical path on a machine with a core
per worker) and the coordinator spent (the machine is shared: CPU is the steadier figure), and checks that the
positions equal the first run's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pickle
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This file's name would shadow the dask package: take its folder off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
sys.path.append(str(HERE))  # last: the other benchmarks' helpers (timing.py), after the installed dask



def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_engine = _benchmark("engine")  # also pins BLAS to one thread, as the single-core figures need

import yaml  # noqa: E402

from rqsweep.backends.dask_cluster import DaskCluster  # noqa: E402
from rqsweep.backends.dask_corpus import ShardedIndex  # noqa: E402
from rqsweep.backends.embedded import EmbeddedBackend  # noqa: E402
from rqsweep.config import Chunking, WorkersConfig  # noqa: E402
from rqsweep.engine.embed import FeatureHashEmbedder  # noqa: E402
from rqsweep.engine.index import Index  # noqa: E402
from rqsweep.golden import Expected, GoldenQuery, GoldenSet  # noqa: E402
from rqsweep.scope import Scope  # noqa: E402

LIMIT = 10


def golden_of(queries: list[tuple[str, str]]) -> GoldenSet:
    return GoldenSet(Path("synthetic"), "", tuple(
        GoldenQuery(f"q{i}", "all", text, (Expected("memory" if key.startswith("mem-") else "document", key),))
        for i, (text, key) in enumerate(queries)), None, ())


def timed_job(index: Index, golden: GoldenSet, settings, workers: WorkersConfig) -> dict[str, float]:
    """Seconds to extract candidates (and, on Dask, start, scatter) and to evaluate every setting."""
    marks: dict[str, float] = {}

    def log(line: str) -> None:
        if line.startswith("dask: ") and " workers at " in line:
            marks["started"] = time.perf_counter()
        elif line.startswith("dask: index scattered"):
            marks["scattered"] = time.perf_counter()

    t0 = time.perf_counter()
    backend = EmbeddedBackend(index, golden, LIMIT, Scope(), workers, log)
    t1 = time.perf_counter()
    try:
        for start in range(0, len(settings), EmbeddedBackend.checkpoint_every):
            backend.evaluate(settings[start : start + EmbeddedBackend.checkpoint_every])
        t2 = time.perf_counter()
        # A one-setting batch: the fixed cost of a round of shard tasks (dispatch, scheduling, gather).
        backend.evaluate(settings[:1])
        t3 = time.perf_counter()
    finally:
        backend.close()
    started, scattered = marks.get("started", t0), marks.get("scattered", t0)
    return {"start": started - t0, "scatter": scattered - started, "extract": t1 - scattered,
            "evaluate": t2 - t1, "round": t3 - t2}


def http_direct(workers: list[int], n_settings: int, in_flight: int, rate: float) -> None:
    """HTTP direct mode here and on Dask, with and without a rate cap: searches per second, peak second."""
    bench_http = _benchmark("http_backend")
    os.environ["SOAT_PASSWORD"] = bench_http.PASSWORD
    ks = [1, 2, 3, 5, 8, 10, 20, 40, 60, 100][:n_settings]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server, url = bench_http.start_server(bench_http.write_config(folder, "engine", bench_http.ENGINE, [60]))
        try:
            for cap in (None, rate):
                for n in [0, *workers]:
                    backend = {"kind": "http", "base_url": url, "username": "admin", "seed": True, "mode": "direct",
                               "max_in_flight": in_flight, "requests_per_second": cap}
                    config = bench_http.write_config(folder, f"direct-{n}-{'capped' if cap else 'free'}", backend, ks)
                    config.write_text(yaml.safe_dump(yaml.safe_load(config.read_text())
                                                     | {"workers": {"backend": "dask", "n": n} if n else 1}))
                    outcome, _, _, _ = bench_http.run(config)
                    seconds = yaml.safe_load((outcome.run_dir / "run.json").read_text())["timings_seconds"]["evaluate"]
                    searches = outcome.grid["setting_id"].n_unique() * outcome.grid.filter(
                        outcome.grid["slice"] == "overall")["queries"][0]
                    where = f"dask {n} worker(s)" if n else "1 process"
                    print(f"http direct, {where}, max_in_flight {in_flight}, requests_per_second {cap}: {searches} "
                          f"searches in {seconds:.2f} s = {searches / seconds:.0f}/s")
        finally:
            server.terminate()
            server.wait()


def _worker_cpu() -> float:
    return time.process_time()


def corpus_shards(args: argparse.Namespace) -> None:
    """`workers.corpus_shards` on 1, 2, ... workers (one shard each): phases' wall time and CPU, same positions."""
    corpus, queries = bench_engine.synthetic_corpus(args.chunks, args.chunks // 10)
    golden = golden_of(queries[: args.queries])
    settings = bench_engine.settings_grid(args.settings)
    print(f"== corpus shards: synthetic {args.chunks} chunks, {len(corpus.memories)} memories, "
          f"{len(golden.queries)} queries, {len(settings)} settings")
    first = None
    for n in args.workers:
        workers = WorkersConfig("dask", n, corpus_shards=n)
        cluster = DaskCluster(workers, lambda _: None)
        try:
            cpu = cluster.client.run(_worker_cpu)
            here = time.process_time()
            t0 = time.perf_counter()
            index = ShardedIndex(cluster, corpus, FeatureHashEmbedder(1024), lambda: FeatureHashEmbedder(1024),
                                 Chunking("size", 1000, 200), datetime.now(timezone.utc), "postgres", n, lambda _: None)
            t1 = time.perf_counter()
            backend = EmbeddedBackend(index, golden, LIMIT, Scope(), workers, lambda _: None, cluster=cluster)
            t2 = time.perf_counter()
            positions = [backend.evaluate(settings[a:a + backend.checkpoint_every])["positions"]
                         for a in range(0, len(settings), backend.checkpoint_every)]
            t3 = time.perf_counter()
            after = cluster.client.run(_worker_cpu)
            spent = [after[w] - cpu[w] for w in cpu]
            coordinator = time.process_time() - here
        finally:
            cluster.close()
        first = first or positions
        same = all(a.equals(b) for a, b in zip(positions, first))
        print(f"dask {n} worker(s), {n} shard(s): build on the workers {t1 - t0:.1f} s, extraction {t2 - t1:.1f} s, "
              f"evaluation {t3 - t2:.1f} s, total {t3 - t0:.1f} s wall; CPU: workers {sum(spent):.1f} s "
              f"(the busiest {max(spent):.1f} s), coordinator {coordinator:.1f} s; positions equal the first run's: "
              f"{same}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000, help="at most 1,000 (the generator's query count)")
    ap.add_argument("--settings", type=int, default=2000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--http", action="store_true", help="HTTP direct mode instead (handbook, --settings 4 is plenty)")
    ap.add_argument("--in-flight", type=int, default=4, help="with --http: max_in_flight")
    ap.add_argument("--rate", type=float, default=50.0, help="with --http: the requests_per_second cap tried")
    ap.add_argument("--corpus-shards", action="store_true", help="workers.corpus_shards on each --workers count")
    args = ap.parse_args()
    if args.corpus_shards:
        return corpus_shards(args)
    if args.http:
        return http_direct(args.workers, min(args.settings, 10), args.in_flight, args.rate)

    corpus, queries = bench_engine.synthetic_corpus(args.chunks, args.chunks // 10)
    golden = golden_of(queries[: args.queries])
    settings = bench_engine.settings_grid(args.settings)
    Q, S = len(golden.queries), len(settings)
    print(f"== synthetic {args.chunks} chunks, {len(corpus.memories)} memories, {Q} queries, {S} settings")
    t = time.perf_counter()
    index = Index.build(corpus, FeatureHashEmbedder(1024), Chunking("size", 1000, 200))
    build = time.perf_counter() - t
    size = len(pickle.dumps(index.stores, protocol=5))
    print(f"index build: {build:.1f} s; index as shipped: {size / 2**20:.0f} MiB")

    one = timed_job(index, golden, settings, WorkersConfig("loky", 1))
    per_query, per_cell = one["extract"] / Q, one["evaluate"] / (S * Q)
    print(f"1 process: extraction {one['extract']:.1f} s ({per_query * 1e3:.1f} ms/query), evaluation "
          f"{one['evaluate']:.2f} s ({per_cell * 1e9:.0f} ns/cell), whole job {build + one['extract'] + one['evaluate']:.1f} s")
    batches = -(-S // EmbeddedBackend.checkpoint_every)
    for n in args.workers:
        run = timed_job(index, golden, settings, WorkersConfig("dask", n))
        whole = build + run["start"] + run["scatter"] + run["extract"] + run["evaluate"]
        shard_bytes = EmbeddedBackend.checkpoint_every * -(-Q // (4 * n)) * 3  # int16 position + bool tie per cell
        # Start-up and scatter are measured; the model predicts how extraction and evaluation divide over n.
        predicted = (build + run["start"] + run["scatter"] + per_query * Q / n + per_cell * S * Q / n
                     + batches * run["round"])
        print(f"dask {n} worker(s): start {run['start']:.1f} s, scatter {run['scatter']:.2f} s "
              f"({size / max(run['scatter'], 1e-9) / 2**20:.0f} MiB/s), extraction {run['extract']:.1f} s, "
              f"evaluation {run['evaluate']:.2f} s, a round of shard tasks {run['round'] * 1e3:.0f} ms "
              f"(~{shard_bytes / 1024:.0f} KiB back per shard and batch); whole job {whole:.1f} s, "
              f"model {predicted:.1f} s")


if __name__ == "__main__":
    main()
