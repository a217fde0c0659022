"""Where the server is and who we are, following the official SOAT CLI's conventions.

Base URL: `backend.base_url`, else `SOAT_BASE_URL`, else the profile's `baseUrl`. Token: `backend.token`,
else `SOAT_TOKEN`, else the profile's `token`; with `backend.username` the job logs in instead (password
from `backend.password` or `SOAT_PASSWORD`). Profiles live in `~/.soat/config.json`, keyed by name, each
`{baseUrl, token}`, chosen by `backend.profile`, then `SOAT_PROFILE`, then `default`. A token starting
`sk_` is an API key; nothing else differs for the client.

What is missing or malformed here is an input problem (InputError, exit 2) naming where it was set: the
job config, the environment, or the profile file. Base URLs never carry secrets (user info, a query, a
fragment): they reach logs, run.json, Parquet metadata and error messages.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

from rqsweep.backends.http.config import HttpConfig
from rqsweep.config import url_problem
from rqsweep.errors import BackendError, InputError
from rqsweep.files import read_data

PROFILES = Path("~/.soat/config.json")
LOGIN_PATH = "/api/v1/users/login"
ENVIRONMENT = "environment"  # the `file` of an InputError about an environment variable


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


def _profile(name: str | None, config_file: Path, env: Mapping[str, str], path: Path) -> tuple[str, dict, Path]:
    """(chosen name, its entry or {}, the profile file); a profile asked for by name must exist."""
    chosen = name or env.get("SOAT_PROFILE") or "default"
    requested_at = ((config_file, "backend.profile") if name else
                    (ENVIRONMENT, "SOAT_PROFILE") if env.get("SOAT_PROFILE") else None)
    path = path.expanduser()
    if not path.exists():
        if requested_at:
            raise InputError(*requested_at, f"{chosen!r}: no such SOAT profile, {path} does not exist")
        return chosen, {}, path
    _, profiles = read_data(path, "SOAT profiles")
    if not isinstance(profiles, dict):
        raise InputError(path, "", "expected an object {profile name: {baseUrl, token}}")
    entry = profiles.get(chosen)
    if entry is None:
        if requested_at:
            raise InputError(*requested_at, f"{chosen!r}: {path} has no such profile "
                                            f"(it has: {', '.join(map(repr, profiles)) or 'none'})")
        return chosen, {}, path
    if not isinstance(entry, dict):
        raise InputError(path, chosen, "expected an object {baseUrl, token}")
    return chosen, entry, path


def resolve_target(config: HttpConfig, config_file: Path, env: Mapping[str, str] = os.environ,
                   profiles: Path = PROFILES) -> Target:
    """Base URL and credentials from the config, the environment and the profile file, in that order.

    `config_file` is the job config the `backend` section came from, named by errors about its keys.
    """
    name, profile, profile_file = _profile(config.profile, config_file, env, profiles)
    candidates = [(config.base_url, config_file, "backend.base_url"),
                  (env.get("SOAT_BASE_URL"), ENVIRONMENT, "SOAT_BASE_URL"),
                  (profile.get("baseUrl"), profile_file, f"{name}.baseUrl")]
    base_url, file, key = next((c for c in candidates if c[0]), (None, config_file, "backend.base_url"))
    if not base_url:
        raise InputError(file, key, f"no SOAT base URL: set backend.base_url, SOAT_BASE_URL or a profile's "
                                    f"baseUrl in {PROFILES}")
    problem = "expected a string" if not isinstance(base_url, str) else url_problem(base_url)
    if problem:
        raise InputError(file, key, problem)
    if config.username:
        password = config.password or env.get("SOAT_PASSWORD")
        if not password:
            raise InputError(config_file, "backend.password", f"backend.username {config.username!r} logs in and "
                                                              "needs a password: set backend.password or SOAT_PASSWORD")
        return Target(base_url.rstrip("/"), None, config.username, Secret(password))
    token = config.token or env.get("SOAT_TOKEN") or profile.get("token")
    return Target(base_url.rstrip("/"), Secret(token) if token else None, None, None)


class Session:
    """The bearer token in use; a login session can log in again when the server says 401."""

    def __init__(self, target: Target):
        self.target = target
        self._token = target.token
        self._lock = threading.Lock()

    @property
    def can_login(self) -> bool:
        return self.target.username is not None

    def secrets(self) -> list[str]:
        """Every credential this session holds: what a server's messages must not repeat."""
        return [s.reveal() for s in (self.target.token, self.target.password, self._token) if s is not None]

    def current(self) -> Target:
        """The target with the token in use (a login's, after one): what a Dask worker searches with, logging in
        again itself only when that token expires."""
        return replace(self.target, token=self._token)

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
