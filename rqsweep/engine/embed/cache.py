"""An on-disk embedding cache, so a re-run never embeds the same text twice."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from rqsweep.engine.cache_file import CacheFile, cache_file_name, connect_wal, stored_keys
from rqsweep.engine.embed.protocol import (Embedder, EmbeddingError, numerics_of, precision_of, texts_per_step,
                                           with_numerics)

_LOOKUP_CHUNK = 500  # keys per SELECT, under SQLite's bound-parameter limit
# Misses are embedded and stored this many at a time: a provider failing late in a large corpus (or a kill)
# loses at most one portion. Large enough that each is still many batches, over all of a Dask run's workers.
_STORE_EVERY = 8192


class CachedEmbedder:
    """Wraps `inner`, keeping its vectors in `cache_dir`, keyed by its identity and each text's SHA-256.

    One SQLite file per identity, in WAL mode: several processes may read and write it at once, and a
    crash mid-write loses at most the uncommitted portion, never the file. Only the texts not yet cached
    go to `inner`, each once, in one `embed` call per `_STORE_EVERY` of them, stored as each comes back.
    `hits` counts texts served from disk, `misses` the distinct texts sent to `inner`. A damaged file is set
    aside and rebuilt; one that cannot be written is left alone, and the vectors come from `inner` alone
    (`CacheFile`); each with a warning through `warn`.
    """

    def __init__(self, inner: Embedder, cache_dir: Path, warn: Callable[[str], None] = lambda _: None) -> None:
        self.inner = inner
        self.hits = 0
        self.misses = 0
        self._queries: CachedEmbedder | None = None
        self.key = with_numerics(inner.identity, inner)
        self.path = Path(cache_dir) / cache_file_name(self.key)
        self.file = CacheFile(self.path, "embedding cache", self._create, warn)

    def _create(self, conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("CREATE TABLE IF NOT EXISTS vectors (sha256 BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID")
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('identity', ?)", (self.key,))
        (stored,) = conn.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
        if stored != self.key:
            raise EmbeddingError(f"embedding cache {self.path} belongs to {stored!r}, not {self.key!r}")

    @property
    def identity(self) -> str:
        """The inner embedder's: the cache changes where vectors come from, never what they are."""
        return self.inner.identity

    @property
    def numerics(self) -> str | None:
        return numerics_of(self.inner)

    @property
    def precision(self) -> float:
        return precision_of(self.inner)

    @property
    def texts_per_step(self) -> int | None:
        return texts_per_step(self.inner)

    @property
    def queries(self) -> CachedEmbedder:
        """The inner embedder's queries, cached beside these vectors (in a file of their own identity)."""
        inner = self.inner.queries
        if inner is self.inner:
            return self
        if self._queries is None:
            self._queries = CachedEmbedder(inner, self.path.parent, self.file.warn)
        return self._queries

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, path={str(self.path)!r})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Cached vectors for `texts`; the misses are embedded by `inner` and stored, `_STORE_EVERY` at a time."""
        if not texts:
            return self.inner.embed([])
        keys = [hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() for text in texts]
        found = self._lookup(set(keys))
        from_disk = sum(key in found for key in keys)
        missing = {key: text for key, text in zip(keys, texts) if key not in found}
        order = list(missing)
        for start in range(0, len(order), _STORE_EVERY):
            portion = {key: missing[key] for key in order[start:start + _STORE_EVERY]}
            vectors = np.asarray(self.inner.embed(list(portion.values())), dtype="<f4")
            if vectors.ndim != 2 or len(vectors) != len(portion):
                raise EmbeddingError(f"{self.identity} returned shape {vectors.shape} for {len(portion)} texts")
            self._store(zip(portion, vectors))
            found.update(zip(portion, vectors))
        self.hits += from_disk
        self.misses += len(missing)
        dimensions = {len(vector) for vector in found.values()}
        if len(dimensions) != 1:
            raise EmbeddingError(f"embedding cache {self.path} holds vectors of several dimensions for "
                                 f"{self.identity}; delete the file to rebuild it")
        expected = getattr(self.inner, "dimensions", None)
        if expected is not None and dimensions != {expected}:
            raise EmbeddingError(f"embedding cache {self.path} holds vectors of {dimensions.pop()} dimensions, but "
                                 f"{self.identity} makes {expected}; delete the file to rebuild it")
        return np.stack([found[key] for key in keys]).astype(np.float32)

    def _store(self, vectors: Iterable[tuple[bytes, np.ndarray]]) -> None:
        if not self.file.usable:
            return
        try:
            with closing(connect_wal(self.path)) as conn, conn:
                conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?)",
                                 [(key, row.tobytes()) for key, row in vectors])
        except (sqlite3.DatabaseError, OSError) as exc:
            self.file.failed(exc)

    def _lookup(self, keys: set[bytes]) -> dict[bytes, np.ndarray]:
        """The vectors the file holds for `keys`: none when it cannot be read (the texts are embedded again)."""
        if not self.file.usable:
            return {}
        wanted = list(keys)
        found = {}
        try:
            with closing(connect_wal(self.path)) as conn:
                for start in range(0, len(wanted), _LOOKUP_CHUNK):
                    chunk = wanted[start:start + _LOOKUP_CHUNK]
                    query = f"SELECT sha256, vector FROM vectors WHERE sha256 IN ({','.join('?' * len(chunk))})"
                    for key, blob in conn.execute(query, chunk):
                        if len(blob) % 4:
                            raise EmbeddingError(f"embedding cache {self.path} holds a damaged vector; delete the file")
                        found[key] = np.frombuffer(blob, dtype="<f4")
        except (sqlite3.DatabaseError, OSError) as exc:
            self.file.failed(exc)
            return {}
        return found


def texts_found(cache_dir: Path, embedder: Embedder, texts: Sequence[str]) -> list[bool]:
    """Which of `texts` the vector cache in `cache_dir` holds for `embedder`, read without writing to it (an
    estimate's look)."""
    keys = [hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() for text in texts]
    path = Path(cache_dir) / cache_file_name(with_numerics(embedder.identity, embedder))
    found = stored_keys(path, "vectors", "sha256", keys)
    return [key in found for key in keys]
