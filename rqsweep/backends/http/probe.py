"""Which knobs and field names a SOAT server accepts, found with a handful of requests before the sweep.

Releases before the hybrid ranking reject unknown request fields with 400 `VALIDATION_FAILED`, listing
them in `error.meta.unknownFields`; they call the floor `min_score`, the memory-store filter `memory_ids`
and a result's memory `entry_id`, return no `signals`, and search memories only when a memory filter is
given; v0.28.0, the newest public release, also ranks by cosine alone, has no `tags` filter, and keeps
memory containers at `/api/v1/memories` and their entries at `/api/v1/memory-entries`. The probe sends one
full modern request, renames or drops what the server rejects, and tries again. SOAT names no embedding
model: the probe asks its embeddings route for the vector of a fixed text and records its length and a
signature of it (`_embedder`). What it learns is recorded with the run (`ServerProfile.record`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

import numpy as np

from rqsweep import __version__
from rqsweep.backends.http.client import RequestFailed, SoatClient, backend_error
from rqsweep.backends.http.mapping import OLD_MEMORY_API, SEARCH_PATH, Dialect, SearchScope, search_body
from rqsweep.errors import BackendError
from rqsweep.knobs import KNOBS, MIN_SIMILARITY, RRF_K, Knobs

# Modern name -> the older release's name, for fields that were renamed rather than added.
_RENAMED = {MIN_SIMILARITY: "min_score", "memory_store_ids": "memory_ids"}
_INCLUDE_FLAGS = ("include_documents", "include_memories")
_MAX_PROBES = 4
# What replay reads from every result, beyond the ids.
REPLAY_FIELDS = ("signals", "similarity_score", "updated_at")
NOTHING_FOUND = "the probe query found nothing, so no result showed its fields"
HEALTH_PATH = "/health"
EMBEDDINGS_PATH = "/api/v1/embeddings"
_EMBEDDER_TEXT = "Which embedder is this? The quick brown fox jumps over the lazy dog."
_SIGNATURE_COMPONENTS = 8
MCP_PATH = "/mcp"
# MCP's handshake (JSON-RPC over streamable HTTP): SOAT's answer names the server's release in serverInfo.version.
_MCP_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "rqsweep", "version": __version__}}}
_MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}


@dataclass(frozen=True)
class ServerProfile:
    """What the probe learnt: names to use, knobs the server refused (with its answer), replay support."""

    dialect: Dialect
    rejected: dict[str, str] = field(default_factory=dict)  # knob -> the server's answer
    replay_missing: str | None = None  # why replay is impossible on this server, or None
    memory_filter_required: bool = False
    version: str | None = None  # as the server states it (MCP initialize, else GET /health), if it does
    embedder: str | None = None  # `N dims, signature` (see `_embedder`), None when the server does not tell

    @property
    def ranking(self) -> str:
        """What the accepted knobs imply: RRF fusion takes `rrf_k`; a server without it ranks by cosine."""
        return "hybrid" if RRF_K in self.dialect.knobs else "pure cosine"

    def record(self, base_url: str, mode: str) -> dict:
        """The profile kept with the run (run.json, Parquet metadata, report): see `backends.base`."""
        return {"backend": "http", "base_url": base_url, "version": self.version, "ranking": self.ranking,
                "knobs_accepted": sorted(self.dialect.knobs), "knobs_refused": dict(sorted(self.rejected.items())),
                "field_names": self.dialect.renamed(), "include_flags": self.dialect.include_flags,
                "signals": self.replay_missing is None, "mode": mode} | (
                    {"embedder": self.embedder} if self.embedder else {})

    def describe(self) -> str:
        names = [] if self.dialect == Dialect() else [
            f"{a} as {b}" for a, b in ((MIN_SIMILARITY, self.dialect.min_similarity),
                                       ("memory_store_ids", self.dialect.memory_store_ids),
                                       ("memory_id", self.dialect.memory_id)) if a != b]
        parts = [f"knobs accepted: {', '.join(sorted(self.dialect.knobs)) or 'none'}"]
        if names:
            parts.append("older field names: " + ", ".join(names))
        parts.append("replay possible" if self.replay_missing is None else f"no replay ({self.replay_missing})")
        return "; ".join(parts)


def _unknown_fields(exc: RequestFailed) -> list[str] | None:
    if exc.status != 400 or exc.code != "VALIDATION_FAILED":
        return None
    fields = exc.meta.get("unknownFields") if isinstance(exc.meta, dict) else None
    if isinstance(fields, list) and all(isinstance(f, str) for f in fields):
        return fields
    match = re.search(r"Unknown field\(s\):\s*(.+)$", str(exc))
    return [f.strip() for f in match.group(1).split(",")] if match else None


def _adapt(body: dict, dialect: Dialect, rejected: dict[str, str], unknown: list[str],
           answer: str, url: str) -> Dialect:
    """Rename or drop each field the server called unknown; anything else cannot be worked around."""
    for name in unknown:
        value = body.pop(name, None)
        modern = next((m for m, old in _RENAMED.items() if old == name), name)
        if name in _RENAMED and getattr(dialect, name) == name:
            body[_RENAMED[name]] = value
            dialect = replace(dialect, **{name: _RENAMED[name]})
        elif modern in KNOBS:
            rejected[modern] = answer
            dialect = replace(dialect, knobs=dialect.knobs - {modern})
        elif name in _INCLUDE_FLAGS:
            for flag in _INCLUDE_FLAGS:
                body.pop(flag, None)
            dialect = replace(dialect, include_flags=False)
        elif name == "tags":
            raise BackendError(f"SOAT at {url} has no tags filter in knowledge search ({answer}): remove "
                               "search.tags, or upgrade the server")
        else:
            raise BackendError(f"SOAT at {url} rejects the search field `{name}` ({answer}); rqsweep cannot "
                               "search without it")
    return dialect


def probe(client: SoatClient, query: str, scope: SearchScope) -> ServerProfile:
    """Send one full search (then adapted ones, each retried like any search) and report what the server takes."""
    dialect, rejected = Dialect(), {}
    body = search_body(query, Knobs(min_similarity=0.0), 5, scope, dialect)
    for _ in range(_MAX_PROBES):
        try:
            reply = client.request("POST", SEARCH_PATH, body, probing=True)
            break
        except RequestFailed as exc:
            unknown = _unknown_fields(exc)
            if not unknown:
                raise backend_error(f"probe search at {client.base_url}{SEARCH_PATH} failed: {exc}", exc) from None
            dialect = _adapt(body, dialect, rejected, unknown, str(exc), client.base_url)
    else:
        raise BackendError(f"SOAT at {client.base_url} kept rejecting the probe search's fields")
    older = dialect != Dialect()
    if older and dialect.memory_store_ids not in body:
        # The probe had no memory filter to send; an older release calls it memory_ids.
        dialect = replace(dialect, memory_store_ids=_RENAMED["memory_store_ids"])
    results = reply.body.get("results") if isinstance(reply.body, dict) else None
    if not isinstance(results, list):
        raise BackendError(f"SOAT at {client.base_url}: the probe search's answer is not {{\"results\": [...]}}; "
                           "is base_url a SOAT server?")
    memories = [r for r in results if isinstance(r, dict) and r.get("source_type") == "memory"]
    if older or any("entry_id" in r for r in memories):
        dialect = replace(dialect, memory_id="entry_id")
    if dialect.memory_store_ids == _RENAMED["memory_store_ids"]:
        dialect = replace(dialect, **OLD_MEMORY_API)  # the filter names containers: they are "memories"
    missing = _replay_missing(results)
    return ServerProfile(dialect, rejected, missing, memory_filter_required=older, version=_version(client),
                         embedder=_embedder(client))


def recheck_results(client: SoatClient, profile: ServerProfile, query: str, scope: SearchScope) -> ServerProfile:
    """When the probe found nothing (as before seeding), one search in the run's scope shows the results' fields."""
    if profile.replay_missing != NOTHING_FOUND:
        return profile
    body = search_body(query, Knobs(), 5, scope, profile.dialect)
    try:
        reply = client.request("POST", SEARCH_PATH, body)
    except RequestFailed as exc:
        raise backend_error(f"search at {client.base_url}{SEARCH_PATH} failed: {exc}", exc) from None
    results = reply.body.get("results") if isinstance(reply.body, dict) else None
    return replace(profile, replay_missing=_replay_missing(results if isinstance(results, list) else []))


def _version(client: SoatClient) -> str | None:
    """The version the server states: its MCP `initialize` answer's serverInfo.version (what SOAT releases state),
    else its health check's `version`; None when neither does. Either route may be missing or refuse the
    API's credentials: that only leaves the version unknown."""
    try:
        answer = client.request("POST", MCP_PATH, _MCP_INITIALIZE, probing=True, headers=_MCP_ACCEPT,
                                credentials_checked=False).body
    except RequestFailed:
        answer = None
    result = answer.get("result") if isinstance(answer, dict) else None
    info = result.get("serverInfo") if isinstance(result, dict) else None
    version = info.get("version") if isinstance(info, dict) else None
    if isinstance(version, str) and version:
        return version
    try:
        answer = client.request("GET", HEALTH_PATH, authenticated=False, probing=True).body
    except RequestFailed:
        return None
    version = answer.get("version") if isinstance(answer, dict) else None
    return version if isinstance(version, str) and version else None


def _embedder(client: SoatClient) -> str | None:
    """The server's embedder as what it makes of a fixed text: `N dims, <signature>`, the signature a hash of the
    places and signs of the vector's strongest components (another model puts them elsewhere; a float's last bits,
    which may differ between two machines running one model, do not move them). None when the server has no
    embeddings route or does not answer it with a vector."""
    try:
        answer = client.request("POST", EMBEDDINGS_PATH, {"input": _EMBEDDER_TEXT}, probing=True).body
    except RequestFailed:
        return None
    vector = answer.get("embedding") if isinstance(answer, dict) else None
    if not (isinstance(vector, list) and vector
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector)):
        return None
    values = np.asarray(vector, np.float64)
    strongest = sorted(np.argsort(-np.abs(values), kind="stable")[:_SIGNATURE_COMPONENTS])
    signature = ",".join(f"{'-' if values[i] < 0 else '+'}{i}" for i in strongest)
    return f"{len(vector)} dims, {hashlib.sha256(signature.encode()).hexdigest()[:12]}"


def _replay_missing(results: list) -> str | None:
    if not results:
        return NOTHING_FOUND
    for i, row in enumerate(results):
        if not isinstance(row, dict):
            return f"results[{i}] is not an object"
        absent = [f for f in REPLAY_FIELDS if f not in row]
        if row.get("source_type") == "document" and "chunk_id" not in row:
            absent.append("chunk_id")
        if absent:
            return f"results carry no {', '.join(absent)}"
    return None
