"""Search spaces: grids enumerated here (not by Optuna's GridSampler), with knob values taken from the data where a
sweep asks (`resolve`), and Optuna suggestions."""

from __future__ import annotations

import itertools
import math
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np
import optuna

from rqsweep.config import DATA_KEYS, KnobSpec, SweepConfig
from rqsweep.errors import InputError
from rqsweep.knobs import HALF_LIFE, KNOBS, MIN_SIMILARITY, OFF, RRF_K, Knobs


# Values a sweep takes from the data (docs/sweeps.md), resolved once the backend has its candidates:
# - `min_similarity: {quantiles: [...]}`: quantiles of the similarity of every vector-channel candidate of every
#   golden query, before the floor (the list a floor cuts, whatever the setting), rounded to 3 decimals and kept in
#   [0, 1] (a negative quantile is the floor 0). A floor
#   below every similarity the vector channel returns changes no rank.
# - `recency_half_life_days: {age_quantiles: [...]}`: quantiles of every memory's age in days at the run's clock,
#   rounded to 2 significant digits. A half-life far from every memory's age changes no rank either.
# Quantiles interpolate linearly between order statistics (numpy's default); values that round alike are one value.


class KnobData(Protocol):
    """What a backend that can resolve data-derived values reports (`BackendKind.knob_data`)."""

    def vector_similarities(self) -> np.ndarray: ...

    def memory_ages(self) -> np.ndarray: ...


# Knob -> (what is quantiled, how a quantile is rounded, what it is called).
_SOURCES: dict[str, tuple[Callable[[KnobData], np.ndarray], Callable[[float], float], str]] = {
    # A cosine can be below 0 (a model that spreads its vectors); a floor is in SOAT's [0, 1].
    MIN_SIMILARITY: (lambda data: data.vector_similarities(), lambda v: min(max(round(v, 3), 0.0), 1.0),
                     "the vector channel's similarities"),
    HALF_LIFE: (lambda data: data.memory_ages(), lambda v: float(f"{v:.2g}"), "the memories' ages in days"),
}


def describe(sweep: SweepConfig) -> list[str]:
    """What each data-derived knob's values will be, for `--dry-run`."""
    out = []
    for knob in sweep.data_knobs():
        spec = sweep.knobs[knob]
        also = f", and {', '.join(f'{v:g}' for v in spec.values)}" if spec.values else ""
        out.append(f"{knob}: {'off, ' if spec.off else ''}quantiles {', '.join(f'{q:g}' for q in spec.quantiles)} "
                   f"of {_SOURCES[knob][2]} (from the data, resolved when the run starts){also}")
    return out


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


def knob_values(knob: str, spec: KnobSpec, derived: Sequence[float] | None = None) -> list:
    """The values a grid tries for one knob, in order, without repeats; `derived`: the values a spec of
    `quantiles` took from the data (`resolve`), tried with its `values`, in ascending order."""
    low, high = spec.low, spec.high
    if spec.quantiles is not None:
        if derived is None:
            raise ValueError(f"{knob} takes its values from the data: resolve them first (space.resolve)")
        values = sorted({*derived, *(spec.values or ())})
    elif spec.values is not None:
        return list(spec.values)
    elif spec.step is not None:
        values = [low + i * spec.step for i in range(spec.range_points())]
    elif spec.num is not None:
        values = list(np.geomspace(low, high, spec.num) if spec.log else np.linspace(low, high, spec.num))
    else:  # config allows a bare range for rrf_k only: every integer in it
        values = list(range(int(low), int(high) + 1))
    values = [int(round(v)) if knob == RRF_K else round(float(v), 12) for v in values]
    if spec.off:
        values.insert(0, OFF[knob])
    return list(dict.fromkeys(values))


def grid(sweep: SweepConfig, baseline: Knobs, derived: Mapping[str, Sequence[float]] | None = None) -> list[Knobs]:
    """Every combination of the swept knobs; knobs not swept stay at the baseline's value. `derived`: knob -> the
    values its `quantiles` took from the data."""
    derived = derived or {}
    axes = [knob_values(k, sweep.knobs[k], derived.get(k)) if k in sweep.knobs else [getattr(baseline, k)]
            for k in KNOBS]
    return [Knobs(*combo) for combo in itertools.product(*axes)]


def _listed(spec: KnobSpec) -> bool:
    """Whether the knob's values are listed by the config (a `values` list or a stepped range)."""
    return spec.values is not None or spec.step is not None


def knob_levels(knob: str, spec: KnobSpec) -> list | None:
    """The ordered values an optimiser picks a knob from by position, "off" first where included; None for
    `rrf_k` over a range, which is an integer parameter.

    A real range is cut to its precision: 2 significant digits on a log range, 1% of the range otherwise, so
    that proposals a hair apart are one setting (evaluated once).
    """
    if _listed(spec):
        return knob_values(knob, spec)
    if knob == RRF_K:
        return None
    low, high = spec.low, spec.high
    if spec.log:
        decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
        inner = {float(f"{m * 10.0 ** e:.2g}") for e in decades for m in range(10, 100)}
        values = sorted({low, high} | {v for v in inner if low < v < high})
    else:
        values = [low + i * (high - low) / 100 for i in range(101)]
    return ([OFF[knob]] if spec.off else []) + [round(float(v), 12) for v in values]


def suggest(trial: optuna.Trial, sweep: SweepConfig, baseline: Knobs) -> Knobs:
    """Draw one setting from the sweep's space through Optuna's distributions.

    Every swept knob is one parameter that every trial has: an ordered integer `<knob>_index` into
    `knob_levels` ("off" its first position), or the integer `rrf_k` over a range. A search space without
    conditional parameters is what lets multivariate TPE model the knobs jointly (a parameter some trials
    lack falls out of its joint model), and positions let it learn which neighbourhood pays.
    """
    values = {}
    for knob in KNOBS:
        spec = sweep.knobs.get(knob)
        levels = None if spec is None else knob_levels(knob, spec)
        if spec is None:
            values[knob] = getattr(baseline, knob)
        elif levels is None:
            values[knob] = trial.suggest_int(knob, int(spec.low), int(spec.high), log=spec.log)
        else:
            values[knob] = levels[trial.suggest_int(f"{knob}_index", 0, len(levels) - 1)]
    return Knobs(**values)


def countable(sweep: SweepConfig, baseline: Knobs) -> int:
    """How many distinct settings `suggest` can return, the baseline not counted (a search's budget at most)."""
    size, inside = 1, True
    for knob, spec in sweep.knobs.items():
        levels = knob_levels(knob, spec)
        value = getattr(baseline, knob)
        if levels is None:
            size *= int(spec.high) - int(spec.low) + 1
            inside = inside and value == int(value) and spec.low <= value <= spec.high
        else:
            size *= len(levels)
            inside = inside and value in levels
    return size - inside


def coarse_grid(sweep: SweepConfig, size: int) -> list[dict[str, object]]:
    """Optuna parameters of at most `size` settings spread evenly over the space (ends included), for a warm start.

    Each swept knob gets the same number of levels, as many as `size` allows (at least 2), at evenly spread
    positions of `knob_levels` ("off", the first position, among them where it is included).
    """
    if size < 2 ** len(sweep.knobs):
        return []
    levels = int(size ** (1 / len(sweep.knobs)) + 1e-9)
    axes = []
    for knob, spec in sweep.knobs.items():
        listed = knob_levels(knob, spec)
        if listed is None:
            axes.append([{knob: p} for p in sorted({int(round(p)) for p in (
                np.geomspace(spec.low, spec.high, levels) if spec.log else np.linspace(spec.low, spec.high, levels))})])
            continue
        n = len(listed)
        axes.append([{f"{knob}_index": i} for i in sorted({round(j * (n - 1) / (levels - 1)) for j in range(levels)})])
    return [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)]
