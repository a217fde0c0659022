"""SOAT's search request and response: a body from knobs and scope, results to ranked ids.

Golden sets name what a hit is: a document id (any of its chunks counts) or a memory id. Within a
result list the identity SOAT fuses on is finer: the chunk id for documents, the memory id for memories.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping, Sequence

import numpy as np

from rqsweep.backends.http.client import RequestFailed
from rqsweep.errors import shown
from rqsweep.knobs import KNOBS, MIN_SIMILARITY, Knobs

SEARCH_PATH = "/api/v1/knowledge/search"


@dataclass(frozen=True)
class Dialect:
    """What a server calls things and which knobs it takes; `probe` finds out (older releases differ)."""

    min_similarity: str = MIN_SIMILARITY  # "min_score" before the hybrid ranking
    memory_store_ids: str = "memory_store_ids"  # "memory_ids" before
    memory_id: str = "memory_id"  # the result field naming the memory: "entry_id" before
    knobs: frozenset[str] = frozenset(KNOBS)
    include_flags: bool = True  # accepts include_documents / include_memories
    # Memory writes. Before the hybrid ranking a "memory" was the container, holding "entries".
    memory_containers: str = "/api/v1/memory-stores"  # create {project_id, name}; list ?project_id=
    memory_entries: str = "/api/v1/memories"  # create {<entry_container>: id, content, tags}
    entry_container: str = "memory_store_id"
    entry_tags_as_list: bool = False  # entry tags as ["key:value"] instead of {key: value}
    threshold_per_entry: bool = False  # duplicate_threshold goes with each entry, not on the container

    def renamed(self) -> dict[str, str]:
        """Modern name -> this server's, for the names that differ."""
        modern = Dialect()
        return {getattr(modern, f): getattr(self, f) for f in ("min_similarity", "memory_store_ids", "memory_id",
                                                               "memory_containers", "memory_entries",
                                                               "entry_container")
                if getattr(self, f) != getattr(modern, f)}


# The memory API of releases before the hybrid ranking (v0.28.0 and older).
OLD_MEMORY_API = {"memory_containers": "/api/v1/memories", "memory_entries": "/api/v1/memory-entries",
                  "entry_container": "memory_id", "entry_tags_as_list": True, "threshold_per_entry": True}


@dataclass(frozen=True)
class SearchScope:
    """The filters every search of a run carries, already in the server's ids."""

    project_id: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    memory_store_ids: tuple[str, ...] | None = None
    document_paths: tuple[str, ...] | None = None
    document_ids: tuple[str, ...] | None = None
    include_documents: bool = True
    include_memories: bool = True


def search_body(query: str, knobs: Knobs, limit: int, scope: SearchScope, dialect: Dialect) -> dict:
    """The JSON body of one search. Knobs the server does not take are left out (the caller checked
    that they sit at SOAT's defaults); `min_similarity` is left out when the floor is off."""
    body: dict = {"query": query, "limit": limit}
    if scope.project_id is not None:
        body["project_id"] = scope.project_id
    for knob, value in knobs.request().items():
        if knob in dialect.knobs:
            body[dialect.min_similarity if knob == MIN_SIMILARITY else knob] = value
    if scope.tags:
        body["tags"] = dict(scope.tags)
    if scope.memory_store_ids is not None:
        body[dialect.memory_store_ids] = list(scope.memory_store_ids)
    if scope.document_paths is not None:
        body["document_paths"] = list(scope.document_paths)
    if scope.document_ids is not None:
        body["document_ids"] = list(scope.document_ids)
    if dialect.include_flags:
        body["include_documents"] = scope.include_documents
        body["include_memories"] = scope.include_memories
    return body


class ResponseShapeError(RequestFailed):
    """A 200 answer that is not SOAT's search response; the message names what is missing."""


@dataclass(frozen=True)
class Hit:
    """One search result, reduced to what ranking and metrics need."""

    source_type: str  # "document" | "memory"
    target_id: str  # document id or memory id: what golden sets name
    item_id: str | None  # chunk id for documents (None if the server sends none), memory id for memories
    similarity: float | None  # raw cosine; None when absent or null
    vector: int | None  # 1-based position in the merged vector list (signals.vector)
    lexical: int | None  # 1-based position in the merged lexical list (signals.lexical)
    updated_at_ms: int | None
    score: float | None = None  # the server's final score: only its order is the contract

    @property
    def identity(self) -> tuple[str, str]:
        """What SOAT fuses on: (source type, chunk or memory id)."""
        return self.source_type, self.item_id or self.target_id


def _position(signals: dict, channel: str, where: str) -> int | None:
    value = signals.get(channel)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ResponseShapeError(f"search response: {where}.signals.{channel} = {shown(value)}, expected a 1-based "
                                 "position")
    return value


def _timestamp_ms(value: object, where: str) -> int | None:
    if value is None:
        return None
    try:
        return round(datetime.fromisoformat(str(value)).timestamp() * 1000)
    except ValueError:
        raise ResponseShapeError(f"search response: {where}.updated_at = {shown(value)} is not an ISO "
                                 "timestamp") from None


def _hit(row: object, i: int, dialect: Dialect) -> Hit:
    where = f"results[{i}]"
    if not isinstance(row, dict):
        raise ResponseShapeError(f"search response: {where} is {type(row).__name__}, expected an object")
    source_type = row.get("source_type")
    if source_type not in ("document", "memory"):
        raise ResponseShapeError(f"search response: {where}.source_type = {shown(source_type)}, expected "
                                 "'document' or 'memory'")
    id_field = "document_id" if source_type == "document" else dialect.memory_id
    target = row.get(id_field)
    if not isinstance(target, str) or not target:
        raise ResponseShapeError(f"search response: {where} is a {source_type} without `{id_field}` "
                                 f"(fields: {shown(sorted(row))})")
    chunk = row.get("chunk_id") if source_type == "document" else target
    similarity = row.get("similarity_score")
    if similarity is not None and (isinstance(similarity, bool) or not isinstance(similarity, (int, float))):
        raise ResponseShapeError(f"search response: {where}.similarity_score = {shown(similarity)}, expected a "
                                 "number")
    signals = row.get("signals")
    if signals is not None and not isinstance(signals, dict):
        raise ResponseShapeError(f"search response: {where}.signals = {shown(signals)}, expected an object")
    signals = signals or {}
    score = row.get("score")
    return Hit(
        source_type, target, chunk if isinstance(chunk, str) and chunk else None,
        None if similarity is None or not math.isfinite(similarity) else float(similarity),
        _position(signals, "vector", where), _position(signals, "lexical", where),
        _timestamp_ms(row.get("updated_at"), where),
        float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
    )


def parse_hits(payload: object, dialect: Dialect) -> list[Hit]:
    """`{"results": [...]}` -> hits, best first; `ResponseShapeError` names whatever is missing."""
    if not isinstance(payload, dict) or not isinstance(payload.get("results"), list):
        got = (f"an object with keys {shown(sorted(payload))}" if isinstance(payload, dict)
               else type(payload).__name__)
        raise ResponseShapeError(f"search response is not SOAT's shape: expected {{\"results\": [...]}}, got {got}")
    return [_hit(row, i, dialect) for i, row in enumerate(payload["results"])]


def positions_in_hits(hits: Sequence[Hit], expected: Sequence[tuple[str, str]]) -> np.ndarray:
    """(1, expected) 1-based position of each expected (source type, id)'s first slot; 0 when absent."""
    first: dict[tuple[str, str], int] = {}
    for position, hit in enumerate(hits, 1):
        first.setdefault((hit.source_type, hit.target_id), position)
    return np.array([[first.get(e, 0) for e in expected]], dtype=np.int64)


@dataclass(frozen=True)
class PreparedQuery:
    """A golden query with its expected items in the server's ids."""

    id: str
    slice: str
    text: str
    expected: tuple[tuple[str, str], ...]  # (source type, document or memory id)
