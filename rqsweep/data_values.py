"""Knob values a sweep takes from the data, resolved once the backend has its candidates (docs/sweeps.md).

- `min_similarity: {quantiles: [...]}`: quantiles of the similarity of every vector-channel candidate of every
  golden query, before the floor (the list a floor cuts, whatever the setting), rounded to 3 decimals. A floor
  below every similarity the vector channel returns changes no rank.
- `recency_half_life_days: {age_quantiles: [...]}`: quantiles of every memory's age in days at the run's clock,
  rounded to 2 significant digits. A half-life far from every memory's age changes no rank either.

Quantiles interpolate linearly between order statistics (numpy's default). Values that round alike are one value.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from rqsweep.config import DATA_KEYS, SweepConfig
from rqsweep.errors import InputError
from rqsweep.knobs import HALF_LIFE, MIN_SIMILARITY


class KnobData(Protocol):
    """What a backend that can resolve data-derived values reports (`BackendKind.knob_data`)."""

    def vector_similarities(self) -> np.ndarray: ...

    def memory_ages(self) -> np.ndarray: ...


# Knob -> (what is quantiled, how a quantile is rounded, what it is called).
_SOURCES: dict[str, tuple[Callable[[KnobData], np.ndarray], Callable[[float], float], str]] = {
    MIN_SIMILARITY: (lambda data: data.vector_similarities(), lambda v: round(v, 3),
                     "the vector channel's similarities"),
    HALF_LIFE: (lambda data: data.memory_ages(), lambda v: float(f"{v:.2g}"), "the memories' ages in days"),
}


def describe(sweep: SweepConfig) -> list[str]:
    """What each data-derived knob's values will be, for `--dry-run`."""
    return [f"{knob}: {'off, ' if sweep.knobs[knob].off else ''}quantiles "
            f"{', '.join(f'{q:g}' for q in sweep.knobs[knob].quantiles)} of {_SOURCES[knob][2]} (from the data, "
            "resolved when the run starts)" for knob in sweep.data_knobs()]


def resolve(sweep: SweepConfig, data: KnobData) -> dict[str, list[float]]:
    """Knob -> the values its quantiles take from `data`, ascending; {} when no knob takes values from the data."""
    out = {}
    for knob in sweep.data_knobs():
        values, rounded, what = _SOURCES[knob]
        observed = np.asarray(values(data), np.float64)
        observed = observed[np.isfinite(observed)]
        if observed.size == 0:
            raise InputError(sweep.file, sweep.where(knob),
                             f"no values to take quantiles of: the run has none of {what}; give `values` instead")
        quantiles = np.quantile(observed, list(sweep.knobs[knob].quantiles))
        out[knob] = sorted({rounded(float(q)) for q in quantiles})
    return out


def refuse_without_data(sweep: SweepConfig, backend_kind: str) -> None:
    """An InputError naming the sweep's first data-derived knob: `backend_kind` cannot report the data."""
    knobs = sweep.data_knobs()
    if knobs:
        raise InputError(sweep.file, sweep.where(knobs[0]),
                         f"{list(sweep.knobs[knobs[0]].quantiles)}: values from the data need the embedded backend, "
                         f"which sees every candidate's similarity and every memory's age; the {backend_kind} "
                         f"backend does not: give `values` or a range ({', '.join(DATA_KEYS.values())} refused)")
