"""The rqsweep job with a 384-dimension dense stand-in for the local model, for corpora it would take hours to embed.

    .venv/bin/python benchmarks/dense_standin.py CONFIG --quiet     # as `rqsweep CONFIG --quiet`

A config whose embedder is `kind: local` gets `DenseStandIn` instead of multilingual-e5-small: float32 vectors of
the same shape and density (384 dimensions, every element non-zero, unit length), so the index, the candidate
extraction and memory cost what the model's vectors cost there, but the model's own embedding time is not in any
figure. `benchmarks/growth.py --embedder dense-384` runs its cells through this.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rqsweep import cli
from rqsweep.backends import embedded
from rqsweep.engine.embed import FeatureHashEmbedder

_TEXTS_PER_BLOCK = 8192


class DenseStandIn:
    """The feature hash at 1,024 dimensions projected by a fixed Gaussian 1,024 x 384 matrix, normalised: a
    deterministic dense embedder whose similar texts stay similar."""

    identity = "dense-stand-in/384"

    def __init__(self) -> None:
        self.queries = self
        self._hash = FeatureHashEmbedder(1024)
        self._projection = np.random.default_rng(384).standard_normal((1024, 384)).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), 384), np.float32)
        # Half a portion at a time: its 1,024-d hashed rows are 2.7x its vectors (2,048 at a time: 1.6x the CPU).
        for lo in range(0, len(texts), _TEXTS_PER_BLOCK):
            vectors = self._hash.embed(texts[lo:lo + _TEXTS_PER_BLOCK]) @ self._projection
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            out[lo:lo + len(vectors)] = vectors
        return out


if __name__ == "__main__":
    embedded.EMBEDDERS["local"] = lambda config, log: DenseStandIn()
    cli.entry()
