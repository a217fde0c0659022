"""Whole-job wall and CPU time of `rqsweep CONFIG` at this checkout against another git revision, side by side.

    .venv/bin/python benchmarks/job_wall.py [--against REV] [--config configs/handbook.yaml] [--rounds 5]

The other revision is exported with `git archive` into a temporary folder and run with this venv's
interpreter (PYTHONPATH first), alternating with this checkout round by round so both see the same
machine load. Prints each side's median wall and CPU time (the job process's user + system), the ratios, and the
sizes of this checkout's Parquet outputs; the run folders go to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(tree: Path, config: str, out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of the job."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started, cpu = time.perf_counter(), cpu_of_children()
    subprocess.run([sys.executable, "-m", "rqsweep.cli", str(tree / config), "--quiet", "--output-dir", str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL, cwd=tree)
    return time.perf_counter() - started, cpu_of_children() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="HEAD~1", help="git revision to compare with (default HEAD~1)")
    p.add_argument("--config", default="configs/handbook.yaml")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        other = export(args.against, Path(tmp) / "other")
        times: dict[str, list[tuple[float, float]]] = {"this checkout": [], args.against: []}
        for _ in range(args.rounds):
            times["this checkout"].append(timed(ROOT, args.config, Path(tmp) / "this"))
            times[args.against].append(timed(other, args.config, Path(tmp) / "other"))
        sizes = {p.name: p.stat().st_size for p in sorted(Path(tmp, "this").glob("*/*/*.parquet"))[-4:]}
    print(f"{args.config}, {args.rounds} alternating rounds, whole command (start-up, report and all)")
    medians = {}
    for what, at in (("wall", 0), ("CPU", 1)):
        for name, runs in times.items():
            values = [run[at] for run in runs]
            medians[what, name] = statistics.median(values)
            print(f"  {what:<4} {name:<16} median {medians[what, name]:6.2f} s   runs: "
                  f"{', '.join(f'{v:.2f}' for v in values)}")
        print(f"  {what} ratio this / {args.against}: "
              f"{medians[what, 'this checkout'] / medians[what, args.against]:.2f}")
    print("  this checkout's outputs: " + ", ".join(f"{name} {size / 1000:.0f} kB" for name, size in sizes.items()))


if __name__ == "__main__":
    main()
