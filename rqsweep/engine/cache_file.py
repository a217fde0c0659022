"""The SQLite file behind an on-disk cache (the vector cache, the index cache), and what its failures mean.

A cache changes where rows come from, never what they are: a run without it gives the same results. So no failure
of its file stops a run. A damaged file (SQLite finds no database, or a malformed one) is set aside and made again;
any other failure (a full disk or quota, a read-only one, a folder that cannot be made, a lock held past the busy
timeout) leaves the file as it is, which may well be valid, and the cache unused for the rest of the run.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

_BUSY_TIMEOUT_S = 60.0
_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_NEARLY_FULL = 1_000_000  # bytes free on a disk that SQLite's writes fill (a page, a journal, a WAL index)


class CacheFile:
    """The SQLite file `path` of a cache (`what`, as warnings name it), its tables made by `create` on a connection.

    A cache calls `failed` with what its file raised (`sqlite3.DatabaseError` or `OSError`), and reads or writes
    only while `usable`. Each failure is said once through `warn`, naming the file."""

    def __init__(self, path: Path, what: str, create: Callable[[sqlite3.Connection], None],
                 warn: Callable[[str], None]) -> None:
        self.path, self.what, self._create, self.warn = path, what, create, warn
        self.usable = True
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._make()
        except (sqlite3.DatabaseError, OSError) as exc:
            self.failed(exc)

    def _make(self) -> None:
        with closing(connect_wal(self.path)) as conn, conn:
            self._create(conn)

    def failed(self, exc: sqlite3.DatabaseError | OSError) -> None:
        """Set a damaged file aside and make it again; after any other failure, use the cache no more."""
        if not self.usable:
            return
        if _code(exc) in _DAMAGED:
            aside = self.path.with_name(self.path.name + ".damaged")
            self.warn(f"{self.what} {self.path} is damaged ({exc}): moved to {aside.name}, rebuilding it")
            try:
                for suffix in ("-wal", "-shm"):
                    self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
                self.path.replace(aside)
                self._make()
                return
            except (sqlite3.DatabaseError, OSError) as again:
                exc = again
        self.usable = False
        self.warn(f"{self.what} {self.path} cannot be used ({exc}{_disk(self.path.parent)}): the file is left as it "
                  "is, and this run goes on without the cache")


def _code(exc: BaseException) -> int | None:
    """SQLite's primary result code for `exc`, None for an error not from SQLite."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _disk(folder: Path) -> str:
    """What the disk holding `folder` says of a failure there (SQLite's own message can be "disk I/O error")."""
    try:
        disk = os.statvfs(folder)
    except OSError:
        return ""
    if disk.f_flag & os.ST_RDONLY:
        return "; its disk is read-only"
    free = disk.f_bavail * disk.f_frsize
    return f"; its disk is full: {free:,} bytes free" if free < _NEARLY_FULL else ""


def connect_wal(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file `path` in WAL mode, which several processes can read and write at once."""
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S)
    # WAL mode is kept in the file: set once. Switching needs a lock SQLite does not wait for (no busy
    # timeout), so two processes creating the file at once retry here instead of failing. Only a lock is waited
    # for: a full or read-only disk fails at once.
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    try:
        while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as exc:
                if _code(exc) not in _BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        # NORMAL is crash-safe under WAL; a power cut may drop the last commits, which are built again.
        conn.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def cache_file_name(identity: str) -> str:
    """A readable, collision-proof file name for an identity (which may hold '/', ':' and a URL)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", identity)[:80]
    return f"{readable}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.sqlite3"


def stored_keys(path: Path, table: str, column: str, keys: list[bytes]) -> set[bytes]:
    """Which of `keys` the cache file `path` holds in `table`'s `column`, read without writing to the file or beside
    it (an estimate's look: opened immutable, so no -wal or -shm file is made, and rows a writer has not yet
    checkpointed are not seen); none when the file is missing or cannot be read."""
    if not path.is_file():
        return set()
    found: set[bytes] = set()
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)) as conn:
            for lo in range(0, len(keys), 500):  # under SQLite's bound-parameter limit
                wanted = keys[lo:lo + 500]
                query = f"SELECT {column} FROM {table} WHERE {column} IN ({','.join('?' * len(wanted))})"
                found.update(key for (key,) in conn.execute(query, wanted))
    except sqlite3.DatabaseError:
        return set()
    return found
