"""Freed heap memory handed back to the system.

glibc keeps the pages of blocks freed between live ones for its own later use, and pyarrow's pool keeps what its
last large arrays used; polars allocates from a heap of its own (jemalloc) and never gets either. At a million
chunks the index build leaves about 0.1 GB so, and dropping the lexical postings half a gigabyte.
"""

from __future__ import annotations

import ctypes

import pyarrow as pa


def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim this way
        return None


_MALLOC_TRIM = _malloc_trim()


def release_freed() -> None:
    """Return the free pages of glibc's heap (`malloc_trim`) and of pyarrow's pool to the system: a few
    milliseconds."""
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
