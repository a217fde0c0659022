"""Feature-hash vectors kept as what they are made of: about a byte per element, where pgvector's float32 takes four.

A feature-hash row is `fl32(counts / 4 / divisor)` (`feature_hash.quarters_to_vectors`): small integer counts of
quarter weights per dimension and one float64 divisor, the row's L2 norm. At 1,024 dimensions a million rows hold
1 GB of counts instead of 4.1 GB of float32. Any row comes back bit for bit on demand, which is all pgvector's exact
arithmetic needs; `cosine_top_many`'s estimate reads the counts' columns directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain

import numpy as np

from rqsweep.engine.embed.feature_hash import FeatureHashEmbedder, quarters_to_vectors

_PRODUCT_ROWS = 16_384  # rows converted to float32 at a time for a dense query's product


class QuarterVectors:
    """A store's feature-hash vectors: `counts` (rows x dimensions, column-major, the narrowest integer type that
    holds them) and each row's `divisors`. Indexed by rows (a slice or integer array) it gives pgvector's float32
    rows; `np.asarray` gives them all."""

    def __init__(self, counts: np.ndarray, divisors: np.ndarray):
        self.counts, self.divisors = counts, divisors

    @classmethod
    def embed(cls, embedder: FeatureHashEmbedder, texts: Sequence[str], portion: int) -> "QuarterVectors":
        """The vectors of `texts`, `portion` texts cut into runs at a time (the float32 rows are never held)."""
        return cls.of_blocks(len(texts), embedder.dimensions,
                             chain.from_iterable(embedder.quarter_blocks(texts[start:start + portion])
                                                 for start in range(0, len(texts), portion)))

    @classmethod
    def of_blocks(cls, n_rows: int, dimensions: int,
                  blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> "QuarterVectors":
        """The vectors of `n_rows` rows from `quarter_blocks`' blocks of them, in order."""
        out, start = cls.empty(n_rows, dimensions), 0
        for block, block_divisors in blocks:
            out.put(slice(start, start + len(block)), block, block_divisors)
            start += len(block)
        return out

    @classmethod
    def empty(cls, n_rows: int, dimensions: int) -> "QuarterVectors":
        """Room for `n_rows` rows, filled by `put`."""
        return cls(np.empty((n_rows, dimensions), np.int8, order="F"), np.empty(n_rows))

    def put(self, rows: slice | np.ndarray, counts: np.ndarray, divisors: np.ndarray) -> None:
        """Set `rows` to these counts and divisors, widening the counts' type when one does not fit."""
        widest = max(int(counts.max()), -int(counts.min())) if counts.size else 0
        if widest > np.iinfo(self.counts.dtype).max:
            self.counts = self.counts.astype(np.int16 if widest < 2**15 else np.int32, order="F")
        self.counts[rows], self.divisors[rows] = counts, divisors

    def subset(self, rows: slice | np.ndarray) -> "QuarterVectors":
        """The vectors of `rows`, kept as these are."""
        return QuarterVectors(self.counts[rows], self.divisors[rows])

    @property
    def shape(self) -> tuple[int, int]:
        return self.counts.shape

    @property
    def nbytes(self) -> int:
        return self.counts.nbytes + self.divisors.nbytes

    @property
    def value_scale(self) -> np.ndarray:
        """Per row, what its counts are multiplied by to give its elements, up to the float32 rounding of each."""
        return 0.25 / self.divisors

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, rows: slice | np.ndarray) -> np.ndarray:
        return quarters_to_vectors(self.counts[rows], self.divisors[rows])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = self[:]
        return rows if dtype is None else rows.astype(dtype)

    def count_products(self, queries: np.ndarray) -> np.ndarray:
        """float32 `queries @ counts.T`, a block of rows at a time."""
        out = np.empty((len(queries), len(self)), np.float32)
        for start in range(0, len(self), _PRODUCT_ROWS):
            block = self.counts[start:start + _PRODUCT_ROWS].astype(np.float32)
            out[:, start:start + len(block)] = queries @ block.T
        return out
