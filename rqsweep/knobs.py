"""SOAT's three ranking knobs, validated here because the server silently falls back on bad values."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from rqsweep.errors import shown

# The knobs' names, here only: what configs, tables, Optuna and SOAT's API call them.
KNOBS = RRF_K, MIN_SIMILARITY, HALF_LIFE = ("rrf_k", "min_similarity", "recency_half_life_days")
# SOAT's defaults: k = 60 (the literature default), no similarity floor, recency blend off.
DEFAULT_RRF_K = 60
# JavaScript's Number.MAX_SAFE_INTEGER: SOAT reads rrf_k as a JavaScript number, and above this it would
# search with a neighbouring integer instead of the one recorded (it also fits Parquet's int64).
MAX_RRF_K = 2 ** 53 - 1


class KnobError(ValueError):
    """A knob value SOAT would silently replace by its default."""

    def __init__(self, knob: str, value: object, rule: str):
        self.knob, self.value, self.rule = knob, value, rule
        super().__init__(f"{knob} = {shown(value)}: {rule}")


def check_rrf_k(value: object) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= MAX_RRF_K
            or value != int(value)):
        raise KnobError(RRF_K, value, f"must be an integer >= 1 and <= {MAX_RRF_K}")
    return int(value)


def check_min_similarity(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise KnobError(MIN_SIMILARITY, value, "must be a number in [0, 1], or null for no floor")
    return float(value)


def check_half_life(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= 0 and math.isfinite(value)):
        raise KnobError(HALF_LIFE, value, "must be a finite number >= 0 (0 = off)")
    return float(value)


CHECKS = {RRF_K: check_rrf_k, MIN_SIMILARITY: check_min_similarity, HALF_LIFE: check_half_life}
# Knob -> the value that switches it off: no similarity floor, no recency blend. rrf_k cannot be switched off.
OFF = {MIN_SIMILARITY: None, HALF_LIFE: 0.0}


def blends(half_life_days):
    """Whether a half-life (a number, or an array of them) switches the recency blend on: 0 is off."""
    return half_life_days > OFF[HALF_LIFE]


_ID = re.compile(r"k(\d+)_m(off|[^_]+)_h(.+)")


@dataclass(frozen=True)
class Knobs:
    """One setting of the knobs. `min_similarity=None` is no floor; half-life 0 is no recency blend."""

    rrf_k: int = DEFAULT_RRF_K
    min_similarity: float | None = None
    recency_half_life_days: float = OFF[HALF_LIFE]

    def __post_init__(self) -> None:
        floor = check_min_similarity(self.min_similarity)
        # `+ 0.0` folds -0.0 into 0.0: equal settings must have one id.
        object.__setattr__(self, "rrf_k", check_rrf_k(self.rrf_k))
        object.__setattr__(self, "min_similarity", None if floor is None else floor + 0.0)
        object.__setattr__(self, "recency_half_life_days", check_half_life(self.recency_half_life_days) + 0.0)

    @property
    def id(self) -> str:
        """The setting's canonical id, e.g. `k60_moff_h0.0`: each value in its shortest round-tripping form,
        `off` for no floor. Equal settings have equal ids; `Knobs.from_id` inverts it."""
        floor = "off" if self.min_similarity is None else repr(self.min_similarity)
        return f"k{self.rrf_k}_m{floor}_h{self.recency_half_life_days!r}"

    @classmethod
    def from_id(cls, text: str) -> "Knobs":
        """The setting an `id` names; ValueError when `text` is not one."""
        match = _ID.fullmatch(text)
        if match is None:
            raise ValueError(f"not a setting id: {text!r} (expected e.g. k60_moff_h0.0)")
        k, floor, half_life = match.groups()
        return cls(int(k), None if floor == "off" else float(floor), float(half_life))

    @classmethod
    def from_columns(cls, row: Mapping[str, object]) -> "Knobs":
        """The setting a row's knob columns hold (a grid or per-query row, a trial's attributes)."""
        return cls(*(row[k] for k in KNOBS))

    def columns(self) -> dict[str, int | float | None]:
        """The knob values by name: what per-setting and per-query rows carry beside the id."""
        return dict(zip(KNOBS, (self.rrf_k, self.min_similarity, self.recency_half_life_days)))

    def request(self) -> dict[str, int | float]:
        """The knobs as a SOAT search request carries them: every knob explicitly (a server's environment may set
        other defaults), `min_similarity` left out when there is no floor."""
        return {k: v for k, v in self.columns().items() if v is not None}

    @property
    def blend_on(self) -> bool:
        return blends(self.recency_half_life_days)

    def label(self) -> str:
        floor = "off" if self.min_similarity is None else f"{self.min_similarity:g}"
        return f"rrf_k={self.rrf_k} min_similarity={floor} half_life={self.recency_half_life_days:g}d"
