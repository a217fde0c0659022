"""HTTP backend benchmark against `rqsweep serve` on this machine (the server in its own process).

    .venv/bin/python benchmarks/http_backend.py            # the handbook corpus and golden set
    .venv/bin/python benchmarks/http_backend.py --direct-settings 4 --in-flight 8

Every count is the client's own request counter (`SoatClient.stats.requests`, retries included), read before
and after each phase of the real job (`rqsweep.job.run`): set-up (login, probe, seeding), replay's fetch phase,
the sweep's searches (`evaluate`), replay's `verify`, and the ranked lists of hits.parquet. Times and CPU are
those of the same calls: the client's CPU (this process, every thread) and the server's (its process, from /proc).

1. Direct mode on a small grid (`--direct-settings` rrf_k values plus the baseline): searches per setting, searches
   per second with `max_in_flight`, client and server CPU per search.
2. Replay mode on a 1,000-setting grid (rrf_k 1 to 1,000), run in full: the searches its fetch phase and its
   sweep made, counted. Direct mode's count for the same grid is the per-setting count of step 1 times 1,000,
   stated as such: running it would take about half an hour at the measured rate.
3. The engine's own `Index.search` time per query in this process, for comparison with the server's rate.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path: put the project root there instead, so that
# `rqsweep` is this checkout's.
ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import yaml  # noqa: E402

from rqsweep import job  # noqa: E402
from rqsweep.backends.embedded import build_embedder  # noqa: E402
from rqsweep.backends.http.backend import HttpBackend  # noqa: E402
from rqsweep.backends.http.replay import Replay  # noqa: E402
from rqsweep.engine.index import Index  # noqa: E402
from rqsweep.inputs import load_inputs  # noqa: E402
from rqsweep.knobs import Knobs  # noqa: E402

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


# The server's engine: SOAT's eval stand-in, what the figures in benchmarks/README.md were measured with.
ENGINE = {"kind": "embedded", "embedder": {"kind": "feature-hash", "dimensions": 1024}}


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


@dataclass
class Phase:
    requests: int = 0
    retries: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    server_cpu: float = 0.0


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Counted:
    """Requests, wall and CPU time per phase of a run, read from the client's counter around each call."""

    CALLS = {"fetch": (Replay, "__init__", lambda replay, searcher, *_: searcher.client),
             "evaluate": (HttpBackend, "evaluate", lambda backend, *_: backend.searcher.client),
             "verify": (Replay, "_verify", lambda replay, *_: replay.searcher.client),
             "ranked": (HttpBackend, "ranked", lambda backend, *_: backend.searcher.client),
             "all": (HttpBackend, "close", lambda backend, *_: backend.searcher.client)}

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.phases: dict[str, Phase] = defaultdict(Phase)

    @contextmanager
    def installed(self):
        originals = {name: getattr(cls, method) for name, (cls, method, _) in self.CALLS.items()}
        for name, (cls, method, client_of) in self.CALLS.items():
            setattr(cls, method, self._counting(name, originals[name], client_of))
        try:
            yield self
        finally:
            for name, (cls, method, _) in self.CALLS.items():
                setattr(cls, method, originals[name])

    def _counting(self, name: str, original, client_of):
        def counted(obj, *args, **kwargs):
            client = client_of(obj, *args)
            requests, retries = client.stats.requests, client.stats.retries
            wall, cpu, server_cpu = time.perf_counter(), time.process_time(), cpu_seconds(self.server_pid)
            try:
                return original(obj, *args, **kwargs)
            finally:
                phase = self.phases[name]
                phase.wall += time.perf_counter() - wall
                phase.cpu += time.process_time() - cpu
                phase.server_cpu += cpu_seconds(self.server_pid) - server_cpu
                if name == "all":  # close: the client's whole count, set-up included
                    phase.requests, phase.retries = client.stats.requests, client.stats.retries
                else:
                    phase.requests += client.stats.requests - requests
                    phase.retries += client.stats.retries - retries
        return counted


def run(config: Path, server_pid: int) -> tuple[job.RunResult, Counted, list[str]]:
    """The job on `config`, its requests counted per phase, its log lines kept."""
    lines: list[str] = []
    original = job.Progress.log
    job.Progress.log = lambda self, message: lines.append(message)
    try:
        with Counted(server_pid).installed() as counted:
            outcome = job.run(config, quiet=True)
        return outcome, counted, lines
    finally:
        job.Progress.log = original


def engine_search_ms(config: Path) -> float:
    """Median time of `Index.search` (SOAT's defaults, limit 10) per golden query, in this process."""
    inputs = load_inputs(config)
    engine = inputs.config.backend
    index = Index.build(inputs.corpus, build_embedder(engine), engine.chunking, tie_order=engine.tie_order)
    times = []
    for q in inputs.golden.queries:
        started = time.perf_counter()
        index.search(q.query, Knobs(), 10)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--direct-settings", type=int, default=4, help="rrf_k values in the direct run (the baseline "
                   "is one more setting)")
    p.add_argument("--in-flight", type=int, default=4, help="max_in_flight")
    args = p.parse_args()
    os.environ["SOAT_PASSWORD"] = PASSWORD
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        engine = write_config(folder, "engine", ENGINE, [60])
        server, url = start_server(engine)
        try:
            backend = {"kind": "http", "base_url": url, "username": "admin", "seed": True,
                       "max_in_flight": args.in_flight}
            ks = [k for k in range(1, 1000) if k != 60][: args.direct_settings]
            direct, counted, _ = run(write_config(folder, "direct", backend | {"mode": "direct"}, ks), server.pid)
            settings = direct.grid["setting_id"].n_unique()
            queries = direct.grid.filter(direct.grid["slice"] == "overall")["queries"][0]
            d = counted.phases
            searches = d["evaluate"].requests
            print(f"direct, {settings} settings x {queries} queries, max_in_flight {args.in_flight}: {searches} "
                  f"sweep searches ({d['evaluate'].retries} retries) = {searches / settings:.1f} per setting, in "
                  f"{d['evaluate'].wall:.1f}s = {searches / d['evaluate'].wall:.0f} searches/s; client CPU "
                  f"{1000 * d['evaluate'].cpu / searches:.2f} ms per search, server CPU "
                  f"{1000 * d['evaluate'].server_cpu / searches:.2f} ms per search; {d['all'].requests} requests "
                  f"in all (set-up and {d['ranked'].requests} for hits.parquet's ranked lists included)")
            per_setting = searches / settings

            replay, counted, lines = run(write_config(
                folder, "replay", backend | {"mode": "replay", "verify": 2}, list(range(1, GRID_SETTINGS + 1))),
                server.pid)
            r = counted.phases
            settings = replay.grid["setting_id"].n_unique()
            proven = next(line for line in lines if line.startswith("replay:"))
            fallback = r["evaluate"].requests - r["verify"].requests
            print(f"replay, {settings:,} settings x {queries} queries: {r['fetch'].requests} searches in the fetch "
                  f"phase ({r['fetch'].wall:.1f}s) + {fallback:,} direct searches in the sweep = "
                  f"{r['fetch'].requests + fallback:,} searches; verify (2 settings) {r['verify'].requests} more, "
                  f"hits.parquet's ranked lists {r['ranked'].requests}, {r['all'].requests:,} requests in all; "
                  f"sweep {r['evaluate'].wall:.1f}s with verify")
            print("  " + proven.replace("\n", "\n  "))
            print(f"direct, the same {settings:,} settings: {per_setting:.0f} searches per setting measured above "
                  f"x {settings:,} = {per_setting * settings:,.0f} searches (not run: "
                  f"{per_setting * settings / (searches / d['evaluate'].wall) / 60:.0f} min at the measured rate)")
        finally:
            server.terminate()
            server.wait()
        print(f"engine, in this process: Index.search {engine_search_ms(engine):.1f} ms per query (median, "
              f"SOAT's defaults, limit 10)")


if __name__ == "__main__":
    main()
