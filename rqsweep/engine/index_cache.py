"""An on-disk cache of built index rows, so a rerun re-indexes only the documents and memories that changed.

An entry holds what building a document's chunks (or a memory) costs, as the build keeps it: the feature hash's
quarter counts and norms (`QuarterVectors`) or another embedder's float32 rows, and each row's lexemes as the
parts `RunCache.parts_of` read them into (a part per run, in order). A build reads entries back with numpy and
Arrow, a portion of rows at a time: no Python step per row or lexeme. An entry is keyed by the content's
SHA-256, the chunking (for documents), the lexical port's sources and, through its file, the embedder's
identity; the chunk texts and ids are cut again from the document, which is cheap and keeps the cache free of
keys. The file records its format (`_FORMAT`): one written in another is emptied, never misread.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rqsweep.config import Chunking
from rqsweep.engine import runs
from rqsweep.engine.runs import ranges
from rqsweep.engine.cosine import squared_norms
from rqsweep.engine.cache_file import CacheFile, cache_file_name, connect_wal, stored_keys
from rqsweep.engine.quarter_vectors import QuarterVectors
from rqsweep.engine.tsearch import _unicode_data, chars, parser
from rqsweep.engine.tsearch.parser import RunCache

# The sources that decide a text's lexemes: a changed port never reads the lexemes of an older one.
_PARSER = hashlib.sha256(b"".join(Path(m.__file__).read_bytes() for m in (parser, chars, _unicode_data, runs))).hexdigest()
# The bound on the index cache's stored rows (cache_dir/index/), in megabytes: about 400,000 chunks of 1,024-d
# float32 vectors with their lexemes.
DEFAULT_MAX_MB = 2048
_FORMAT = 2  # the file's user_version: 0 (no version) held float32 rows and lexemes as strings
_MAGIC, _CRC, _HEADER = b"RQX2", struct.Struct("<I"), struct.Struct("<IIIc")  # rows, dimensions, parts, vectors' type
_VECTOR_TYPES = {b"b": "<i1", b"h": "<i2", b"i": "<i4", b"f": "<f4"}  # quarter counts, or float32 rows
_WIDTHS = {code: np.dtype(t).itemsize for code, t in _VECTOR_TYPES.items()}
_START = len(_MAGIC) + _CRC.size  # where the header begins
_LOOKUP = 8192  # entries a build reads back or stores at a time (about 16 MB of them); keys per SELECT, under
# SQLite's bound-parameter limit (32,766)
# Within a part, each lexeme is followed by \x01, a lexeme too long to keep (None) is \x02; each part by \0.
# None of them can be inside a lexeme: control characters are blanks to the parser.
_LEXEME_END, _TOO_LONG, _PART_END = "\x01", "\x02", b"\0"


class BuiltRows(NamedTuple):
    """The built rows of one document (its chunks, in order) or of one memory (one row), each field little-endian
    bytes as the entry holds them: a build reads a block of entries back with one numpy call per field
    (`CachedRows.read`)."""

    code: bytes  # the vectors' type (`_VECTOR_TYPES`): quarter counts (integers) or float32 rows
    n_rows: int
    dimensions: int
    n_parts: int
    lengths: bytes  # uint32 per row: how many parts its lexemes are in
    norms: bytes  # float32 per row: pgvector's squared norm (`squared_norms`)
    divisors: bytes  # float64 per row with quarter counts (`QuarterVectors`), else empty
    vectors: bytes  # row-major
    parts: bytes  # every row's parts in order (`encode_part`)

    @classmethod
    def split(cls, vectors: "QuarterVectors | np.ndarray", norms: np.ndarray, lengths: np.ndarray,
              parts: list[bytes], bounds: list[int]) -> list["BuiltRows"]:
        """The entries of rows `bounds[i]` to `bounds[i + 1]`: of their vectors (as the store keeps them), norms,
        how many parts each row's lexemes are in (`lengths`) and those parts as entries store them (`parts`, every
        row's in order). Each field is converted once for them all and sliced as bytes."""
        quarters = isinstance(vectors, QuarterVectors)
        counts = vectors.counts if quarters else vectors
        code = next(c for c, t in _VECTOR_TYPES.items() if counts.dtype == np.dtype(t))
        dims = counts.shape[1]
        row_bytes = _WIDTHS[code] * dims
        raw = [np.asarray(lengths, "<u4").tobytes(), np.asarray(norms, "<f4").tobytes(),
               np.asarray(vectors.divisors, "<f8").tobytes() if quarters else b"",
               np.ascontiguousarray(counts, _VECTOR_TYPES[code]).tobytes()]
        runs = np.append(0, np.cumsum(lengths, dtype=np.int64)).tolist()
        divisor_bytes = 8 if quarters else 0
        return [cls(code, b - a, dims, runs[b] - runs[a], raw[0][4 * a:4 * b], raw[1][4 * a:4 * b],
                    raw[2][divisor_bytes * a:divisor_bytes * b], raw[3][row_bytes * a:row_bytes * b],
                    b"".join(parts[runs[a]:runs[b]])) for a, b in zip(bounds, bounds[1:])]

    def to_bytes(self) -> bytes:
        payload = b"".join([_HEADER.pack(self.n_rows, self.dimensions, self.n_parts, self.code), self.lengths,
                            self.norms, self.divisors, self.vectors, self.parts])
        return _MAGIC + _CRC.pack(zlib.crc32(payload)) + payload

    @classmethod
    def from_bytes(cls, blob: bytes) -> "BuiltRows":
        """Raises ValueError when `blob` is not an intact entry. That the row lengths add up to `n_parts` is checked
        for a block of entries at once (`_consistent`)."""
        if blob[:len(_MAGIC)] != _MAGIC or len(blob) < _START + _HEADER.size:
            raise ValueError("not an index cache entry")
        if _CRC.unpack_from(blob, len(_MAGIC))[0] != zlib.crc32(memoryview(blob)[_START:]):
            raise ValueError("checksum mismatch")
        n_rows, dims, n_parts, code = _HEADER.unpack_from(blob, _START)
        if code not in _WIDTHS:
            raise ValueError(f"unknown vector type {code!r}")
        a = _START + _HEADER.size
        b = a + 4 * n_rows
        c = b + 4 * n_rows
        d = c + (0 if code == b"f" else 8 * n_rows)
        e = d + _WIDTHS[code] * n_rows * dims
        if e > len(blob) or blob.count(_PART_END, e) != n_parts or (n_parts and blob[-1:] != _PART_END):
            raise ValueError("inconsistent entry")
        # Copies, not memoryviews: bytes are no work for the garbage collector (a build holds many objects).
        return cls(code, n_rows, dims, n_parts, blob[a:b], blob[b:c], blob[c:d], blob[d:e], blob[e:])


def encode_part(part: tuple[str | None, ...]) -> bytes:
    """A part's lexemes as an entry stores them: each lexeme followed by \\x01 (a lexeme too long to keep is \\x02),
    the part by a zero byte."""
    return "".join(_TOO_LONG + _LEXEME_END if w is None else w + _LEXEME_END
                   for w in part).encode("utf-8", "surrogatepass") + _PART_END


def _decoded_part(stored: bytes) -> tuple[str | None, ...]:
    words = stored[:-1].decode("utf-8", "surrogatepass").split(_LEXEME_END)[:-1]
    return tuple(None if w == _TOO_LONG else w for w in words)


class StoredParts:
    """Parts read from entries, as parts of `parsed` (each distinct one added once), and the parts of `parsed` as
    entries store them."""

    def __init__(self, parsed: RunCache) -> None:
        self._parsed = parsed
        self._numbers: dict[bytes, int] = {}  # a stored part -> its number in parsed.parts
        self._encoded: list[bytes] = []  # parsed.parts[i] as an entry stores it

    def numbers(self, stored: bytes) -> np.ndarray:
        """The part numbers (int32) of `stored` parts (`encode_part`, one after another). The distinct ones are
        found by Arrow's dictionary encoding, so only they cost a Python step."""
        data = np.frombuffer(stored, np.uint8)
        offsets = np.zeros(1, np.int64) if not len(data) else np.append(0, np.flatnonzero(data == 0) + 1)
        column = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1,
                                                  [None, pa.py_buffer(offsets), pa.py_buffer(stored)])
        encoded = pc.dictionary_encode(column)
        known = self._numbers
        distinct = [known[part] if part in known else self._add(part) for part in encoded.dictionary.to_pylist()]
        return np.array(distinct, np.int32)[encoded.indices.to_numpy()]

    def _add(self, part: bytes) -> int:
        number = self._numbers[part] = self._parsed.add(_decoded_part(part))
        return number

    def encoded(self, numbers: np.ndarray) -> list[bytes]:
        """Parts of `parsed` as entries store them."""
        parts = self._parsed.parts
        self._encoded.extend(map(encode_part, parts[len(self._encoded):]))
        return list(map(self._encoded.__getitem__, numbers.tolist()))


class CachedRows:
    """A store's rows in groups (a document's chunks, or one memory), each keyed in `cache`: what a build reads back
    and stores, a portion of its groups at a time. `reused` counts the rows read back; `norms` holds every row's
    squared norm once the build is done (read back, or computed for the entries stored)."""

    def __init__(self, cache: "IndexCache", keys: list[bytes], sizes: np.ndarray) -> None:
        self.cache, self.keys = cache, keys
        self.ends = np.cumsum(sizes, dtype=np.int64)  # where each group's rows end
        self.starts = self.ends - sizes
        self.norms = np.empty(int(self.ends[-1]) if len(sizes) else 0, np.float32)
        self.reused = 0

    def rows_of(self, groups: np.ndarray) -> np.ndarray:
        """The rows of ascending `groups`, in order."""
        return ranges(self.starts[groups], self.ends[groups] - self.starts[groups])

    def read(self, groups: range, parts: StoredParts, dimensions: int | None) -> Iterator[tuple]:
        """The entries of `groups` found (of `dimensions` quarter counts, or float32 rows when None), `_LOOKUP`
        rows at a time in group order: which groups (ascending), their rows' vectors and divisors (None for float32
        rows), and their part numbers and row ends (as `RunCache.parts_of` gives them, over `parts`' parsed)."""
        ends, starts, lo = self.ends, self.starts, groups.start
        while lo < groups.stop:
            hi = max(lo + 1, min(groups.stop, int(np.searchsorted(ends, starts[lo] + _LOOKUP, "right"))))
            entries = dict(self.cache.entries(self.keys[lo:hi]))
            found = [g for g, n in zip(range(lo, hi), (ends[lo:hi] - starts[lo:hi]).tolist())
                     if (e := entries.get(self.keys[g])) is not None and e.n_rows == n and _fits(e, dimensions)]
            lo = hi
            chosen = [entries[self.keys[g]] for g in found]
            del entries
            lengths = np.frombuffer(b"".join(e.lengths for e in chosen), "<u4")
            consistent = _consistent(chosen, lengths)
            if not consistent.all():
                self.cache.warn(f"index cache {self.cache.path}: {np.count_nonzero(~consistent)} inconsistent "
                                 "entries are rebuilt")
                found = [g for g, ok in zip(found, consistent) if ok]
                chosen = [e for e, ok in zip(chosen, consistent) if ok]
                lengths = np.frombuffer(b"".join(e.lengths for e in chosen), "<u4")
            if not found:
                continue
            found = np.array(found, np.int64)
            self.reused += len(lengths)
            self.norms[self.rows_of(found)] = np.frombuffer(b"".join(e.norms for e in chosen), "<f4")
            codes = {e.code for e in chosen}
            vectors = (np.frombuffer(b"".join(e.vectors for e in chosen), _VECTOR_TYPES[codes.pop()])
                       if len(codes) == 1 else  # counts of several widths: numpy widens them to the widest
                       np.concatenate([np.frombuffer(e.vectors, _VECTOR_TYPES[e.code]) for e in chosen]))
            block = (found, vectors.reshape(len(lengths), -1),
                     None if dimensions is None else np.frombuffer(b"".join(e.divisors for e in chosen), "<f8"),
                     parts.numbers(b"".join(e.parts for e in chosen)), np.cumsum(lengths, dtype=np.int64))
            del chosen, vectors  # the entries go before the block is put in place
            yield block
            del block

    def store(self, groups: np.ndarray, vectors: "QuarterVectors | np.ndarray", numbers: np.ndarray,
              ends: np.ndarray, parts: StoredParts) -> None:
        """Store the rows of `groups` (ascending): their vectors as the store keeps them, and their parts
        (`RunCache.parts_of`'s numbers and row ends), computing their norms; `_LOOKUP` rows at a time, so the
        entries' bytes are a block's."""
        if not len(groups):
            return
        norms = self.norms[self.rows_of(groups)] = squared_norms(vectors)
        lengths = np.diff(ends, prepend=0)
        bounds = np.append(0, np.cumsum(self.ends[groups] - self.starts[groups]))
        lo = 0
        while lo < len(groups):
            hi = max(lo + 1, int(np.searchsorted(bounds, bounds[lo] + _LOOKUP, "right")) - 1)
            a, b = int(bounds[lo]), int(bounds[hi])
            runs = slice(int(ends[a - 1]) if a else 0, int(ends[b - 1]) if b else 0)
            block = vectors[a:b] if isinstance(vectors, np.ndarray) else vectors.subset(slice(a, b))
            built = BuiltRows.split(block, norms[a:b], lengths[a:b], parts.encoded(numbers[runs]),
                                    (bounds[lo:hi + 1] - a).tolist())
            self.cache.store(dict(zip((self.keys[g] for g in groups[lo:hi].tolist()), built)))
            lo = hi


def _consistent(entries: list[BuiltRows], lengths: np.ndarray) -> np.ndarray:
    """Whether each entry's rows (`lengths`: all of theirs, concatenated) hold its `n_parts` parts."""
    sums = np.append(0, np.cumsum(lengths, dtype=np.int64))[np.cumsum([0] + [e.n_rows for e in entries])]
    return np.diff(sums) == np.array([e.n_parts for e in entries], np.int64)


def _fits(entry: BuiltRows, dimensions: int | None) -> bool:
    """Whether `entry` holds what the build keeps: `dimensions` quarter counts, or float32 rows when None."""
    return entry.code == b"f" if dimensions is None else entry.code != b"f" and entry.dimensions == dimensions


def _chunking_key(chunking: Chunking) -> str:
    return f"{_PARSER}\0{chunking.strategy}\0{chunking.chunk_size}\0{chunking.chunk_overlap}\0"


def _document_key(chunking_key: str, content: str) -> bytes:
    return hashlib.sha256((chunking_key + content).encode("utf-8", "surrogatepass")).digest()


def _memory_key(content: str) -> bytes:
    return hashlib.sha256(f"{_PARSER}\0memory\0{content}".encode("utf-8", "surrogatepass")).digest()


def rows_found(cache_dir: Path, identity: str, chunking: Chunking, documents: list[str],
               memories: list[str]) -> tuple[list[bool], list[bool]]:
    """Which documents and which memories the index cache in `cache_dir` holds built for
    the embedder `identity`, read without writing to it (an estimate's look)."""
    chunking_key = _chunking_key(chunking)
    document_keys = [_document_key(chunking_key, content) for content in documents]
    memory_keys = [_memory_key(content) for content in memories]
    found = stored_keys(Path(cache_dir) / "index" / cache_file_name(identity), "built", "key",
                        document_keys + memory_keys)
    return [key in found for key in document_keys], [key in found for key in memory_keys]


class IndexCache:
    """Built rows in `cache_dir`/index, one SQLite file per embedder identity (WAL: several processes may share it).

    Entries are kept to `max_mb` megabytes (10**6 bytes) of stored rows: past it, the least recently used go
    (an entry is used when a build reads or writes it). A damaged file is set aside and rebuilt, a damaged entry
    rebuilt; a file that cannot be written is left alone and the build goes on without it (`CacheFile`); each
    with a warning through `warn`.
    """

    def __init__(self, cache_dir: Path, identity: str, chunking: Chunking,
                 warn: Callable[[str], None] = lambda _: None, max_mb: float | None = None) -> None:
        self.path = Path(cache_dir) / "index" / cache_file_name(identity)
        self._chunking = _chunking_key(chunking)
        self.warn = warn
        self._max_bytes = round((DEFAULT_MAX_MB if max_mb is None else max_mb) * 1_000_000)  # int() would cut a bound of 2.01 MB to 2,009,999 bytes
        self.file = CacheFile(self.path, "index cache", self._create, warn)

    def document_key(self, content: str) -> bytes:
        return _document_key(self._chunking, content)

    def memory_key(self, content: str) -> bytes:
        return _memory_key(content)

    def entries(self, keys: Iterable[bytes]) -> Iterator[tuple[bytes, BuiltRows]]:
        """The entries found for `keys` (in no set order), `_LOOKUP` keys looked up at a time and each decoded as it
        is read (a caller can let it go before the next); damaged ones are left out (they are rebuilt and stored
        again). Those read count as used."""
        if not self.file.usable:
            return
        keys, read = list(dict.fromkeys(keys)), []
        try:
            with closing(connect_wal(self.path)) as conn:
                for lo in range(0, len(keys), _LOOKUP):
                    wanted = keys[lo:lo + _LOOKUP]
                    for key, blob in conn.execute(f"SELECT key, rows FROM built WHERE key IN ({_marks(wanted)})",
                                                  wanted):
                        try:
                            entry = BuiltRows.from_bytes(blob)
                        except ValueError as exc:
                            self.warn(f"index cache {self.path}: a damaged entry is rebuilt ({exc})")
                            continue
                        read.append(key)
                        yield key, entry
                with conn:  # one use time for them all (ties go by key): one statement per block of keys
                    at = _now()
                    for lo in range(0, len(read), _LOOKUP):
                        used = read[lo:lo + _LOOKUP]
                        conn.execute(f"UPDATE used SET at = ? WHERE key IN ({_marks(used)})", [at, *used])
        except (sqlite3.DatabaseError, OSError) as exc:
            self.file.failed(exc)

    def store(self, entries: dict[bytes, BuiltRows]) -> None:
        """Store `entries`, then let the least recently used go while the stored rows exceed the bound."""
        if not self.file.usable:
            return
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
        except (sqlite3.DatabaseError, OSError) as exc:
            self.file.failed(exc)

    def _create(self, conn: sqlite3.Connection) -> None:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if tables and version != _FORMAT:
            self.warn(f"index cache {self.path} holds entries of format {version}, not {_FORMAT}: they are "
                       "dropped and rebuilt")
            for table in tables:
                conn.execute(f'DROP TABLE "{table}"')
        conn.execute(f"PRAGMA user_version = {_FORMAT}")
        # A rowid table: SQLite keeps rows of several kilobytes far better there than WITHOUT ROWID (filling
        # 20,000 entries of 4.7 kB: 0.46 s of CPU instead of 1.40).
        conn.execute("CREATE TABLE IF NOT EXISTS built (key BLOB PRIMARY KEY, rows BLOB NOT NULL)")
        # When each entry was last used and its size, apart: touching an entry must not rewrite its rows.
        conn.execute("CREATE TABLE IF NOT EXISTS used (key BLOB PRIMARY KEY, at INTEGER NOT NULL, "
                     "size INTEGER NOT NULL) WITHOUT ROWID")


def _marks(values: list) -> str:
    """SQL parameters for `values`, comma-separated."""
    return ",".join("?" * len(values))


def _now() -> int:
    """When an entry is used, in nanoseconds: later uses sort after earlier ones."""
    return time.time_ns()
