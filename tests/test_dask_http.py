"""HTTP direct mode on a Dask cluster: the local run's results, `max_in_flight` and `requests_per_second` held for
the whole run (measured by a loopback proxy in front of `rqsweep serve`), no credential in any output."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import polars as pl
import pytest
import yaml

from rqsweep import job
from rqsweep.pacing import RequestLimits
from rqsweep.progress import Progress
from tests.http_support import EMBEDDED, PASSWORD, http_backend, serving, write_config
from tests.test_http_backend import corpus, password  # noqa: F401 (fixtures: the corpus, SOAT_PASSWORD)

RUN_SPECIFIC = ("run_id", "config_sha256")


class CountingProxy:
    """Forwards every request to `upstream` after `delay` seconds; records when each started and ended, the most
    in flight at once, and every bearer token it carried."""

    def __init__(self, upstream: str, delay: float):
        self.spans: list[tuple[float, float, str]] = []  # (start, end, path)
        self.tokens: set[str] = set()
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()
        forward = httpx.Client(base_url=upstream, timeout=30)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                started = time.monotonic()
                with proxy._lock:
                    proxy.in_flight += 1
                    proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                try:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
                    if headers.get("Authorization", "").startswith("Bearer "):
                        proxy.tokens.add(headers["Authorization"][7:])
                    time.sleep(delay)
                    answer = forward.request(self.command, self.path, content=body, headers=headers)
                finally:
                    with proxy._lock:
                        proxy.in_flight -= 1
                        proxy.spans.append((started, time.monotonic(), self.path.split("?")[0]))
                self.send_response(answer.status_code)
                for name in ("content-type", "date", "retry-after"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def searches(self) -> list[tuple[float, float, str]]:
        return [s for s in self.spans if s[2].endswith("/knowledge/search")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def tables(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    return tuple(pl.read_parquet(run_dir / f"{name}.parquet").drop(RUN_SPECIFIC, strict=False)
                 for name in ("grid", "queries"))


def run_through(proxy: CountingProxy, corpus: Path, out: Path, name: str, workers: object, **limits) -> Path:
    config = write_config(corpus, name, http_backend(proxy.url, mode="direct") | limits)
    config.write_text(yaml.safe_dump(yaml.safe_load(config.read_text()) | {"workers": workers}, sort_keys=False))
    return job.run(config, quiet=False, output_dir=out).run_dir


def test_direct_mode_on_a_local_cluster_keeps_max_in_flight_for_the_whole_run(corpus, tmp_path, capfd, monkeypatch):
    parts = []
    monkeypatch.setattr(Progress, "part", lambda self, settings: parts.append(settings))
    embedded = write_config(corpus, "embedded-source", EMBEDDED)
    with serving(embedded) as server:
        proxy = CountingProxy(server.url, delay=0.03)
        try:
            local = run_through(proxy, corpus, tmp_path, "local", 1, max_in_flight=3)
            proxy.most_in_flight = 0
            spread_from = len(proxy.spans)
            spread = run_through(proxy, corpus, tmp_path, "spread", {"backend": "dask", "n": 2}, max_in_flight=3)
        finally:
            proxy.close()
    out, err = capfd.readouterr()
    # 3 in flight over 2 workers is lanes of 2 and 1: reaching 3 takes both workers at once, and no more.
    assert proxy.most_in_flight == 3
    assert RequestLimits(3).split(2) == [RequestLimits(2), RequestLimits(1)]
    assert len([s for s in proxy.spans[spread_from:] if s[2].endswith("/knowledge/search")]) >= 8 * 20
    (grid, queries), (want_grid, want_queries) = tables(spread), tables(local)
    assert grid.height > 0 and grid.equals(want_grid)
    assert queries.height > 0 and queries.equals(want_queries)
    # The 8 settings reached the progress bar chunk by chunk, 8 chunks (4 per lane) per batch.
    assert sum(parts) == pytest.approx(8) and len(parts) % 8 == 0 and max(parts) < 1
    assert "dask: 2 workers at tcp://127.0.0.1:" in err and ", dashboard http://127.0.0.1:" in err
    # Worker processes log to this process's stderr: the password and every token used stay out of all output.
    assert proxy.tokens and all(secret not in out + err for secret in [PASSWORD, *proxy.tokens])


def most_started_within(starts: list[float], seconds: float) -> int:
    """The most request starts in any window of `seconds`."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, t in enumerate(starts):
        while t - starts[first] > seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_requests_per_second_holds_for_the_whole_run_on_an_existing_cluster(corpus, tmp_path):
    from distributed import LocalCluster

    rate = 25.0
    embedded = write_config(corpus, "embedded-rate", EMBEDDED)
    with serving(embedded) as server, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        proxy = CountingProxy(server.url, delay=0.0)
        try:
            run_through(proxy, corpus, tmp_path, "rate", {"backend": "dask", "n": 2,
                                                          "address": cluster.scheduler_address},
                        max_in_flight=4, requests_per_second=rate)
        finally:
            proxy.close()
    starts = [s[0] for s in proxy.searches()]
    assert len(starts) >= 8 * 20
    # Over the whole spread: at most `rate` per second (the two lanes at rate/2 each). A per-worker limit would
    # start twice as many.
    assert (len(starts) - 1) / (max(starts) - min(starts)) <= rate
    # In any one second: `rate`, plus one per pacer (two lanes, then the coordinator's for the ranked lists)
    # whose interval straddles the window's edges.
    assert most_started_within(starts, 1.0) <= rate + 3


def test_a_server_lost_mid_run_on_the_cluster_exits_3_without_credentials_and_resume_completes(
        corpus, tmp_path, monkeypatch, capfd):
    from distributed import LocalCluster

    from rqsweep import cli
    from rqsweep.backends.http import backend as http_backend_module

    monkeypatch.setattr(http_backend_module, "SEARCHES_PER_CHECKPOINT", 40)  # 20 queries: every 2 settings
    out = tmp_path / "out"
    with serving(write_config(corpus, "embedded-lost", EMBEDDED)) as server, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        backend = http_backend(server.url, mode="direct", retries=3, max_consecutive_failures=4)
        config = write_config(corpus, "lost", backend)
        config.write_text(yaml.safe_dump(yaml.safe_load(config.read_text()) | {"workers": {
            "backend": "dask", "n": 2, "address": cluster.scheduler_address}}, sort_keys=False))
        # The probe, the seed's check (one search per seeded item), the baseline and one batch of 2 finish; the
        # next batch meets a dead server.
        server.die_after = 1 + 8 + 12 + 20 * 3 + 7
        assert cli.main([str(config), "--output-dir", str(out)]) == 3
        err = capfd.readouterr().err
        # The coordinator's last words; this cluster's workers log to the same stderr, as they would not elsewhere.
        assert "rqsweep: 4 requests to SOAT at" in err and "failed in a row" in err.splitlines()[-1]
        assert "Traceback (most recent call last)" not in err
        tokens = list(server.accounts._sessions)
        assert tokens and all(secret not in err for secret in [PASSWORD, *tokens])
        (run_dir,) = (out / "lost").iterdir()
        assert not (run_dir / "grid.parquet").exists()

        server.die_after = None
        server.start(port=int(server.url.rsplit(":", 1)[1]))
        assert cli.main([str(config), "--resume", str(run_dir), "--output-dir", str(out), "--quiet"]) == 0
        local = write_config(corpus, "whole", http_backend(server.url, mode="direct"))
        assert cli.main([str(local), "--output-dir", str(out), "--quiet"]) == 0
    (whole,) = (out / "whole").iterdir()
    assert tables(run_dir)[0].drop("golden_sha256").equals(tables(whole)[0].drop("golden_sha256"))


def test_a_worker_killed_mid_chunk_changes_nothing(corpus, tmp_path):
    import os
    import signal

    from distributed import Client, LocalCluster

    embedded = write_config(corpus, "embedded-kill", EMBEDDED)
    with serving(embedded) as server:
        proxy = CountingProxy(server.url, delay=0.02)  # chunks last long enough to be caught running
        try:
            local = run_through(proxy, corpus, tmp_path, "local-kill", 1)
            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                    Client(cluster) as monitor:
                workers = {"backend": "dask", "n": 2, "address": cluster.scheduler_address}
                outcome = {}
                runner = threading.Thread(target=lambda: outcome.update(
                    run_dir=run_through(proxy, corpus, tmp_path, "killed", workers)))
                runner.start()
                pids = monitor.run(os.getpid)
                killed, deadline = None, time.monotonic() + 120
                while killed is None and time.monotonic() < deadline and runner.is_alive():
                    for address, keys in monitor.processing().items():
                        if any("search_chunk" in str(k) for k in keys):
                            killed = pids[address]
                            os.kill(killed, signal.SIGKILL)
                            break
                    time.sleep(0.02)
                runner.join(300)
        finally:
            proxy.close()
    assert killed is not None, "no chunk was seen running"
    (grid, queries), (want_grid, want_queries) = tables(outcome["run_dir"]), tables(local)
    assert grid.equals(want_grid) and queries.equals(want_queries)
