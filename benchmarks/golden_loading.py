"""Golden-set loading benchmark: the same large golden set as YAML and as JSON lines.

    .venv/bin/python benchmarks/golden_loading.py                  # 50,000 queries
    .venv/bin/python benchmarks/golden_loading.py --queries 10000  # a quick look
    .venv/bin/python benchmarks/golden_loading.py --start --queries 4000   # a run's start, whole and resumed

Writes a synthetic corpus (200 documents) and one golden set in both formats to a temporary folder,
then loads each with `rqsweep.golden.load_golden` (reading, parsing, checking, validating) in a fresh
process, and prints wall and CPU time and peak memory (CPU time is the steadier figure on a shared
machine); then the part of the YAML load spent refusing aliases and duplicate keys (rqsweep.files
walks the composed nodes), and PyYAML's pure-Python safe loader on the same YAML for reference
(parsing alone: what rqsweep used before libyaml's parser).

`--start` times instead what a run does before its first search, each in a fresh process: reading the inputs
(`load_inputs`: config, corpus, golden set as JSON lines) and building the embedded backend (feature-hash
embedder: index the corpus, embed the queries, extract every query's candidates) into a run folder, which
keeps the candidates block by block (`rqsweep.backends.candidate_blocks`). Three starts: a new one; one resumed
after an interrupt half way through the extraction (the second half's blocks deleted, as an interrupt leaves
them: before the blocks were kept, such a resume cost a whole start, and the interrupted start's folder was
deleted); one resumed with every block kept (an interrupt during the sweep).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("vpn certificate pager backup laptop expense handover incident escalate restore portal gateway "
         "on-call rotation approval invoice bucket nightly monthly refresh").split()
SLICES = ("document", "freshness", "entity", "exact_token")


def write_inputs(folder: Path, queries: int) -> None:
    rng = random.Random(7)
    keys = [f"doc-{i:03d}" for i in range(200)]
    corpus = {"documents": [{"key": k, "path": f"/{k}.md", "content": " ".join(rng.choices(WORDS, k=40))}
                            for k in keys], "memories": []}
    (folder / "corpus.yaml").write_text(yaml.safe_dump(corpus, sort_keys=False))
    rows = [{"id": f"q{i:06d}", "slice": rng.choice(SLICES), "query": " ".join(rng.choices(WORDS, k=6)),
             "expected": rng.sample(keys, 2)} for i in range(queries)]
    (folder / "golden.yaml").write_text(yaml.safe_dump(rows, sort_keys=False))
    (folder / "golden.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_job(folder: Path) -> Path:
    config = {"name": "start", "corpus": "corpus.yaml", "golden": "golden.jsonl",
              "backend": {"kind": "embedded", "embedder": {"kind": "feature-hash", "dimensions": 1024}},
              "sweep": {"strategy": "grid", "knobs": {"rrf_k": {"values": [60]}}}, "validation": False}
    (folder / "job.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return folder / "job.yaml"


def measure_start(config: Path) -> None:
    """In this (fresh) process: read the inputs and build the embedded backend into the run folder `run`."""
    from rqsweep.backends.embedded import build_embedded_backend
    from rqsweep.inputs import load_inputs

    started, cpu = time.perf_counter(), time.process_time()
    inputs = load_inputs(config)
    build_embedded_backend(inputs.config, inputs.golden, inputs.corpus, workers=1, log=lambda _: None,
                           run_dir=config.parent / "run")
    print(json.dumps({"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def start(queries: int) -> None:
    from rqsweep.backends.candidate_blocks import FOLDER

    print(f"| {queries:,} queries, start before the first search | blocks kept at its start | wall | CPU | "
          "peak memory |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_inputs(folder, queries)
        config = write_job(folder)
        blocks = folder / "run" / FOLDER
        for label in ("new run", "resumed after an interrupt half way", "resumed with every block kept"):
            kept = sorted(blocks.iterdir()) if blocks.exists() else []
            if label.startswith("resumed after"):
                for path in kept[len(kept) // 2:]:
                    path.unlink()
                kept = kept[:len(kept) // 2]
            out = subprocess.run([sys.executable, __file__, "--measure", "start", str(config)], check=True,
                                 capture_output=True, text=True).stdout
            figures = json.loads(out)
            print(f"| {label} | {len(kept)} of {len(list(blocks.iterdir()))} | {figures['seconds']:.2f} s "
                  f"| {figures['cpu']:.2f} s | {figures['peak_mb']:.0f} MB |")


def measure(what: str, path: Path) -> None:
    """In this (fresh) process: load `path` as `what` says, print seconds and peak RSS as JSON."""
    sys.path.insert(0, str(ROOT))
    if what == "start":
        measure_start(path)
        return
    from rqsweep.corpus import load_corpus
    from rqsweep.golden import load_golden

    corpus = load_corpus(path.parent / "corpus.yaml")
    started, cpu = time.perf_counter(), time.process_time()
    if what == "pure-yaml":
        yaml.load(path.read_text(), Loader=yaml.SafeLoader)
    elif what == "check":
        from rqsweep import files

        nodes = yaml.compose(path.read_text(), Loader=files._SafeLoader)
        started, cpu = time.perf_counter(), time.process_time()
        files._check_nodes(nodes)
    else:
        load_golden(path, corpus)
    print(json.dumps({"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=50_000)
    p.add_argument("--start", action="store_true", help="time a run's start instead, whole and resumed")
    p.add_argument("--measure", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        measure(args.measure[0], Path(args.measure[1]))
        return
    if args.start:
        start(args.queries)
        return
    print(f"PyYAML {yaml.__version__}, libyaml: {'yes' if yaml.__with_libyaml__ else 'no'}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_inputs(folder, args.queries)
        print(f"| {args.queries:,} queries | file | wall | CPU | peak memory |")
        print("| --- | --- | --- | --- | --- |")
        for what, name in (("load_golden", "golden.yaml"), ("load_golden", "golden.jsonl"),
                           ("check", "golden.yaml"), ("pure-yaml", "golden.yaml")):
            path = folder / name
            out = subprocess.run([sys.executable, __file__, "--measure", what, str(path)], check=True,
                                 capture_output=True, text=True).stdout
            figures = json.loads(out)
            label = {"load_golden": f"load_golden {name}", "check": "of which the alias and duplicate-key check",
                     "pure-yaml": "PyYAML's pure-Python safe loader (parsing only)"}[what]
            print(f"| {label} | {path.stat().st_size / 1e6:.1f} MB | {figures['seconds']:.2f} s "
                  f"| {figures['cpu']:.2f} s | {figures['peak_mb']:.0f} MB |")


if __name__ == "__main__":
    main()
