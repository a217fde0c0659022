"""Whole-job wall time of `rqsweep CONFIG` at this checkout against another git revision, side by side.

    .venv/bin/python benchmarks/job_wall.py [--against REV] [--config configs/handbook.yaml] [--rounds 5]

The other revision is exported with `git archive` into a temporary folder and run with this venv's
interpreter (PYTHONPATH first), alternating with this checkout round by round so both see the same
machine load. Prints each side's median wall time, the ratio, and the sizes of this checkout's Parquet
outputs; the run folders go to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def wall(tree: Path, config: str, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rqsweep.cli", str(tree / config), "--quiet", "--output-dir", str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL, cwd=tree)
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="HEAD~1", help="git revision to compare with (default HEAD~1)")
    p.add_argument("--config", default="configs/handbook.yaml")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        other = export(args.against, Path(tmp) / "other")
        times: dict[str, list[float]] = {"this checkout": [], args.against: []}
        for _ in range(args.rounds):
            times["this checkout"].append(wall(ROOT, args.config, Path(tmp) / "this"))
            times[args.against].append(wall(other, args.config, Path(tmp) / "other"))
        sizes = {p.name: p.stat().st_size for p in sorted(Path(tmp, "this").glob("*/*/*.parquet"))[-4:]}
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.config}, {args.rounds} alternating rounds, whole command (start-up, report and all)")
    for name, values in times.items():
        print(f"  {name:<16} median {medians[name]:6.2f} s   runs: {', '.join(f'{v:.2f}' for v in values)}")
    print(f"  ratio this / {args.against}: {medians['this checkout'] / medians[args.against]:.2f}")
    print("  this checkout's outputs: " + ", ".join(f"{name} {size / 1000:.0f} kB" for name, size in sizes.items()))


if __name__ == "__main__":
    main()
