"""The HTTP backend's config (`backend.kind: http`) and its reader. Light on purpose: the config is read before
any search, and before the client and its dependencies load."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from rqsweep.config import Chunking, Section, read_chunking
from rqsweep.errors import InputError


@dataclass(frozen=True)
class SeedConfig:
    """Seeding the project over HTTP from the config's corpus (`backend.seed`)."""

    project_name: str | None = None  # name of the project to create when no project_id is given
    chunking: Chunking = Chunking()
    allow_existing_content: bool = False
    # The memory stores' near-duplicate threshold: SOAT skips a memory this similar to an existing one (its
    # default is 0.95), and under a semantic model a corpus's stale and fresh twins are that similar. 1 keeps
    # every memory but an exact duplicate, as the embedded engine keeps the corpus it is given.
    duplicate_threshold: float = 1.0


@dataclass(frozen=True)
class HttpConfig:
    """A running SOAT over HTTP (`backend.kind: http`); see docs/http-backend.md."""

    kind: ClassVar[str] = "http"

    base_url: str | None = None  # else SOAT_BASE_URL, else the profile's baseUrl
    profile: str | None = None  # ~/.soat/config.json entry; else SOAT_PROFILE, else "default"
    token: str | None = field(default=None, repr=False)  # else SOAT_TOKEN, else the profile's token
    username: str | None = None  # log in instead of a token
    password: str | None = field(default=None, repr=False)  # else SOAT_PASSWORD
    verify_tls: bool = True
    project_id: str | None = None
    ids: Path | None = None  # JSON key -> id map, when the golden set names keys of a corpus seeded elsewhere
    seed: SeedConfig | None = None
    mode: Literal["auto", "direct", "replay"] = "auto"
    replay_limit: int = 100
    verify: int = 0
    max_in_flight: int = 8
    requests_per_second: float | None = None
    timeout: float = 30.0
    retries: int = 4
    backoff: float = 0.5
    max_consecutive_failures: int = 20


def read_http(sec: Section) -> HttpConfig:
    """The `backend:` section of `kind: http`."""
    sec.only("kind", "base_url", "profile", "token", "username", "password", "verify_tls", "project_id", "ids",
             "seed", "mode", "replay_limit", "verify", "max_in_flight", "requests_per_second", "timeout", "retries",
             "backoff", "max_consecutive_failures")
    seed_value = sec.data.get("seed", False)
    seed = None
    if isinstance(seed_value, dict) or seed_value is True:
        s = Section({} if seed_value is True else seed_value, sec.file, sec.where("seed"))
        s.only("project_name", "chunking", "allow_existing_content", "duplicate_threshold")
        seed = SeedConfig(s.get("project_name", str, None), read_chunking(s.section("chunking", {})),
                          s.get("allow_existing_content", bool, False),
                          float(s.get("duplicate_threshold", (int, float), 1.0, lambda v: 0 < v <= 1, "must be in (0, 1]")))
    elif seed_value not in (False, None):
        raise sec.fail("seed", seed_value, "expected true, false or {project_name, chunking, allow_existing_content, "
                       "duplicate_threshold}")
    base_url = sec.url("base_url")
    username = sec.get("username", str, None)
    password = sec.get("password", str, None)
    if password is not None and username is None:
        raise InputError(sec.file, sec.where("password"), "is only used with `username` (log in)")
    ids = sec.get("ids", str, None)
    if ids is not None and seed is not None:
        raise InputError(sec.file, sec.where("ids"), "give `ids` (a corpus seeded elsewhere) or `seed`, not both")
    rps = sec.get("requests_per_second", (int, float), None, lambda v: v > 0, "must be > 0 (or null for no cap)")
    return HttpConfig(
        base_url=base_url,
        profile=sec.get("profile", str, None), token=sec.get("token", str, None), username=username,
        password=password, verify_tls=sec.get("verify_tls", bool, True), project_id=sec.get("project_id", str, None),
        ids=(sec.file.parent / ids).resolve() if ids else None, seed=seed,
        mode=sec.choice("mode", ("auto", "direct", "replay"), "auto"),
        replay_limit=sec.get("replay_limit", int, 100, lambda v: 1 <= v <= 100, "SOAT caps limit to 1..100"),
        verify=sec.get("verify", int, 0, lambda v: v >= 0, "must be >= 0"),
        max_in_flight=sec.get("max_in_flight", int, 8, lambda v: v >= 1, "must be >= 1"),
        requests_per_second=None if rps is None else float(rps),
        timeout=sec.get("timeout", (int, float), 30.0, lambda v: v > 0, "must be > 0 seconds"),
        retries=sec.get("retries", int, 4, lambda v: v >= 0, "must be >= 0"),
        backoff=sec.get("backoff", (int, float), 0.5, lambda v: v >= 0, "must be >= 0 seconds"),
        max_consecutive_failures=sec.get("max_consecutive_failures", int, 20, lambda v: v >= 1, "must be >= 1"),
    )
