"""Search spaces: grids enumerated here (not by Optuna's GridSampler), and Optuna suggestions."""

from __future__ import annotations

import itertools

import numpy as np
import optuna

from rqsweep.config import KnobSpec, SweepConfig
from rqsweep.knobs import KNOBS, OFF, RRF_K, Knobs


def knob_values(knob: str, spec: KnobSpec) -> list:
    """The values a grid tries for one knob, in order, without repeats."""
    if spec.values is not None:
        return list(spec.values)
    low, high = spec.low, spec.high
    if spec.step is not None:
        values = [low + i * spec.step for i in range(spec.range_points())]
    elif spec.num is not None:
        values = list(np.geomspace(low, high, spec.num) if spec.log else np.linspace(low, high, spec.num))
    else:  # config allows a bare range for rrf_k only: every integer in it
        values = list(range(int(low), int(high) + 1))
    values = [int(round(v)) if knob == RRF_K else round(float(v), 12) for v in values]
    if spec.off:
        values.insert(0, OFF[knob])
    return list(dict.fromkeys(values))


def grid(sweep: SweepConfig, baseline: Knobs) -> list[Knobs]:
    """Every combination of the swept knobs; knobs not swept stay at the baseline's value."""
    axes = [knob_values(k, sweep.knobs[k]) if k in sweep.knobs else [getattr(baseline, k)] for k in KNOBS]
    return [Knobs(*combo) for combo in itertools.product(*axes)]


def _listed(spec: KnobSpec) -> bool:
    """Whether Optuna picks the knob from an ordered list (a `values` list or a stepped range) by position."""
    return spec.values is not None or spec.step is not None


def _rounded(knob: str, spec: KnobSpec, value: float) -> float:
    """A continuous proposal rounded to the knob's precision: 2 significant digits on a log range, 1% of the
    range otherwise, so that proposals a hair apart are one setting (evaluated once)."""
    if spec.log:
        value = float(f"{value:.2g}")
    else:
        unit = (spec.high - spec.low) / 100
        value = spec.low + round((value - spec.low) / unit) * unit
    return round(min(max(value, spec.low), spec.high), 12)


def suggest(trial: optuna.Trial, sweep: SweepConfig, baseline: Knobs) -> Knobs:
    """Draw one setting from the sweep's space through Optuna's distributions, rounded to the knob's precision.

    A list of values (or a stepped range, "off" first when included) is an ordered integer parameter
    `<knob>_index`, so that TPE learns which neighbourhood pays; `rrf_k` over a range is an integer; a
    real range is a float rounded by `_rounded`, its "off" a separate categorical `<knob>_off`.
    """
    values = {}
    for knob in KNOBS:
        spec = sweep.knobs.get(knob)
        if spec is None:
            values[knob] = getattr(baseline, knob)
        elif _listed(spec):
            listed = knob_values(knob, spec)
            values[knob] = listed[trial.suggest_int(f"{knob}_index", 0, len(listed) - 1)]
        elif spec.off and trial.suggest_categorical(f"{knob}_off", [False, True]):
            values[knob] = OFF[knob]
        elif knob == RRF_K:
            values[knob] = trial.suggest_int(knob, int(spec.low), int(spec.high), log=spec.log)
        else:
            values[knob] = _rounded(knob, spec, trial.suggest_float(knob, spec.low, spec.high, log=spec.log))
    return Knobs(**values)


def finite_space(sweep: SweepConfig, baseline: Knobs) -> list[Knobs] | None:
    """Every setting `suggest` can return when there are finitely many (lists, steps, integers), else None."""
    if any(not _listed(spec) and knob != RRF_K for knob, spec in sweep.knobs.items()):
        return None
    axes = [knob_values(k, s) if _listed(s) else range(int(s.low), int(s.high) + 1) for k, s in sweep.knobs.items()]
    return [Knobs(**{**baseline.columns(), **dict(zip(sweep.knobs, combo))}) for combo in itertools.product(*axes)]


def coarse_grid(sweep: SweepConfig, size: int) -> list[dict[str, object]]:
    """Optuna parameters of at most `size` settings spread evenly over the space (ends included), for a warm start.

    Each swept knob gets the same number of levels, as many as `size` allows (at least 2); "off" is one of
    them where it is included.
    """
    if size < 2 ** len(sweep.knobs):
        return []
    levels = int(size ** (1 / len(sweep.knobs)) + 1e-9)
    axes = []
    for knob, spec in sweep.knobs.items():
        if _listed(spec):
            n = len(knob_values(knob, spec))
            axes.append([{f"{knob}_index": i} for i in sorted({round(j * (n - 1) / (levels - 1)) for j in range(levels)})])
            continue
        spread = levels - 1 if spec.off else levels
        points = (np.geomspace(spec.low, spec.high, spread) if spec.log else np.linspace(spec.low, spec.high, spread))
        points = sorted({int(round(p)) for p in points}) if knob == RRF_K else [float(p) for p in points]
        off = {f"{knob}_off": False} if spec.off else {}
        axes.append(([{f"{knob}_off": True}] if spec.off else []) + [{**off, knob: p} for p in points])
    return [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)]
