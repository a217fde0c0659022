"""Seeding a project over HTTP from the config's corpus, and the key -> id map the run keeps.

Writes go one at a time, in corpus order (documents, then memories), so that the server's tables hold
rows in the order SOAT's own eval loads them: PostgreSQL's order among ties depends on it. Writes are
not retried after a failure that may have reached the server (that could create a row twice); each is
recorded in the run folder's journal as it is made, so a stopped seed continues where it stopped. Memory
writes use the server's dialect (older releases: containers at `/memories`, entries at `/memory-entries`, each
entry carrying the near-duplicate threshold that newer releases set on the container).
Memory ages cannot be seeded: SOAT stamps `updated_at` with the write time. A server whose embedding provider
fails during a write may store the row without an embedding and answer as usual (v0.28.0 does): after seeding,
a search on each item's own text shows that the vector channel finds it (`unsearchable`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from rqsweep.backends.http.client import RequestFailed, SoatClient, backend_error
from rqsweep.backends.http.config import SeedConfig
from rqsweep.backends.http.mapping import SEARCH_PATH, Dialect, Hit, SearchScope, parse_hits, search_body
from rqsweep.config import Chunking
from rqsweep.corpus import Corpus, Document, Memory, chunk_document
from rqsweep.engine.index import MAX_LIMIT
from rqsweep.errors import BackendError, BackendRefused, InputError
from rqsweep.files import read_data
from rqsweep.files import write_json
from rqsweep.knobs import Knobs

SEED_FILE = "seed.json"
SEED_JOURNAL = "seed.journal"


@dataclass
class IdMap:
    """Corpus keys (and memory store names) -> the server's ids. Empty maps mean keys *are* ids."""

    project_id: str | None = None
    documents: dict[str, str] = field(default_factory=dict)
    memories: dict[str, str] = field(default_factory=dict)
    memory_stores: dict[str, str] = field(default_factory=dict)
    actions: list[dict] = field(default_factory=list)  # every write whose action was not `created`

    def document(self, key: str) -> str:
        return self.documents.get(key, key)

    def memory_store(self, name: str) -> str:
        return self.memory_stores.get(name, name)

    @classmethod
    def load(cls, path: Path) -> "IdMap":
        _, data = read_data(path, "the key -> id map")
        if not isinstance(data, dict):
            raise InputError(path, "", "expected an object {project_id?, documents, memories, memory_stores?}")
        for key in ("documents", "memories", "memory_stores"):
            value = data.get(key, {})
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in value.items()):
                raise InputError(path, key, "expected an object mapping keys to ids")
        return cls(data.get("project_id"), dict(data.get("documents", {})), dict(data.get("memories", {})),
                   dict(data.get("memory_stores", {})), list(data.get("actions", [])))

    def save(self, path: Path) -> None:
        write_json(path, asdict(self))


def listing(body: object) -> list:
    """A listing answer, bare or wrapped (`{data|items|results: [...]}`)."""
    if isinstance(body, list):
        return body
    if isinstance(body, dict):
        for key in ("data", "items", "results"):
            if isinstance(body.get(key), list):
                return body[key]
    return []


def _post(client: SoatClient, path: str, body: dict, what: str) -> dict:
    try:
        reply = client.request("POST", path, body, idempotent=False)
    except RequestFailed as exc:
        raise backend_error(f"seeding stopped at {what}: {path} answered {exc}", exc) from None
    if not isinstance(reply.body, dict) or not isinstance(reply.body.get("id"), str):
        raise BackendError(f"seeding stopped at {what}: {path} answered without an `id`")
    return reply.body


def _existing_content(client: SoatClient, project_id: str, dialect: Dialect) -> tuple[int, int]:
    counts = []
    for path in ("/api/v1/documents", dialect.memory_containers):
        try:
            counts.append(len(listing(client.request("GET", path, params={"project_id": project_id,
                                                                          "limit": 1}).body)))
        except RequestFailed as exc:
            raise backend_error(f"cannot tell whether project {project_id} is empty ({path}: {exc}); set "
                                "backend.seed.allow_existing_content: true to seed anyway", exc) from None
    return counts[0], counts[1]


class Journal:
    """Every write seeding made, one JSON line each, fsynced before the next write: what a killed seed resumes from.

    Lines: `{"write": "start", "project_name"}` (before a project is created), then `project`, `document`,
    `memory_store` and `memory` with the key (or name) and the server's id. A torn last line is ignored.
    """

    def __init__(self, path: Path | None):
        self.path = path  # None: kept in memory only (no run folder)
        self.entries: list[dict] = []
        if path is not None and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    self.entries.append(json.loads(line))
                except ValueError:
                    break  # killed mid-line: that write was not recorded

    def record(self, entry: dict) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
                f.flush()
                os.fsync(f.fileno())
        self.entries.append(entry)

    def id_map(self) -> IdMap:
        """The key -> id map of the writes recorded so far."""
        ids = IdMap()
        tables = {"document": ids.documents, "memory_store": ids.memory_stores, "memory": ids.memories}
        for e in self.entries:
            if e["write"] == "project":
                ids.project_id = e["id"]
            elif e["write"] in tables:
                tables[e["write"]][e["key"]] = e["id"]
                if e.get("action", "created") != "created":
                    ids.actions.append({"key": e["key"], "action": e["action"], "id": e["id"]})
        return ids


def _adopt(client: SoatClient, path: str, project_id: str, match: dict, known: set[str]) -> str | None:
    """The id of an unrecorded row whose fields equal `match`: the write a killed seed made but did not record."""
    try:
        rows = listing(client.request("GET", path, params={"project_id": project_id, "limit": 100}).body)
    except RequestFailed:
        return None
    found = [r["id"] for r in rows if isinstance(r, dict) and r.get("id") not in known
             and all((r.get(k) or "") == v for k, v in match.items())]
    return found[0] if len(found) == 1 else None


def _delete(client: SoatClient, path: str, what: str, problem: str) -> None:
    try:
        client.request("DELETE", path)
    except RequestFailed as exc:
        raise backend_error(f"seeding: {what} was left incomplete by the stopped seed ({problem}), and deleting it "
                            f"failed ({exc}): delete it, then resume", exc) from None


def _entry_tags(tags: dict[str, str], dialect: Dialect) -> object:
    return [f"{k}:{v}" for k, v in tags.items()] if dialect.entry_tags_as_list else dict(tags)


def age_warning(corpus: Corpus) -> str | None:
    """What a corpus with memory ages loses over HTTP, or None: the recency blend sees every memory as new."""
    aged = sum(1 for m in corpus.memories if m.age_days > 0)
    if not aged:
        return None
    return (f"{aged} memories have age_days, which cannot be seeded over HTTP: SOAT stamps updated_at with the "
            "write time, so the recency blend sees them all as new")


def _by_vector(hit: Hit) -> bool:
    """Whether the vector channel found a hit: its signal says so, or (a server without signals ranks by
    cosine alone) its similarity is above 0. v0.28.0 returns a row without an embedding after the rest, scored
    0; a row with one, searched with its own or its document's text, is far above that."""
    return hit.vector is not None or (hit.lexical is None and (hit.similarity or 0.0) > 0.0)


def _unfound(client: SoatClient, item: Document | Memory, item_id: str, ids: IdMap, chunking: Chunking,
             dialect: Dialect) -> str | None:
    """What the vector channel does not find of the seeded item `item_id`, or None: one search on its own text, in
    its document or memory store, for the most results the server returns (a document's chunks past that are not
    counted)."""
    if isinstance(item, Document):
        chunks = chunk_document(item, chunking)
        scope = SearchScope(ids.project_id, document_ids=(item_id,), include_memories=False)
        query = chunks[0].content
    else:
        scope = SearchScope(ids.project_id, memory_store_ids=(ids.memory_stores[item.store],), include_documents=False)
        query = item.content
    body = search_body(query, Knobs(), MAX_LIMIT, scope, dialect)
    try:
        hits = client.request("POST", SEARCH_PATH, body, read=lambda payload: parse_hits(payload, dialect)).body
    except RequestFailed as exc:
        raise backend_error(f"checking the seeded {item.key!r}: the search failed: {exc}", exc) from None
    if isinstance(item, Document):
        found = len({h.item_id for h in hits if h.target_id == item_id and _by_vector(h)})
        return None if found >= min(len(chunks), MAX_LIMIT) else f"{found} of {len(chunks)} chunks found"
    return None if any(h.target_id == item_id and _by_vector(h) for h in hits) else "not found"


def unsearchable(client: SoatClient, corpus: Corpus, ids: IdMap, chunking: Chunking, dialect: Dialect) -> list[str]:
    """The seeded items the vector channel cannot find, described: documents with fewer chunks found than they
    were cut into, memories a search on their own text does not find. One search per item."""
    def check(item: Document | Memory) -> str | None:
        document = isinstance(item, Document)
        problem = _unfound(client, item, (ids.documents if document else ids.memories)[item.key], ids, chunking,
                           dialect)
        return problem and f"{'document' if document else 'memory'} {item.key!r} ({problem})"

    return [problem for problem in client.map(check, [*corpus.documents, *corpus.memories]) if problem]


def seed_corpus(client: SoatClient, corpus: Corpus, config: SeedConfig, project_id: str | None,
                default_name: str, log: Callable[[str], None], dialect: Dialect, journal: Journal) -> IdMap:
    """Create (or fill) the project from `corpus` in the server's dialect, recording each write in `journal`
    as it is made; with writes already recorded, continue after them. Reports every write SOAT did not answer
    `created`."""
    ids = journal.id_map()
    resumed = bool(journal.entries)
    # Only the first write after a kill is in doubt: it may have reached the server unrecorded.
    in_doubt = resumed
    if resumed:
        log(f"seed: continuing from {journal.path} ({len(journal.entries)} writes recorded)")
    if ids.project_id is None:
        if project_id is None:
            name = config.project_name or default_name
            if any(e["write"] == "start" for e in journal.entries):
                log(f"seed: warning: the previous seed was stopped while creating project {name!r}; if an empty "
                    "project of that name exists besides the one created now, it is left over: delete it")
            journal.record({"write": "start", "project_name": name})
            project_id = _post(client, "/api/v1/projects", {"name": name}, f"project {name!r}")["id"]
            log(f"seed: created project {project_id} ({name})")
        elif not config.allow_existing_content:
            documents, stores = _existing_content(client, project_id, dialect)
            if documents or stores:
                raise BackendError(f"project {project_id} already has content (documents or memory stores): "
                                   "refusing to seed into it; set backend.seed.allow_existing_content: true to seed "
                                   "anyway")
        journal.record({"write": "project", "id": project_id})
        ids.project_id = project_id
        in_doubt = False
    project_id = ids.project_id
    chunking = config.chunking
    for d in corpus.documents:
        if d.key in ids.documents:
            continue
        adopted = _adopt(client, "/api/v1/documents", project_id, {"path": d.path, "title": d.title},
                         set(ids.documents.values())) if in_doubt else None
        if adopted:
            # The server may have stored the document and died before its chunks were all written (v0.28.0 writes
            # them without a transaction): adopted only when whole, else deleted and written again.
            problem = _unfound(client, d, adopted, ids, chunking, dialect)
            if problem:
                _delete(client, f"/api/v1/documents/{adopted}", f"document {d.key!r} (id {adopted})", problem)
                log(f"seed: document {d.key!r} (id {adopted}) was left incomplete by the stopped seed ({problem}): "
                    "deleted, and written again")
                adopted = None
        if not adopted:
            body = {"project_id": project_id, "content": d.content, "path": d.path or None,
                    "title": d.title or None, "tags": dict(d.tags) or None, "chunk_strategy": chunking.strategy}
            if chunking.strategy == "size":
                body |= {"chunk_size": chunking.chunk_size, "chunk_overlap": chunking.chunk_overlap}
            adopted = _post(client, "/api/v1/documents", {k: v for k, v in body.items() if v is not None},
                            f"document {d.key!r}")["id"]
        journal.record({"write": "document", "key": d.key, "id": adopted})
        ids.documents[d.key], in_doubt = adopted, False
    for store in dict.fromkeys(m.store for m in corpus.memories):
        if store in ids.memory_stores:
            continue
        adopted = _adopt(client, dialect.memory_containers, project_id, {"name": store},
                         set(ids.memory_stores.values())) if in_doubt else None
        if not adopted:
            body = {"project_id": project_id, "name": store}
            if not dialect.threshold_per_entry:
                body["duplicate_threshold"] = config.duplicate_threshold
            adopted = _post(client, dialect.memory_containers, body, f"memory store {store!r}")["id"]
        journal.record({"write": "memory_store", "key": store, "id": adopted})
        ids.memory_stores[store], in_doubt = adopted, False
    for m in corpus.memories:
        if m.key in ids.memories:
            continue
        body = {dialect.entry_container: ids.memory_stores[m.store], "content": m.content}
        if m.tags:
            body["tags"] = _entry_tags(m.tags, dialect)
        if dialect.threshold_per_entry:
            body["duplicate_threshold"] = config.duplicate_threshold
        answer = _post(client, dialect.memory_entries, body, f"memory {m.key!r}")
        action = answer.get("action", "created")
        if in_doubt and action == "skipped" and answer["id"] not in ids.memories.values():
            action = "created"  # the duplicate of itself: the killed seed wrote it without recording it
        journal.record({"write": "memory", "key": m.key, "id": answer["id"], "action": action})
        ids.memories[m.key], in_doubt = answer["id"], False
        if action != "created":
            ids.actions.append({"key": m.key, "action": action, "id": answer["id"]})
            log(f"seed: memory {m.key!r} was {action}, not created (id {answer['id']}): the server judged it a "
                "near-duplicate; the golden set's expectations on it may not hold")
    missing = unsearchable(client, corpus, ids, chunking, dialect)
    if missing:
        raise BackendRefused(f"seeding: {len(missing)} seeded items cannot be found by the server's vector search: "
                           f"{', '.join(missing[:20])}{' ...' if len(missing) > 20 else ''}; the server stored them "
                           "without an embedding (its embedding provider failed during the seed?): once it embeds "
                           f"again, delete project {project_id} and seed anew")
    if age_warning(corpus):
        log(f"seed: {age_warning(corpus)}")
    log(f"seed: {len(ids.documents)} documents, {len(ids.memory_stores)} memory stores, {len(ids.memories)} "
        f"memories ({len(ids.actions)} not created)")
    return ids
