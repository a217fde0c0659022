"""The recency blend's multiplier: where `recency_half_life_days` acts on a memory's score."""

from __future__ import annotations

from functools import lru_cache

from rqsweep.knobs import blends

SEARCH_DELAY_SECONDS = 60
SEARCH_DELAY_DAYS = SEARCH_DELAY_SECONDS / 86_400  # the later search that `tie_sensitive` also checks


@lru_cache(maxsize=1 << 16)
def recency_factor(age_days: float, half_life_days: float) -> float:
    """SOAT's multiplier 2^(-age/half-life); 1 when the blend is off (half-life 0) or age <= 0.

    Computed with the C library's pow, as Node 24's `Math.pow` (SOAT's runtime) does: numpy's
    vectorised power (SVML on AVX-512) and Node 20-23's fdlibm port round some values differently,
    so both paths of the engine call this one function. Cached: a run asks for the same few
    hundred (age, half-life) pairs again and again.
    """
    if not blends(half_life_days) or not age_days > 0:  # `not >`: an unknown (NaN) age leaves the score as it is
        return 1.0
    return 2.0 ** (-age_days / half_life_days)


def decays(age_days: float) -> bool:
    """Whether a live search decays a memory of this nominal age, however soon after the write it comes.

    A search always follows its writes, so a memory's age at search time is its nominal age plus a delay
    (delay -> 0+ is what the engine models): age 0 is already a little old, and its factor a little below
    `recency_factor`'s. Among equal blended scores such a memory goes after every undecayed item (documents,
    memories dated in the future); decayed memories keep their order, as one delay shrinks all their scores
    by the same factor 2^(-delay/half-life). An unknown (NaN) age is never decayed.
    """
    return age_days >= 0
