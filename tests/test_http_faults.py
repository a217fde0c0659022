"""Manners under failure: injected transient faults change nothing; a dead server stops the run with exit 3,
keeps what finished, and `--resume` completes it once the server is back."""

from __future__ import annotations

import socket
from pathlib import Path

import polars as pl
import pytest
import yaml

from rqsweep import cli, job, serve
from rqsweep.backends.http import backend as http_backend_module
from rqsweep.backends.http.auth import Secret, Target
from rqsweep.backends.http.client import EMBEDDER_FAILURES, RequestFailed, SoatClient, retry_after_seconds
from rqsweep.backends.http.mapping import SEARCH_PATH
from rqsweep.serve import EMBEDDER_FAULT, Faults, SoatServer
from tests.http_support import (EMBEDDED, PASSWORD, comparable, counted_back_offs, http_backend, serving, write_config,
                                write_corpus)
from tests.soat_golden import SOAT_GOLDEN_CONFIG, needs_soat_golden


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)


def _grid(run_dir: Path) -> pl.DataFrame:
    return comparable(pl.read_parquet(run_dir / "grid.parquet"))


def _run_dir(out: Path, name: str) -> Path:
    (run_dir,) = (out / name).iterdir()
    return run_dir


@pytest.mark.parametrize("mode", ["direct", "replay"])
def test_twenty_percent_transient_faults_give_the_clean_metrics(tmp_path, mode):
    write_corpus(tmp_path)
    embedded = write_config(tmp_path, "embedded", EMBEDDED)
    with serving(embedded) as server:
        clean = write_config(tmp_path, "clean", http_backend(server.url, mode=mode))
        clean_grid = comparable(job.run(clean, quiet=True, output_dir=tmp_path / "out").grid)
        clean_searches = server.searches
        # A slow answer outlasts the client's timeout by a second, and a busy machine does not make a clean one
        # outlast it (0.3 s did, on a loaded machine: searches timed out until the run gave up).
        server.faults = Faults(0.2, seed=7, retry_after=0, slow_seconds=2.0)
        faulty = write_config(tmp_path, "faulty", http_backend(server.url, mode=mode, timeout=1.0))
        outcome = job.run(faulty, quiet=True, output_dir=tmp_path / "out")
        retried = server.searches - 2 * clean_searches  # each fault costs one more search
    assert retried > 0.15 * clean_searches
    assert comparable(outcome.grid).drop("golden_sha256").equals(clean_grid.drop("golden_sha256"))
    assert outcome.grid["errors"].sum() == 0


def test_a_dead_server_stops_the_run_with_exit_3_and_resume_completes_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(http_backend_module, "SEARCHES_PER_CHECKPOINT", 40)  # 20 queries: every 2 settings
    write_corpus(tmp_path)
    embedded = write_config(tmp_path, "embedded", EMBEDDED)
    with serving(embedded) as server:
        backend = http_backend(server.url, mode="direct", retries=3, max_consecutive_failures=4)
        config = write_config(tmp_path, "resumed", backend)
        out = str(tmp_path / "out")
        queries = 20
        # The probe, the seed's check (one search per seeded item), the baseline and one batch of 2 finish; the
        # server dies during the next batch.
        server.die_after = 1 + 8 + 12 + queries * 3 + 7
        back_offs = counted_back_offs(monkeypatch)
        assert cli.main([str(config), "--output-dir", out, "--quiet"]) == 3
        # Each failing search is retried 3 times; 4 failed in a row stop the run, and the 4 in flight end after.
        assert len(back_offs.asked) <= (4 + 4) * 3
        err = capsys.readouterr().err
        run_dir = _run_dir(tmp_path / "out", "resumed")
        assert "failed in a row" in err and f"continue with: rqsweep {config} --resume {run_dir}" in err
        finished = pl.concat([pl.read_parquet(p) for p in (run_dir / "state").glob("part-*.parquet")])
        assert finished["setting_id"].n_unique() == 3 and finished["error"].null_count() == finished.height
        assert not (run_dir / "grid.parquet").exists()

        server.die_after = None
        server.start(port=int(server.url.rsplit(":", 1)[1]))
        assert cli.main([str(config), "--resume", str(run_dir), "--output-dir", out, "--quiet"]) == 0
        whole = write_config(tmp_path, "whole", backend)
        assert cli.main([str(whole), "--output-dir", out, "--quiet"]) == 0
    resumed, uninterrupted = _grid(run_dir), _grid(_run_dir(tmp_path / "out", "whole"))
    assert resumed.drop("golden_sha256").equals(uninterrupted.drop("golden_sha256"))
    assert resumed["setting_id"].n_unique() == 8


class _EmbedderDown(Faults):
    """SOAT's embedding provider down from the search after `after` on: each search fails as SOAT's does, slowly."""

    def __init__(self, server: SoatServer, after: int):
        super().__init__(kinds=(EMBEDDER_FAULT,), slow_seconds=0.3)
        self.server, self.after, self.failed = server, after, 0

    def draw(self, path: str) -> str | None:
        if path != SEARCH_PATH or self.server.searches <= self.after:
            return None
        self.failed += 1
        return EMBEDDER_FAULT


_V0_28_0_SWEEP = {"strategy": "grid", "knobs": {"min_similarity": {"values": [0.1, 0.2, 0.3], "include_off": True}}}


@pytest.mark.parametrize("old_server, after", [(False, 0), (False, 1 + 20 + 20 * 3), (True, 0),
                                               (True, 2 + 20 + 20 * 2)],
                         ids=["from the probe on", "mid-run", "v0.28.0 from the probe on", "v0.28.0 mid-run"])
def test_an_embedding_provider_down_stops_the_run_at_once_naming_it(tmp_path, capsys, old_server, after):
    """Before, each search was retried and the run stopped only on `max_consecutive_failures` final failures
    (here 20 x 5 attempts of 0.3 s each), saying nothing of the embedder; v0.28.0's opaque 500 went unrecognised."""
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED), old_server=old_server) as server:
        config = write_config(tmp_path, "down", http_backend(server.url, mode="direct", retries=4,
                                                             max_consecutive_failures=20),
                              _V0_28_0_SWEEP if old_server else None)
        server.faults = down = _EmbedderDown(server, after)
        assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
        err = capsys.readouterr().err
        said = (f"answered {EMBEDDER_FAILURES} requests in a row with HTTP 500 INTERNAL_ERROR: Internal Server Error, "
                "its answer to an unexpected error: SOAT v0.28.0 answers so when its embedding provider is down"
                if old_server else f"cannot embed: {EMBEDDER_FAILURES} answers in a row said its embedding provider "
                "failed (last: HTTP 502 AI_PROVIDER_ERROR: embedding the query failed")
        assert f"SOAT at {server.url} {said}" in err
        assert down.failed < EMBEDDER_FAILURES + 4  # the searches in flight (max_in_flight 4) end too
        assert "Traceback" not in err
        if not after:  # stopped at the probe, before any search: no run folder to resume is left
            assert not (tmp_path / "out" / "down").exists() or not any((tmp_path / "out" / "down").iterdir())
            return
        run_dir = _run_dir(tmp_path / "out", "down")
        assert f"continue with: rqsweep {config} --resume {run_dir}" in err
        server.faults = Faults()  # the provider is back: the run resumes to its end
        assert cli.main([str(config), "--resume", str(run_dir), "--quiet"]) == 0
    assert pl.read_parquet(run_dir / "grid.parquet")["errors"].sum() == 0


def test_a_refusal_that_would_repeat_does_not_advise_resuming_once_the_server_answers(tmp_path, capsys):
    """A 4xx other than a timeout, a rate limit or the credentials is the server's answer to that very request:
    resuming sends it again. Here a document over the server's body limit (413)."""
    write_corpus(tmp_path)
    corpus = yaml.safe_load((tmp_path / "corpus.yaml").read_text())
    corpus["documents"].insert(2, {"key": "doc-huge", "path": "/huge.md", "content": "word " * 300_000})
    (tmp_path / "corpus.yaml").write_text(yaml.safe_dump(corpus))
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        config = write_config(tmp_path, "huge", http_backend(server.url))
        assert cli.main([str(config), "--output-dir", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    run_dir = _run_dir(tmp_path / "out", "huge")
    assert "seeding stopped at document 'doc-huge': /api/v1/documents answered HTTP 413 PAYLOAD_TOO_LARGE" in err
    assert (f"finished work is kept in {run_dir}; this is no passing outage: --resume meets the same answer until "
            "what it names is fixed") in err
    assert "once the backend answers again" not in err and "continue with" not in err


def test_unreachable_server_and_rejected_password_fail_fast_with_exit_3(tmp_path, monkeypatch, capsys):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        url = server.url
        config = write_config(tmp_path, "wrong", http_backend(url))
        monkeypatch.setenv("SOAT_PASSWORD", "not-the-password")
        assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
        assert "refused the login as 'admin': HTTP 401 UNAUTHORIZED" in capsys.readouterr().err
    config = write_config(tmp_path, "gone", http_backend(url))
    back_offs = counted_back_offs(monkeypatch)
    assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
    assert back_offs.asked == []  # a server that never answered is not retried
    assert f"cannot reach SOAT at {url}" in capsys.readouterr().err


def test_a_429_waits_at_least_its_retry_after_and_other_4xx_are_never_retried(tmp_path, monkeypatch):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        server.faults = Faults(kinds=("429",), retry_after=1, first=1)
        client = SoatClient(Target(server.url, None, "admin", Secret(PASSWORD)), retries=3, backoff=0.001)
        client.connect()  # the login route has no faults
        back_offs = counted_back_offs(monkeypatch)
        with pytest.raises(RequestFailed, match="400"):  # an unknown field: the 429 passes, then a plain 4xx
            client.request("POST", "/api/v1/knowledge/search", {"query": "x", "colour": "red"})
        assert back_offs.asked == [1.0]  # the Retry-After, over a back-off of a millisecond
        assert client.stats.requests == 1 + 2 and client.stats.retries == 1
        client.close()
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after_seconds("soon") is None


def test_serve_exits_with_the_code_of_its_error(tmp_path, capsys):
    write_corpus(tmp_path)
    with socket.socket() as s:  # a port nothing listens on: the embedder cannot be reached
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    unreachable = write_config(tmp_path, "ollama", EMBEDDED | {"embedder": {
        "kind": "ollama", "model": "nomic-embed-text", "base_url": f"http://127.0.0.1:{closed}", "timeout": 2}})
    ids = tmp_path / "ids.json"
    assert serve.main([str(unreachable), "--port", "0", "--preload", str(ids)]) == 3  # a backend failure
    assert "ollama embeddings" in capsys.readouterr().err and not ids.exists()
    assert serve.main([str(tmp_path / "missing.yaml"), "--port", "0"]) == 2  # invalid input
    assert serve.main([str(unreachable), "--port", "0", "--clock", "yesterday"]) == 2


@needs_soat_golden
def test_serve_preloads_the_corpus_of_a_soat_golden_json(tmp_path):
    """configs/soat-golden.yaml has no `corpus:`: its golden.json carries the corpus, and --preload loads that."""
    import json
    import signal
    import subprocess
    import sys

    config = SOAT_GOLDEN_CONFIG
    ids = tmp_path / "ids.json"
    proc = subprocess.Popen([sys.executable, "-m", "rqsweep", "serve", str(config), "--port", "0", "--preload",
                             str(ids)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert first.startswith("listening on http://127.0.0.1:"), err
    preloaded = json.loads(ids.read_text())
    assert len(preloaded["documents"]) == 31 and len(preloaded["memories"]) == 12
    assert "rqsweep serve preload: 43/43 documents and memories" in err  # its progress (before: none)
