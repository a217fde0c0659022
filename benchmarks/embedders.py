"""Embedders side by side: throughput, the handbook job's fresh-machine cost, and what each makes of the handbook.

    .venv/bin/python benchmarks/embedders.py [--rounds 3] [--skip-quality]

1. Throughput: the handbook's chunks and memories (what the index embeds) in a fresh process per embedder and
   round, model load included, alternating embedders round by round. CPU seconds count every thread.
2. The handbook job (`rqsweep configs/handbook.yaml --quiet`, 1,980 settings) as a fresh machine runs it: an
   empty vector cache, the whole command. "before" is the same config with the release-before embedder line
   (the feature hash at 1,024 dimensions, no cache); "rerun" is the local model with the cache the first run
   filled.
3. Quality: per embedder, the handbook job's baseline MRR (overall and per slice), its best feasible setting,
   whether the former recommendation k2_m0.2_h365.0 is still feasible, and the held-out gain of the global
   tuning (5-fold cross-validation).
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
EMBEDDERS = {
    "feature-hash/1024": {"kind": "feature-hash", "dimensions": 1024},
    "e5-small, prefixes query": {"kind": "local", "model": "multilingual-e5-small", "prefixes": "query"},
    "e5-small, prefixes query-passage": {"kind": "local", "model": "multilingual-e5-small",
                                         "prefixes": "query-passage"},
    "e5-small-enpt, prefixes query": {"kind": "local", "model": "multilingual-e5-small-enpt", "prefixes": "query"},
}
FORMER_RECOMMENDATION = "k2_m0.2_h365.0"

EMBED_ONE = """
import json, sys, time
from pathlib import Path
from rqsweep.backends.embedded import EMBEDDERS
from rqsweep.backends.embedded_config import EmbedderConfig
from rqsweep.config import Chunking
from rqsweep.corpus import chunk_document, load_corpus
corpus = load_corpus(Path(sys.argv[2]))
texts = [c.content for d in corpus.documents for c in chunk_document(d, Chunking("size", 1000, 200))]
texts += [m.content for m in corpus.memories]
config = EmbedderConfig(**json.loads(sys.argv[1]))
started = time.process_time()
vectors = EMBEDDERS[config.kind](config, lambda _: None).embed(texts)
print(json.dumps({"texts": len(texts), "chars": sum(map(len, texts)), "embed_cpu": time.process_time() - started}))
"""


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(args: list[str], **kwargs) -> tuple[float, float, subprocess.CompletedProcess]:
    cpu, started = child_cpu(), time.perf_counter()
    done = subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)
    return child_cpu() - cpu, time.perf_counter() - started, done


def throughput(rounds: int) -> None:
    print("1. Throughput: the handbook's chunks and memories, a fresh process each (start-up and model load in)")
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ("feature-hash/1024", "e5-small")}
    configs = {"feature-hash/1024": {"kind": "feature-hash", "dimensions": 1024},
               "e5-small": {"kind": "local", "model": "multilingual-e5-small", "batch_size": 32}}
    info = {}
    for _ in range(rounds):
        for name, config in configs.items():
            cpu, wall, done = measured([sys.executable, "-c", EMBED_ONE, json.dumps(config),
                                        str(ROOT / "configs" / "handbook" / "corpus.yaml")], cwd=ROOT)
            info = json.loads(done.stdout)
            samples[name].append((info["embed_cpu"], cpu, wall))
    print(f"   {info['texts']} texts, {info['chars']:,} characters; {os.cpu_count()} cores; median of {rounds}")
    for name, values in samples.items():
        embed, cpu, wall = (statistics.median(v[i] for v in values) for i in (0, 1, 2))
        print(f"   {name:<18} embedding CPU {embed:7.3f} s ({info['texts'] / embed:8.1f} texts per CPU-second); "
              f"whole process CPU {cpu:6.2f} s, wall {wall:6.2f} s")


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
    print("2. The handbook job as a fresh machine runs it (whole command, empty vector cache)")
    command = [sys.executable, "-m", "rqsweep.cli"]
    samples: dict[str, list[tuple[float, float]]] = {"before: feature-hash/1024": [], "after: e5-small, fresh": [],
                                                      "after: e5-small, rerun": []}
    for n in range(rounds):
        before = config_with(tmp / f"before{n}", EMBEDDERS["feature-hash/1024"], None)
        after = config_with(tmp / f"after{n}", {"kind": "local", "model": "multilingual-e5-small"},
                            tmp / f"cache{n}")
        for name, path in (("before: feature-hash/1024", before), ("after: e5-small, fresh", after),
                           ("after: e5-small, rerun", after)):
            cpu, wall, _ = measured([*command, str(path), "--quiet", "--output-dir", str(tmp / "runs")], cwd=ROOT)
            samples[name].append((cpu, wall))
    for name, values in samples.items():
        cpu, wall = (statistics.median(v[i] for v in values) for i in (0, 1))
        print(f"   {name:<26} wall {wall:6.1f} s   CPU {cpu:6.1f} s   (median of {rounds})")
    print(f"   load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def quality(tmp: Path) -> None:
    from rqsweep import job
    from rqsweep.errors import NoFeasibleSetting

    print("3. What each embedder makes of the handbook (baseline k60_moff_h0.0; constraints as configured)")
    rows = []
    for name, embedder in EMBEDDERS.items():
        path = config_with(tmp / "quality" / name.replace("/", "-").replace(" ", ""), embedder, tmp / "qcache")
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
    with pl.Config(tbl_cols=-1, tbl_width_chars=250, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        print(pl.DataFrame(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip-quality", action="store_true")
    args = p.parse_args()
    throughput(args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        fresh_job(args.rounds, Path(tmp))
        if not args.skip_quality:
            quality(Path(tmp))


if __name__ == "__main__":
    main()
