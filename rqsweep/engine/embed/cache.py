"""An on-disk embedding cache, so a re-run never embeds the same text twice."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from rqsweep.engine.embed.protocol import Embedder, EmbeddingError, numerics_of, precision_of, with_numerics

_LOOKUP_CHUNK = 500  # keys per SELECT, under SQLite's bound-parameter limit
_BUSY_TIMEOUT_S = 60.0
# Misses are embedded and stored this many at a time: a provider failing late in a large corpus (or a kill)
# loses at most one portion. Large enough that each is still many batches, over all of a Dask run's workers.
_STORE_EVERY = 8192


class CachedEmbedder:
    """Wraps `inner`, keeping its vectors in `cache_dir`, keyed by its identity and each text's SHA-256.

    One SQLite file per identity, in WAL mode: several processes may read and write it at once, and a
    crash mid-write loses at most the uncommitted portion, never the file. Only the texts not yet cached
    go to `inner`, each once, in one `embed` call per `_STORE_EVERY` of them, stored as each comes back.
    `hits` counts texts served from disk, `misses` the distinct texts sent to `inner`.
    """

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        self.inner = inner
        key = with_numerics(inner.identity, inner)
        self.path = Path(cache_dir) / cache_file_name(key)
        self.hits = 0
        self.misses = 0
        self._queries: CachedEmbedder | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(connect_wal(self.path)) as conn, conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS vectors "
                         "(sha256 BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID")
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('identity', ?)", (key,))
            (stored,) = conn.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
        if stored != key:
            raise EmbeddingError(f"embedding cache {self.path} belongs to {stored!r}, not {key!r}")

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
    def queries(self) -> CachedEmbedder:
        """The inner embedder's queries, cached beside these vectors (in a file of their own identity)."""
        inner = self.inner.queries
        if inner is self.inner:
            return self
        if self._queries is None:
            self._queries = CachedEmbedder(inner, self.path.parent)
        return self._queries

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, path={str(self.path)!r})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Cached vectors for `texts`; the misses are embedded by `inner` and stored, `_STORE_EVERY` at a time."""
        if not texts:
            return self.inner.embed([])
        keys = [hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() for text in texts]
        with closing(connect_wal(self.path)) as conn:
            found = self._lookup(conn, set(keys))
            from_disk = sum(key in found for key in keys)
            missing = {key: text for key, text in zip(keys, texts) if key not in found}
            order = list(missing)
            for start in range(0, len(order), _STORE_EVERY):
                portion = {key: missing[key] for key in order[start:start + _STORE_EVERY]}
                found.update(self._embed_and_store(conn, portion))
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

    def _embed_and_store(self, conn: sqlite3.Connection, missing: dict[bytes, str]) -> dict[bytes, np.ndarray]:
        vectors = np.asarray(self.inner.embed(list(missing.values())), dtype="<f4")
        if vectors.ndim != 2 or len(vectors) != len(missing):
            raise EmbeddingError(f"{self.identity} returned shape {vectors.shape} for {len(missing)} texts")
        with conn:
            conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?)",
                             [(key, row.tobytes()) for key, row in zip(missing, vectors)])
        return dict(zip(missing, vectors))

    def _lookup(self, conn: sqlite3.Connection, keys: set[bytes]) -> dict[bytes, np.ndarray]:
        wanted = list(keys)
        found = {}
        for start in range(0, len(wanted), _LOOKUP_CHUNK):
            chunk = wanted[start:start + _LOOKUP_CHUNK]
            query = f"SELECT sha256, vector FROM vectors WHERE sha256 IN ({','.join('?' * len(chunk))})"
            for key, blob in conn.execute(query, chunk):
                if len(blob) % 4:
                    raise EmbeddingError(f"embedding cache {self.path} holds a damaged vector; delete the file")
                found[key] = np.frombuffer(blob, dtype="<f4")
        return found


def connect_wal(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file `path` in WAL mode, which several processes can read and write at once."""
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S)
    # WAL mode is kept in the file: set once. Switching needs a lock SQLite does not wait for (no busy
    # timeout), so two processes creating the file at once retry here instead of failing.
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(0.05)
    # NORMAL is crash-safe under WAL; a power cut may drop the last commits, which are built again.
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def cache_file_name(identity: str) -> str:
    """A readable, collision-proof file name for an identity (which may hold '/', ':' and a URL)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", identity)[:80]
    return f"{readable}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.sqlite3"
