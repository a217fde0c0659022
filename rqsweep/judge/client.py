"""One OpenAI-compatible chat-completions endpoint: `ChatClient(base_url, model).ask(prompt)` POSTs
`{base_url}/chat/completions` and returns the answer's text and the tokens it cost.

The API key is read once from the environment variable `api_key_env` and sent as a Bearer token; it never reaches
a message, a log, a file or an exception (the server's answers are scrubbed of it before they are shown).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from rqsweep.config import JudgeConfig
from rqsweep.errors import BackendError, InputError
from rqsweep.scrub import scrub_secrets

_SHOWN_BODY_CHARS = 300


@dataclass(frozen=True)
class Reply:
    text: str
    tokens: int  # the endpoint's usage.total_tokens (prompt and completion); 0 when it reports none


class ChatClient:
    """Send a prompt, get text back; one connection pool for every call. Use it as a context manager."""

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None, timeout: float = 60.0):
        self.base_url, self.model = base_url.rstrip("/"), model
        self._key = ""
        if api_key_env is not None:
            self._key = os.environ.get(api_key_env, "")
            if not self._key:
                raise InputError(f"${api_key_env}", "", f"is not set: the judge's API key for {self.base_url} "
                                                        "(judge.api_key_env)")
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers)

    @classmethod
    def of(cls, config: JudgeConfig) -> ChatClient:
        return cls(config.base_url, config.model, config.api_key_env, config.timeout)

    @property
    def name(self) -> str:
        """What a judgments file's `judge` column says."""
        return f"openai-compatible {self.model}"

    def ask(self, prompt: str, system: str | None = None) -> Reply:
        """The model's answer to one user message (after `system`, when given), at temperature 0."""
        messages = [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": prompt}]
        try:
            response = self._http.post(f"{self.base_url}/chat/completions",
                                       json={"model": self.model, "messages": messages, "temperature": 0})
        except httpx.HTTPError as exc:
            raise self._error(f"failed: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise self._error(f"answered HTTP {response.status_code}: {response.text[:_SHOWN_BODY_CHARS]}")
        try:
            body = response.json()
            text = body["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise self._error(f"answered without choices[0].message.content: "
                              f"{response.text[:_SHOWN_BODY_CHARS]}") from None
        if not isinstance(text, str):
            raise self._error("answered a message whose content is not text")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        tokens = usage.get("total_tokens")
        return Reply(scrub_secrets(text, [self._key]), tokens if type(tokens) is int else 0)

    def _error(self, problem: str) -> BackendError:
        return BackendError(scrub_secrets(f"judge {self.model!r}: POST {self.base_url}/chat/completions {problem}",
                                          [self._key]))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChatClient({self.name}@{self.base_url})"
