"""The locked holdout's queries (`holdout: {fraction: F}`): a query is held out when the first 64 bits of its id's
SHA-256, as a fraction of 2^64, fall below F. A stable draw per id: the same queries stay held out as the golden
set grows, and new queries join the holdout at the same rate. What a run does with them: `rqsweep.decide.holdout`."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from rqsweep.golden.model import GoldenSet


def held_out(query_id: str, fraction: float) -> bool:
    """Whether `query_id` is in the holdout of `fraction`."""
    return int.from_bytes(hashlib.sha256(query_id.encode()).digest()[:8], "big") < fraction * 2.0 ** 64


def split_holdout(golden: GoldenSet, fraction: float) -> tuple[GoldenSet, GoldenSet]:
    """(the queries a run chooses on, the holdout's), each in the golden set's order."""
    out = tuple(q for q in golden.queries if held_out(q.id, fraction))
    kept = tuple(q for q in golden.queries if not held_out(q.id, fraction))
    return replace(golden, queries=kept), replace(golden, queries=out)
