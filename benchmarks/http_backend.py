"""HTTP backend benchmark against `rqsweep serve` on this machine (the server in its own process).

    .venv/bin/python benchmarks/http_backend.py            # the handbook corpus and golden set
    .venv/bin/python benchmarks/http_backend.py --settings 4 --in-flight 8

Prints, for direct mode, requests per second and the client's CPU time per request (this process only;
the server's work is not counted), and for replay mode the searches a 1,000-setting grid costs: one probe,
one fetch per query, the single-store fetches for queries that one fetch could not prove, and direct
searches per setting for the queries replay still could not prove, against 1,000 x Q in direct mode. The
replay's fetch phase is run for real (and checked with `verify`); the 1,000-setting totals are then
counted from its outcome.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named http.py: its folder must not shadow the standard library's `http` package.
ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import yaml  # noqa: E402

from rqsweep import job  # noqa: E402

HANDBOOK = ROOT / "configs" / "handbook"
PASSWORD = "benchmark-password"
GRID_SETTINGS = 1000


def start_server(config: Path) -> tuple[subprocess.Popen, str]:
    env = os.environ | {"RQSWEEP_SERVE_PASSWORD": PASSWORD}
    proc = subprocess.Popen([sys.executable, "-m", "rqsweep.serve", str(config), "--port", "0",
                             "--clock", "2026-01-05T12:00:00Z"], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"serve did not start: {line!r}")
    return proc, match.group(1)


def write_config(folder: Path, name: str, backend: dict, rrf_ks: list[int]) -> Path:
    config = {
        "name": name, "corpus": str(HANDBOOK / "corpus.yaml"), "golden": str(HANDBOOK / "golden.yaml"),
        "backend": backend, "search": {"limit": 10},
        "sweep": {"strategy": "grid", "knobs": {"rrf_k": {"values": rrf_ks}}},
        "baseline": {"rrf_k": 60}, "output_dir": str(folder / "results"),
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def number(self, pattern: str) -> int:
        return int(next(m.group(1) for line in self.lines for m in [re.search(pattern, line)] if m))


def run(config: Path) -> tuple[job.Outcome, Log, float, float]:
    log = Log()
    original = job.Progress.log
    job.Progress.log = lambda self, message: log(message)  # keep the backend's lines for the figures
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        outcome = job.run(config, quiet=True)
        return outcome, log, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        job.Progress.log = original


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", type=int, default=4, help="settings in the timed direct run")
    p.add_argument("--in-flight", type=int, default=4, help="max_in_flight")
    args = p.parse_args()
    os.environ["SOAT_PASSWORD"] = PASSWORD
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        engine = write_config(folder, "engine", {"kind": "embedded"}, [60])
        server, url = start_server(engine)
        try:
            backend = {"kind": "http", "base_url": url, "username": "admin", "seed": True,
                       "max_in_flight": args.in_flight}
            ks = [1, 2, 3, 5, 8, 10, 20, 40, 60, 100][: args.settings]
            direct, log, wall, cpu = run(write_config(folder, "direct", backend | {"mode": "direct"}, ks))
            requests = log.number(r"http: (\d+) requests")
            evaluate = direct.run_dir / "run.json"
            timings = yaml.safe_load(evaluate.read_text())["timings_seconds"]
            queries = direct.grid.filter(direct.grid["slice"] == "overall")["queries"][0]
            print(f"direct: {direct.grid['setting_id'].n_unique()} settings x {queries} queries, {requests} requests "
                  f"(seeding included) in {wall:.1f}s; searching {timings['evaluate']:.1f}s = "
                  f"{(requests - 1) / timings['evaluate']:.0f} searches/s with max_in_flight {args.in_flight}; "
                  f"client CPU {1000 * cpu / requests:.2f} ms per request")
            replay, log, wall, cpu = run(write_config(folder, "replay", backend | {"mode": "replay", "verify": 2},
                                                      ks[:2]))
            replayed = log.number(r"replay: (\d+) of")
            single_store = log.number(r"(\d+) single-store searches")
            rescued = log.number(r"which proved (\d+)")
            fallback = queries - replayed
            print(f"replay: {replayed} of {queries} queries proven ({replayed - rescued} from one search, {rescued} "
                  f"with {single_store} single-store searches; {fallback} fall back); verify on 2 settings passed; "
                  f"{wall:.1f}s")
            print("\n".join(f"  {line.strip()}" for line in log.lines if " x " in line and "verify" not in line))
            print(f"1,000-setting grid: direct {1 + GRID_SETTINGS * queries:,} searches; replay "
                  f"{1 + queries + single_store + fallback * GRID_SETTINGS:,} searches (1 probe + {queries} "
                  f"fetches + {single_store} single-store + {fallback} x {GRID_SETTINGS:,}); without single-store "
                  f"searches {1 + queries + (fallback + rescued) * GRID_SETTINGS:,}")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
