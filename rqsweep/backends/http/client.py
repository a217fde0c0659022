"""One shared HTTP client for a SOAT deployment: keep-alive, bounded concurrency, pacing, retries.

Retries (exponential backoff with jitter) cover what is transient: connection errors, timeouts, a dropped
connection, 429 (after at least its Retry-After), 5xx, and a 2xx answer that is not what was asked for (not JSON,
an HTML page, the wrong shape as the caller's `read` finds it, or larger than `max_response_bytes`: a proxy or
a server in trouble). Other 4xx are answers, never retried. An answer is read as it streams in and dropped
once rejected: past the cap the connection is closed unread, and a rejection quotes none of it. A request
that still fails raises `RequestFailed`, which the caller records against its (setting, query). What
cannot be a per-search accident stops the run with `BackendError`: no connection at all before the server
ever answered (a wrong URL or a server that is down: retrying only delays the news), credentials rejected,
or `max_consecutive_failures` requests failing in a row (the server is gone: resume the run later), or
`EMBEDDER_FAILURES` answers in a row saying that the server's embedding provider failed (each takes the
provider's timeouts, about 6 s on SOAT, and every search needs it: resume the run once it embeds again), or
that many in a row of v0.28.0's opaque `500 INTERNAL_ERROR "Internal Server Error"`, its answer when the
provider is down (or its database: the stop names both).
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Callable, Iterable, TypeVar

import httpx

from rqsweep.backends.http.auth import Session, Target
from rqsweep.errors import BackendError, BackendRefused
from rqsweep.pacing import Pacer
from rqsweep.scrub import scrub_secrets

T = TypeVar("T")
R = TypeVar("R")

_MAX_DELAY = 60.0  # seconds: cap on one backoff or Retry-After wait
# Connection-level failures where the request surely never reached the server: safe to retry a write.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# No connection could be made: before the server's first answer, the run stops at once.
_UNREACHABLE = (httpx.ConnectError, httpx.ConnectTimeout)
# SOAT answers this 503 when no embedding provider is configured: retrying cannot help.
_PERMANENT_5XX_CODES = {"EMBEDDING_NOT_CONFIGURED"}
# How SOAT says that its embedding provider failed: newer releases with AI_PROVIDER_ERROR, every release
# with a message about embedding (or, before any provider is set, EMBEDDING_NOT_CONFIGURED).
_EMBEDDER_CODES = {"AI_PROVIDER_ERROR", "EMBEDDING_NOT_CONFIGURED"}
# v0.28.0 answers any unexpected error with this, its embedding provider's failure included (after its ~6 s of
# timeouts): no code or word says which.
OPAQUE_MESSAGE = "Internal Server Error"
EMBEDDER_FAILURES = 4  # attempts in a row, any request's: a few, so a lone provider hiccup does not stop a run
# What one answer may hold. A search answer at SOAT's largest limit is a few hundred kB, a listing page less:
# anything near this is a proxy's or a broken server's, and reading it whole would hold it all in memory.
MAX_RESPONSE_BYTES = 32_000_000


@dataclass(frozen=True)
class Reply:
    """A successful answer: status, parsed JSON body, and the server's clock from its Date header."""

    status: int
    body: object
    server_time_ms: int | None


class RequestFailed(Exception):
    """A request that failed for good: an HTTP error answer, or transient failures past the retries."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None, meta: object = None):
        super().__init__(message)
        self.status, self.code, self.meta = status, code, meta


@dataclass
class Stats:
    """What the client did, for logs and benchmarks."""

    requests: int = 0  # HTTP exchanges attempted, retries included
    retries: int = 0
    failures: int = 0  # requests that failed for good
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A Retry-After header (delta-seconds or an HTTP date) in seconds from now, or None if absent/unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def _server_time_ms(response: httpx.Response) -> int | None:
    try:
        return round(parsedate_to_datetime(response.headers["date"]).timestamp() * 1000)
    except (KeyError, TypeError, ValueError):
        return None


def _content_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "no content type")


def _read_capped(response: httpx.Response, cap: int) -> bytes:
    """The body of a streamed response, or RequestFailed as soon as it is known to exceed `cap` bytes."""
    too_large = RequestFailed(f"HTTP {response.status_code} answer larger than {cap / 1e6:g} MB "
                              f"({_content_type(response)})", response.status_code)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    body = bytearray()
    for piece in response.iter_bytes():
        body += piece
        if len(body) > cap:
            raise too_large
    return bytes(body)


def _json_of(content: bytes, response: httpx.Response) -> object:
    """A 2xx answer's JSON; one sent as server-sent events (MCP's streamable HTTP) is its last `data:` line's."""
    if _content_type(response).startswith("text/event-stream"):
        data = [line[5:] for line in content.splitlines() if line.startswith(b"data:")]
        if not data:
            raise ValueError("no data in the event stream")
        content = data[-1]
    return json.loads(content)


def _error_of(response: httpx.Response, content: bytes, scrub: Callable[[str], str]) -> RequestFailed:
    """SOAT's error body `{"error": {"code", "message", "meta"?}}` as an exception, its text passed through
    `scrub`; anything else described."""
    try:
        error = json.loads(content).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        return RequestFailed(scrub(f"HTTP {response.status_code} {code}: {message}"), response.status_code,
                             code if isinstance(code, str) else None, error.get("meta"))
    return RequestFailed(f"HTTP {response.status_code} without SOAT's error body ({_content_type(response)})",
                         response.status_code)


def backend_error(message: str, failure: RequestFailed) -> BackendError:
    """The error that stops a run on `failure`: `BackendRefused` for a 4xx that asking again gets again (not a
    timeout, a rate limit or the credentials)."""
    repeats = failure.status is not None and 400 <= failure.status < 500 and failure.status not in (401, 403, 408, 429)
    return (BackendRefused if repeats else BackendError)(message)


def embedder_failed(failure: RequestFailed) -> bool:
    """Whether a server error says that the server's embedding provider failed."""
    return (failure.status or 0) >= 500 and (failure.code in _EMBEDDER_CODES or "embed" in str(failure).lower())


class SoatClient:
    """Thread-safe client: `request` from any thread, `map` to run many requests `max_in_flight` at a time."""

    def __init__(self, target: Target, *, max_in_flight: int = 8, requests_per_second: float | None = None,
                 timeout: float = 30.0, retries: int = 4, backoff: float = 0.5, max_consecutive_failures: int = 20,
                 verify_tls: bool = True, reached: bool = False, max_response_bytes: int = MAX_RESPONSE_BYTES):
        """`reached`: the server has answered this run before (a Dask worker's client continuing the
        coordinator's run), so a connection that cannot be made is retried rather than fatal."""
        self.base_url = target.base_url
        self.max_response_bytes = max_response_bytes
        self.session = Session(target)
        self.retries, self.backoff = retries, backoff
        self.max_consecutive_failures = max_consecutive_failures
        self.max_in_flight = max_in_flight
        self.stats = Stats()
        self.http = httpx.Client(
            base_url=target.base_url, timeout=timeout, verify=verify_tls,
            limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight),
        )
        self._pool = ThreadPoolExecutor(max_in_flight, thread_name_prefix="soat-http")
        self.pacer = Pacer(requests_per_second)
        self._failure_lock = threading.Lock()
        self._consecutive_failures = 0
        self._embedder_failures = 0  # attempts in a row answered with an embedding provider's failure
        self._stopped: str | None = None
        self._answered = reached  # has the server answered anything yet?
        self._jitter = random.Random()

    def connect(self) -> None:
        """Log in when configured (an unreachable server fails at once, see `request`)."""
        if not self.session.can_login:
            return

        def post(path: str, body: dict) -> object:
            try:
                return self.request("POST", path, body, authenticated=False).body
            except RequestFailed as exc:
                raise BackendError(f"SOAT at {self.base_url} refused the login as "
                                   f"{self.session.target.username!r}: {exc}") from None

        self.session.login(post)

    def request(self, method: str, path: str, body: object = None, *, params: dict | None = None,
                idempotent: bool = True, authenticated: bool = True, probing: bool = False,
                read: Callable[[object], object] | None = None, headers: dict[str, str] | None = None,
                credentials_checked: bool = True) -> Reply:
        """One API call with SOAT's error handling; see the module docstring for what is retried.

        `read(payload)`: what the caller makes of a 2xx answer's JSON (the reply's body); a RequestFailed it
        raises (an answer of the wrong shape) is retried like a transient failure, its message scrubbed.

        `idempotent=False` (writes) retries only failures where the request was surely not processed:
        connection refused or timed out before sending, and 429. Until the server has answered once, a
        connection that cannot be made is an immediate `BackendError`; after that it is retried like any
        transient failure (a dropped connection right after the login is not a dead server). `probing`: a
        4xx answer is what the caller asked to learn (an unknown field, a missing route), not a failure the
        stats or the breaker count. `credentials_checked=False`: a 401 or 403 is that route's answer (one
        that takes other credentials than the API's), not a reason to stop the run. `headers` are sent
        besides the credentials.
        """
        relogged = False
        attempt = 0
        while True:
            if self._stopped:
                raise BackendError(self._stopped)
            self.pacer.wait()
            self.stats.add(requests=1)
            sent = (self.session.headers() if authenticated else {}) | (headers or {})
            try:
                with self.http.stream(method, path, json=body, params=params, headers=sent) as response:
                    self._answered = True
                    content = _read_capped(response, self.max_response_bytes)
            except httpx.TransportError as exc:
                problem = self.scrub(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
                if not self._answered and isinstance(exc, _UNREACHABLE):
                    raise BackendError(f"cannot reach SOAT at {self.base_url} ({problem})") from None
                retryable = idempotent or isinstance(exc, _NOT_SENT)
                failure, delay = RequestFailed(problem), self._backoff(attempt)
            except RequestFailed as exc:  # past the size cap
                failure, retryable, delay = exc, idempotent, self._backoff(attempt)
            else:
                status = response.status_code
                if 200 <= status < 300:
                    try:
                        payload = None if status == 204 else _json_of(content, response)  # 204: No Content
                        del content  # held no longer than needed: answers can be large
                        payload = payload if read is None else read(payload)
                    except ValueError:
                        failure = RequestFailed(f"HTTP {status} answer is not JSON ({_content_type(response)})", status)
                        retryable, delay = idempotent, self._backoff(attempt)
                    except RequestFailed as exc:  # it may quote what the server sent back, credentials included
                        failure = type(exc)(self.scrub(str(exc)), status)
                        retryable, delay = idempotent, self._backoff(attempt)
                    else:
                        self._succeeded()
                        return Reply(status, payload, _server_time_ms(response))
                else:
                    failure = _error_of(response, content, self.scrub)
                    self._note_embedder(failure)
                    checked = authenticated and credentials_checked
                    if status == 401 and checked and self.session.can_login and not relogged:
                        relogged = True
                        self.connect()  # the login token expired: log in again, once
                        continue
                    if status in (401, 403) and checked:
                        raise BackendError(f"SOAT at {self.base_url} rejected the credentials on {path}: "
                                           f"{failure}") from None
                    retryable = status == 429 or (status >= 500 and idempotent
                                                  and failure.code not in _PERMANENT_5XX_CODES)
                    delay = self._backoff(attempt)
                    if status == 429:
                        delay = max(delay, min(_MAX_DELAY, retry_after_seconds(response.headers.get("retry-after"))
                                               or 0.0))
            if not retryable or attempt >= self.retries:
                if not (probing and failure.status is not None and 400 <= failure.status < 500):
                    self._failed(failure, path)
                if attempt:
                    raise type(failure)(f"{failure} (after {attempt + 1} attempts)", failure.status, failure.code,
                                        failure.meta)
                raise failure
            attempt += 1
            self.stats.add(retries=1)
            time.sleep(delay)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`fn` over `items`, `max_in_flight` at a time, results in order; the first `BackendError` stops all."""
        futures: list[Future] = [self._pool.submit(fn, item) for item in items]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for future in done:
            if future.exception() is not None:
                for other in pending:
                    other.cancel()
                raise future.exception()
        return [f.result() for f in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.http.close()

    def scrub(self, text: str) -> str:
        """A server's words with our credentials (and anything credential-shaped) masked: servers and
        proxies may echo the Authorization header or the login body."""
        return scrub_secrets(text, self.session.secrets())

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with equal jitter: half the step fixed, half random, so retries spread out."""
        step = min(_MAX_DELAY, self.backoff * 2**attempt)
        return step / 2 + self._jitter.uniform(0, step / 2)

    def _succeeded(self) -> None:
        with self._failure_lock:
            self._consecutive_failures = self._embedder_failures = 0

    def _note_embedder(self, failure: RequestFailed) -> None:
        """Count an answer that says (or, opaque, may say) that the server could not embed; `EMBEDDER_FAILURES` in
        a row stop the run."""
        opaque = (failure.status, failure.code) == (500, "INTERNAL_ERROR") and str(failure).endswith(OPAQUE_MESSAGE)
        if not (opaque or embedder_failed(failure)):
            with self._failure_lock:
                self._embedder_failures = 0
            return
        check = ("check the provider it embeds with (SOAT's EMBEDDING_PROVIDER and EMBEDDING_MODEL, and the "
                 "provider's own service)")
        with self._failure_lock:
            self._embedder_failures += 1
            if self._embedder_failures >= EMBEDDER_FAILURES and not self._stopped:
                self._stopped = (
                    f"SOAT at {self.base_url} answered {self._embedder_failures} requests in a row with {failure}, "
                    "its answer to an unexpected error: SOAT v0.28.0 answers so when its embedding provider is down "
                    f"(after about 6 s) or its database is; stopping: {check}, its database, and the server's log"
                    if opaque else
                    f"SOAT at {self.base_url} cannot embed: {self._embedder_failures} answers in a row said its "
                    f"embedding provider failed (last: {failure}); stopping: {check}")
        if self._stopped:
            raise BackendError(self._stopped)

    def _failed(self, failure: RequestFailed, path: str) -> None:
        self.stats.add(failures=1)
        with self._failure_lock:
            self._consecutive_failures += 1
            if self._consecutive_failures >= self.max_consecutive_failures and not self._stopped:
                self._stopped = (f"{self._consecutive_failures} requests to SOAT at {self.base_url} failed in a row "
                                 f"(last: {path}: {failure}); stopping: the server is gone or broken")
        if self._stopped:
            raise BackendError(self._stopped)
