"""What `ranked: all` costs: the handbook under the stand-in embedder, sweep rrf-k-only, with and without it.

    .venv/bin/python benchmarks/ranked_all.py [--rounds 3]

Per round, the same config runs twice as a whole command, `ranked: chosen` (the default) then `ranked: all`.
Prints the medians of run.json's `timings_seconds` (evaluate: the sweep; score: scoring, writing the ranked
lists included), each command's peak RSS, and ranked.parquet's rows and size per setting. The README's
figures for `ranked.parquet` come from this command.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
from pathlib import Path

import polars as pl
import yaml

from embedders import ROOT, measured

CONFIG = ROOT / "configs" / "handbook-stand-in.yaml"


def config_with(folder: Path, ranked: str) -> Path:
    config = yaml.safe_load(CONFIG.read_text())
    config.update(corpus=str(ROOT / "configs" / "handbook" / "corpus.yaml"),
                  golden=str(ROOT / "configs" / "handbook" / "golden.yaml"), sweep="rrf-k-only", ranked=ranked)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "handbook.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run(config: Path, out: Path) -> tuple[dict, float, Path]:
    """The run's timings, the command's peak RSS in MB (the largest child so far: rounds alternate, so a
    `ranked: all` peak shows from its first round) and its run folder."""
    measured([sys.executable, "-m", "rqsweep.cli", str(config), "--quiet", "--output-dir", str(out)], cwd=ROOT)
    run_dir = max((out / "handbook-stand-in").iterdir(), key=lambda p: p.stat().st_mtime)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return json.loads((run_dir / "run.json").read_text())["timings_seconds"], peak, run_dir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        timings: dict[str, list[dict]] = {"chosen": [], "all": []}
        peaks: dict[str, float] = {}
        for n in range(args.rounds):
            for ranked in ("chosen", "all"):
                times, peak, run_dir = run(config_with(Path(tmp) / f"{ranked}{n}", ranked), Path(tmp) / "runs")
                timings[ranked].append(times)
                peaks.setdefault(ranked, peak)
        table = pl.read_parquet(run_dir / "ranked.parquet")
        settings = table["setting_id"].n_unique()
        size = (run_dir / "ranked.parquet").stat().st_size
    print(f"handbook-stand-in, sweep rrf-k-only ({settings} settings), median of {args.rounds} rounds")
    for ranked, values in timings.items():
        evaluate, score = (statistics.median(t[k] for t in values) for k in ("evaluate", "score"))
        print(f"  ranked: {ranked:<6}  evaluate {evaluate:6.2f} s   score {score:6.2f} s   "
              f"peak RSS {peaks[ranked]:5.0f} MB")
    extra = (statistics.median(t["score"] for t in timings["all"])
             - statistics.median(t["score"] for t in timings["chosen"])) / settings
    print(f"  ranked.parquet: {table.height / settings:,.0f} rows and {size / settings / 1000:.1f} kB per setting; "
          f"ranked: all adds {extra * 1000:.0f} ms per setting")


if __name__ == "__main__":
    main()
