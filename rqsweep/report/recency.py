"""What the recency blend costs a top result: fused scores are compressed, so a multiplier after fusion is strong."""

from __future__ import annotations

import math

import polars as pl

from rqsweep.engine.recency import recency_factor

AGES_DAYS = (1, 7, 30, 90, 365)
_SHOWN_UP_TO = 1_000_000  # beyond this a count is astronomically past any real result list

ASSUMPTION = (
    "Assumes the memory is rank 1 in one channel only (fused score f/(k+1)) and faces competitors that are each "
    "in one channel only at ranks 2, 3, ... (fused 1/(k+r)) and are not decayed themselves (document chunks, or "
    "fresh memories); a competitor passes it when 1/(k+r) > f/(k+1), i.e. r < (k+1)/f - k. A result found by both "
    "channels, or decayed competitors, lose fewer ranks; a real list holds at most 2 x limit items per channel."
)


def ranks_lost(rrf_k: int, factor: float) -> int:
    """Ranks a rank-1 single-channel result falls when its fused score is multiplied by `factor`.

    Counts the single-channel competitors r >= 2 with 1/(k+r) > factor/(k+1), i.e. r < (k+1)/factor - k.
    """
    # Long ages at short half-lives underflow the factor to 0; any tiny positive factor gives the same verdict.
    bound = (rrf_k + 1) / max(factor, 1e-300) - rrf_k
    return max(0, math.ceil(bound) - 2)


def recency_cost(rrf_k: int, half_life_days: float, limit: int, ages: tuple[float, ...] = AGES_DAYS) -> pl.DataFrame:
    """Per memory age: the decay factor, the ranks a top result loses, and whether it stays in the top `limit`."""
    factors = [recency_factor(a, half_life_days) for a in ages]
    lost = [ranks_lost(rrf_k, f) for f in factors]
    return pl.DataFrame({
        "memory age (days)": list(ages),
        "factor 2^(-age/h)": [f"{f:.4g}" for f in factors],
        "ranks lost": [f"{n:,}" if n <= _SHOWN_UP_TO else f"more than {_SHOWN_UP_TO:,}" for n in lost],
        f"still in top {limit}": [n + 1 <= limit for n in lost],
    })
