"""An in-memory SOAT: projects, documents, memory stores and memories, searched by the embedded engine.

What `rqsweep serve` serves. Rows keep insertion order per table, as a freshly loaded PostgreSQL table
does (an updated memory moves to the end, as an UPDATE's new tuple would). Each document is chunked
with its own strategy; the engine then indexes the chunks whole. Timestamps come from one clock, which
can be frozen so that a corpus seeded over HTTP has the ages (zero) of an embedded run. Releases
before the hybrid ranking rank by cosine alone (`pure_cosine`). Those releases store a row whose embedding
failed without one (`unembedded`): left out of the index, such rows come after every embedded one with a score
of 0, as v0.28.0 sorts a NULL distance last and scores it `1 - 1`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Mapping, Sequence

import numpy as np

from rqsweep.config import Chunking
from rqsweep.corpus import Corpus, Document, Memory, chunk_document, memory_updated_at
from rqsweep.engine.pgsort import TieOrder
from rqsweep.engine.cosine import cosine_distance
from rqsweep.engine.embed import Embedder
from rqsweep.engine.fusion import similarity_floor
from rqsweep.engine.index import Index, SearchResult
from rqsweep.scope import Scope
from rqsweep.knobs import Knobs

Clock = Callable[[], datetime]
DUPLICATE_THRESHOLD = 0.95  # SOAT's default: a new memory this similar to an existing one is skipped


@dataclass
class StoredDocument:
    id: str
    project_id: str
    content: str
    path: str
    title: str
    tags: dict[str, str]
    metadata: dict
    chunks: list[str]  # chunk texts, chunked with the document's own strategy
    created_at: datetime


@dataclass
class StoredMemory:
    id: str
    store_id: str
    content: str
    tags: dict[str, str]
    vector: np.ndarray
    created_at: datetime
    updated_at: datetime


@dataclass
class MemoryStore:
    id: str
    project_id: str
    name: str
    tags: dict[str, str]
    duplicate_threshold: float
    supersede_threshold: float | None


@dataclass
class Filters:
    """A search's filters in SOAT's ids (None: no such filter)."""

    tags: Mapping[str, str] = field(default_factory=dict)
    memory_store_ids: Sequence[str] | None = None
    document_paths: Sequence[str] | None = None
    document_ids: Sequence[str] | None = None
    include_documents: bool = True
    include_memories: bool = True


@dataclass(frozen=True)
class Found:
    """A search result with the stored rows it came from."""

    result: SearchResult
    document: StoredDocument | None
    memory: StoredMemory | None
    store: MemoryStore | None
    chunk_id: str | None


def _chunk_key(document_id: str, index: int) -> str:
    return f"{document_id}#{index}"


class SoatStore:
    """SOAT's data, thread-safe; indexes are rebuilt lazily after writes, one per project."""

    def __init__(self, embedder: Embedder, clock: Clock, tie_order: TieOrder = "postgres"):
        self.embedder, self.clock, self.tie_order = embedder, clock, tie_order
        self.projects: dict[str, str] = {}  # id -> name
        self.documents: dict[str, StoredDocument] = {}
        self.stores: dict[str, MemoryStore] = {}
        self.memories: dict[str, StoredMemory] = {}
        self.unembedded: set[str] = set()  # chunk keys and memory ids stored without an embedding
        self._counters: dict[str, int] = {}
        self._lock = threading.RLock()
        self._indexes: dict[str | None, Index] = {}

    def _new_id(self, prefix: str) -> str:
        self._counters[prefix] = self._counters.get(prefix, 0) + 1
        return f"{prefix}_{self._counters[prefix]:06d}"

    def create_project(self, name: str) -> str:
        with self._lock:
            project_id = self._new_id("proj")
            self.projects[project_id] = name
            return project_id

    def create_document(self, project_id: str, content: str, path: str = "", title: str = "",
                        tags: Mapping[str, str] | None = None, metadata: dict | None = None,
                        chunking: Chunking = Chunking("whole"), embedded: bool = True,
                        chunked: bool = True) -> StoredDocument:
        """`embedded=False`: its chunks are stored without an embedding; `chunked=False`: without its chunks, as a
        write cut off between the two leaves it."""
        with self._lock:
            doc_id = self._new_id("doc")
            chunks = [c.content for c in chunk_document(Document(doc_id, content), chunking)] if chunked else []
            if not embedded:
                self.unembedded.update(_chunk_key(doc_id, i) for i in range(len(chunks)))
            doc = StoredDocument(doc_id, project_id, content, path, title, dict(tags or {}), dict(metadata or {}),
                                 chunks, self.clock())
            self.documents[doc_id] = doc
            self._indexes.clear()
            return doc

    def delete_document(self, doc_id: str) -> None:
        with self._lock:
            doc = self.documents.pop(doc_id)
            self.unembedded.difference_update(_chunk_key(doc_id, i) for i in range(len(doc.chunks)))
            self._indexes.clear()

    def create_memory_store(self, project_id: str, name: str, tags: Mapping[str, str] | None = None,
                            duplicate_threshold: float = DUPLICATE_THRESHOLD,
                            supersede_threshold: float | None = None) -> MemoryStore:
        with self._lock:
            store = MemoryStore(self._new_id("mst"), project_id, name, dict(tags or {}), duplicate_threshold,
                                supersede_threshold)
            self.stores[store.id] = store
            return store

    def create_memory(self, store_id: str, content: str, tags: Mapping[str, str] | None = None,
                      updated_at: datetime | None = None,
                      duplicate_threshold: float | None = None, embedded: bool = True) -> tuple[str, StoredMemory]:
        """Add a memory; `(action, memory)` with action `created`, `skipped` (a near-duplicate at
        `duplicate_threshold`, else the store's: the existing memory) or `superseded` (the nearest memory,
        rewritten). `embedded=False`: stored without an embedding, so compared with none."""
        with self._lock:
            store = self.stores[store_id]
            vector = self.embedder.embed([content])[0]
            now = self.clock()
            siblings = [m for m in self.memories.values() if m.store_id == store_id and m.id not in self.unembedded]
            if siblings and embedded:
                similarity = 1.0 - cosine_distance(np.stack([m.vector for m in siblings]), vector)
                best = int(np.nanargmax(similarity)) if not np.isnan(similarity).all() else 0
                if similarity[best] >= (store.duplicate_threshold if duplicate_threshold is None
                                        else duplicate_threshold):
                    return "skipped", siblings[best]
                if store.supersede_threshold is not None and similarity[best] >= store.supersede_threshold:
                    old = self.memories.pop(siblings[best].id)  # an UPDATE writes a new tuple at the end
                    old.content, old.vector, old.updated_at = content, vector, now
                    self.memories[old.id] = old
                    self._indexes.clear()
                    return "superseded", old
            memory = StoredMemory(self._new_id("mem"), store_id, content, dict(tags or {}), vector, now,
                                  updated_at or now)
            self.memories[memory.id] = memory
            if not embedded:
                self.unembedded.add(memory.id)
            self._indexes.clear()
            return "created", memory

    def preload(self, corpus: Corpus, chunking: Chunking, name: str,
                loaded: Callable[[int], None] = lambda _: None) -> dict:
        """Load a corpus (memory ages included, which HTTP cannot seed); returns the key -> id map. `loaded(1)`
        after each document and memory (a `Progress`)."""
        with self._lock:
            project_id = self.create_project(name)
            ids: dict = {"project_id": project_id, "documents": {}, "memories": {}, "memory_stores": {}}
            for d in corpus.documents:
                ids["documents"][d.key] = self.create_document(project_id, d.content, d.path, d.title, d.tags,
                                                               chunking=chunking).id
                loaded(1)
            now = self.clock()
            for m in corpus.memories:
                if m.store not in ids["memory_stores"]:
                    # Duplicates are kept: a corpus file says what the table holds.
                    ids["memory_stores"][m.store] = self.create_memory_store(project_id, m.store,
                                                                             duplicate_threshold=2.0).id
                _, memory = self.create_memory(ids["memory_stores"][m.store], m.content, m.tags,
                                               updated_at=memory_updated_at(m.age_days, now))
                ids["memories"][m.key] = memory.id
                loaded(1)
            return ids

    def project_documents(self, project_id: str) -> list[StoredDocument]:
        with self._lock:
            return [d for d in self.documents.values() if d.project_id == project_id]

    def project_stores(self, project_id: str) -> list[MemoryStore]:
        with self._lock:
            return [s for s in self.stores.values() if s.project_id == project_id]

    def _index(self, project_id: str | None) -> Index:
        with self._lock:
            if project_id not in self._indexes:
                self._indexes[project_id] = self._build(project_id)
            return self._indexes[project_id]

    def _build(self, project_id: str | None) -> Index:
        chunks = [(d, _chunk_key(d.id, i), text) for d in self.documents.values()
                  if project_id is None or d.project_id == project_id
                  for i, text in enumerate(d.chunks) if _chunk_key(d.id, i) not in self.unembedded]
        mems = [m for m in self.memories.values() if m.id not in self.unembedded
                and (project_id is None or self.stores[m.store_id].project_id == project_id)]
        corpus = Corpus(
            tuple(Document(key, text, d.path, d.title, d.tags) for d, key, text in chunks),
            tuple(Memory(m.id, m.content, m.store_id, m.tags) for m in mems),
        )
        index = Index.build(corpus, self.embedder, Chunking("whole"), now=self.clock(), tie_order=self.tie_order)
        # Real write times, not the build clock: the recency blend reads them at each search.
        index.stores["document"].updated_at_ms[:] = [round(d.created_at.timestamp() * 1000) for d, _, _ in chunks]
        index.stores["memory"].updated_at_ms[:] = [round(m.updated_at.timestamp() * 1000) for m in mems]
        return index

    def _unembedded(self, project_id: str | None, filters: Filters) -> list[SearchResult]:
        """The rows in scope stored without an embedding, as v0.28.0 returns them after the rest: documents', then
        (when stores are named) memories', each in write order, scored 0."""
        with self._lock:
            chunks = [(d, i, text) for d in self.documents.values() for i, text in enumerate(d.chunks)
                      if _chunk_key(d.id, i) in self.unembedded and (project_id is None or d.project_id == project_id)
                      and (filters.document_ids is None or d.id in filters.document_ids)
                      and (filters.document_paths is None or any(d.path.startswith(p) for p in filters.document_paths))]
            memories = [m for m in self.memories.values() if m.id in self.unembedded
                        and filters.memory_store_ids is not None and m.store_id in filters.memory_store_ids]
        return ([SearchResult("document", _chunk_key(d.id, i), None, text, 0.0, 0.0, {}, d.created_at, 1.0)
                 for d, i, text in chunks] +
                [SearchResult("memory", m.id, None, m.content, 0.0, 0.0, {}, m.updated_at, 1.0) for m in memories])

    def search(self, project_id: str | None, query: str, knobs: Knobs, limit: int, filters: Filters,
               pure_cosine: bool = False) -> list[Found]:
        """SOAT's knowledge search over one project (or every project when `project_id` is None).

        `pure_cosine`: the ranking of releases before the hybrid one, where only the floor applies.
        """
        index = self._index(project_id)
        with self._lock:
            document_keys = None
            if filters.document_ids is not None:
                wanted = set(filters.document_ids)
                document_keys = tuple(_chunk_key(d.id, i) for d in self.documents.values() if d.id in wanted
                                      for i in range(len(d.chunks)))
        scope = Scope(dict(filters.tags), filters.include_documents, filters.include_memories,
                      None if filters.memory_store_ids is None else tuple(filters.memory_store_ids),
                      None if filters.document_paths is None else tuple(filters.document_paths), document_keys)
        if pure_cosine:
            results = _cosine_search(index, query, knobs.min_similarity, limit, scope)
            if not knobs.min_similarity:  # v0.28.0 keeps a score of 0 unless the floor is above it
                results += self._unembedded(project_id, filters)[:limit - len(results)]
        else:
            results = index.search(query, knobs, limit, scope, now=self.clock())
        found = []
        for r in results:
            if r.source_type == "document":
                chunk_id = r.key
                found.append(Found(r, self.documents[chunk_id.rsplit("#", 1)[0]], None, None, chunk_id))
            else:
                memory = self.memories[r.key]
                found.append(Found(r, None, memory, self.stores[memory.store_id], None))
        return found


def _cosine_search(index: Index, query: str, floor: float | None, limit: int, scope: Scope) -> list[SearchResult]:
    """Both stores by cosine similarity alone, top `limit`, then the floor: it removes and never refills."""
    top = similarity_floor(index.candidates(query, limit, scope).vector[:limit], floor)
    results = []
    for c in top:
        store = index.stores[c.source_type]
        results.append(SearchResult(
            c.source_type, store.keys[c.row], store.ids[c.row] if c.source_type == "document" else None,
            store.contents[c.row], c.score, c.score, {},
            datetime.fromtimestamp(store.updated_at_ms[c.row] / 1000, timezone.utc), 1.0))
    return results


def frozen_clock(at: datetime) -> Clock:
    return lambda: at


def system_clock() -> datetime:
    return datetime.now(timezone.utc)
