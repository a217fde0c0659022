"""Credentials masked out of text that came from elsewhere.

A server, a proxy or an embedding provider may echo what it was sent (an Authorization header, a login
body) in an error message, and those messages become rqsweep's errors, log lines and Parquet cells.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
# Credentials recognisable without being known: a bearer token (its scheme kept), an `sk_` API key.
_CREDENTIAL_SHAPED = re.compile(r"\b(bearer)\s+[^\s\"',;]+|\bsk_[\w-]+", re.IGNORECASE)


def scrub_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with each of `secrets`, and anything shaped like a bearer token or an `sk_` key, masked."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _CREDENTIAL_SHAPED.sub(lambda m: f"{m.group(1)} {MASK}" if m.group(1) else MASK, text)


def redact_url(url: str) -> str:
    """A URL with its password replaced (a storage URL's): what logs, run.json, reports and errors may show."""
    return re.sub(r"(://[^:/@]+:)[^@/]*@", rf"\1{MASK}@", url)
