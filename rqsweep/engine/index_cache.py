"""An on-disk cache of built index rows, so a rerun re-indexes only the documents and memories that changed.

An entry holds what building a document's chunks (or a memory) costs: their vectors and their lexemes
(`to_tsvector('simple')` in position order). It is keyed by the content's SHA-256, the chunking (for
documents), the lexical port's sources and, through its file, the embedder's identity; the chunk texts and
ids are cut again from the document, which is cheap and keeps the cache free of keys.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
import sys
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from rqsweep.backends.embedded_config import DEFAULT_MAX_MB
from rqsweep.config import Chunking
from rqsweep.engine import runs
from rqsweep.engine.embed.cache import cache_file_name, connect_wal
from rqsweep.engine.tsearch import _unicode_data, chars, parser

# The sources that decide a text's lexemes: a changed port never reads the lexemes of an older one.
_PARSER = hashlib.sha256(b"".join(Path(m.__file__).read_bytes() for m in (parser, chars, _unicode_data, runs))).hexdigest()
_SEPARATOR = "\0"  # never inside a lexeme (control characters are blanks to the parser)
_MAGIC, _CRC, _HEADER = b"RQX1", struct.Struct("<I"), struct.Struct("<III")  # rows, dimensions, positions


@dataclass(frozen=True)
class BuiltRows:
    """The built rows of one document (its chunks, in order) or of one memory (one row)."""

    vectors: np.ndarray  # float32, one row per chunk
    lexemes: tuple[tuple[str | None, ...], ...]  # per chunk; None: a lexeme too long to keep, holding a position

    def to_bytes(self) -> bytes:
        """Vectors, then each position's number in the entry's own list of distinct lexemes (-1: None)."""
        flat = list(chain.from_iterable(self.lexemes))
        words = dict.fromkeys(flat)  # first appearance order
        words.pop(None, None)
        number = {word: i for i, word in enumerate(words)}
        number[None] = -1
        ids = np.fromiter(map(number.__getitem__, flat), "<i4", len(flat))
        vectors = np.ascontiguousarray(self.vectors, "<f4")
        payload = b"".join([
            _HEADER.pack(len(self.lexemes), vectors.shape[1] if vectors.ndim == 2 else 0, len(ids)),
            np.array([len(row) for row in self.lexemes], "<i4").tobytes(), ids.tobytes(), vectors.tobytes(),
            _SEPARATOR.join(words).encode("utf-8", "surrogatepass")])
        return _MAGIC + _CRC.pack(zlib.crc32(payload)) + payload

    @classmethod
    def from_bytes(cls, blob: bytes) -> "BuiltRows":
        """Raises ValueError when `blob` is not an intact entry."""
        start = len(_MAGIC) + _CRC.size
        if blob[:len(_MAGIC)] != _MAGIC or len(blob) < start + _HEADER.size:
            raise ValueError("not an index cache entry")
        if _CRC.unpack_from(blob, len(_MAGIC))[0] != zlib.crc32(memoryview(blob)[start:]):
            raise ValueError("checksum mismatch")
        n_rows, dims, n_ids = _HEADER.unpack_from(blob, start)
        at = start + _HEADER.size
        # array, not numpy, for the small integer parts: most entries are a chunk or two.
        lengths, ids = array("i"), array("i")
        lengths.frombytes(blob[at:at + 4 * n_rows])
        ids.frombytes(blob[at + 4 * n_rows:at + 4 * (n_rows + n_ids)])
        if sys.byteorder == "big":
            lengths.byteswap()
            ids.byteswap()
        at += 4 * (n_rows + n_ids)
        vectors = np.frombuffer(blob, "<f4", n_rows * dims, at).reshape(n_rows, dims)
        table: list[str | None] = blob[at + 4 * n_rows * dims:].decode("utf-8", "surrogatepass").split(_SEPARATOR)
        table.append(None)  # position -1
        if (sum(lengths) != n_ids or min(lengths, default=0) < 0
                or (ids and not -1 <= min(ids) <= max(ids) < len(table) - 1)):
            raise ValueError("inconsistent entry")
        flat = list(map(table.__getitem__, ids))
        rows, end = [], 0
        for n in lengths:
            rows.append(tuple(flat[end:end + n]))
            end += n
        return cls(vectors, tuple(rows))


class IndexCache:
    """Built rows in `cache_dir`/index, one SQLite file per embedder identity (WAL: several processes may share it).

    Entries are kept to `max_mb` megabytes (10**6 bytes) of stored rows: past it, the least recently used go
    (an entry is used when a build reads or writes it). A damaged file is set aside and rebuilt, a damaged entry
    rebuilt, each with a warning through `warn`.
    """

    def __init__(self, cache_dir: Path, identity: str, chunking: Chunking,
                 warn: Callable[[str], None] = lambda _: None, max_mb: float = DEFAULT_MAX_MB) -> None:
        self.path = Path(cache_dir) / "index" / cache_file_name(identity)
        self._chunking = f"{_PARSER}\0{chunking.strategy}\0{chunking.chunk_size}\0{chunking.chunk_overlap}\0"
        self._warn = warn
        self._max_bytes = round(max_mb * 1_000_000)  # int() would cut a bound of 2.01 MB to 2,009,999 bytes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._create()
        except sqlite3.DatabaseError as exc:
            self._set_aside(exc)
            self._create()

    def document_key(self, content: str) -> bytes:
        return hashlib.sha256((self._chunking + content).encode("utf-8", "surrogatepass")).digest()

    def memory_key(self, content: str) -> bytes:
        return hashlib.sha256(f"{_PARSER}\0memory\0{content}".encode("utf-8", "surrogatepass")).digest()

    def entries(self, keys: Iterable[bytes]) -> Iterator[tuple[bytes, BuiltRows]]:
        """The entries found for `keys`, one at a time as they are read (a caller can let each go before the next
        is decoded); damaged ones are left out (they are rebuilt and stored again). Those read count as used."""
        wanted, read = set(keys), []
        try:
            with closing(connect_wal(self.path)) as conn:
                # One scan: a rerun wants nearly every entry, and a scan reads them 5x faster than lookups by key.
                for key, blob in conn.execute("SELECT key, rows FROM built"):
                    if key in wanted:
                        try:
                            entry = BuiltRows.from_bytes(blob)
                        except ValueError as exc:
                            self._warn(f"index cache {self.path}: a damaged entry is rebuilt ({exc})")
                            continue
                        read.append(key)
                        yield key, entry
                with conn:
                    conn.executemany("UPDATE used SET at = ? WHERE key = ?", [(_now(), key) for key in read])
        except sqlite3.DatabaseError as exc:
            self._set_aside(exc)
            self._create()

    def store(self, entries: dict[bytes, BuiltRows]) -> None:
        """Store `entries`, then let the least recently used go while the stored rows exceed the bound."""
        try:
            with closing(connect_wal(self.path)) as conn, conn:
                blobs = [(key, rows.to_bytes()) for key, rows in entries.items()]
                conn.executemany("INSERT OR REPLACE INTO built VALUES (?, ?)", blobs)
                conn.executemany("INSERT OR REPLACE INTO used VALUES (?, ?, ?)",
                                 [(key, _now(), len(blob)) for key, blob in blobs])
                del blobs
                excess = conn.execute("SELECT total(size) FROM used").fetchone()[0] - self._max_bytes
                if excess > 0:
                    evicted, freed = [], 0
                    oldest = conn.execute("SELECT key, size FROM used ORDER BY at, key")
                    for key, size in oldest:
                        if freed >= excess:
                            break
                        evicted.append((key,))
                        freed += size
                    oldest.close()
                    conn.executemany("DELETE FROM built WHERE key = ?", evicted)
                    conn.executemany("DELETE FROM used WHERE key = ?", evicted)
        except sqlite3.DatabaseError as exc:
            self._warn(f"index cache {self.path}: not stored ({exc}); the next run builds these rows again")

    def _create(self) -> None:
        with closing(connect_wal(self.path)) as conn, conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            # A rowid table: SQLite keeps rows of several kilobytes far better there than WITHOUT ROWID (filling
            # 20,000 entries of 4.7 kB: 0.46 s of CPU instead of 1.40).
            conn.execute("CREATE TABLE IF NOT EXISTS built (key BLOB PRIMARY KEY, rows BLOB NOT NULL)")
            # When each entry was last used and its size, apart: touching an entry must not rewrite its rows.
            conn.execute("CREATE TABLE IF NOT EXISTS used (key BLOB PRIMARY KEY, at INTEGER NOT NULL, "
                         "size INTEGER NOT NULL) WITHOUT ROWID")
            if "entries" in tables:  # a file from before: its entries move over
                conn.execute("INSERT OR IGNORE INTO built SELECT key, rows FROM entries")
                conn.execute("DROP TABLE entries")
            if "used" not in tables:
                conn.execute("INSERT OR IGNORE INTO used SELECT key, 0, length(rows) FROM built")

    def _set_aside(self, exc: Exception) -> None:
        aside = self.path.with_name(self.path.name + ".damaged")
        self._warn(f"index cache {self.path} is damaged ({exc}): moved to {aside.name}, rebuilding it")
        for suffix in ("-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        self.path.replace(aside)


def _now() -> int:
    """When an entry is used, in nanoseconds: later uses sort after earlier ones."""
    return time.time_ns()
