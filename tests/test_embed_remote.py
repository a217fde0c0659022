"""Remote embedders against a real loopback HTTP server, and the on-disk cache in front of them."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rqsweep.engine.embed import (CachedEmbedder, EmbeddingError, FeatureHashEmbedder, OllamaEmbedder,
                                  OpenAIEmbedder)

KEY = "sk-test-SECRET-4f9c2a71e0"
REPO = Path(__file__).resolve().parents[1]


def fake_vector(text: str) -> list[float]:
    """What the fake server embeds a text as: distinct per text, independent of the batch."""
    return [float(len(text)), float(sum(map(ord, text)) % 997), 0.5]


Reply = tuple[int, Any]  # status, JSON-able payload or raw bytes


def openai_reply(body: dict[str, Any]) -> Reply:
    # Reversed on purpose: clients must order by `index`, not by position.
    data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]
    return 200, {"object": "list", "data": data[::-1], "model": body["model"]}


def ollama_reply(body: dict[str, Any]) -> Reply:
    return 200, {"model": body["model"], "embeddings": [fake_vector(t) for t in body["input"]]}


class FakeProvider:
    """A loopback server speaking OpenAI's /v1/embeddings and Ollama's /api/embed; records every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: Callable[[str, dict[str, Any], dict[str, str]], Reply] = self.default_reply
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = dict(self.headers.items())
                provider.requests.append({"path": self.path, "headers": headers, "body": body})
                status, payload = provider.reply(self.path, body, headers)
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @staticmethod
    def default_reply(path: str, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        return openai_reply(body) if path == "/v1/embeddings" else ollama_reply(body)

    def inputs(self) -> list[list[str]]:
        return [request["body"]["input"] for request in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def provider():
    fake = FakeProvider()
    yield fake
    fake.close()


@pytest.fixture()
def openai(provider, monkeypatch):
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    return OpenAIEmbedder(f"{provider.base}/v1", "text-embedding-3-small", api_key_env="TEST_EMBED_KEY",
                          batch_size=4, timeout=5)


def expected(texts: list[str]) -> np.ndarray:
    return np.array([fake_vector(t) for t in texts], dtype=np.float32)


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert KEY not in text


# --- OpenAI-compatible ---------------------------------------------------------------------------------

def test_openai_batches_orders_by_index_and_authenticates(provider, openai):
    texts = [f"text number {i}" for i in range(10)]
    got = openai.embed(texts)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected(texts))
    assert provider.inputs() == [texts[0:4], texts[4:8], texts[8:10]]  # ceil(10 / 4) requests
    for request in provider.requests:
        assert request["path"] == "/v1/embeddings"
        assert request["headers"]["Authorization"] == f"Bearer {KEY}"
        assert request["body"]["model"] == "text-embedding-3-small"
        assert request["body"]["encoding_format"] == "float"
        assert "dimensions" not in request["body"]


def test_openai_identity_and_repr_hold_no_key(openai, provider, caplog):
    caplog.set_level(logging.DEBUG)
    openai.embed(["hello"])
    assert openai.identity == f"openai/text-embedding-3-small@{provider.base}/v1"
    assert_no_key(openai.identity, repr(openai), caplog.text)


def test_openai_sends_requested_dimensions(provider, monkeypatch):
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    embedder = OpenAIEmbedder(f"{provider.base}/v1/", "m", api_key_env="TEST_EMBED_KEY", dimensions=3)
    assert embedder.identity == f"openai/m/3@{provider.base}/v1"
    np.testing.assert_array_equal(embedder.embed(["a", "bb"]), expected(["a", "bb"]))
    assert provider.requests[0]["body"]["dimensions"] == 3
    short = OpenAIEmbedder(f"{provider.base}/v1", "m", api_key_env="TEST_EMBED_KEY", dimensions=2)
    with pytest.raises(EmbeddingError, match="3-dimensional embeddings, expected 2"):
        short.embed(["a"])


def test_openai_without_key_sends_no_authorization(provider):
    OpenAIEmbedder(f"{provider.base}/v1", "m", api_key_env=None).embed(["a"])
    assert "Authorization" not in provider.requests[0]["headers"]


def test_openai_missing_key_variable_is_named(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VARIABLE", raising=False)
    with pytest.raises(EmbeddingError, match="NO_SUCH_KEY_VARIABLE"):
        OpenAIEmbedder("http://127.0.0.1:9/v1", "m", api_key_env="NO_SUCH_KEY_VARIABLE")


def test_base_url_with_credentials_is_refused():
    with pytest.raises(ValueError) as info:
        OllamaEmbedder("http://user:hunter2@127.0.0.1:11434", "m")
    assert "hunter2" not in str(info.value)


# --- Ollama ----------------------------------------------------------------------------------------------

def test_ollama_batches(provider):
    embedder = OllamaEmbedder(provider.base, "nomic-embed-text", batch_size=2)
    texts = ["α", "β", "γ", "δ", "lone \ud800 surrogate"]
    np.testing.assert_array_equal(embedder.embed(texts), expected(texts))
    assert provider.inputs() == [texts[0:2], texts[2:4], texts[4:]]
    assert {r["path"] for r in provider.requests} == {"/api/embed"}
    assert provider.requests[0]["body"] == {"model": "nomic-embed-text", "input": ["α", "β"]}
    assert embedder.identity == f"ollama/nomic-embed-text@{provider.base}"


def test_empty_input_sends_nothing(provider, openai):
    assert openai.embed([]).shape[0] == 0
    assert provider.requests == []


# --- failures --------------------------------------------------------------------------------------------

def refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_dims(body: dict[str, Any]) -> Reply:
    return 200, {"data": [{"index": i, "embedding": [0.1] * (2 + i)} for i in range(len(body["input"]))]}


FAILURES: dict[str, tuple[Callable[..., Reply], str]] = {
    "server error": (lambda p, b, h: (500, {"error": {"message": "model overloaded", "type": "server_error"}}),
                     r"HTTP 500: model overloaded"),
    "echoed key": (lambda p, b, h: (401, {"error": {"message": f"bad key {h['Authorization']}"}}),
                   r"HTTP 401: bad key Bearer \*\*\*"),
    "not json": (lambda p, b, h: (200, b"<html>gateway says hi</html>"), r"not JSON: '<html>gateway says hi"),
    "wrong count": (lambda p, b, h: (200, {"data": [{"index": 0, "embedding": [1.0]}]}),
                    r"returned 1 embeddings for 2 texts"),
    "duplicate index": (lambda p, b, h: (200, {"data": [{"index": 0, "embedding": [1.0]}] * 2}),
                        r"indices \[0, 0\]"),
    "ragged": (lambda p, b, h: two_dims(b), r"inconsistent dimensions \[2, 3\]"),
    "strings": (lambda p, b, h: (200, {"data": [{"index": i, "embedding": ["0.1"]} for i in range(2)]}),
                r"not a non-empty list of numbers"),
    "no data": (lambda p, b, h: (200, {"object": "list"}), r"without a 'data' list"),
}


@pytest.mark.parametrize("case", FAILURES)
def test_openai_failures_are_clear_and_keep_the_key_secret(case, provider, openai, caplog):
    caplog.set_level(logging.DEBUG)
    provider.reply, pattern = FAILURES[case]
    with pytest.raises(EmbeddingError, match=pattern) as info:
        openai.embed(["first", "second"])
    message = str(info.value)
    assert f"POST {provider.base}/v1/embeddings" in message
    assert_no_key(message, "".join(traceback.format_exception(info.value)), caplog.text)


def test_ollama_error_message_is_reported(provider):
    provider.reply = lambda p, b, h: (404, {"error": 'model "nope" not found, try pulling it first'})
    with pytest.raises(EmbeddingError, match=r'/api/embed answered HTTP 404: model "nope" not found'):
        OllamaEmbedder(provider.base, "nope").embed(["a"])


def test_dimensions_must_agree_across_batches(provider, openai):
    provider.reply = lambda p, b, h: (200, {"data": [{"index": i, "embedding": [1.0] * (2 + len(b["input"][0]))}
                                                     for i in range(len(b["input"]))]})
    with pytest.raises(EmbeddingError, match="4-dimensional embeddings, expected 3"):
        openai.embed(["a", "a", "a", "a", "bb"])


def test_connection_refused(monkeypatch):
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    url = f"http://127.0.0.1:{refused_port()}/v1"
    with pytest.raises(EmbeddingError, match=r"POST .*/v1/embeddings failed: ConnectError") as info:
        OpenAIEmbedder(url, "m", api_key_env="TEST_EMBED_KEY").embed(["a"])
    assert_no_key(str(info.value), "".join(traceback.format_exception(info.value)))


def test_timeout(provider):
    def slow(path: str, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        time.sleep(1.0)
        return ollama_reply(body)
    provider.reply = slow
    with pytest.raises(EmbeddingError, match=r"/api/embed timed out after 0.2 s"):
        OllamaEmbedder(provider.base, "m", timeout=0.2).embed(["a"])


# --- the cache -------------------------------------------------------------------------------------------

def test_cache_reruns_never_reembed_and_send_only_misses(provider, openai, tmp_path):
    first = CachedEmbedder(openai, tmp_path)
    np.testing.assert_array_equal(first.embed(["a", "b", "c"]), expected(["a", "b", "c"]))
    assert provider.inputs() == [["a", "b", "c"]]

    rerun = CachedEmbedder(openai, tmp_path)  # a new process would build exactly this
    np.testing.assert_array_equal(rerun.embed(["c", "a", "b"]), expected(["c", "a", "b"]))
    assert len(provider.requests) == 1
    assert (rerun.hits, rerun.misses) == (3, 0)

    texts = ["a", "d", "b", "e", "d", "f", "g", "h", "i"]
    np.testing.assert_array_equal(rerun.embed(texts), expected(texts))
    # The six misses (d once) go to the inner embedder in one call, which batches them by 4.
    assert provider.inputs()[1:] == [["d", "e", "f", "g"], ["h", "i"]]
    assert (rerun.hits, rerun.misses) == (5, 6)


def test_cache_stores_each_portion_as_it_comes_back(provider, openai, tmp_path, monkeypatch):
    import rqsweep.engine.embed.cache as cache_module

    monkeypatch.setattr(cache_module, "_STORE_EVERY", 4)  # one request of batch_size 4 per portion
    provider.reply = lambda path, body, headers: ((500, {"error": {"message": "down"}}) if len(provider.requests) == 3
                                                  else openai_reply(body))
    texts = [f"text {i}" for i in range(10)]
    with pytest.raises(EmbeddingError, match="HTTP 500"):
        CachedEmbedder(openai, tmp_path).embed(texts)
    # The provider failed on the third portion: the first two are on disk, and only the rest is sent again.
    provider.reply = provider.default_reply
    rerun = CachedEmbedder(openai, tmp_path)
    np.testing.assert_array_equal(rerun.embed(texts), expected(texts))
    assert (rerun.hits, rerun.misses) == (8, 2) and provider.inputs()[3:] == [texts[8:]]


def test_cache_is_keyed_by_identity(provider, openai, tmp_path, monkeypatch):
    CachedEmbedder(openai, tmp_path).embed(["a"])
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    other_model = OpenAIEmbedder(f"{provider.base}/v1", "other-model", api_key_env="TEST_EMBED_KEY")
    CachedEmbedder(other_model, tmp_path).embed(["a"])
    assert len(provider.requests) == 2
    files = sorted(p.name for p in tmp_path.glob("*.sqlite3"))
    assert len(files) == 2
    assert_no_key(*files, *(p.read_bytes().decode("latin-1") for p in tmp_path.iterdir()))


def test_cache_refuses_a_file_of_another_identity(tmp_path):
    cache = CachedEmbedder(FeatureHashEmbedder(8), tmp_path)
    other = CachedEmbedder(FeatureHashEmbedder(16), tmp_path)
    other.path.unlink()
    cache.path.rename(other.path)
    with pytest.raises(EmbeddingError, match="belongs to 'feature-hash/8'"):
        CachedEmbedder(FeatureHashEmbedder(16), tmp_path)


_WRITER = """
import sys
from pathlib import Path
from rqsweep.engine.embed import CachedEmbedder, FeatureHashEmbedder
dimensions, start, stop, step = map(int, sys.argv[2:6])
cache = CachedEmbedder(FeatureHashEmbedder(dimensions), Path(sys.argv[1]))
for begin in range(start, stop, step):
    cache.embed([f"text {i} ΟΔΟΣ" for i in range(begin, begin + step)])
print("done", flush=True)
"""


def writer(cache_dir: Path, dimensions: int, start: int, stop: int, step: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [str(cache_dir), *map(str, (dimensions, start, stop, step))]
    return subprocess.Popen([sys.executable, "-c", _WRITER, *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cache_shared_by_two_processes_at_once(tmp_path):
    # Overlapping ranges, written concurrently, from a cache file none has created yet (SQLite does not wait
    # for the lock that turns a new file to WAL mode: six processes at once make that race likely).
    procs = [writer(tmp_path, 64, start, start + 3000, 100) for start in range(0, 6001, 1200)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    texts = [f"text {i} ΟΔΟΣ" for i in range(9000)]
    cache = CachedEmbedder(FeatureHashEmbedder(64), tmp_path)
    np.testing.assert_array_equal(cache.embed(texts), FeatureHashEmbedder(64).embed(texts))
    assert (cache.hits, cache.misses) == (9000, 0)


def test_cache_survives_a_kill_mid_write(tmp_path):
    # Wide vectors make each committed batch 16 MB, so the kill often lands inside a write.
    proc = writer(tmp_path, 4096, 0, 10**7, 1000)  # writes until killed
    deadline = time.monotonic() + 60
    while stored_rows(tmp_path) < 2000 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    (cache_file,) = tmp_path.glob("*.sqlite3")
    with closing(sqlite3.connect(cache_file)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    stored = stored_rows(tmp_path)
    assert stored >= 2000 and stored % 1000 == 0  # whole batches only
    texts = [f"text {i} ΟΔΟΣ" for i in range(stored + 3000)]
    cache = CachedEmbedder(FeatureHashEmbedder(4096), tmp_path)
    np.testing.assert_array_equal(cache.embed(texts), FeatureHashEmbedder(4096).embed(texts))
    assert cache.hits == stored


def stored_rows(cache_dir: Path) -> int:
    files = list(cache_dir.glob("*.sqlite3"))
    if not files:
        return 0
    try:
        with closing(sqlite3.connect(files[0], timeout=5)) as conn:
            return conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    except sqlite3.OperationalError:  # tables not created yet
        return 0
