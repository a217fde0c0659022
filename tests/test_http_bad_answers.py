"""A server that answers searches badly (not JSON, an HTML page, the wrong shape, far too much): each bad answer is
retried as `retries` says and dropped once rejected; what stays failed ends the run with exit 3, saying which
searches failed, why, and the `--resume` command that retries them."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import polars as pl
import psutil
import pytest
import yaml

from rqsweep import cli, job
from rqsweep.backends.http.auth import Target
from rqsweep.backends.http.client import RequestFailed, SoatClient
from tests.http_support import (EMBEDDED, PASSWORD, Loopback, QuietHandler, comparable, http_backend, serving,
                                write_config, write_corpus)

SETTINGS = 8  # http_support.SWEEP, the baseline among them
BAD = {
    "not JSON": ("application/json", b'{"results": [{"source_type": "document", '),
    "HTML": ("text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
    "wrong shape": ("application/json", json.dumps({"items": [], "note": "x" * 2_000_000}).encode()),
    "a wrong value": ("application/json", json.dumps({"results": [{"source_type": "y" * 2_000_000}]}).encode()),
}
SAID = {"not JSON": "answer is not JSON", "HTML": "HTTP 200 answer is not JSON (text/html)",
        "wrong shape": "search response is not SOAT's shape",
        "a wrong value": "search response: results[0].source_type = 'yyyy"}


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)


class _BadProxy:
    """A proxy in front of `upstream` answering the searches of each query in `answers` with its answer (content
    type, body): every time (`every=1`), or every other time starting with the first (`every=2`: each retry gets
    the real answer). `bad` counts the bad answers given."""

    def __init__(self, upstream: str, answers: dict[str, tuple[str, bytes]], every: int = 1):
        self.upstream, self.answers, self.every = upstream, answers, every
        self.seen = dict.fromkeys(answers, 0)
        self.bad = 0
        self._lock = threading.Lock()
        self._http = Loopback(self._handler())
        self.url = self._http.url

    def close(self) -> None:
        self._http.close()

    def _bad_answer(self, raw: bytes) -> tuple[str, bytes] | None:
        query = json.loads(raw or b"{}").get("query")
        if query not in self.answers:
            return None
        with self._lock:
            self.seen[query] += 1
            if (self.seen[query] - 1) % self.every:
                return None
            self.bad += 1
            return self.answers[query]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(QuietHandler):
            def _pass(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                bad = proxy._bad_answer(raw)
                if bad is not None:
                    kind, data = bad
                    return self.reply(200, data, kind)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
                answer = httpx.request(method, proxy.upstream + self.path, content=raw, headers=headers)
                self.reply(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

            def do_GET(self) -> None:
                self._pass("GET")

            def do_POST(self) -> None:
                self._pass("POST")

        return Handler


def _queries(folder: Path) -> list[str]:
    return [q["query"] for q in yaml.safe_load((folder / "golden.yaml").read_text())]


def test_a_bad_answer_of_each_kind_is_retried_as_retries_says(tmp_path):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        clean = job.run(write_config(tmp_path, "clean", http_backend(server.url, mode="direct")), quiet=True,
                        output_dir=tmp_path / "out").grid
        proxy = _BadProxy(server.url, dict(zip(_queries(tmp_path)[-len(BAD):], BAD.values())), every=2)
        try:
            config = write_config(tmp_path, "flaky", http_backend(proxy.url, mode="direct", retries=1))
            outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
        finally:
            proxy.close()
    assert proxy.bad >= SETTINGS * len(BAD)  # each search of those queries: a bad answer, then the real one
    assert outcome.grid["errors"].sum() == 0
    assert comparable(outcome.grid).drop("golden_sha256").equals(comparable(clean).drop("golden_sha256"))


def test_searches_that_stay_failed_end_the_run_with_exit_3_saying_which_why_and_how_to_retry(tmp_path, capsys):
    write_corpus(tmp_path)
    kinds = ("HTML", "a wrong value")
    queries = dict(zip(kinds, _queries(tmp_path)[-2:]))
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        proxy = _BadProxy(server.url, {queries[k]: BAD[k] for k in kinds})
        try:
            config = write_config(tmp_path, "bad", http_backend(proxy.url, mode="direct", retries=2))
            assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
            # Each search of those queries tried 1 + retries times: the sweep's, then the ranked lists' of the report.
            assert proxy.bad % 3 == 0 and proxy.bad >= 2 * SETTINGS * 3
            err = capsys.readouterr().err
            (run_dir,) = (tmp_path / "out" / "bad").iterdir()
            assert f"{2 * SETTINGS} searches failed for good, in {SETTINGS} of {SETTINGS} settings" in err
            for kind in kinds:
                assert f"{SETTINGS} x {SAID[kind]}" in err and f"query {queries[kind]!r}" in err
            assert f"--resume {run_dir}" in err and "RUN_DIR" not in err
            assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
            errors = pl.read_parquet(run_dir / "queries.parquet")["error"].drop_nulls()
            assert errors.len() == 2 * SETTINGS and errors.str.len_chars().max() < 1000  # the 2 MB value is not kept

            proxy.answers = {}  # the server behaves again: --resume retries what failed
            assert cli.main([str(config), "--resume", str(run_dir), "--quiet"]) == 0
        finally:
            proxy.close()
    assert pl.read_parquet(run_dir / "grid.parquet")["errors"].sum() == 0


def _flood(size: int) -> ThreadingHTTPServer:
    """A server answering every request with `size` bytes of JSON-looking text, streamed in 1 MB pieces."""

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            piece = b" " * 1_000_000
            try:
                for _ in range(size // len(piece)):
                    self.wfile.write(piece)
            except (BrokenPipeError, ConnectionResetError, socket.error):
                pass  # the client stopped reading: what the cap is for

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    http.daemon_threads = True
    threading.Thread(target=http.serve_forever, daemon=True).start()
    return http


def test_an_answer_past_the_size_cap_is_refused_unread(tmp_path):
    http = _flood(400_000_000)
    client = SoatClient(Target(f"http://127.0.0.1:{http.server_address[1]}", None, None, None), retries=1, backoff=0.001,
                        max_response_bytes=2_000_000)
    process = psutil.Process()
    before = process.memory_info().rss
    try:
        with pytest.raises(RequestFailed, match=r"HTTP 200 answer larger than 2 MB \(application/json\) \(after 2 attempts\)"):
            client.request("POST", "/api/v1/knowledge/search", {"query": "q"})
    finally:
        client.close()
        http.shutdown()
        http.server_close()
    assert process.memory_info().rss - before < 100_000_000  # 2 x 400 MB read whole would show


def test_memory_ages_that_http_cannot_seed_are_a_warning_in_run_json_and_the_report(tmp_path):
    write_corpus(tmp_path, ages=True)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        outcome = job.run(write_config(tmp_path, "aged", http_backend(server.url, mode="direct")), quiet=True,
                          output_dir=tmp_path / "out")
    aged = sum(1 for m in yaml.safe_load((tmp_path / "corpus.yaml").read_text())["memories"] if m.get("age_days"))
    said = f"{aged} memories have age_days, which cannot be seeded over HTTP"
    assert aged and any(said in w for w in json.loads((outcome.run_dir / "run.json").read_text())["warnings"])
    for report in ("report.md", "report.html"):
        assert said in (outcome.run_dir / report).read_text()
