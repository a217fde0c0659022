"""Cost growth of the whole sweep job: wall time, peak memory and output sizes against settings, queries and corpus.

    .venv/bin/python benchmarks/growth.py --quick              # 1,000 / 10,000 settings x 165 / 1,000 queries,
                                                               # and 100,000 x 165 (the run's end under 1 GiB)
    .venv/bin/python benchmarks/growth.py --budget 900         # the full table, cells estimated over 900 s skipped
    .venv/bin/python benchmarks/growth.py --rev 68fab31        # the same, the job run at another git revision
    nice .venv/bin/python benchmarks/growth.py --settings "" --corpus 1000000 --corpus-queries 1000 \
        --budget 3000 --max-rss 12 [--embedder dense-384]         # the million-chunk run

Builds synthetic inputs in a temporary folder: a corpus (JSON lines) of documents (one chunk each) and memories with ages; a
golden set (JSON lines) whose every query carries its expected item's topic token, so the expected item is always
among the lexical candidates; and, per settings count, a grid written as a `sweeps/` file (rrf_k x min_similarity
x half-life, SOAT's defaults included). Then each cell runs the real job, `.venv/bin/rqsweep CONFIG --quiet`
(embedded backend, per-query output written), in a subprocess, and records its wall and CPU time, its peak RSS
(the child's own `ru_maxrss`) and the largest RSS sampled (every 0.2 s) up to the end of its evaluation,
run.json's timings (prepare = inputs, index and candidates; evaluate = the sweep's searches and state writes;
the rest is the run's end: score = scoring, cross-validation, outputs; and report), each phase's share of
run.json's total (a second table), and the sizes of what it wrote. Cells run smallest estimate first; a cell whose estimated time exceeds `--budget` or whose
estimated peak RSS exceeds `--max-rss` is skipped and printed with its estimate, and a running cell passing
either bound is stopped. Estimates scale the largest cell measured so far (per (setting x query) cell) and the
corpus cost (per chunk and per query-chunk) by its measured prepare time.

`--rev` runs the job from a temporary `git worktree` of that revision with this checkout's .venv (PYTHONPATH
first), so a before/after pair is one command run twice. `--embedder dense-384` replaces the feature hash by a
384-dimension dense stand-in for the local model (benchmarks/dense_standin.py: same shape and density, not the
model's embedding time).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
RQSWEEP = ROOT / ".venv" / "bin" / "rqsweep"
EMBEDDERS = {  # --embedder: the config's embedder, and the command that runs the job
    "feature-hash": ({"kind": "feature-hash", "dimensions": 1024}, [str(RQSWEEP)]),
    "dense-384": ({"kind": "local"}, [sys.executable, str(ROOT / "benchmarks" / "dense_standin.py")]),
}

GRIDS = {  # settings -> values per knob (rrf_k, min_similarity incl. off, half-life incl. 0)
    1_000: (10, 10, 10), 10_000: (25, 20, 20), 100_000: (50, 40, 50), 1_000_000: (100, 100, 100),
}
MEMORY_AGES = (0.0, 1.0, 7.0, 30.0, 400.0)
VOCABULARY = 20_000
DOCUMENT_WORDS = 120  # at most 7 characters each: a document stays under the 1,000-character chunk
TOPIC_SIZE = 5  # documents sharing a topic token: the lexical list (limit 10) always holds the expected one
GiB = 1 << 30
PHASES = ("prepare", "evaluate", "score", "report")  # run.json's timings, which add up to its total

# Priors until a cell is measured (2-core development machine, the job at 68fab31 on the handbook and the
# engine benchmark): index build per chunk, candidates per (query x chunk) in both tie orders, per cell.
PRIOR = {"start": 3.0, "build_per_chunk": 2.5e-4, "candidates_per_query_chunk": 7.5e-7, "per_cell": 2e-6,
         "rss_base": 400e6, "rss_per_chunk": 6e3, "rss_per_cell": 270.0}


# ---------------------------------------------------------------------------------------------------- inputs

def write_corpus(path: Path, n_documents: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Documents of Zipf-distributed words plus a topic token shared by TOPIC_SIZE documents; memories (one
    tenth as many) of 12 words plus a topic token shared by two, with ages. Returns the word indices of both."""
    rng = np.random.default_rng(seed)
    cum = np.cumsum(1 / np.arange(1, VOCABULARY + 1))
    cum /= cum[-1]
    vocab = np.array([f"w{i}" for i in range(VOCABULARY)], dtype=object)
    n_memories = max(n_documents // 10, 2)
    doc_words = np.searchsorted(cum, rng.random((n_documents, DOCUMENT_WORDS))).astype(np.uint16)
    mem_words = np.searchsorted(cum, rng.random((n_memories, 12))).astype(np.uint16)
    ages = [float(a) for a in rng.choice(MEMORY_AGES, n_memories)]
    with path.open("w") as out:
        for i, words in enumerate(doc_words):
            text = f"t{i // TOPIC_SIZE} " + " ".join(vocab[words])
            out.write(json.dumps({"key": f"doc-{i}", "content": text}) + "\n")
        for i, (words, age) in enumerate(zip(mem_words, ages)):
            text = " ".join(vocab[words]) + f" t{i // 2}"
            out.write(json.dumps({"source_type": "memory", "key": f"mem-{i}", "content": text, "age_days": age}) + "\n")
    return doc_words, mem_words, ages


def write_golden(path: Path, n_queries: int, doc_words: np.ndarray, mem_words: np.ndarray, ages: list[float],
                 seed: int) -> None:
    """Five slices; every query names its target's topic token, plus words of the target (its two rarest, or any
    two; one for a memory) or none."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for n in range(n_queries):
            kind = rng.choice(["doc_topic", "doc_rare", "doc_common", "memory", "memory"])
            if kind == "memory":
                i = rng.randrange(len(mem_words))
                words, topic, key = mem_words[i], f"t{i // 2}", f"mem-{i}"
                kind = "memory_fresh" if ages[i] <= 7 else "memory_stale"
                picked = [rng.choice(words.tolist())]
            else:
                i = rng.randrange(len(doc_words))
                words, topic, key = doc_words[i], f"t{i // TOPIC_SIZE}", f"doc-{i}"
                picked = {"doc_topic": [], "doc_rare": sorted(set(words.tolist()))[-2:],
                          "doc_common": rng.sample(words.tolist(), 2)}[kind]
            query = " ".join([topic] + [f"w{w}" for w in picked])
            out.write(json.dumps({"id": f"q{n:05d}", "slice": kind, "query": query, "expected": key}) + "\n")


def write_sweep(folder: Path, settings: int) -> str:
    """A grid of exactly `settings` settings, SOAT's defaults (rrf_k 60, no floor, no blend) among them."""
    n_k, n_floor, n_half = GRIDS[settings]
    ks = [60] + [k for k in range(1, 2 * n_k + 1) if k != 60][: n_k - 1]
    floors = [round(0.5 * i / (n_floor - 1), 4) for i in range(1, n_floor)]
    halves = [0] + [round(float(h), 3) for h in np.geomspace(0.25, 730, n_half - 1)]
    name = f"growth-{settings}"
    space = {"description": f"{settings:,} settings for benchmarks/growth.py", "strategy": "grid",
             "knobs": {"rrf_k": {"values": sorted(ks)},
                       "min_similarity": {"include_off": True, "values": floors},
                       "recency_half_life_days": {"values": halves}}}
    (folder / "sweeps").mkdir(exist_ok=True)
    (folder / "sweeps" / f"{name}.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    return name


def write_config(folder: Path, corpus: Path, golden: Path, sweep: str, label: str, embedder: dict) -> Path:
    """The handbook's config (constraints, objective, engine) over the synthetic inputs."""
    config = {
        "name": "growth", "corpus": str(corpus), "golden": str(golden),
        "backend": {"kind": "embedded", "embedder": embedder,
                    "chunking": {"strategy": "size", "chunk_size": 1000, "chunk_overlap": 200},
                    "tie_order": "postgres"},
        "search": {"limit": 10}, "sweep": sweep,
        "baseline": {"rrf_k": 60, "min_similarity": None, "recency_half_life_days": 0},
        "objective": {"metric": "mrr", "slice": "overall"},
        "constraints": [{"metric": "recall_at_10", "slice": "*", "max_drop": 0.10},
                        {"metric": "mrr", "slice": "*", "max_drop": 0.10},
                        {"metric": "recall_at_10", "slice": "*", "min": 0.3}],
        "workers": 1, "output_dir": str(folder / "out"),
    }
    (folder / "configs").mkdir(exist_ok=True)
    path = folder / "configs" / f"{label}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Inputs:
    """Synthetic corpora and golden sets, each built once and shared by the cells that use it."""

    def __init__(self, folder: Path, embedder: dict):
        self.folder, self.embedder = folder, embedder
        self._corpora: dict[int, tuple] = {}
        self._golden: dict[tuple[int, int], Path] = {}

    def config(self, chunks: int, settings: int, queries: int) -> Path:
        if chunks not in self._corpora:
            started = time.perf_counter()
            path = self.folder / f"corpus-{chunks}.jsonl"
            self._corpora[chunks] = (path, *write_corpus(path, chunks, seed=chunks))
            log(f"corpus of {chunks:,} chunks written in {time.perf_counter() - started:.0f}s "
                f"({path.stat().st_size / 1e6:.0f} MB)")
        path, doc_words, mem_words, ages = self._corpora[chunks]
        if (chunks, queries) not in self._golden:
            golden = self.folder / f"golden-{chunks}-{queries}.jsonl"
            # Every golden set of a corpus is a prefix of its largest: more queries, same first ones.
            write_golden(golden, queries, doc_words, mem_words, ages, seed=chunks)
            self._golden[chunks, queries] = golden
        sweep = write_sweep(self.folder, settings)
        return write_config(self.folder, path, self._golden[chunks, queries], sweep,
                            f"growth-{chunks}-{settings}-{queries}", self.embedder)


# ---------------------------------------------------------------------------------------------------- running

@dataclass
class Cell:
    chunks: int
    settings: int
    queries: int
    estimate: tuple[float, float] = (0.0, 0.0)  # seconds, peak RSS bytes
    outcome: str = ""  # "", "skipped", "stopped: ..." or "failed: ..."
    figures: dict = field(default_factory=dict)

    @property
    def cells(self) -> int:
        return self.settings * self.queries


class Model:
    """Estimates of a cell's time and peak RSS: priors, replaced by the largest measured cell's figures."""

    def __init__(self) -> None:
        self.p = dict(PRIOR)
        self.prepare_scale = 1.0
        self.largest, self.largest_corpus = 0, 0

    def prepare(self, cell: Cell) -> float:
        p = self.p
        return self.prepare_scale * (p["build_per_chunk"] * cell.chunks
                                     + p["candidates_per_query_chunk"] * cell.queries * cell.chunks)

    def estimate(self, cell: Cell) -> tuple[float, float]:
        p = self.p
        seconds = p["start"] + self.prepare(cell) + p["per_cell"] * cell.cells
        rss = p["rss_base"] + p["rss_per_chunk"] * cell.chunks + p["rss_per_cell"] * cell.cells
        return seconds, rss

    def learn(self, cell: Cell) -> None:
        f = cell.figures
        self.prepare_scale *= max(f["prepare"], 0.1) / max(self.prepare(cell), 0.1)
        if cell.chunks > self.largest_corpus:
            self.largest_corpus = cell.chunks
            self.p["rss_per_chunk"] = max(f["rss"] - self.p["rss_base"] - self.p["rss_per_cell"] * cell.cells,
                                          0.0) / cell.chunks
        if cell.cells >= self.largest:
            self.largest = cell.cells
            self.p["start"] = max(f["wall"] - f["total"], 0.0)
            self.p["per_cell"] = max(f["total"] - f["prepare"], 0.0) / cell.cells
            self.p["rss_per_cell"] = max(f["rss"] - self.p["rss_base"] - self.p["rss_per_chunk"] * cell.chunks,
                                         0.0) / cell.cells


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_job(command: list[str], config: Path, tree: Path, max_seconds: float,
            max_rss: float) -> tuple[int, float, dict, str]:
    """Run `COMMAND CONFIG --quiet` (`rqsweep`, or the dense stand-in's runner) on `tree`'s code; (exit code, wall, figures, why it stopped). The figures:
    peak RSS and CPU from the child's rusage, and its RSS sampled every 0.2 s as (seconds, bytes).

    The child is polled, not waited for: it is reaped only once it has ended, so stopping it can never
    signal another process that took its pid."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        proc = subprocess.Popen([*command, str(config), "--quiet"], env=env, cwd=config.parent,
                                stdout=subprocess.DEVNULL, stderr=errors)
        stopped, samples = "", []
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            elapsed = time.perf_counter() - started
            samples.append((elapsed, _rss(proc.pid)))
            if not stopped and samples[-1][1] > max_rss:
                stopped = f"RSS over {max_rss / GiB:.1f} GiB after {elapsed:.0f}s"
            elif not stopped and elapsed > max_seconds:
                stopped = f"over {max_seconds:.0f}s"
            if stopped:
                proc.kill()
            time.sleep(0.2)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        last = errors.read().decode(errors="replace").strip().splitlines()[-1:]
    figures = {"rss": usage.ru_maxrss * 1024, "cpu": usage.ru_utime + usage.ru_stime, "samples": samples}
    return proc.returncode, wall, figures, stopped or (last[0] if last else "")


def disk_size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder; 0 when absent."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(cell: Cell, inputs: Inputs, command: list[str], tree: Path, budget: float, max_rss: float) -> None:
    config = inputs.config(cell.chunks, cell.settings, cell.queries)
    out = config.parent.parent / "out"
    shutil.rmtree(out, ignore_errors=True)
    code, wall, figures, why = run_job(command, config, tree, max(1.5 * budget, 60.0), max_rss)
    runs = sorted(out.glob("*/*/run.json"))
    if code not in (0, 4) or not runs:  # 4: no feasible setting, everything written all the same
        cell.outcome = f"stopped: {why}" if why.startswith(("RSS", "over")) else f"failed (exit {code}): {why}"
        cell.figures = {"wall": wall, "rss": figures["rss"], "cpu": figures["cpu"]}
        shutil.rmtree(out, ignore_errors=True)
        return
    run_dir = runs[-1].parent
    info = json.loads(runs[-1].read_text())
    timings = info.get("timings_seconds", {})
    sizes = {name: disk_size(run_dir / name) for name in
             ("grid.parquet", "queries.parquet", "hits.parquet", "state")}
    sizes["report"] = disk_size(run_dir / "report.md") + disk_size(run_dir / "report.html")
    try:
        reached = (pl.scan_parquet(run_dir / "queries.parquet").filter(pl.col("setting_id") == "k60_moff_h0.0")
                   .select((pl.col("rank") > 0).mean()).collect().item())
    except (pl.exceptions.PolarsError, OSError):  # a revision whose per-query table reads otherwise
        reached = None
    # The job's clock starts after the interpreter's: its evaluation ended `wall - total` later on ours.
    evaluated = wall - timings.get("total", wall) + timings.get("prepare", 0.0) + timings.get("evaluate", 0.0)
    figures["rss_evaluated"] = max((r for t, r in figures.pop("samples") if t <= evaluated), default=0)
    cell.figures = {"wall": wall, **figures, "prepare": timings.get("prepare", float("nan")),
                    "evaluate": timings.get("evaluate", float("nan")), "total": timings.get("total", float("nan")),
                    "phases": {phase: timings.get(phase, float("nan")) for phase in PHASES},
                    "settings_run": info.get("settings"), "baseline_found": reached, **sizes}
    shutil.rmtree(out, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- printing

def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 600 else f"{s / 60:.0f} min"


def table(cells: list[Cell]) -> str:
    head = ("| chunks | settings | queries | wall | CPU | prepare | evaluate (share of total) | peak RSS "
            "| RSS by evaluation's end | RSS / cell "
            "| grid.parquet | queries.parquet | q.parquet / cell | hits.parquet | state/ | report |")
    rows = [head, "|" + " --- |" * (head.count("|") - 1)]
    for c in sorted(cells, key=lambda c: (c.chunks, c.queries, c.settings)):
        lead = f"| {c.chunks:,} | {c.settings:,} | {c.queries:,} |"
        f = c.figures
        if c.outcome == "skipped":
            est_s, est_rss = c.estimate
            rows.append(f"{lead} skipped: estimated {seconds(est_s)}, {size(est_rss)} |" + " |" * 13)
        elif c.outcome:
            rows.append(f"{lead} {c.outcome} (estimated {seconds(c.estimate[0])}, {size(c.estimate[1])}) |"
                        + " |" * 13)
        else:
            share = f["evaluate"] / f["total"] if f["total"] else float("nan")
            rows.append(f"{lead} {seconds(f['wall'])} | {seconds(f['cpu'])} | {seconds(f['prepare'])} | "
                        f"{seconds(f['evaluate'])} ({share:.0%}) | {size(f['rss'])} | {size(f['rss_evaluated'])} | "
                        f"{f['rss'] / c.cells:.0f} B | "
                        f"{size(f['grid.parquet'])} | {size(f['queries.parquet'])} | "
                        f"{f['queries.parquet'] / c.cells:.1f} B | {size(f['hits.parquet'])} | {size(f['state'])} | "
                        f"{size(f['report'])} |")
    return "\n".join(rows)


def phase_table(cells: list[Cell]) -> str:
    """run.json's phases per measured cell, each with its share of the job's total, beside the job's CPU and peak
    RSS; the run's end is score (cross-validation, routing, the tables, and the scoring left for it) plus report."""
    head = ("| chunks | settings | queries | total | job CPU | " + " | ".join(PHASES)
            + " | the run's end (score + report) | peak RSS |")
    rows = [head, "|" + " --- |" * (head.count("|") - 1)]
    for c in sorted(cells, key=lambda c: (c.chunks, c.queries, c.settings)):
        if c.outcome:
            continue
        f, total = c.figures["phases"], c.figures["total"]
        end = f["score"] + f["report"]
        rows.append(f"| {c.chunks:,} | {c.settings:,} | {c.queries:,} | {seconds(total)} | "
                    f"{seconds(c.figures['cpu'])} | "
                    + " | ".join(f"{seconds(f[p])} ({f[p] / total:.0%})" for p in PHASES)
                    + f" | {seconds(end)} ({end / total:.0%}) | {size(c.figures['rss'])} |")
    return "\n".join(rows)


def growth_lines(cells: list[Cell]) -> list[str]:
    """grid.parquet's and peak RSS's growth per 10x settings, at each (chunks, queries)."""
    done = {(c.chunks, c.queries, c.settings): c.figures for c in cells if not c.outcome}
    lines = []
    for (chunks, queries, settings), f in sorted(done.items()):
        bigger = done.get((chunks, queries, settings * 10))
        if bigger:
            lines.append(f"- {chunks:,} chunks, {queries:,} queries, {settings:,} -> {settings * 10:,} settings: "
                         f"grid.parquet x{bigger['grid.parquet'] / f['grid.parquet']:.1f}, queries.parquet "
                         f"x{bigger['queries.parquet'] / f['queries.parquet']:.1f}, peak RSS "
                         f"x{bigger['rss'] / f['rss']:.2f}, wall x{bigger['wall'] / f['wall']:.1f}")
    return lines


# ---------------------------------------------------------------------------------------------------- main

def numbers(text: str) -> list[int]:
    """'1000,10_000' -> [1000, 10000]; '' -> []."""
    return [int(v) for v in text.split(",") if v.strip()]


def checkout(rev: str, folder: Path) -> tuple[Path, str]:
    """A detached worktree of `rev` (removed by the caller) and its short hash."""
    tree = folder / "rev"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)
    return tree, subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", type=numbers, default=[1_000, 10_000, 100_000, 1_000_000],
                   help="settings counts, comma-separated (of 1000, 10000, 100000, 1000000)")
    p.add_argument("--queries", type=numbers, default=[165, 1_000, 10_000], help="golden set sizes")
    p.add_argument("--chunks", type=int, default=10_000, help="corpus of the settings x queries table")
    p.add_argument("--corpus", type=numbers, default=[10_000, 100_000, 1_000_000],
                   help="corpus sizes (chunks) of the corpus table; empty for none")
    p.add_argument("--corpus-settings", type=int, default=1_000)
    p.add_argument("--corpus-queries", type=int, default=165)
    p.add_argument("--quick", action="store_true", help="1,000 / 10,000 settings x 165 / 1,000 queries and "
                   "100,000 x 165, 10,000 chunks, no corpus table")
    p.add_argument("--budget", type=float, default=900.0, help="seconds: skip cells estimated above it")
    p.add_argument("--max-rss", type=float, default=10.0, help="GiB: skip cells estimated above it, stop any "
                   "cell passing it")
    p.add_argument("--embedder", choices=sorted(EMBEDDERS), default="feature-hash",
                   help="feature-hash (1,024 dimensions) or dense-384 (benchmarks/dense_standin.py)")
    p.add_argument("--rev", help="run the job at this git revision (a temporary worktree) instead of this checkout")
    args = p.parse_args()
    if args.quick:
        args.settings, args.queries, args.corpus = [1_000, 10_000], [165, 1_000], []
    unknown = sorted(set(args.settings + [args.corpus_settings]) - set(GRIDS))
    if unknown:
        p.error(f"settings counts must be among {', '.join(map(str, GRIDS))}, not {unknown}")
    cells = [Cell(args.chunks, s, q) for s in args.settings for q in args.queries]
    if args.quick:  # the cell whose run's end held every batch's strings (1.49 GB; issue 35, item 26)
        cells.append(Cell(args.chunks, 100_000, 165))
    cells += [Cell(c, args.corpus_settings, args.corpus_queries) for c in args.corpus
              if (c, args.corpus_settings, args.corpus_queries) not in
              {(x.chunks, x.settings, x.queries) for x in cells}]
    model, max_rss = Model(), args.max_rss * GiB
    with tempfile.TemporaryDirectory(prefix="rqsweep-growth-") as tmp:
        folder = Path(tmp)
        tree, rev = checkout(args.rev, folder) if args.rev else (ROOT, "this checkout")
        try:
            embedder, command = EMBEDDERS[args.embedder]
            inputs = Inputs(folder / "inputs", embedder)
            inputs.folder.mkdir()
            pending = list(cells)
            while pending:
                for c in pending:
                    c.estimate = model.estimate(c)
                pending.sort(key=lambda c: c.estimate[0])
                cell = pending.pop(0)
                est_s, est_rss = cell.estimate
                if est_s > args.budget or est_rss > max_rss:
                    cell.outcome = "skipped"
                    log(f"skip {cell.chunks:,} chunks x {cell.settings:,} settings x {cell.queries:,} queries: "
                        f"estimated {seconds(est_s)}, {size(est_rss)}")
                    continue
                log(f"run {cell.chunks:,} chunks x {cell.settings:,} settings x {cell.queries:,} queries "
                    f"(estimated {seconds(est_s)}, {size(est_rss)})")
                measure(cell, inputs, command, tree, args.budget, max_rss)
                log(f"  {cell.outcome or 'done'}: " + ", ".join(
                    f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in cell.figures.items()))
                if not cell.outcome:
                    model.learn(cell)
        finally:
            if args.rev:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    machine = os.getloadavg()[0]
    print(f"rqsweep job at {rev}; embedded backend, {args.embedder}, limit 10, workers 1, per-query output on; "
          f"load average at the end {machine:.1f}, {os.cpu_count()} cores")
    print(table(cells))
    print("\nPhases (run.json's timings, wall seconds, share of its total):\n" + phase_table(cells))
    found = [c.figures["baseline_found"] for c in cells if not c.outcome and c.figures["baseline_found"] is not None]
    if found:
        print(f"\nExpected item within the top 10 at SOAT's defaults: {min(found):.1%} to {max(found):.1%} of "
              "queries (every expected item is among its query's lexical candidates by construction).")
    for c in cells:
        if (c.settings, c.queries) == (100_000, 165) and not c.outcome:
            met = "met" if c.figures["rss"] < GiB else "MISSED"
            print(f"\n{c.chunks:,} chunks x 100,000 settings x 165 queries: peak RSS {c.figures['rss'] / GiB:.2f} GiB, "
                  f"the 1 GiB bound {met}")
    lines = growth_lines(cells)
    if lines:
        print("\nGrowth per 10x settings:\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
