"""Where the server is and who we are, following the official SOAT CLI's conventions.

Base URL: `backend.base_url`, else `SOAT_BASE_URL`, else the profile's `baseUrl`. Token: `backend.token`,
else `SOAT_TOKEN`, else the profile's `token`; with `backend.username` the job logs in instead (password
from `backend.password` or `SOAT_PASSWORD`). Profiles live in `~/.soat/config.json`, keyed by name, each
`{baseUrl, token}`, chosen by `backend.profile`, then `SOAT_PROFILE`, then `default`. A token starting
`sk_` is an API key; nothing else differs for the client.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from rqsweep.config import HttpConfig
from rqsweep.errors import BackendError

PROFILES = Path("~/.soat/config.json")
LOGIN_PATH = "/api/v1/users/login"


class Secret:
    """A credential that prints as `***`: it can sit in objects that end up in logs or tracebacks."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__


@dataclass(frozen=True)
class Target:
    """A SOAT deployment and the credentials to use on it."""

    base_url: str
    token: Secret | None
    username: str | None
    password: Secret | None
    source: str  # where the base URL came from, for messages

    @property
    def is_api_key(self) -> bool:
        return self.token is not None and self.token.reveal().startswith("sk_")


def _profile(name: str | None, env: Mapping[str, str], path: Path) -> tuple[str, dict]:
    chosen = name or env.get("SOAT_PROFILE") or "default"
    path = path.expanduser()
    if not path.exists():
        if name or env.get("SOAT_PROFILE"):
            raise BackendError(f"SOAT profile {chosen!r} requested but {path} does not exist")
        return chosen, {}
    try:
        profiles = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BackendError(f"{path}: cannot read SOAT profiles ({type(exc).__name__})") from None
    entry = profiles.get(chosen) if isinstance(profiles, dict) else None
    if entry is None:
        if name or env.get("SOAT_PROFILE"):
            raise BackendError(f"{path}: no profile named {chosen!r}")
        return chosen, {}
    if not isinstance(entry, dict):
        raise BackendError(f"{path}: profile {chosen!r} is not an object with baseUrl and token")
    return chosen, entry


def resolve_target(config: HttpConfig, env: Mapping[str, str] = os.environ, profiles: Path = PROFILES) -> Target:
    """Base URL and credentials from the config, the environment and the profile file, in that order."""
    name, profile = _profile(config.profile, env, profiles)
    candidates = [(config.base_url, "backend.base_url"), (env.get("SOAT_BASE_URL"), "SOAT_BASE_URL"),
                  (profile.get("baseUrl"), f"profile {name!r}")]
    base_url, source = next(((u, s) for u, s in candidates if u), (None, ""))
    if not base_url:
        raise BackendError("no SOAT base URL: set backend.base_url, SOAT_BASE_URL or a profile's baseUrl "
                           f"in {PROFILES}")
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise BackendError(f"SOAT base URL from {source} is not an http(s) URL: {base_url!r}")
    if config.username:
        password = config.password or env.get("SOAT_PASSWORD")
        if not password:
            raise BackendError(f"backend.username {config.username!r} needs a password: backend.password or "
                               "SOAT_PASSWORD")
        return Target(base_url.rstrip("/"), None, config.username, Secret(password), source)
    token = config.token or env.get("SOAT_TOKEN") or profile.get("token")
    return Target(base_url.rstrip("/"), Secret(token) if token else None, None, None, source)


class Session:
    """The bearer token in use; a login session can log in again when the server says 401."""

    def __init__(self, target: Target):
        self.target = target
        self._token = target.token
        self._lock = threading.Lock()

    @property
    def can_login(self) -> bool:
        return self.target.username is not None

    def headers(self) -> dict[str, str]:
        return {} if self._token is None else {"Authorization": f"Bearer {self._token.reveal()}"}

    def login(self, post: Callable[[str, dict], dict]) -> None:
        """Log in with username and password; `post(path, body)` sends one unauthenticated request."""
        assert self.target.username is not None and self.target.password is not None
        with self._lock:
            answer = post(LOGIN_PATH, {"username": self.target.username, "password": self.target.password.reveal()})
            token = answer.get("token") if isinstance(answer, dict) else None
            if not isinstance(token, str) or not token:
                raise BackendError(f"login at {self.target.base_url}{LOGIN_PATH} answered without a token")
            self._token = Secret(token)
