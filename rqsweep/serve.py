"""`rqsweep serve CONFIG`: the embedded engine behind the subset of SOAT's HTTP API that rqsweep uses.

Routes: login, projects, documents (create, list per project, delete), memory stores, memories (create, and
list per project), knowledge search with `signals`, embeddings, and `/health`. Errors use SOAT's body
`{"error": {"code", "message", "meta"?}}` and status codes. Every POST refuses a field its route does not take, as SOAT does: 400 `VALIDATION_FAILED`
"Unknown field(s): a, b" with `error.meta.unknownFields`. Knob values the server cannot use fall back to the
defaults silently, as SOAT's do. Callers are authenticated before their request body is read, and bodies over
`MAX_BODY_BYTES` are refused unread (413). For tests and demos: seeded fault injection (500, 429 with
Retry-After, slow answers, dropped connections), a frozen clock, `--die-after N` searches, and `--old-server`:
SOAT v0.28.0, the newest public release: pure cosine ranking with `min_score` applied after the top-`limit`
cut, `memory_ids`, no `tags` filter and no `include_*` flags, results without `signals` naming the memory
`entry_id`; memory containers at `/api/v1/memories {project_id, name, description?, tags?}`, entries at
`/api/v1/memory-entries {memory_id, content, tags: [string], duplicate_threshold?}` (the near-duplicate
threshold is each entry's, default 0.95); unknown routes: 404 in plain text.

The stdlib's ThreadingHTTPServer is enough here: the work per request is the engine's, not the server's,
and it keeps the test suite free of another dependency.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import math
import os
import random
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from rqsweep.backends import BACKENDS
from rqsweep.backends.embedded_config import EmbeddedConfig
from rqsweep.backends.http.auth import LOGIN_PATH
from rqsweep.backends.http.mapping import SEARCH_PATH
from rqsweep.backends.http.probe import HEALTH_PATH
from rqsweep.config import Chunking, JobConfig, load_config
from rqsweep.corpus import load_corpus
from rqsweep.golden import load_golden
from rqsweep.engine.index import clamp_limit
from rqsweep.errors import RqsweepError
from rqsweep.knobs import DEFAULT_RRF_K, KNOBS, Knobs
from rqsweep.soat_store import DUPLICATE_THRESHOLD, Filters, Found, SoatStore, frozen_clock, system_clock
from rqsweep.progress import Progress

MODERN_FIELDS = {"project_id", "query", "limit", *KNOBS, "tags",
                 "memory_store_ids", "document_paths", "document_ids", "include_documents", "include_memories"}
# Releases before the hybrid ranking: no rrf_k, recency, tags or include flags; older names for the rest.
OLD_FIELDS = {"project_id", "query", "limit", "min_score", "memory_ids", "document_paths", "document_ids"}
_DOCUMENT_FIELDS = {"project_id", "content", "path", "title", "tags", "metadata", "chunk_strategy", "chunk_size",
                    "chunk_overlap"}
# The fields each POST route takes; any other is refused (400, VALIDATION_FAILED).
_EMBEDDINGS_PATH = "/api/v1/embeddings"
MODERN_POST_FIELDS = {
    SEARCH_PATH: MODERN_FIELDS,
    _EMBEDDINGS_PATH: {"input", "inputs"},
    "/api/v1/projects": {"name"},
    "/api/v1/documents": _DOCUMENT_FIELDS,
    "/api/v1/memory-stores": {"project_id", "name", "tags", "duplicate_threshold", "supersede_threshold"},
    "/api/v1/memories": {"memory_store_id", "content", "tags"},
}
# v0.28.0's request schemas (rest/openapi/v1/*.yaml): the near-duplicate threshold is an entry's, not its container's.
OLD_POST_FIELDS = {
    SEARCH_PATH: OLD_FIELDS,
    _EMBEDDINGS_PATH: {"input", "inputs"},
    "/api/v1/projects": {"name"},
    "/api/v1/documents": _DOCUMENT_FIELDS | {"filename"},
    "/api/v1/memories": {"project_id", "name", "description", "tags"},
    "/api/v1/memory-entries": {"memory_id", "content", "source_type", "tags", "metadata", "duplicate_threshold"},
}
FAULT_KINDS = ("500", "429", "slow", "drop")
# Asked for by name only: SOAT with its embedding provider down, failing each search after the provider's timeouts;
# v0.28.0 (--old-server) stores what it writes then without an embedding, and answers as usual.
EMBEDDER_FAULT = "embedder"
# Asked for by name only: v0.28.0's database dying during a document write, which it makes without a transaction:
# the document's row stays, without its chunks, and the answer is a 500.
TORN_FAULT = "torn-document"
# The writes each fault changes on v0.28.0 (--old-server), rather than answering in their place.
OLD_WRITE_FAULTS = {EMBEDDER_FAULT: {"/api/v1/documents", "/api/v1/memory-entries"}, TORN_FAULT: {"/api/v1/documents"}}
OPAQUE_500 = "Internal Server Error"  # v0.28.0's message on any unexpected error (INTERNAL_ERROR, 500)
DOCUMENTS_PATH = "/api/v1/documents"
PUBLIC_ROUTES = {("POST", LOGIN_PATH), ("GET", HEALTH_PATH)}  # every other route needs a bearer token
# Searches and seeding writes are a few kB; a document beyond this is refused (413) like any oversized body.
MAX_BODY_BYTES = 1 << 20

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An answer in SOAT's error shape."""

    def __init__(self, status: int, code: str, message: str, meta: dict | None = None, plain: bool = False):
        super().__init__(message)
        self.status, self.code, self.meta, self.plain = status, code, meta, plain

    def body(self) -> dict | str:
        """SOAT's JSON error body, or plain text (`plain`: what a release's router answers on its own)."""
        if self.plain:
            return str(self)
        error = {"code": self.code, "message": str(self)}
        if self.meta is not None:
            error["meta"] = self.meta
        return {"error": error}


def _invalid(message: str, **meta) -> ApiError:
    return ApiError(400, "VALIDATION_FAILED", message, meta or None)


@dataclass
class Faults:
    """A seeded share of requests answered badly, on the search route unless `all_routes`; the `first` such
    requests all are (to test a client's first contact)."""

    rate: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    retry_after: int = 1
    slow_seconds: float = 2.0
    all_routes: bool = False
    first: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def draw(self, path: str) -> str | None:
        if not (self.all_routes or path == SEARCH_PATH):
            return None
        with self._lock:
            if self.first > 0:
                self.first -= 1
                return self._rng.choice(self.kinds)
            return self._rng.choice(self.kinds) if self.rate > 0 and self._rng.random() < self.rate else None


@dataclass
class Accounts:
    """Who may call: one admin login, and optional `sk_` API keys (each maybe confined to one project)."""

    username: str = "admin"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12), repr=False)
    api_keys: dict[str, str | None] = field(default_factory=dict, repr=False)  # key -> project id or None
    _sessions: set[str] = field(default_factory=set, repr=False)

    def login(self, username: object, password: object) -> str:
        if username != self.username or not secrets.compare_digest(str(password), self.password):
            raise ApiError(401, "UNAUTHORIZED", "invalid username or password")
        token = "tok_" + secrets.token_urlsafe(24)
        self._sessions.add(token)
        return token

    def caller(self, header: str | None) -> tuple[bool, str | None]:
        """(is admin, confining project) for an Authorization header; 401 otherwise."""
        token = header[7:] if header and header.startswith("Bearer ") else None
        if token in self._sessions:
            return True, None
        if token is not None and token in self.api_keys:
            return False, self.api_keys[token]
        raise ApiError(401, "UNAUTHORIZED", "missing or invalid bearer token")


def _knobs(body: dict, old: bool) -> Knobs:
    """SOAT's knob parsing: a value it cannot use silently becomes the default."""
    def number(name: str) -> float | None:
        v = body.get(name)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    default_k = _env_number("KNOWLEDGE_RRF_K", DEFAULT_RRF_K, lambda v: v >= 1 and v == int(v))
    default_h = _env_number("KNOWLEDGE_RECENCY_HALF_LIFE_DAYS", 0.0, lambda v: v >= 0)
    if old:
        floor = number("min_score")
        return Knobs(int(default_k), floor if floor is not None and 0 <= floor <= 1 else None, default_h)
    k, floor, h = (number(knob) for knob in KNOBS)
    return Knobs(int(k) if k is not None and k >= 1 and k == int(k) else int(default_k),
                 floor if floor is not None and 0 <= floor <= 1 else None,
                 h if h is not None and h >= 0 else default_h)


def _env_number(name: str, default: float, valid: Callable[[float], bool]) -> float:
    try:
        value = float(os.environ[name])
    except (KeyError, ValueError):
        return default
    return value if math.isfinite(value) and valid(value) else default


def _refuse_unknown(body: dict, allowed: set[str]) -> None:
    """v0.28.0's answer to fields its request schema does not declare, named in the order they were sent."""
    unknown = [k for k in body if k not in allowed]
    if unknown:
        raise _invalid(f"Unknown field(s): {', '.join(unknown)}", unknownFields=unknown)


def _strings(body: dict, name: str) -> list[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid(f"{name} must be an array of strings")
    return value


def _tags(body: dict) -> dict[str, str]:
    tags = body.get("tags")
    if tags is None:
        return {}
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        raise _invalid("tags must be an object of string values")
    return tags


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SoatServer:
    """The store behind an HTTP server; `start`/`stop` it, possibly several times on the same port."""

    def __init__(self, store: SoatStore, accounts: Accounts, *, old_server: bool = False, faults: Faults | None = None,
                 die_after: int | None = None, version: str | None = None):
        self.store, self.accounts, self.old_server, self.version = store, accounts, old_server, version
        self.faults = faults or Faults()
        self.die_after = die_after
        self.searches = 0
        self.dead = False
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        assert self._http is not None
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def loopback_only(self) -> bool:
        """Whether only this machine can connect (the address listened on is a loopback one)."""
        assert self._http is not None
        return ipaddress.ip_address(self._http.server_address[0]).is_loopback

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen (port 0: any free port) and serve in a background thread; returns the base URL."""
        self.dead = False
        self._http = ThreadingHTTPServer((host, port), _handler(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="rqsweep-serve", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop as a killed server would: refuse new connections, drop requests on kept-alive ones."""
        self.dead = True
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    # --- routes -------------------------------------------------------------------------------------

    def authenticate(self, method: str, path: str, authorization: str | None) -> tuple[bool, str | None] | None:
        """Who calls, from the headers alone: (is admin, confining project), or None on a public route;
        401 otherwise."""
        return None if (method, path) in PUBLIC_ROUTES else self.accounts.caller(authorization)

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: object,
               caller: tuple[bool, str | None] | None, write_fault: str | None = None) -> tuple[int, object]:
        """Answer one request from `caller`, as `authenticate` found it; `write_fault`: one of `OLD_WRITE_FAULTS`
        befalls this write."""
        if (method, path) == ("POST", LOGIN_PATH):
            body = self._object(body)
            token = self.accounts.login(body.get("username"), body.get("password"))
            return 200, {"id": "usr_000001", "username": self.accounts.username, "role": "admin", "token": token}
        if (method, path) == ("GET", HEALTH_PATH):
            return 200, {"status": "ok"} | ({"version": self.version} if self.version else {})
        assert caller is not None, f"{method} {path} is a public route without an answer"
        admin, confined = caller
        if method == "DELETE" and path.startswith(DOCUMENTS_PATH + "/"):
            return self._delete_document(path.removeprefix(DOCUMENTS_PATH + "/"), confined)
        routes = {
            ("POST", "/api/v1/projects"): self._create_project,
            ("GET", "/api/v1/projects"): self._list_projects,
            ("POST", "/api/v1/documents"): self._create_document,
            ("GET", "/api/v1/documents"): self._list_documents,
            ("POST", SEARCH_PATH): self._search,
            ("POST", _EMBEDDINGS_PATH): self._embeddings,
        }
        if self.old_server:  # a memory is a container of entries
            routes |= {("POST", "/api/v1/memories"): self._create_memory_store,
                       ("GET", "/api/v1/memories"): self._list_memory_stores,
                       ("POST", "/api/v1/memory-entries"): self._create_memory_entry}
        else:
            routes |= {("POST", "/api/v1/memory-stores"): self._create_memory_store,
                       ("GET", "/api/v1/memory-stores"): self._list_memory_stores,
                       ("POST", "/api/v1/memories"): self._create_memory}
        route = routes.get((method, path))
        if route is None:
            raise ApiError(404, "NOT_FOUND", "Not Found" if self.old_server else f"no route {method} {path}",
                           plain=self.old_server)
        if method == "GET":
            body = {k: v[0] for k, v in query.items()}
        body = self._object(body)
        if method == "POST":
            _refuse_unknown(body, (OLD_POST_FIELDS if self.old_server else MODERN_POST_FIELDS)[path])
        return route(body, admin, confined) if write_fault is None else route(body, admin, confined, write_fault)

    @staticmethod
    def _object(body: object) -> dict:
        if not isinstance(body, dict):
            raise _invalid("the request body must be a JSON object")
        return body

    def _project(self, body: dict, confined: str | None, required: bool = True) -> str | None:
        project_id = body.get("project_id")
        if project_id is None and not required:
            return confined
        if not isinstance(project_id, str) or project_id not in self.store.projects:
            raise _invalid(f"project_id {project_id!r} does not name a project")
        if confined is not None and project_id != confined:
            raise ApiError(403, "API_KEY_PROJECT_SCOPE", "this API key is confined to another project")
        return project_id

    def _create_project(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        if not admin:
            raise ApiError(403, "FORBIDDEN", "creating a project needs an admin")
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid("name is required")
        return 201, {"id": self.store.create_project(name), "name": name}

    def _list_projects(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        return 200, {"data": [{"id": p, "name": n} for p, n in self.store.projects.items()
                              if confined is None or p == confined]}

    def _create_document(self, body: dict, admin: bool, confined: str | None,
                         fault: str | None = None) -> tuple[int, object]:
        project_id = self._project(body, confined)
        content = body.get("content")
        if not isinstance(content, str) or not content:
            raise _invalid("content is required")
        strategy = body.get("chunk_strategy", "whole")
        if strategy not in ("whole", "size"):
            raise _invalid(f"chunk_strategy {strategy!r} is not supported here (whole, size)")
        size, overlap = body.get("chunk_size", 1000), body.get("chunk_overlap", 200)
        if not (isinstance(size, int) and isinstance(overlap, int) and 0 <= overlap < size):
            raise _invalid("chunk_size and chunk_overlap must be integers with 0 <= chunk_overlap < chunk_size")
        doc = self.store.create_document(project_id, content, str(body.get("path") or ""), str(body.get("title") or ""),
                                         _tags(body), body.get("metadata") or {}, Chunking(strategy, size, overlap),
                                         embedded=fault != EMBEDDER_FAULT, chunked=fault != TORN_FAULT)
        if fault == TORN_FAULT:
            raise ApiError(500, "INTERNAL_ERROR", OPAQUE_500)
        return 201, {"id": doc.id, "project_id": project_id, "path": doc.path, "title": doc.title, "tags": doc.tags,
                     "chunks": len(doc.chunks), "created_at": _iso(doc.created_at)}

    def _delete_document(self, doc_id: str, confined: str | None) -> tuple[int, None]:
        doc = self.store.documents.get(doc_id)
        if doc is None:
            raise ApiError(404, "RESOURCE_NOT_FOUND", "Document not found")
        self._project({"project_id": doc.project_id}, confined)
        self.store.delete_document(doc_id)
        return 204, None

    def _list_documents(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        docs = self.store.project_documents(self._project(body, confined))
        return 200, {"data": [{"id": d.id, "path": d.path, "title": d.title} for d in docs]}

    def _create_memory_store(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        project_id = self._project(body, confined)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid("name is required")
        thresholds = {k: body[k] for k in ("duplicate_threshold", "supersede_threshold")
                      if isinstance(body.get(k), (int, float))}
        store = self.store.create_memory_store(project_id, name, _tags(body), **thresholds)
        return 201, {"id": store.id, "project_id": project_id, "name": name}

    def _list_memory_stores(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        stores = self.store.project_stores(self._project(body, confined))
        return 200, {"data": [{"id": s.id, "name": s.name} for s in stores]}

    def _create_memory(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        return self._write_memory(body, confined, "memory_store_id", _tags(body))

    def _create_memory_entry(self, body: dict, admin: bool, confined: str | None,
                             fault: str | None = None) -> tuple[int, object]:
        tags = body.get("tags")
        if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            raise _invalid("tags must be an array of strings")
        threshold = body.get("duplicate_threshold", DUPLICATE_THRESHOLD)
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
            raise _invalid("duplicate_threshold must be a number from 0 to 1")
        # The release searches no entry tags, so they are echoed and kept nowhere else.
        status, answer = self._write_memory(body, confined, "memory_id", {}, threshold, fault != EMBEDDER_FAULT)
        return status, answer | {"tags": tags or []}

    def _write_memory(self, body: dict, confined: str | None, container: str, tags: dict[str, str],
                      duplicate_threshold: float | None = None, embedded: bool = True) -> tuple[int, dict]:
        """A memory (an entry, in older releases) written into the container `body[container]` names; skipped
        as a near-duplicate at `duplicate_threshold` (None: the container's)."""
        store = self.store.stores.get(body.get(container))
        if store is None:
            raise _invalid(f"{container} {body.get(container)!r} does not name a memory container")
        self._project({"project_id": store.project_id}, confined)
        content = body.get("content")
        if not isinstance(content, str) or not content:
            raise _invalid("content is required")
        action, memory = self.store.create_memory(store.id, content, tags, duplicate_threshold=duplicate_threshold,
                                                  embedded=embedded)
        return (201 if action == "created" else 200), {"id": memory.id, "action": action, container: store.id}

    def _embeddings(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        """The store's embedder's vectors: `{embedding}` for `input`, `{embeddings}` for `inputs`."""
        single, batch = body.get("input"), _strings(body, "inputs")
        if not isinstance(single, str) and not batch:
            raise _invalid("At least one of `input` (string) or `inputs` (string[]) is required.")
        answer = {}
        if isinstance(single, str):
            answer["embedding"] = self.store.embedder.embed([single])[0].tolist()
        if batch:
            answer["embeddings"] = self.store.embedder.embed(batch).tolist()
        return 200, answer

    def _search(self, body: dict, admin: bool, confined: str | None) -> tuple[int, object]:
        query = body.get("query")
        if query is not None and not isinstance(query, str):
            raise _invalid("query must be a string")
        stores = _strings(body, "memory_ids" if self.old_server else "memory_store_ids")
        filters = Filters(_tags(body), stores, _strings(body, "document_paths"), _strings(body, "document_ids"))
        for flag in ("include_documents", "include_memories"):
            if not isinstance(body.get(flag, True), bool):
                raise _invalid(f"{flag} must be a boolean")
            setattr(filters, flag, body.get(flag, True))
        if not (filters.include_documents or filters.include_memories):
            raise _invalid("include_documents and include_memories cannot both be false")
        if self.old_server:
            filters.include_memories = stores is not None  # older releases search memories only when named
        if not (query or filters.tags or stores or filters.document_paths or filters.document_ids):
            raise _invalid("give a query, tags, memory stores, document paths or document ids")
        project_id = self._project(body, confined, required=False)
        found = self.store.search(project_id, query or "", _knobs(body, self.old_server),
                                  clamp_limit(body.get("limit")), filters, pure_cosine=self.old_server)
        return 200, {"results": [self._result(f) for f in found]}

    def _result(self, f: Found) -> dict:
        r = f.result
        out = {"source_type": r.source_type, "content": r.content, "score": r.score,
               "similarity_score": r.similarity_score if math.isfinite(r.similarity_score) else None}
        if not self.old_server:
            out["signals"] = r.signals
        if f.document is not None:
            d = f.document
            out |= {"document_id": d.id, "chunk_id": f.chunk_id, "path": d.path, "title": d.title, "tags": d.tags,
                    "metadata": d.metadata, "created_at": _iso(d.created_at), "updated_at": _iso(d.created_at)}
        else:
            m, s = f.memory, f.store
            ids = {"entry_id": m.id, "memory_id": s.id} if self.old_server else {"memory_id": m.id,
                                                                                  "memory_store_id": s.id}
            out |= ids | {"memory_store_name": s.name, "tags": m.tags, "created_at": _iso(m.created_at),
                          "updated_at": _iso(m.updated_at)}
        return out

    def count_search(self) -> bool:
        """Count a search; False once the server should be dead (`die_after`)."""
        with self._lock:
            self.searches += 1
            if self.die_after is not None and self.searches > self.die_after and not self.dead:
                self.dead = True
                threading.Thread(target=self.stop, daemon=True).start()
            return not self.dead


def _handler(server: SoatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive
        disable_nagle_algorithm = True  # headers and body go out in two writes: Nagle would hold the second

        def log_message(self, format: str, *args: object) -> None:  # requests are not logged
            pass

        def date_time_string(self, timestamp: float | None = None) -> str:
            # The Date header tells clients the server's clock (replay reads memory ages against it).
            return formatdate(server.store.clock().timestamp(), usegmt=True)

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (BrokenPipeError, ConnectionResetError) as exc:
                # The client gave up (its timeout, an interrupted sweep): its loss, not the server's.
                log.debug("client %s:%s went away: %s", *self.client_address[:2], exc)
                self.close_connection = True

        def _drop(self) -> None:
            self.close_connection = True

        def _answer(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
            plain = isinstance(payload, str)
            data = b"" if payload is None else payload.encode() if plain else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8" if plain else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _content_length(self) -> int | None:
            """The announced body size; None when it cannot be trusted (malformed, negative, chunked)."""
            text = self.headers.get("Content-Length", "0").strip()
            if "Transfer-Encoding" in self.headers or not (text.isascii() and text.isdigit()):
                return None
            return int(text)

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            if server.dead:
                return self._drop()
            # The caller and the body's size are checked before the body is read: an oversized body is never
            # read, a stranger's at most skipped, neither parsed.
            length = self._content_length()
            try:
                if length is None:
                    raise _invalid("Content-Length must be a byte count (chunked bodies are not accepted)")
                caller = server.authenticate(method, url.path, self.headers.get("Authorization"))
                if length > MAX_BODY_BYTES:
                    raise ApiError(413, "PAYLOAD_TOO_LARGE", f"the request body has {length} bytes; at most "
                                                             f"{MAX_BODY_BYTES} are accepted")
            except ApiError as exc:
                if length is not None and length <= MAX_BODY_BYTES:
                    self.rfile.read(length)  # skipped, so the connection can carry the client's next request
                    return self._answer(exc.status, exc.body())
                return self._answer(exc.status, exc.body(), {"Connection": "close"})  # the body stays unread
            raw = self.rfile.read(length)
            if url.path == SEARCH_PATH and not server.count_search():
                return self._drop()
            fault = server.faults.draw(url.path)
            if fault == "drop":
                return self._drop()
            if fault == "500":
                return self._answer(500, ApiError(500, "INTERNAL_ERROR", "injected fault").body())
            if fault == "429":
                return self._answer(429, {"error": {"code": "RATE_LIMITED", "message": "injected fault"}},
                                    {"Retry-After": str(server.faults.retry_after)})
            write_fault = fault if server.old_server and url.path in OLD_WRITE_FAULTS.get(fault, ()) else None
            if fault == EMBEDDER_FAULT and write_fault is None:
                time.sleep(server.faults.slow_seconds)
                if server.old_server:  # v0.28.0 does not catch the failure: its catch-all answers
                    return self._answer(500, ApiError(500, "INTERNAL_ERROR", OPAQUE_500).body())
                return self._answer(502, ApiError(502, "AI_PROVIDER_ERROR", "embedding the query failed: the "
                                                  "embedding provider is unreachable (injected fault)").body())
            if fault == "slow":
                time.sleep(server.faults.slow_seconds)
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                return self._answer(400, _invalid("the request body is not valid JSON").body())
            try:
                status, payload = server.handle(method, url.path, parse_qs(url.query), body, caller, write_fault)
            except ApiError as exc:
                return self._answer(exc.status, exc.body())
            except Exception as exc:  # noqa: BLE001 - a server answers 500, as SOAT would, and keeps serving
                return self._answer(500, ApiError(500, "INTERNAL_ERROR", type(exc).__name__).body())
            self._answer(status, payload)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rqsweep serve", description=(
        "Serve the embedded engine over SOAT's HTTP API (login, projects, documents, memory stores, memories, "
        "knowledge search), for tests and demos. Loopback only unless --host says otherwise."))
    p.add_argument("config", type=Path, help="job config: its embedded backend settings (embedder, tie order) "
                   "and, with --preload, its corpus")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (default: loopback; any other draws a warning)")
    p.add_argument("--port", type=int, default=8080, help="port (0: any free port; default 8080)")
    p.add_argument("--username", default="admin", help="the admin login (default admin)")
    p.add_argument("--password-env", default="RQSWEEP_SERVE_PASSWORD",
                   help="environment variable holding the admin password (unset: a random one is printed)")
    p.add_argument("--api-key-env", help="environment variable holding an accepted sk_ API key")
    p.add_argument("--preload", type=Path, metavar="IDS_JSON",
                   help="load the config's corpus (memory ages included) and write its key -> id map here")
    p.add_argument("--clock", help="freeze the server's clock at this ISO time (default: the real clock)")
    p.add_argument("--old-server", action="store_true",
                   help="behave like SOAT v0.28.0, before the hybrid ranking: pure cosine, min_score after the cut, "
                        "memory_ids, entry_id, no tags, include flags or signals, memory containers at /memories")
    p.add_argument("--server-version", help="the version GET /health states (default: none)")
    p.add_argument("--fault-rate", type=float, default=0.0, help="share of requests answered badly (0..1)")
    p.add_argument("--fault-kinds", default=",".join(FAULT_KINDS),
                   help=f"comma-separated of {', '.join(FAULT_KINDS)} (the default: all of them), {EMBEDDER_FAULT} "
                        "(a search that fails as SOAT's does with its embedding provider down, after --slow-seconds; "
                        "with --old-server, a document or memory entry written then is stored without an "
                        f"embedding), {TORN_FAULT} (with --old-server: a document write that dies after storing "
                        "the document, before its chunks, answered 500)")
    p.add_argument("--fault-seed", type=int, default=0)
    p.add_argument("--fault-all-routes", action="store_true", help="faults on every route, not only search")
    p.add_argument("--fault-first", type=int, default=0, metavar="N",
                   help="answer the first N requests (on the faulted routes) badly, whatever the rate")
    p.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds on an injected 429")
    p.add_argument("--slow-seconds", type=float, default=2.0, help="delay of an injected slow answer")
    p.add_argument("--die-after", type=int, metavar="N", help="stop serving after N searches (to test --resume)")
    return p


def _engine(config: JobConfig) -> EmbeddedConfig:
    """The config's embedded engine settings; a config for another backend gets the embedded defaults."""
    return config.backend if isinstance(config.backend, EmbeddedConfig) else EmbeddedConfig()


def build_server(config: JobConfig, *, clock: datetime | None = None, accounts: Accounts | None = None,
                 old_server: bool = False, faults: Faults | None = None, die_after: int | None = None,
                 version: str | None = None) -> SoatServer:
    """A server over an empty store with the config's engine settings (embedded defaults otherwise)."""
    from rqsweep.backends.embedded import build_embedder

    engine = _engine(config)
    store = SoatStore(build_embedder(engine), frozen_clock(clock) if clock else system_clock, engine.tie_order)
    return SoatServer(store, accounts or Accounts(), old_server=old_server, faults=faults, die_after=die_after,
                      version=version)


def main(argv: list[str]) -> int:
    """Run the server until interrupted; prints its URL (and a generated password) on stdout."""
    args = _parser().parse_args(argv)
    kinds = tuple(k.strip() for k in args.fault_kinds.split(",") if k.strip())
    named = (*FAULT_KINDS, EMBEDDER_FAULT, TORN_FAULT)
    if not kinds or set(kinds) - set(named) or not 0 <= args.fault_rate <= 1 or args.fault_first < 0:
        print(f"rqsweep serve: --fault-kinds takes {', '.join(named)}; --fault-rate 0..1; "
              "--fault-first >= 0", file=sys.stderr)
        return 2
    password = os.environ.get(args.password_env)
    accounts = Accounts(args.username, password) if password else Accounts(args.username)
    if args.api_key_env and os.environ.get(args.api_key_env):
        accounts.api_keys[os.environ[args.api_key_env]] = None
    try:
        clock = datetime.fromisoformat(args.clock) if args.clock else None
        if clock is not None and clock.tzinfo is None:
            clock = clock.replace(tzinfo=timezone.utc)
        config = load_config(args.config, BACKENDS)
        server = build_server(config, clock=clock, accounts=accounts, old_server=args.old_server,
                              faults=Faults(args.fault_rate, kinds, args.fault_seed, args.retry_after,
                                            args.slow_seconds, args.fault_all_routes, args.fault_first),
                              die_after=args.die_after, version=args.server_version)
        if args.preload:
            # The config's corpus, or the one its golden set carries (SOAT's golden.json, a BEIR folder); a golden
            # set without one is an InputError saying so.
            corpus = (load_corpus(config.corpus, config.corpus_files) if config.corpus is not None else
                      load_golden(config.golden, None, config.golden_rules, config.path).corpus)
            loaded = Progress(len(corpus.documents) + len(corpus.memories), "rqsweep serve preload",
                              unit="documents and memories")
            ids = server.store.preload(corpus, _engine(config).chunking, config.name, loaded)
            args.preload.write_text(json.dumps(ids, indent=2) + "\n")
        url = server.start(args.host, args.port)
    except RqsweepError as exc:
        print(f"rqsweep serve: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ValueError, OSError) as exc:  # a malformed --clock; a port in use or an unwritable --preload file
        print(f"rqsweep serve: {exc}", file=sys.stderr)
        return 2
    if not server.loopback_only:  # said before the URL, which whoever started the server waits for
        print(f"rqsweep serve: warning: listening on {args.host}, reachable from other machines; this is a test "
              "server (injected faults, a printed password): use the default 127.0.0.1 unless that is meant",
              file=sys.stderr, flush=True)
    print(f"listening on {url}", flush=True)
    if not password:
        print(f"login: {accounts.username} / {accounts.password}", flush=True)
    try:
        while not server.dead:
            time.sleep(0.2)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
