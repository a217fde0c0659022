"""CPU time of the run's end (score + report) at this checkout against another git revision, side by side.

    nice .venv/bin/python benchmarks/run_end.py --against 36be3ec [--settings 100000] [--queries 165] [--rounds 2]

The job runs on growth.py's synthetic cell (10,000 chunks, a grid of `--settings` settings, `--queries` queries;
the same inputs and config as `growth.py --settings 100000 --queries 165 --corpus ""`), each run in its own process
(this venv's interpreter, the revision's source first on PYTHONPATH), alternating the two sides round by round so
both see the same machine load. A small wrapper reads the process's CPU time (user + system, every thread) when
`Sweep.finish` starts and when the run folder is finished: the run's end as run.json's `score` and `report` count
its wall. On a loaded machine wall times blur; these CPU seconds do not. Prints per run the end's CPU and wall,
the job's CPU (the child's user + system) and run.json's total, and the end's share of each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import growth  # noqa: E402  (the cell's inputs)

WRAPPER = """
import json, sys, time
import rqsweep.job as job
from rqsweep.sweep import Sweep
mark = {}
finish, run_in = Sweep.finish, job._run_in
def timed_finish(self, *args, **kwargs):
    mark["cpu"], mark["wall"] = time.process_time(), time.perf_counter()
    return finish(self, *args, **kwargs)
def timed_run_in(*args, **kwargs):
    try:
        return run_in(*args, **kwargs)
    finally:
        if mark:
            print("END " + json.dumps({"cpu": time.process_time() - mark["cpu"],
                                       "wall": time.perf_counter() - mark["wall"]}), file=sys.stderr)
Sweep.finish, job._run_in = timed_finish, timed_run_in
from rqsweep.__main__ import entry
sys.argv = ["rqsweep", sys.argv[1], "--quiet", "--output-dir", sys.argv[2]]
sys.exit(entry())
"""


def run(tree: Path, config: Path, out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", WRAPPER, str(config), str(out)], cwd=tree, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    end = [json.loads(line[4:]) for line in done.stderr.splitlines() if line.startswith("END ")]
    if done.returncode or not end:
        raise SystemExit(f"the job failed at {tree}:\n{done.stderr[-3000:]}")
    (record,) = out.glob("*/*/run.json")
    timings = json.loads(record.read_text())["timings_seconds"]
    job_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"end_cpu": end[0]["cpu"], "end_wall": timings["score"] + timings["report"], "job_cpu": job_cpu,
            "total": timings["total"], "load": os.getloadavg()[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", required=True, help="the other git revision")
    p.add_argument("--settings", type=int, default=100_000, choices=sorted(growth.GRIDS))
    p.add_argument("--queries", type=int, default=165)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="rqsweep-run-end-") as tmp:
        folder = Path(tmp)
        tree, rev = growth.checkout(args.against, folder)
        try:
            inputs = growth.Inputs(folder / "inputs", growth.EMBEDDERS["feature-hash"][0])
            inputs.folder.mkdir()
            config = inputs.config(10_000, args.settings, args.queries)
            here = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                                  capture_output=True, text=True).stdout.strip()
            print(f"10,000 chunks x {args.settings:,} settings x {args.queries} queries; {os.cpu_count()} cores\n")
            print("| round | revision | the end's CPU | job CPU | end / job CPU | the end's wall | run.json total "
                  "| end / total | load after |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for r in range(1, args.rounds + 1):
                for label, source in ((f"{rev} (--against)", tree), (f"{here} (this checkout)", ROOT)):
                    f = run(source, config, folder / f"out-{r}-{source == ROOT}")
                    print(f"| {r} | {label} | {f['end_cpu']:.2f} s | {f['job_cpu']:.1f} s | "
                          f"{f['end_cpu'] / f['job_cpu']:.0%} | {f['end_wall']:.1f} s | {f['total']:.1f} s | "
                          f"{f['end_wall'] / f['total']:.0%} | {f['load']:.1f} |", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
