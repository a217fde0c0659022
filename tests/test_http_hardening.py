"""HTTP hardening: first contact survives a transient fault, echoed credentials are scrubbed, and
`rqsweep serve` survives clients that give up, authenticates before reading a body and caps it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Iterator

import httpx
import polars as pl
import psutil
import pytest
import yaml

from rqsweep import cli, job
from rqsweep.backends.http.auth import Secret, Target
from rqsweep.backends.http.client import RequestFailed, SoatClient
from rqsweep.backends.http.direct import Searcher
from rqsweep.backends.http.mapping import SEARCH_PATH, Dialect, SearchScope
from rqsweep.errors import BackendError
from rqsweep.knobs import Knobs
from rqsweep.scrub import scrub_secrets
from rqsweep.serve import Faults
from tests.http_support import (EMBEDDED, PASSWORD, Loopback, QuietHandler, comparable, counted_back_offs, http_backend,
                                leaks, serving, write_config, write_corpus)

SETTINGS = 8  # http_support.SWEEP, the baseline among them


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- item 10: the probe search is retried like any search ---------------------------------------------------


def _sweep(tmp_path: Path, name: str, faults: Faults | None = None) -> tuple[pl.DataFrame, int]:
    """An HTTP sweep against a fresh server: its grid, and how many searches the server saw."""
    with serving(tmp_path / "embedded.yaml", faults=faults) as server:
        config = write_config(tmp_path, name, http_backend(server.url, mode="direct", timeout=1))
        return job.run(config, quiet=True, output_dir=tmp_path / "out").grid, server.searches


@pytest.mark.parametrize("kind", ["drop", "slow"])
def test_a_fault_on_the_probe_search_right_after_login_is_retried(tmp_path, kind):
    write_corpus(tmp_path)
    write_config(tmp_path, "embedded", EMBEDDED)
    want, clean_searches = _sweep(tmp_path, "clean")
    grid, searches = _sweep(tmp_path, "flaky", Faults(first=2, kinds=(kind,), slow_seconds=2.5))
    assert searches >= clean_searches + 2  # the probe, twice more (and any search a loaded machine timed out)
    assert grid["errors"].sum() == 0
    assert comparable(grid).drop("golden_sha256").equals(comparable(want).drop("golden_sha256"))


def test_a_probe_that_cannot_connect_at_all_still_fails_fast(tmp_path, capsys, monkeypatch):
    write_corpus(tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}"
    # A token, no login, no seeding: the probe is the first request. Retries would show as a slow exit.
    config = write_config(tmp_path, "gone", {"kind": "http", "base_url": url, "token": "tok-unused",
                                             "retries": 4, "backoff": 5})
    back_offs = counted_back_offs(monkeypatch)
    assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
    assert back_offs.asked == []
    assert f"cannot reach SOAT at {url}" in capsys.readouterr().err


# --- item 11: credentials a server or proxy echoes are scrubbed from its messages ---------------------------

UPSTREAM_KEY = "sk_proxy_Wm4-upstream-key"  # a credential the client never held, echoed all the same


class _EchoingProxy:
    """A proxy in front of `upstream` that answers 500, echoing the credentials it was sent, to the login
    (`echo_login`) or to searches for `echo_query`; every other request is passed on."""

    def __init__(self, upstream: str, echo_query: str | None = None, echo_login: bool = False,
                 status: int = 500):
        self.upstream, self.echo_query, self.echo_login = upstream, echo_query, echo_login
        self.status = status  # 500: an error body; 200: a malformed search answer quoting the credentials
        self.echoed = 0
        self._http = Loopback(self._handler())
        self.url = self._http.url

    def close(self) -> None:
        self._http.close()

    def _echo(self, path: str, raw: bytes) -> bool:
        if path == "/api/v1/users/login":
            return self.echo_login
        return self.echo_query is not None and json.loads(raw or b"{}").get("query") == self.echo_query

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(QuietHandler):
            def _pass(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy._echo(self.path.split("?")[0], raw):
                    proxy.echoed += 1
                    message = (f"upstream refused Authorization: {self.headers.get('Authorization')} "
                               f"(key {UPSTREAM_KEY}) for {raw.decode()}")
                    if proxy.status == 200:
                        return self.reply(200, json.dumps({"results": [{"source_type": message}]}).encode())
                    error = {"error": {"code": "INTERNAL_ERROR", "message": message}}
                    return self.reply(500, json.dumps(error).encode())
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
                answer = httpx.request(method, proxy.upstream + self.path, content=raw, headers=headers)
                self.reply(answer.status_code, answer.content)

            def do_GET(self) -> None:
                self._pass("GET")

            def do_POST(self) -> None:
                self._pass("POST")

        return Handler


@pytest.mark.parametrize("status, said", [(500, "HTTP 500 INTERNAL_ERROR: upstream refused"),
                                          (200, "search response: results[0].source_type = 'upstream refused")])
def test_a_search_error_echoing_the_token_reaches_no_file_log_or_message(tmp_path, capsys, caplog, status, said):
    caplog.set_level(logging.DEBUG)
    write_corpus(tmp_path)
    last_query = yaml.safe_load((tmp_path / "golden.yaml").read_text())[-1]["query"]
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        proxy = _EchoingProxy(server.url, echo_query=last_query, status=status)
        try:
            config = write_config(tmp_path, "echoed", http_backend(proxy.url, mode="direct", retries=1))
            code = cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"])
            tokens = list(server.accounts._sessions)
            client = SoatClient(Target(proxy.url, None, "admin", Secret(PASSWORD)), retries=0)
            client.connect()
            tokens += list(server.accounts._sessions)
            with pytest.raises(RequestFailed) as raised:
                Searcher(client, 10, SearchScope(), Dialect()).hits(last_query, Knobs())
            client.close()
        finally:
            proxy.close()
    # Each search of that query failed after one retry, a 500 and a malformed 200 alike: exit 3, a misbehaving server.
    assert code == 3 and proxy.echoed > SETTINGS * 2
    secrets = [PASSWORD, UPSTREAM_KEY, *tokens]
    (run_dir,) = (tmp_path / "out" / "echoed").iterdir()
    errors = pl.read_parquet(run_dir / "queries.parquet")["error"].drop_nulls()
    assert errors.len() == SETTINGS and errors.str.contains(said, literal=True).all()
    assert leaks(tmp_path / "out", secrets) == []
    captured = capsys.readouterr()
    for text in (captured.out, captured.err, caplog.text, str(raised.value), repr(raised.value.args)):
        assert [s[:8] for s in secrets if s in text] == []
    assert "Bearer ***" in str(raised.value)


def test_a_login_error_echoing_the_password_reaches_no_message(tmp_path, capsys):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        proxy = _EchoingProxy(server.url, echo_login=True)
        try:
            config = write_config(tmp_path, "echoed", http_backend(proxy.url, retries=1))
            assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
            with pytest.raises(BackendError) as raised:
                job.run(config, quiet=True, output_dir=tmp_path / "out")
        finally:
            proxy.close()
    err = capsys.readouterr().err
    assert "refused the login as 'admin': HTTP 500 INTERNAL_ERROR: upstream refused" in err
    for text in (err, str(raised.value)):
        assert PASSWORD not in text and UPSTREAM_KEY not in text


def test_scrub_masks_held_secrets_and_credential_shaped_words_only():
    text = 'auth "bearer tok_abc.def" key=sk_live_9-x pw hunter2-long; task_id disk_usage Bearer'
    assert scrub_secrets(text, ["hunter2-long", ""]) == 'auth "bearer ***" key=*** pw ***; task_id disk_usage Bearer'


# --- item 2: `rqsweep serve` outlives a client that gives up ------------------------------------------------


@contextlib.contextmanager
def _serve_process(config: Path, *options: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`rqsweep serve` run as users run it (the console script), on a free port; yields it and its URL."""
    rqsweep = Path(sys.executable).with_name("rqsweep")
    process = subprocess.Popen([str(rqsweep), "serve", str(config), "--port", "0", *options], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=os.environ | {"RQSWEEP_SERVE_PASSWORD": PASSWORD})
    try:
        line = process.stdout.readline()
        assert line.startswith("listening on "), line + process.stderr.read()
        yield process, line.split()[-1]
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(10)


def _login(http: httpx.Client) -> dict[str, str]:
    answer = http.post("/api/v1/users/login", json={"username": "admin", "password": PASSWORD})
    assert answer.status_code == 200
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def _abort(url: str, request: bytes) -> None:
    """Send `request` and hang up with a reset, as a killed client's connection ends."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(request)


def test_serve_outlives_clients_that_give_up_before_the_answer(tmp_path):
    write_corpus(tmp_path)
    config = write_config(tmp_path, "embedded", EMBEDDED)
    with _serve_process(config, "--fault-rate", "1", "--fault-kinds", "slow", "--slow-seconds", "0.5") as (server, url):
        with httpx.Client(base_url=url) as http:
            auth = _login(http)
            for _ in range(3):  # a timed-out search, as a sweep with a short timeout gives up
                with pytest.raises(httpx.TimeoutException):
                    http.post(SEARCH_PATH, json={"query": "pager"}, headers=auth, timeout=0.1)
        body = json.dumps({"query": "pager"}).encode()
        head = (f"POST {SEARCH_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth['Authorization']}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        _abort(url, head + body)  # killed while the server works on the answer
        _abort(url, head + body[:5])  # killed while sending its request
        time.sleep(1.0)  # the server wakes and answers into closed connections
        assert server.poll() is None, f"serve died with exit {server.returncode}"
        with httpx.Client(base_url=url) as http:
            assert http.post(SEARCH_PATH, json={"query": "pager"}, headers=_login(http)).status_code == 200
        server.terminate()
        assert "Traceback" not in server.communicate(timeout=10)[1]


# --- item 12: serve authenticates before reading a body, caps it, and warns off loopback ----------------------

MIB = 1 << 20


def _peak_rss_growth(pid: int, send) -> int:
    """How far the process's peak resident memory rose above its resident memory while `send()` ran."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    before = psutil.Process(pid).memory_info().rss
    send()
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
    return peak_kib * 1024 - before


def test_an_unauthenticated_large_post_is_refused_unread(tmp_path):
    write_corpus(tmp_path)
    with _serve_process(write_config(tmp_path, "embedded", EMBEDDED)) as (server, url):
        answers = []

        def send() -> None:
            size = 64 * MIB
            chunks = (b" " * MIB for _ in range(size // MIB))
            headers = {"Content-Length": str(size), "Content-Type": "application/json"}
            with httpx.Client(base_url=url, timeout=30) as http:
                answers.append(http.post(SEARCH_PATH, content=chunks, headers=headers))

        growth = _peak_rss_growth(server.pid, send)
        assert growth < 16 * MIB, f"serve's memory grew by {growth / MIB:.0f} MiB"
        assert answers[0].status_code == 401 and answers[0].json()["error"]["code"] == "UNAUTHORIZED"
        with httpx.Client(base_url=url) as http:  # still serving
            assert http.post(SEARCH_PATH, json={"query": "pager"}, headers=_login(http)).status_code == 200


def test_an_oversized_authenticated_body_gets_413_and_the_connection_goes_on(tmp_path):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        with httpx.Client(base_url=server.url) as http:
            auth = _login(http)
            small = http.post(SEARCH_PATH, json={"query": "pager"}, headers=auth)
            large = http.post(SEARCH_PATH, json={"query": "x" * (2 * MIB)}, headers=auth)
            unauthenticated = http.post(SEARCH_PATH, json={"query": "pager"})
            again = http.post(SEARCH_PATH, json={"query": "pager"}, headers=auth)
    assert small.status_code == 200 and again.json() == small.json()
    assert large.status_code == 413
    error = large.json()["error"]
    assert error["code"] == "PAYLOAD_TOO_LARGE" and "1048576" in error["message"]
    assert unauthenticated.status_code == 401


@pytest.mark.parametrize("length", ["-1", "12x"])
def test_an_unreadable_content_length_is_refused(tmp_path, length):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        with httpx.Client(base_url=server.url) as http:
            auth = _login(http)["Authorization"]
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:  # httpx refuses to send such a header
            s.sendall(f"POST {SEARCH_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
                      f"Content-Length: {length}\r\n\r\n{{}}".encode())
            answer = b""
            while chunk := s.recv(65536):  # the server answers, then closes: the request's framing is lost
                answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and json.loads(body)["error"]["code"] == "VALIDATION_FAILED"


def test_serve_warns_when_it_listens_beyond_loopback(tmp_path):
    write_corpus(tmp_path)
    config = write_config(tmp_path, "embedded", EMBEDDED)
    with _serve_process(config, "--host", "0.0.0.0") as (server, url):  # no request is sent to it
        server.terminate()
        warning = server.communicate(timeout=10)[1]
    assert "warning: listening on 0.0.0.0" in warning and "reachable from other machines" in warning
    with _serve_process(config) as (server, url):
        server.terminate()
        assert "warning" not in server.communicate(timeout=10)[1]
