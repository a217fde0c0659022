"""Seeding a project over HTTP from the config's corpus, and the key -> id map the run keeps.

Writes go one at a time, in corpus order (documents, then memories), so that the server's tables hold
rows in the order SOAT's own eval loads them: PostgreSQL's order among ties depends on it. Writes are
not retried after a failure that may have reached the server (that could create a row twice). Memory
ages cannot be seeded: SOAT stamps `updated_at` with the write time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from rqsweep.backends.http.client import RequestFailed, SoatClient
from rqsweep.config import SeedConfig
from rqsweep.corpus import Corpus
from rqsweep.errors import BackendError, InputError
from rqsweep.files import read_data
from rqsweep.files import write_json

SEED_FILE = "seed.json"


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
        raise BackendError(f"seeding stopped at {what}: {path} answered {exc}") from None
    if not isinstance(reply.body, dict) or not isinstance(reply.body.get("id"), str):
        raise BackendError(f"seeding stopped at {what}: {path} answered without an `id`")
    return reply.body


def _existing_content(client: SoatClient, project_id: str) -> tuple[int, int]:
    counts = []
    for path in ("/api/v1/documents", "/api/v1/memory-stores"):
        try:
            counts.append(len(listing(client.request("GET", path, params={"project_id": project_id,
                                                                          "limit": 1}).body)))
        except RequestFailed as exc:
            raise BackendError(f"cannot tell whether project {project_id} is empty ({path}: {exc}); set "
                               "backend.seed.allow_existing_content: true to seed anyway") from None
    return counts[0], counts[1]


def seed_corpus(client: SoatClient, corpus: Corpus, config: SeedConfig, project_id: str | None,
                default_name: str, log: Callable[[str], None]) -> IdMap:
    """Create (or fill) the project from `corpus`; report every write SOAT did not answer `created`."""
    if project_id is None:
        name = config.project_name or default_name
        project_id = _post(client, "/api/v1/projects", {"name": name}, f"project {name!r}")["id"]
        log(f"seed: created project {project_id} ({name})")
    elif not config.allow_existing_content:
        documents, stores = _existing_content(client, project_id)
        if documents or stores:
            raise BackendError(f"project {project_id} already has content (documents or memory stores): refusing "
                               "to seed into it; set backend.seed.allow_existing_content: true to seed anyway")
    ids = IdMap(project_id)
    chunking = config.chunking
    for d in corpus.documents:
        body = {"project_id": project_id, "content": d.content, "path": d.path or None, "title": d.title or None,
                "tags": dict(d.tags) or None, "chunk_strategy": chunking.strategy}
        if chunking.strategy == "size":
            body |= {"chunk_size": chunking.chunk_size, "chunk_overlap": chunking.chunk_overlap}
        answer = _post(client, "/api/v1/documents", {k: v for k, v in body.items() if v is not None},
                       f"document {d.key!r}")
        ids.documents[d.key] = answer["id"]
    for store in dict.fromkeys(m.store for m in corpus.memories):
        answer = _post(client, "/api/v1/memory-stores", {"project_id": project_id, "name": store},
                       f"memory store {store!r}")
        ids.memory_stores[store] = answer["id"]
    for m in corpus.memories:
        body = {"memory_store_id": ids.memory_stores[m.store], "content": m.content}
        if m.tags:
            body["tags"] = dict(m.tags)
        answer = _post(client, "/api/v1/memories", body, f"memory {m.key!r}")
        ids.memories[m.key] = answer["id"]
        action = answer.get("action", "created")
        if action != "created":
            ids.actions.append({"key": m.key, "action": action, "id": answer["id"]})
            log(f"seed: memory {m.key!r} was {action}, not created (id {answer['id']}): the server judged it a "
                "near-duplicate; the golden set's expectations on it may not hold")
    aged = sum(1 for m in corpus.memories if m.age_days > 0)
    if aged:
        log(f"seed: {aged} memories have age_days, which cannot be seeded over HTTP: SOAT stamps updated_at "
            "with the write time")
    log(f"seed: {len(ids.documents)} documents, {len(ids.memory_stores)} memory stores, {len(ids.memories)} "
        f"memories ({len(ids.actions)} not created)")
    return ids
