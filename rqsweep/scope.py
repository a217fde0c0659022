"""Which rows a search may see: SOAT's tag, store, path and id filters (`search:` in a config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Scope:
    tags: Mapping[str, str] = field(default_factory=dict)
    include_documents: bool = True
    include_memories: bool = True
    memory_stores: tuple[str, ...] | None = None
    document_paths: tuple[str, ...] | None = None
    document_keys: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not (self.include_documents or self.include_memories):
            raise ValueError("include_documents and include_memories cannot both be false")

    def key(self) -> tuple:
        return (tuple(sorted(self.tags.items())), self.include_documents, self.include_memories,
                self.memory_stores, self.document_paths, self.document_keys)
