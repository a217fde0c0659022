"""A column of texts kept out of memory: a million chunks' texts would take about 0.6 GB as Python strings.

The texts are UTF-8 (lone surrogates kept, as a JSON string may hold one) in an unnamed temporary file, which
the system removes when it is closed or the process ends, however it ends; only each text's end offset stays
in memory (8 bytes a row). Reads are positional (`os.pread`) of one row or a range of rows, so no file page is
mapped into the process: what a reader holds is the portion it asked for.
"""

from __future__ import annotations

import os
import tempfile
from typing import IO, Iterable, Iterator, Sequence, overload

import numpy as np

ROWS_READ_AT_ONCE = 8192  # a portion read by iteration: about 5 MB of chunk texts, a few times that as strings


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def sequence_equal(self: Sequence, other: object) -> bool:
    """`==` of a sequence read from a file with any sequence (a list, a tuple): item by item, in order."""
    if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
        return NotImplemented
    return len(other) == len(self) and all(a == b for a, b in zip(self, other))


class Texts(Sequence[str]):
    """Rows `lo` to `hi` of a file of texts. An index gives one text, a slice the list of its texts (read at
    once); `view` gives a window of rows without reading them."""

    def __init__(self, file: IO[bytes], ends: np.ndarray, lo: int = 0, hi: int | None = None):
        self._file, self._ends = file, ends
        self._lo, self._hi = lo, len(ends) if hi is None else hi

    @classmethod
    def of(cls, texts: Iterable[str]) -> "Texts":
        writer = TextsWriter()
        writer.add(texts)
        return writer.finish()

    def __len__(self) -> int:
        return self._hi - self._lo

    def _start(self, row: int) -> int:
        return int(self._ends[row - 1]) if row else 0

    def _read(self, lo: int, hi: int) -> list[str]:
        """The texts of rows lo..hi of the file (absolute row numbers)."""
        if lo >= hi:
            return []
        start = self._start(lo)
        blob = os.pread(self._file.fileno(), int(self._ends[hi - 1]) - start, start)
        cuts = (self._ends[lo:hi] - start).tolist()
        return [blob[a:b].decode("utf-8", "surrogatepass") for a, b in zip([0, *cuts[:-1]], cuts)]

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            if step == 1:
                return self._read(self._lo + lo, self._lo + max(lo, hi))
            return [self[j] for j in range(lo, hi, step)]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        row = self._lo + (i % n)
        return self._read(row, row + 1)[0]

    def __iter__(self) -> Iterator[str]:
        for texts in self.portions():
            yield from texts

    def portions(self, rows: int | None = None) -> Iterator[list[str]]:
        """The texts in order, `rows` (default ROWS_READ_AT_ONCE) at a time."""
        rows = rows or ROWS_READ_AT_ONCE
        for lo in range(self._lo, self._hi, rows):
            yield self._read(lo, min(lo + rows, self._hi))

    def view(self, lo: int, hi: int) -> "Texts":
        lo, hi, _ = slice(lo, hi).indices(len(self))
        return Texts(self._file, self._ends, self._lo + lo, self._lo + max(lo, hi))

    def __reduce__(self):
        # To another process (a Dask worker): the rows' bytes, written to a file of its own there.
        start = self._start(self._lo)
        ends = self._ends[self._lo:self._hi] - start
        blob = os.pread(self._file.fileno(), int(ends[-1]) if len(ends) else 0, start)
        return _unpickled, (blob, ends)

    __eq__ = sequence_equal
    __hash__ = None

    def __repr__(self) -> str:
        return f"Texts({len(self)} rows)"


def _unpickled(blob: bytes, ends: np.ndarray) -> Texts:
    file = tempfile.TemporaryFile(prefix="rqsweep-texts-")
    file.write(blob)
    file.flush()
    return Texts(file, ends)


class TextsWriter:
    """Texts added a portion at a time, then `finish()`ed into a `Texts`."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="rqsweep-texts-")
        self._ends: list[np.ndarray] = []
        self._size = 0

    def add(self, texts: Iterable[str]) -> None:
        encoded = [_encoded(t) for t in texts]
        if not encoded:
            return
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        self._ends.append(self._size + np.cumsum(lengths))
        self._size += int(lengths.sum())
        self._file.write(b"".join(encoded))

    def finish(self) -> Texts:
        self._file.flush()
        return Texts(self._file, np.concatenate(self._ends) if self._ends else np.zeros(0, np.int64))
