"""HTTP hardening: first contact survives a transient fault, echoed credentials are scrubbed, and
`rqsweep serve` survives clients that give up, authenticates before reading a body and caps it."""

from __future__ import annotations

import socket
import time

import pytest

from rqsweep import cli, job
from rqsweep.serve import Faults
from tests.http_support import EMBEDDED, PASSWORD, comparable, http_backend, serving, write_config, write_corpus

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


def test_a_probe_that_cannot_connect_at_all_still_fails_fast(tmp_path, capsys):
    write_corpus(tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}"
    # A token, no login, no seeding: the probe is the first request. Retries would show as a slow exit.
    config = write_config(tmp_path, "gone", {"kind": "http", "base_url": url, "token": "tok-unused",
                                             "retries": 4, "backoff": 5})
    started = time.monotonic()
    assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
    assert time.monotonic() - started < 3
    assert f"cannot reach SOAT at {url}" in capsys.readouterr().err
