"""Remote embedding providers, called the way SOAT deployments call them (OpenAI-compatible, Ollama)."""

from __future__ import annotations

import copy
import json
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np

from rqsweep.engine.embed.protocol import EmbeddingError, to_pgvector_float32
from rqsweep.pacing import Pacer, RequestLimits
from rqsweep.scrub import scrub_secrets

log = logging.getLogger(__name__)

_SHOWN_BODY_CHARS = 300


class RemoteEmbedder(ABC):
    """POSTs texts in batches to one endpoint and checks every answer; subclasses speak the protocol.

    `limits` are the provider's, for this embedder's calls (a Dask run gives each lane a share: `within`). The
    object pickles whole, API key included (a Dask worker embeds with it); its repr shows only the identity."""

    provider: str

    def __init__(self, base_url: str, model: str, batch_size: int, timeout: float,
                 dimensions: int | None = None, limits: RequestLimits = RequestLimits()) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{self.provider} base_url must be an http(s) URL, got scheme {parts.scheme!r}")
        if parts.username or parts.password or parts.query or parts.fragment:
            # The URL lands in identities, cache file names and error messages: keep secrets out of it.
            raise ValueError(f"{self.provider} base_url must not carry credentials, a query or a fragment "
                             f"(host {parts.hostname}); put API keys in an environment variable")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if dimensions is not None and dimensions < 1:
            raise ValueError(f"dimensions must be >= 1, got {dimensions}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.batch_size = batch_size
        self.timeout = timeout
        self.dimensions = dimensions
        self.limits = limits
        self.pacer = Pacer(limits.requests_per_second)

    @property
    def queries(self) -> RemoteEmbedder:
        """Itself: SOAT sends a provider queries as it sends texts."""
        return self

    def within(self, limits: RequestLimits) -> RemoteEmbedder:
        """This embedder with other limits (a lane's share of the run's) and a pacer of its own."""
        lane = copy.copy(self)
        lane.limits, lane.pacer = limits, Pacer(limits.requests_per_second)
        return lane

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` in batches of `batch_size`, one request each, `limits.max_in_flight` at a time and paced;
        raises `EmbeddingError` (a failed request stops the batches not sent yet)."""
        starts = range(0, len(texts), self.batch_size)
        with httpx.Client(timeout=self.timeout) as client, ThreadPoolExecutor(self.limits.max_in_flight) as pool:
            sent = [pool.submit(self._paced_post, client, list(texts[s:s + self.batch_size])) for s in starts]
            try:
                batches = [future.result() for future in sent]
            finally:
                for future in sent:
                    future.cancel()
        for vectors in batches:
            if self.dimensions is None:
                self.dimensions = vectors.shape[1]
            elif vectors.shape[1] != self.dimensions:
                raise self._error(f"returned {vectors.shape[1]}-dimensional embeddings, expected {self.dimensions}")
        if not batches:
            return np.empty((0, self.dimensions or 0), dtype=np.float32)
        return to_pgvector_float32(np.concatenate(batches))

    def _paced_post(self, client: httpx.Client, batch: list[str]) -> np.ndarray:
        self.pacer.wait()
        return self._post(client, batch)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(identity={self.identity!r})"

    @property
    @abstractmethod
    def url(self) -> str:
        """The endpoint texts are POSTed to."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """Provider, model (and requested dimensions) and base URL; see `Embedder`."""

    @abstractmethod
    def _body(self, batch: list[str]) -> dict[str, Any]:
        """The JSON request for one batch."""

    @abstractmethod
    def _rows(self, payload: Any) -> list[Any]:
        """The embeddings of a decoded response, in input order; raises `EmbeddingError` if malformed."""

    def _headers(self) -> dict[str, str]:
        return {}

    def _post(self, client: httpx.Client, batch: list[str]) -> np.ndarray:
        log.debug("POST %s: %d texts", self.url, len(batch))
        try:
            # json.dumps escapes non-ASCII, so lone surrogates travel as \uXXXX, as JSON.stringify sends them.
            response = client.post(self.url, content=json.dumps(self._body(batch)).encode(),
                                   headers={"Content-Type": "application/json", **self._headers()})
        except httpx.TimeoutException:
            raise self._error(f"timed out after {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise self._error(f"failed: {type(exc).__name__}: {self._scrub(str(exc))}") from None
        if response.status_code != 200:
            raise self._error(f"answered HTTP {response.status_code}: {self._server_message(response)}")
        try:
            payload = response.json()
        except ValueError:
            raise self._error(f"answered HTTP 200 with a body that is not JSON: "
                              f"{self._scrub(response.text[:_SHOWN_BODY_CHARS])!r}") from None
        rows = self._rows(payload)
        if len(rows) != len(batch):
            raise self._error(f"returned {len(rows)} embeddings for {len(batch)} texts")
        # json gives int/float for numbers; anything else (strings, bools, nesting) is not an embedding.
        if not all(isinstance(row, list) and row and all(type(v) in (int, float) for v in row) for row in rows):
            raise self._error("returned an embedding that is not a non-empty list of numbers")
        if len({len(row) for row in rows}) != 1:
            raise self._error(f"returned embeddings of inconsistent dimensions {sorted({len(r) for r in rows})}")
        vectors = np.array(rows, dtype=np.float64)
        if not np.isfinite(vectors).all():
            raise self._error("returned non-finite embedding values")
        return vectors

    def _server_message(self, response: httpx.Response) -> str:
        try:
            error = response.json().get("error")
            message = error.get("message") if isinstance(error, dict) else error
        except (ValueError, AttributeError):
            message = None
        text = message if isinstance(message, str) else response.text[:_SHOWN_BODY_CHARS]
        return self._scrub(text) or response.reason_phrase

    def _scrub(self, text: str) -> str:
        """`text` with any secret this embedder holds, or anything credential-shaped, masked (servers may
        echo what they were sent)."""
        return scrub_secrets(text)

    def _error(self, problem: str) -> EmbeddingError:
        return EmbeddingError(f"{self.provider} embeddings (model {self.model!r}): POST {self.url} {problem}")


class OpenAIEmbedder(RemoteEmbedder):
    """An OpenAI-compatible `/embeddings` endpoint, as SOAT's OpenAI provider (the AI SDK) calls it.

    The API key is read from the environment variable `api_key_env` once, here, and sent as a Bearer
    token; it never appears in the identity, the repr, logs or errors. `api_key_env=None` sends no key
    (servers without auth). `dimensions` is sent when set, to shorten embeddings server-side.
    """

    provider = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str | None = "OPENAI_API_KEY",
                 dimensions: int | None = None, batch_size: int = 128, timeout: float = 60.0,
                 limits: RequestLimits = RequestLimits()) -> None:
        super().__init__(base_url, model, batch_size, timeout, dimensions, limits)
        self._requested_dimensions = dimensions
        self._api_key = ""
        if api_key_env is not None:
            self._api_key = os.environ.get(api_key_env, "")
            if not self._api_key:
                raise EmbeddingError(f"openai embeddings: environment variable {api_key_env} "
                                     f"(the API key for {self.base_url}) is not set")

    @property
    def url(self) -> str:
        return f"{self.base_url}/embeddings"

    @property
    def identity(self) -> str:
        dims = "" if self._requested_dimensions is None else f"/{self._requested_dimensions}"
        return f"openai/{self.model}{dims}@{self.base_url}"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _body(self, batch: list[str]) -> dict[str, Any]:
        # encoding_format as the AI SDK sends it: float JSON arrays, never base64.
        body: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self._requested_dimensions is not None:
            body["dimensions"] = self._requested_dimensions
        return body

    def _rows(self, payload: Any) -> list[Any]:
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise self._error("answered without a 'data' list of embedding objects")
        indices = [item.get("index") for item in data]
        if not all(type(i) is int for i in indices) or sorted(indices) != list(range(len(data))):
            raise self._error(f"returned indices {indices}, expected each of 0..{len(data) - 1} once")
        return [item.get("embedding") for item in sorted(data, key=lambda item: item["index"])]

    def _scrub(self, text: str) -> str:
        return scrub_secrets(text, [self._api_key])


class OllamaEmbedder(RemoteEmbedder):
    """Ollama's native `/api/embed` endpoint: `{"model", "input": [...]}` -> `{"embeddings": [...]}`.

    Ollama listens on `http://127.0.0.1:11434` unless configured otherwise.
    """

    provider = "ollama"

    def __init__(self, base_url: str, model: str, batch_size: int = 64, timeout: float = 120.0,
                 limits: RequestLimits = RequestLimits()) -> None:
        super().__init__(base_url, model, batch_size, timeout, limits=limits)

    @property
    def url(self) -> str:
        return f"{self.base_url}/api/embed"

    @property
    def identity(self) -> str:
        return f"ollama/{self.model}@{self.base_url}"

    def _body(self, batch: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": batch}

    def _rows(self, payload: Any) -> list[Any]:
        embeddings = payload.get("embeddings") if isinstance(payload, dict) else None
        if not isinstance(embeddings, list):
            raise self._error("answered without an 'embeddings' list")
        return embeddings
