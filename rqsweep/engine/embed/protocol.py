"""What every embedder is, and how its vectors become the float32 values pgvector stores."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol

import numpy as np

from rqsweep.errors import BackendError

_FLOAT32_TINY = 2.0**-126


class Embedder(Protocol):
    """Turns texts into the vectors SOAT would store for them.

    `identity` names the embedder, its model and its dimensions (for example `feature-hash/1024`); it keys
    on-disk caches, so it is stable across runs and never contains a secret. `queries` embeds search queries:
    the embedder itself, except for a model that embeds queries differently from the texts it searches.
    """

    @property
    def identity(self) -> str:
        """Stable name of embedder, model and dimensions; never a secret."""
        ...

    @property
    def queries(self) -> Embedder:
        """The embedder of search queries (often this one)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 row per text, shape (len(texts), d), as pgvector would hold it."""
        ...


def described(embedder: Embedder) -> str:
    """What ranked, as a run records it: the identity, and the queries' where they differ."""
    queries = embedder.queries.identity
    return embedder.identity if queries == embedder.identity else f"{embedder.identity} (queries: {queries})"


def numerics_of(embedder: Embedder) -> str | None:
    """What besides the model changes its vectors' last bits on this machine (an embedder's optional `numerics`:
    for the local model, the C library's math); None where the arithmetic is exact (the feature hash) or not
    ours to see (a provider's server)."""
    return getattr(embedder, "numerics", None)


def precision_of(embedder: Embedder) -> float:
    """How far a cosine of this embedder's vectors may move with the numerics alone (an embedder's optional
    `precision`); 0 where the vectors are the same on every machine."""
    return getattr(embedder, "precision", 0.0)


def texts_per_step(embedder: Embedder) -> int | None:
    """How many texts a model in this process embeds between two reports of progress (an embedder's optional
    `texts_per_step`); None: all of a call's texts at once (a provider's batches, spread over the call)."""
    return getattr(embedder, "texts_per_step", None)


def with_numerics(identity: str, embedder: Embedder) -> str:
    """`identity` keyed by the embedder's numerics too: a cache or a resumed start never mixes vectors made with
    another C library's math."""
    numerics = numerics_of(embedder)
    return identity if numerics is None else f"{identity}/{numerics}"


class EmbeddingError(BackendError):
    """An embedding provider was unreachable or answered something unusable."""


def to_pgvector_float32(vectors: np.ndarray) -> np.ndarray:
    """Round float64 vectors to the float32 values pgvector stores when SOAT writes them.

    SOAT sends vectors as the text literal `[${embedding.join(',')}]`: JavaScript prints each double as the
    shortest decimal that reads back to it, and pgvector reads that decimal with `strtof`. That equals a
    plain float64 -> float32 cast except when the double lies exactly halfway between two float32 values:
    there the cast rounds to even, while `strtof` rounds towards whichever side the printed decimal fell.
    """
    x = np.ascontiguousarray(vectors, dtype=np.float64)
    out = x.astype(np.float32)
    # A double at a normal float32 midpoint has, in the 29 mantissa bits float32 drops, a 1 then 28 zeros;
    # subnormal float32 midpoints do not fit that pattern, so tiny non-zero values are all checked slowly.
    low_bits = x.view(np.uint64) & np.uint64(0x1FFFFFFF)
    suspects = (low_bits == np.uint64(0x10000000)) | ((np.abs(x) < _FLOAT32_TINY) & (x != 0))
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    for i in np.flatnonzero(suspects.reshape(-1)):
        flat_out[i] = _strtof_of_shortest_decimal(float(flat_x[i]), flat_out[i])
    return out


def _strtof_of_shortest_decimal(value: float, cast: np.float32) -> np.float32:
    if not np.isfinite(value) or float(cast) == value:
        return cast
    other = np.nextafter(cast, np.float32(np.inf if value > float(cast) else -np.inf))
    if (float(cast) + float(other)) / 2 != value:
        return cast
    # repr() is the shortest round-tripping decimal, the digits JavaScript prints too.
    offset = Fraction(repr(value)) - Fraction(value)
    if offset == 0:
        return cast
    toward_other = (offset > 0) == (float(other) > value)
    return other if toward_other else cast
