"""Shared setup of the HTTP backend tests: a small corpus, job configs, and `rqsweep serve` in process."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import polars as pl
import pyarrow.parquet as pq
import yaml

from rqsweep.backends import BACKENDS
from rqsweep.backends.http import client as http_client
from rqsweep.config import load_config
from rqsweep.serve import Accounts, Faults, SoatServer, build_server

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = ROOT / "configs" / "handbook"
CLOCK = datetime(2026, 1, 5, 12, 0, 0, tzinfo=timezone.utc)  # whole second: the Date header is exact
PASSWORD = "pw-Zq8-never-in-output"  # distinctive, so that a leak is found by grepping
SWEEP = {  # 8 settings, the baseline among them
    "strategy": "grid",
    "knobs": {"rrf_k": {"values": [2, 60]}, "min_similarity": {"values": [None, 0.3]},
              "recency_half_life_days": {"values": [0, 7]}},
}
WIDE_SWEEP = {  # 48 settings: cheap in replay mode only
    "strategy": "grid",
    "knobs": {"rrf_k": {"values": [1, 3, 10, 30, 60, 200]},
              "min_similarity": {"values": [None, 0.1, 0.3, 0.5]},
              "recency_half_life_days": {"values": [0, 7]}},
}


def write_corpus(folder: Path, n_documents: int = 8, n_memories: int = 12, ages: bool = False) -> None:
    """A slice of the handbook corpus (ages dropped unless asked) and the golden queries it can answer."""
    corpus = yaml.safe_load((HANDBOOK / "corpus.yaml").read_text())
    docs, mems = corpus["documents"][:n_documents], corpus["memories"][:n_memories]
    if not ages:
        for m in mems:
            m.pop("age_days", None)
    keys = {d["key"] for d in docs} | {m["key"] for m in mems}
    golden = []
    for q in yaml.safe_load((HANDBOOK / "golden.yaml").read_text()):
        expected = [q["expected"]] if isinstance(q["expected"], str) else q["expected"]
        if all(k in keys for k in expected):
            golden.append(q)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.yaml").write_text(yaml.safe_dump({"documents": docs, "memories": mems}))
    (folder / "golden.yaml").write_text(yaml.safe_dump(golden[:20]))


def write_config(folder: Path, name: str, backend: dict, sweep: dict | None = None, **extra) -> Path:
    """A job config over the corpus in `folder`; `extra` keys replace the defaults (`workers`, ...)."""
    config = {
        "name": name, "corpus": "corpus.yaml", "golden": "golden.yaml", "backend": backend,
        "search": {"limit": 10}, "sweep": sweep or SWEEP,
        "baseline": {"rrf_k": 60, "min_similarity": None, "recency_half_life_days": 0},
        "workers": 1, "output_dir": "results",
    } | extra
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class QuietHandler(BaseHTTPRequestHandler):
    """A keep-alive request handler that logs nothing; `reply` sends one whole answer."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def reply(self, status: int, data: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Loopback:
    """An HTTP server on a free loopback port, answering with `handler` from a thread of its own until `close`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


EMBEDDED = {"kind": "embedded", "embedder": {"kind": "feature-hash", "dimensions": 1024},  # SOAT's eval stand-in: fast
            "chunking": {"strategy": "size", "chunk_size": 1000, "chunk_overlap": 200}}


def http_backend(url: str, **extra) -> dict:
    """An http backend section for the test server: seeding, fast retries, password from SOAT_PASSWORD."""
    return {"kind": "http", "base_url": url, "username": "admin", "seed": True, "max_in_flight": 4,
            "retries": 10, "backoff": 0.002, "timeout": 5, "max_consecutive_failures": 8} | extra


@contextlib.contextmanager
def serving(config: Path, *, faults: Faults | None = None, old_server: bool = False,
            clock: datetime = CLOCK) -> Iterator[SoatServer]:
    server = build_server(load_config(config, BACKENDS), clock=clock, accounts=Accounts("admin", PASSWORD), old_server=old_server,
                          faults=faults)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def comparable(grid: pl.DataFrame) -> pl.DataFrame:
    """A grid without what differs between runs and backends by design (ids, hashes, tie counts, the embedder's
    label: null over HTTP, where the server's embedder is its own)."""
    return grid.drop("run_id", "embedder", "config_sha256", "tie_sensitive", "numeric_sensitive").sort("setting_id", "slice")


def leaks(folder: Path, secrets: list[str]) -> list[str]:
    """Every place under `folder` where a secret shows: raw bytes, and decoded Parquet values and metadata."""
    found = []
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        texts = [path.read_bytes().decode("utf-8", "replace")]
        if path.suffix == ".parquet":
            texts.append(pl.read_parquet(path).write_ndjson())  # nested columns included
            texts.append(json.dumps({k.decode(): v.decode() for k, v in
                                     (pq.read_schema(path).metadata or {}).items()}))
        found += [f"{path}: {s[:6]}..." for s in secrets for t in texts if s in t]
    return found


class BackOffs:
    """Stands in for the HTTP client's `time` module: records each back-off sleep the client asks for, then sleeps.
    What a test then asserts is how many retries the client chose, which a loaded machine does not change."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        time.sleep(seconds)


def counted_back_offs(monkeypatch) -> BackOffs:
    """The back-off sleeps the HTTP client asks for, from now on in this test."""
    back_offs = BackOffs()
    monkeypatch.setattr(http_client, "time", back_offs)
    return back_offs
