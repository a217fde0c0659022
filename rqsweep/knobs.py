"""SOAT's three ranking knobs, validated here because the server silently falls back on bad values."""

from __future__ import annotations

import math
from dataclasses import dataclass

KNOBS = ("rrf_k", "min_similarity", "recency_half_life_days")
# SOAT's defaults: k = 60 (the literature default), no similarity floor, recency blend off.
DEFAULT_RRF_K = 60


class KnobError(ValueError):
    """A knob value SOAT would silently replace by its default."""

    def __init__(self, knob: str, value: object, rule: str):
        self.knob, self.value = knob, value
        super().__init__(f"{knob} = {value!r}: {rule}")


def check_rrf_k(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise KnobError("rrf_k", value, "must be an integer >= 1")
    return int(value)


def check_min_similarity(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise KnobError("min_similarity", value, "must be a number in [0, 1], or null for no floor")
    return float(value)


def check_half_life(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= 0 and math.isfinite(value)):
        raise KnobError("recency_half_life_days", value, "must be a finite number >= 0 (0 = off)")
    return float(value)


@dataclass(frozen=True)
class Knobs:
    """One setting of the knobs. `min_similarity=None` is no floor; half-life 0 is no recency blend."""

    rrf_k: int = DEFAULT_RRF_K
    min_similarity: float | None = None
    recency_half_life_days: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rrf_k", check_rrf_k(self.rrf_k))
        object.__setattr__(self, "min_similarity", check_min_similarity(self.min_similarity))
        object.__setattr__(self, "recency_half_life_days", check_half_life(self.recency_half_life_days))

    def label(self) -> str:
        floor = "off" if self.min_similarity is None else f"{self.min_similarity:g}"
        return f"rrf_k={self.rrf_k} min_similarity={floor} half_life={self.recency_half_life_days:g}d"
